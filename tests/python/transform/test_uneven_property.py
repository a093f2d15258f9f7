"""Uneven shards, property-tested: random shapes whose dims include 1, primes and sizes below
the device count, random placements on 1-D, 2-D and 3-D meshes (partials of every kind the
dtype holds), chains of redistributes, float32, integers anywhere in their range and bools, and
1 to 8 devices. Legalize -> lower -> specialize -> run_spmd equals the value every time, and
the bytes the simulator moves equal the cost model's figure (distir.analysis.comm_volume).
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distir.analysis import comm_volume
from distir.ir import Binding, Block, Call, DeviceMesh, DTensorType, Function, IRModule, Range, Var, get_op, sym
from distir.ir.combine import PARTIAL_KINDS, partial_refusal
from distir.ir.placement import Partial, Placement, Replicate, Shard
from distir.runtime.spmd import SpmdStats, run_spmd
from distir.transform import get_pass
from distir.transform.specialize import specialize

W = sym.var("num_workers")
MESHES = [(W,), (2, W), (W, 3), (2, W, 2), (3, 1, W), (W, W)]
SIZES = [1, 2, 3, 5, 6, 7, 11, 13, 16]  # 1, primes, sizes below the device count, one even size
DTYPES = ("float32", "float32", "int8", "uint8", "int32", "int64", "bool")


def chain_module(mesh_shape, shape, placements, dtype="float32") -> IRModule:
    total = sym.product(mesh_shape)
    mesh = DeviceMesh(mesh_shape, Range(0, total))
    x = Var("x", DTensorType(tuple(shape), dtype, mesh, placements[0]))
    bindings, cur = [], x
    for i, p in enumerate(placements[1:]):
        call = Call(get_op("dist.redistribute"), (cur,), {"device_mesh": mesh, "placement": p})
        cur = Var(f"y{i}", call.type)
        bindings.append(Binding(cur, call))
    return IRModule({"main": Function("main", (x,), (Block(tuple(bindings), True, (cur,)),), cur)}, {"mesh": [mesh]})


@st.composite
def cases(draw):
    mesh_shape = draw(st.sampled_from(MESHES))
    fixed = 1
    for d in mesh_shape:
        fixed *= d if isinstance(d, int) else 1
    symbolic = sum(1 for d in mesh_shape if not isinstance(d, int))
    most = max(1, int((8 // fixed) ** (1 / max(symbolic, 1))))
    workers = draw(st.integers(1, max(most, 1)))
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.sampled_from(SIZES)) for _ in range(ndim))
    dtype = draw(st.sampled_from(DTYPES))
    op = draw(st.sampled_from([k for k in PARTIAL_KINDS if partial_refusal(k, dtype) is None]))

    def placement():
        spec = st.one_of(st.just(Replicate()), st.builds(Shard, st.integers(0, ndim - 1)), st.just(Partial(op)))
        return Placement(tuple(draw(spec) for _ in mesh_shape))

    n = draw(st.integers(2, 4))
    return mesh_shape, workers, shape, [placement() for _ in range(n)], dtype


def values(dtype: str, shape, seed: int) -> np.ndarray:
    """Integers anywhere in their range (the parts of a sum wrap around), bools, small floats."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "float32":
        return rng.integers(-50, 50, size=shape).astype("float32")
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.integers(0, 2**16))
def test_redistribute_chains_on_uneven_shapes_move_the_data_and_the_modelled_bytes(case, seed):
    mesh_shape, workers, shape, placements, dtype = case
    lowered = get_pass("lower-global-view-to-local-view")(
        get_pass("legalize-redistribute")(chain_module(mesh_shape, shape, placements, dtype))
    )
    local = specialize(lowered, {"num_workers": workers})
    x = values(dtype, shape, seed)
    stats = SpmdStats()
    y = run_spmd(local, x, stats=stats, seed=seed)
    what = f"{dtype} {[str(p) for p in placements]} {shape}"
    if dtype == "float32":
        np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-3, err_msg=what)
    else:
        np.testing.assert_array_equal(y, x, err_msg=what)
    numbers = comm_volume(local).evaluate()
    assert numbers.total_bytes == stats.total_bytes, ([str(p) for p in placements], shape, workers, stats.summary())
    assert numbers.counts == stats.counts


@st.composite
def dynamic_cases(draw):
    workers = draw(st.sampled_from([1, 2, 3, 4, 5, 6, 7, 8]))
    rows = draw(st.integers(0, 20))
    src, dst = draw(st.sampled_from([("S[0]", "R"), ("R", "S[0]"), ("S[0]", "S[1]"), ("P", "S[0]"), ("S[1]", "S[0]")]))
    return workers, rows, src, dst


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dynamic_cases())
def test_a_size_known_at_run_time_is_right_for_every_value(case):
    """Rows bound from the input: below the device count, 0, 1, primes."""
    workers, rows, src, dst = case
    mod = chain_module((W,), (sym.var("s"), 6), [Placement.parse(src), Placement.parse(dst)])
    lowered = get_pass("lower-global-view-to-local-view")(get_pass("legalize-redistribute")(mod))
    local = specialize(lowered, {"num_workers": workers})
    x = np.arange(rows * 6, dtype="float32").reshape(rows, 6)
    stats = SpmdStats()
    np.testing.assert_allclose(run_spmd(local, x, stats=stats), x, atol=1e-3)
    assert comm_volume(local).evaluate({"s": rows}).total_bytes == stats.total_bytes
