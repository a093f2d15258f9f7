"""Every redistribute, legalized once with symbolic mesh sizes, lowered, specialized and
simulated, returns its input unchanged and moves exactly the bytes of the cost model's plan, and
on small meshes no more than any sequence of up to three steps, each run on the simulator
(:mod:`plan_oracle`, which shares nothing with the planner's search)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distir.errors import DistirError
from distir.ir import (
    Call,
    DeviceMesh,
    DTensorType,
    IRModule,
    Placement,
    Range,
    Var,
    get_op,
    sym,
)
from distir.ir.placement import Partial, Replicate, Shard
from distir.ir.types import dtype_bytes
from distir.runtime.spmd import SpmdStats, run_spmd
from distir.transform import get_pass
from distir.transform.legalize_redistribute import expand_replans
from distir.transform.redistribute_plan import needs_replan, plan_cost, plan_redistribute
from distir.transform.specialize import specialize
from helpers import redistribute_module
from plan_oracle import MAX_STEPS, least

W = sym.var("num_workers")

# mesh layouts: symbolic axes are num_workers; the rest are fixed sizes
MESHES = {
    1: [(W,)],
    2: [(2, W), (W, 2)],
    3: [(2, W, 2), (W, 2, 1)],
}


def legalize_and_lower(mod: IRModule) -> IRModule:
    return get_pass("lower-global-view-to-local-view")(get_pass("legalize-redistribute")(mod))


@st.composite
def cases(draw):
    mesh_ndim = draw(st.sampled_from([1, 2, 3]))
    mesh_shape = draw(st.sampled_from(MESHES[mesh_ndim]))
    fixed = sym.product(d for d in mesh_shape if isinstance(d, int))
    workers = draw(st.integers(1, max(1, 8 // fixed)))
    sizes = tuple(sym.evaluate(d, {"num_workers": workers}) for d in mesh_shape)
    ndim = draw(st.integers(1, 3))
    total = 1
    for s in sizes:
        total *= s
    shape = tuple(draw(st.integers(1, 2)) * total for _ in range(ndim))
    dtype = draw(st.sampled_from(["float32", "float64", "int32"]))
    ops = ["sum", "max", "min"] + (["avg"] if dtype != "int32" else [])
    op = draw(st.sampled_from(ops))

    def spec():
        return st.one_of(st.just(Replicate()), st.builds(Shard, st.integers(0, ndim - 1)), st.just(Partial(op)))

    src = Placement(tuple(draw(spec()) for _ in range(mesh_ndim)))
    dst = Placement(tuple(draw(spec()) for _ in range(mesh_ndim)))
    return mesh_shape, workers, sizes, shape, dtype, src, dst


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.integers(0, 2**16))
def test_every_redistribute_moves_the_data_and_the_planned_bytes(case, seed):
    mesh_shape, workers, sizes, shape, dtype, src, dst = case
    lowered = legalize_and_lower(redistribute_module(mesh_shape, shape, src, dst, dtype=dtype))
    local = specialize(lowered, {"num_workers": workers})
    rng = np.random.default_rng(seed)
    if dtype == "int32":
        x = rng.integers(-50, 50, size=shape).astype(dtype)
    else:
        x = rng.standard_normal(shape).astype(dtype)
    stats = SpmdStats()
    y = run_spmd(local, x, stats=stats, seed=seed)
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(y, x, rtol=tol, atol=tol)
    nbytes = int(np.prod(shape)) * dtype_bytes(dtype)
    # where legalize keeps the plan made for every count (it is the optimum at every count of
    # REPLAN_SIZES), the simulator moves what the cost model says it moves
    global_mesh = redistribute_module(mesh_shape, shape, src, dst, dtype=dtype).meshes()[0]
    if not needs_replan(global_mesh, len(shape), src, dst, shape):
        plan = plan_redistribute(global_mesh, len(shape), src, dst)
        assert stats.bytes_per_worker == plan_cost(plan, src, sizes) * nbytes


def _planned(mesh_shape, workers: int, shape, src, dst, dtype: str) -> tuple[int, int]:
    """(bytes all workers send, steps) of the redistribute legalized once with the mesh symbolic and
    specialized to ``workers``, run on the simulator (whose numbers must equal the input)."""
    local = specialize(legalize_and_lower(redistribute_module(mesh_shape, shape, src, dst, dtype=dtype)),
                       {"num_workers": workers})
    x = np.random.default_rng(0).integers(-50, 50, size=shape).astype(dtype)
    stats = SpmdStats()
    np.testing.assert_allclose(run_spmd(local, x, stats=stats), x, rtol=1e-6, atol=1e-4)  # partial parts round
    steps = sum(b.value.op.name.startswith("ccl.") for b in local["main"].bindings())
    return stats.total_bytes, steps


def _against_the_oracle(mesh_shape, workers: int, ndim: int, src, dst, dtype: str, k: int = 1) -> None:
    """The planner's bytes are at most the least of any sequence of up to MAX_STEPS steps, and equal
    to it where its plan has at most MAX_STEPS steps. Shapes divide the mesh (k blocks a device), so
    bytes per byte of the tensor do not depend on k: the oracle prices k = 1, once per mesh."""
    sizes = tuple(sym.evaluate(d, {"num_workers": workers}) for d in mesh_shape)
    unit = tuple(int(np.prod(sizes)) for _ in range(ndim))
    shape = tuple(k * n for n in unit)
    sent, steps = _planned(mesh_shape, workers, shape, src, dst, dtype)
    best = least(sizes, unit, src, dst)
    scale = Fraction(int(np.prod(shape)) * dtype_bytes(dtype), int(np.prod(unit)) * 8)
    case = (str(src), str(dst), sizes, dtype)
    if best is not None:
        assert sent <= best[0] * scale, (case, sent, best)
    if steps <= MAX_STEPS:
        assert best is not None and sent == best[0] * scale, (case, sent, steps, best)


# small meshes, the counts and the largest rank drawn on each (the oracle runs every step out of every
# layout once per mesh and rank: 0.3 s on a 2-D mesh at rank 2, 4 s on a 3-D one, so rank 1 there)
SMALL_MESHES = [((W,), (1, 2, 3, 4, 5), 2), ((2, W), (1, 2), 2), ((W, 3), (1, 2), 2), ((2, W, 2), (1,), 1)]


@st.composite
def small_cases(draw):
    mesh_shape, counts, rank = draw(st.sampled_from(SMALL_MESHES))
    workers = draw(st.sampled_from(counts))
    ndim = draw(st.integers(1, rank))
    dtype = draw(st.sampled_from(["float32", "int32"]))
    op = draw(st.sampled_from(["sum", "max", "min"] + (["avg"] if dtype != "int32" else [])))
    spec = st.one_of(st.just(Replicate()), st.builds(Shard, st.integers(0, ndim - 1)), st.just(Partial(op)))
    src = Placement(tuple(draw(spec) for _ in mesh_shape))
    dst = Placement(tuple(draw(spec) for _ in mesh_shape))
    return mesh_shape, workers, ndim, src, dst, dtype, draw(st.integers(1, 2))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_cases())
def test_plans_send_no_more_than_any_sequence_of_three_steps(case):
    _against_the_oracle(*case)


def test_plans_for_the_issue_examples():
    mesh = DeviceMesh((2, W), Range(0, 2 * W))
    P = Placement.parse
    # swapping the mesh axes of a layout: one block exchange, where per-axis collectives send more
    # (local_shard, all_gather, all_to_all: 1/(2n) + (n-1)/n^2 of the tensor per device, against 1/(2n))
    plan = plan_redistribute(mesh, 2, P("S[0], R"), P("R, S[0]"))
    assert [s.kind for s in plan] == ["exchange"]
    plan = plan_redistribute(mesh, 2, P("S[0], S[1]"), P("S[1], S[0]"))
    assert [str(s) for s in plan] == ['exchange(placement="S[1], S[0]")']
    # where a collective moves as little, it is kept (ties go to the collectives)
    assert [s.kind for s in plan_redistribute(mesh, 2, P("R, S[0]"), P("R, R"))] == ["all_gather"]
    # a dim sharded over two mesh axes: the inner axis is gathered first
    plan = plan_redistribute(mesh, 2, P("S[0], S[0]"), P("R, R"))
    assert [(s.kind, s.mesh_axis) for s in plan] == [("all_gather", 1), ("all_gather", 0)]
    # P -> S is a reduce-scatter, never an all-reduce followed by a slice
    assert [s.kind for s in plan_redistribute(mesh, 2, P("P, R"), P("S[1], R"))] == ["reduce_scatter"]


@pytest.mark.parametrize("workers", [2, 3, 4, 8])
def test_one_d_plans_are_optimal_at_every_count(workers):
    """On a 1-D mesh the plan made once for every count sends, at each count, the least of any
    sequence of up to three steps (every pair of R, S[0], S[1], P, P[max])."""
    specs = ["R", "S[0]", "S[1]", "P", "P[max]"]
    for a in specs:
        for b in specs:
            if a != b:
                _against_the_oracle((W,), workers, 2, Placement.parse(a), Placement.parse(b), "float32")


def test_legalize_is_idempotent():
    mod = redistribute_module((W,), (8, 8), "P", "S[1]")
    once = get_pass("legalize-redistribute")(mod)
    assert get_pass("legalize-redistribute")(once) is once


def test_same_placement_is_the_value_itself():
    mod = redistribute_module((W,), (8, 8), "S[0]", "S[0]")
    out = get_pass("legalize-redistribute")(mod)
    assert list(out["main"].bindings()) == []
    assert out["main"].result is out["main"].params[0]


@pytest.mark.parametrize("workers", [3, 5, 9, 16])
def test_a_count_that_does_not_divide_gathers_the_blocks_without_their_padding(workers):
    """8 rows over 3: blocks of 3, 3, 2 (the last padded to 3); over 9 or 16, some blocks are empty."""
    lowered = legalize_and_lower(redistribute_module((W,), (8, 16), "S[0]", "R"))
    # the plan made for every count: an all-gather of padded blocks (XLA's padded figure)
    uniform = lowered.replace(functions={"main": expand_replans(lowered["main"], exact_only=False)})
    assert [b.value.op.name for b in uniform["main"].bindings()] == ["ccl.all_gather"]
    x = np.arange(128, dtype="float32").reshape(8, 16)
    block = -(-8 // workers)
    local = specialize(uniform, {"num_workers": workers})
    assert local["main"].params[0].type.shape == (block, 16)
    stats = SpmdStats()
    np.testing.assert_array_equal(run_spmd(local, x, stats=stats), x)
    assert stats.bytes_per_worker == (workers - 1) * block * 16 * 4
    # re-planned for the count: each worker receives only the real rows it lacks (the bound)
    local = specialize(lowered, {"num_workers": workers})
    stats = SpmdStats()
    np.testing.assert_array_equal(run_spmd(local, x, stats=stats), x)
    held = [max(0, min(8, (k + 1) * block) - k * block) for k in range(workers)]
    assert stats.total_bytes == sum(8 - h for h in held) * 16 * 4
    assert stats.counts == {"exchange": 1}


def test_lowered_shapes_stay_symbolic():
    mod = redistribute_module((W,), (128, 64), "R", "S[0]")
    lowered = legalize_and_lower(mod)
    f = lowered["main"]
    (b,) = list(f.bindings())
    assert b.value.op.name == "ccl.local_shard"  # each worker cuts its own block
    assert sym.to_str(b.var.type.shape[0]) == "T.ceildiv(128, num_workers)"
    assert f.attrs["distir.global_params"][0] == mod["main"].params[0].type


def test_redistribute_of_a_plain_tensor_is_an_error():
    from distir.errors import TypeInferenceError
    from distir.ir import TensorType

    x = Var("x", TensorType((4, 4), "float32"))
    mesh = DeviceMesh((W,), Range(0, W))
    with pytest.raises(TypeInferenceError, match="must be a DTensor"):
        _ = Call(get_op("dist.redistribute"), (x,), {"device_mesh": mesh, "placement": Placement.parse("R")}).type


def test_placement_invalid_for_the_mesh_is_an_error():
    from distir.errors import TypeInferenceError

    mesh = DeviceMesh((W,), Range(0, W))
    x = Var("x", DTensorType((4, 4), "float32", mesh, Placement.parse("S[0]")))
    with pytest.raises(TypeInferenceError, match="mesh has 1 axis"):
        _ = Call(get_op("dist.redistribute"), (x,), {"device_mesh": mesh, "placement": Placement.parse("R, R")}).type
    with pytest.raises(TypeInferenceError, match="shards dim 2"):
        _ = Call(get_op("dist.redistribute"), (x,), {"device_mesh": mesh, "placement": Placement.parse("S[2]")}).type
