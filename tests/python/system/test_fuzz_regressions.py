"""Cases an independent differential fuzzer found on main: each once gave a wrong number, a
crash, or a failed plan where a valid one exists. Each test reproduces the case exactly."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import distir
from distir.errors import DistirError
from distir.ir import DeviceMesh, Range
from distir.ir.verify import verify
from distir.runtime.spmd import run_spmd
from distir.transform import Sequential, get_pass
from distir.transform.pipelines import distribute_pipeline
from distir.transform.specialize import specialize
from helpers import redistribute_module

# ---------------------------------------------------------------- device lists in any order

PERMUTED_MESHES = [
    DeviceMesh((4,), (1, 0, 2, 3)),
    DeviceMesh((4,), (0, 1, 3, 2)),
    DeviceMesh((2, 2), (3, 2, 1, 0)),
    DeviceMesh((2, 2), (0, 2, 1, 3)),
    DeviceMesh((3,), (4, 2, 0)),
]


def _transitions(mesh: DeviceMesh):
    for src in itertools.product(["R", "S[0]", "S[1]", "P"], repeat=mesh.ndim):
        for dst in itertools.product(["R", "S[0]", "S[1]"], repeat=mesh.ndim):
            if src != dst:
                yield ", ".join(src), ", ".join(dst)


# every layout is given (a parameter and its redistribute): propagation has nothing to choose, so the
# transitions go through legalize and lowering only (the pipeline's solve would take 20x longer)
LEGALIZE_AND_LOWER = Sequential([get_pass(n) for n in ("legalize-redistribute", "lower-global-view-to-local-view")])


@pytest.mark.parametrize("mesh", PERMUTED_MESHES, ids=lambda m: str(list(m.device_ids)))
def test_block_k_belongs_to_the_kth_listed_device_on_the_simulator(mesh):
    x = np.arange(144, dtype="float32").reshape(12, 12) + 1
    for src, dst in _transitions(mesh):
        got = run_spmd(LEGALIZE_AND_LOWER(redistribute_module(mesh, (12, 12), src, dst)), x)
        np.testing.assert_allclose(got, x, rtol=1e-6, err_msg=f"{list(mesh.device_ids)}: {src} -> {dst}")


def test_the_reported_out_of_order_list_slices_in_list_order():
    text = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((4,), [0, 1, 3, 2])]})

    @R.function
    def main(x: R.DTensor((4,), "float32", "mesh[0]", "R")):
        y = R.dist.redistribute(x, device_mesh="mesh[0]", placement="S[0]")
        return y
"""
    mod = distir.parse(text)
    local = distribute_pipeline()(mod)
    x = np.arange(4, dtype="float32")
    np.testing.assert_array_equal(run_spmd(local, x), x)
    # and each device holds the block of its place in the list: device 3 (third listed) holds x[2]
    from distir.runtime.spmd import shard_input

    pieces = shard_input(local["main"].attrs["distir.global_result"], x, {}, np.random.default_rng(0))
    assert {d: float(v[0]) for d, v in pieces.items()} == {0: 0.0, 1: 1.0, 3: 2.0, 2: 3.0}


@pytest.mark.parametrize(
    "mesh, src, dst",
    [
        (DeviceMesh((4,), (1, 0, 2, 3)), "R", "S[0]"),
        (DeviceMesh((4,), (0, 1, 3, 2)), "S[0]", "S[1]"),
        (DeviceMesh((4,), (0, 1, 3, 2)), "P", "S[1]"),
        (DeviceMesh((2, 2), (3, 2, 1, 0)), "S[0], S[1]", "R, R"),
        (DeviceMesh((2, 2), (0, 2, 1, 3)), "P, S[1]", "S[1], S[0]"),
        (DeviceMesh((3,), (4, 2, 0)), "S[1]", "S[0]"),
        (DeviceMesh((3,), (4, 2, 0)), "P", "R"),
    ],
)
def test_device_lists_in_any_order_on_disco(mesh, src, dst):
    from distir.driver import run_disco
    from distir.tvm import specialize_and_build, to_relax

    x = np.arange(144, dtype="float32").reshape(12, 12) + 1
    local = distribute_pipeline()(redistribute_module(mesh, (12, 12), src, dst))
    built = specialize_and_build(to_relax(local), {})
    got = run_disco(built, local, x, num_workers=max(mesh.device_ids) + 1)
    np.testing.assert_allclose(got, x, rtol=1e-6)


def test_a_size_one_axis_coordinate_is_zero():
    """Mesh (1,): R -> S[1] is a no-op (it failed in lowering with a worker-dependent extent)."""
    mesh = DeviceMesh((1,), Range(0, 1))
    x = np.arange(24, dtype="float32").reshape(4, 6)
    np.testing.assert_array_equal(run_spmd(distribute_pipeline()(redistribute_module(mesh, (4, 6), "R", "S[1]")), x), x)


# ---------------------------------------------------------------- sizes that do not divide


STATIC_UNEVEN = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((2,), I.Range(0, 2))]})

    @R.function
    def main(x: R.DTensor((3,), "float32", "mesh[0]", "R")):
        y = R.dist.redistribute(x, device_mesh="mesh[0]", placement="S[0]")
        z = R.sum(y, axis=[0])
        return z
"""


def test_a_static_size_that_does_not_divide_a_static_mesh_keeps_every_element():
    """(3,) over a static mesh of 2: element 2 was silently dropped; now blocks of 2 and 1 (padded)."""
    mod = distir.parse(STATIC_UNEVEN)
    verify(mod)
    local = distribute_pipeline()(mod)
    x = np.array([1.0, 2.0, 4.0], dtype="float32")
    np.testing.assert_allclose(run_spmd(local, x), 7.0)


def test_a_static_parameter_that_does_not_divide_its_mesh_is_cut_in_blocks():
    """(6, 3) over 4: blocks of 2, 2, 2 and an empty one (was refused)."""
    mesh = DeviceMesh((4,), Range(0, 4))
    local = distribute_pipeline()(redistribute_module(mesh, (6, 3), "S[0]", "R"))
    assert local["main"].params[0].type.shape == (2, 3)
    x = np.arange(18, dtype="float32").reshape(6, 3)
    np.testing.assert_array_equal(run_spmd(local, x), x)


DYNAMIC = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(x: R.DTensor(("s", 4), "float32", "mesh[0]", "S[0]")):
        z = R.sum(x, axis=[0])
        return z
"""


@pytest.fixture(scope="module")
def dynamic_local():
    return distribute_pipeline()(distir.parse(DYNAMIC))


@pytest.mark.parametrize("workers, rows", [(2, 7), (4, 10), (3, 2), (8, 1), (5, 0), (7, 13)])
def test_a_dynamic_size_that_does_not_divide_is_summed_exactly(dynamic_local, workers, rows):
    """s rows cut over the workers at run time: 7 over 2 lost a row; the padding is now masked before the sum."""
    x = np.arange(rows * 4, dtype="float32").reshape(rows, 4) + 1
    np.testing.assert_allclose(run_spmd(specialize(dynamic_local, {"num_workers": workers}), x), x.sum(0))


def test_a_dynamic_size_that_divides_still_runs(dynamic_local):
    x = np.arange(32, dtype="float32").reshape(8, 4)
    np.testing.assert_allclose(run_spmd(specialize(dynamic_local, {"num_workers": 4}), x), x.sum(0))


@pytest.mark.parametrize("rows", [7, 6, 1])
def test_a_dynamic_size_that_does_not_divide_on_disco(dynamic_local, rows):
    """One symbolic export, any run-time size: the mask is computed from s on the worker."""
    from distir.driver import run_disco
    from distir.tvm import specialize_and_build, to_relax

    built = specialize_and_build(to_relax(dynamic_local), {"num_workers": 2})
    x = np.arange(rows * 4, dtype="float32").reshape(rows, 4) + 1
    np.testing.assert_allclose(run_disco(built, dynamic_local, x, num_workers=2), x.sum(0))


# ---------------------------------------------------------------- plans valid wherever the user's layouts are


def _run_counts(mesh, shape, src, dst, counts):
    local = distribute_pipeline()(redistribute_module(mesh, shape, src, dst))
    x = np.arange(int(np.prod(shape)), dtype="float32").reshape(shape) + 1
    for w in counts:
        got = run_spmd(specialize(local, {"num_workers": w}), x)
        if "P" in src:  # a partial input is split into random parts; the value is their sum
            np.testing.assert_allclose(got, x, rtol=1e-5, atol=1e-3)
        else:
            np.testing.assert_array_equal(got, x)
    return local


W = distir.ir.sym.var("num_workers")


def test_a_plan_never_cuts_a_static_dim_more_ways_than_it_divides():
    """(6, 2) "S[0], S[0]" -> "S[1], S[0]" on a static (2, 3) mesh went through "S[0], S[1]" (2 cut 3 ways)."""
    _run_counts(DeviceMesh((2, 3), Range(0, 6)), (6, 2), "S[0], S[0]", "S[1], S[0]", [1])
    # the same on (2, num_workers, 2): the target cuts dim 0 over num_workers only, so 12 rows run at 1 and 3
    _run_counts(DeviceMesh((2, W, 2), Range(0, 4 * W)), (12, 2), "S[0], S[0], R", "S[1], S[0], R", [1, 3])


def test_a_plan_needs_no_count_to_divide_more_than_the_user_layouts_do():
    """(7, 4) "P, P" -> "R, R" on (num_workers, 2) failed to specialize at 3 on an intermediate 4 / 3."""
    _run_counts(DeviceMesh((W, 2), Range(0, 2 * W)), (7, 4), "P, P", "R, R", [1, 2, 3, 5])


def test_identical_blocks_across_a_size_one_axis_move_nothing():
    """(num_workers, 1, 2): "S[0], S[0], S[0]" -> "S[0], R, S[0]" moved 64 B per worker through three collectives."""
    from distir.runtime.spmd import SpmdStats

    mesh = DeviceMesh((W, 1, 2), Range(0, 2 * W))
    local = _run_counts(mesh, (16, 4), "S[0], S[0], S[0]", "S[0], R, S[0]", [1, 2, 4])
    stats = SpmdStats()
    run_spmd(specialize(local, {"num_workers": 2}), np.ones((16, 4), "float32"), stats=stats)
    assert stats.total_bytes == 0


def test_a_partial_between_meshes_of_other_shapes_at_a_count_that_divides_the_target():
    """(3, 4) "P" on a static (2,) mesh -> "S[0]" on (num_workers,): a numpy ValueError at 3 workers."""
    src = DeviceMesh((2,), Range(0, 2))
    dst = DeviceMesh((W,), Range(0, W))
    mod = redistribute_module(src, (3, 4), "P", "S[0]", dst_mesh=dst)
    local = distribute_pipeline()(mod)
    value = np.arange(12, dtype="float32").reshape(3, 4)
    for w in (1, 2, 3, 4):  # 3 rows over 2 or 4 target workers: uneven blocks (2 and 1; 1, 1, 1 and none)
        np.testing.assert_allclose(run_spmd(specialize(local, {"num_workers": w}), value), value, atol=1e-5)


def test_a_parameter_wanted_cut_over_two_symbolic_axes_keeps_only_the_cut_that_divides():
    """Mesh (num_workers, num_workers): a plain (24,) parameter read with "S[0], R" and "R, S[0]"
    tensors was laid out "S[0], S[0]" (num_workers^2 pieces), so specialization at 3 failed."""
    text = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers", "num_workers"), I.Range(0, "num_workers * num_workers"))]})

    @R.function
    def main(x: R.DTensor((24,), "float32", "mesh[0]", "S[0], R"), w: R.DTensor((24,), "float32", "mesh[0]", "R, S[0]"), y: R.Tensor((24,), "float32")):
        z = R.add(x, y)
        u = R.add(z, w)
        v = R.sum(y, axis=[0])
        return (u, v)
"""
    from distir.testing import assert_sharded_equivalent, random_inputs

    mod = distir.parse(text)
    # propagation avoids layouts that leave workers empty at the hinted count; at 8 per axis, 64 pieces of 24
    with distir.transform.PassContext(config={"propagate-sharding.size_hints": {"num_workers": 8}}):
        placed = distir.transform.get_pass("propagate-sharding")(mod)
    assert str(placed["main"].params[2].type.placement) == "S[0], R"
    assert_sharded_equivalent(mod, random_inputs(mod), num_workers=(1, 2, 3))


def test_a_mesh_of_large_device_ids_simulates_only_its_devices():
    """I.Range(100000000, 100000002): the simulator allocated 10^8 worker slots (GBs, then MemoryError)."""
    from distir.runtime.spmd import SpmdStats

    mesh = DeviceMesh((2,), Range(100000000, 100000002))
    x = np.arange(16, dtype="float32").reshape(4, 4)
    stats = SpmdStats()
    np.testing.assert_array_equal(run_spmd(distribute_pipeline()(redistribute_module(mesh, (4, 4), "S[0]", "R")), x, stats=stats), x)
    assert stats.simulated == 2


def test_size_arithmetic_that_overflows_int64_is_a_distir_error():
    from distir.ir import sym

    with pytest.raises(DistirError, match="out of the int64 range"):
        sym.mul(sym.var("s"), 2**64)
    with pytest.raises(DistirError, match="overflows int64"):
        sym.mul(sym.mul(sym.var("s"), 2**62), 16)


def test_a_redistribute_to_a_strided_layout_plans_by_time():
    """With axis costs, propagation priced every conversion to or from a strided layout as
    impossible (the time model planned on the strided shape itself): "no layout of the function
    satisfies the hints" for a plain redistribute to "S[1/3], P" (fuzz finding n16)."""
    from distir.analysis import comm_volume
    from distir.runtime.spmd import SpmdStats
    from distir.testing import random_inputs
    from distir.transform import PassContext
    from distir.transform.legalize_redistribute import AXIS_COSTS_KEY

    costs = "0=1ms:100GB/s,1=1ms:2TB/s"
    for src, dst in (("S[0], S[1]", "S[1/3], P"), ("R, R", "R, S[1/3]"), ("S[1/3], R", "S[0], S[1]")):
        mod = distir.parse(f"""
@I.ir_module
class Module:
    I.module_global_infos({{"mesh": [R.device_mesh((3, "num_workers"), I.Range(0, "3 * num_workers"))]}})

    @R.function
    def main(x: R.DTensor((8, 6), "float32", "mesh[0]", "{src}")):
        y = R.dist.redistribute(x, device_mesh="mesh[0]", placement="{dst}")
        return y
""")
        with PassContext(config={AXIS_COSTS_KEY: costs}):
            lowered = distribute_pipeline()(mod)
        (x,) = random_inputs(mod)
        for w in (1, 2, 4, 5):
            local = specialize(lowered, {"num_workers": w})
            stats = SpmdStats()
            np.testing.assert_allclose(run_spmd(local, x, stats=stats), x, rtol=1e-6, err_msg=f"{src} -> {dst} at {w}")
            assert comm_volume(local).evaluate({"num_workers": w}).total_bytes == stats.total_bytes


def test_a_function_whose_layouts_are_all_given_needs_no_solver_columns():
    """Every layout given and the one redistribute (a strided layout between meshes) impossible to
    price: the layout program had no columns and HiGHS raised a ValueError (fuzz finding n17).
    Propagation now leaves it as it is, and legalize refuses it in one line."""
    mod = distir.parse("""
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers")), R.device_mesh(("num_workers",), I.Range(2, "num_workers + 2"))]})

    @R.function
    def main(p: R.DTensor((1, 4), "float32", "mesh[1]", "R")):
        v = R.dist.redistribute(p, device_mesh="mesh[0]", placement="S[1/2]")
        return v
""")
    placed = distir.transform.get_pass("propagate-sharding")(mod)
    assert str(placed["main"].params[0].type.placement) == "R"
    with pytest.raises(DistirError, match="moves between meshes only after it is redistributed to a plain one"):
        distribute_pipeline()(mod)


def test_a_free_parameter_never_gets_a_strided_dim_cut_twice():
    """Two consumers wished the free parameter p3 cut "S[0/2]" on each mesh axis; propagation
    combined the wishes into "S[0/2], S[0/2]", no layout (a strided dim is cut by one mesh axis
    only), and lowering crashed with an IndexError (fuzz finding n18). A strided dim now keeps its
    first cut, and a strided shard the shape does not allow ("S[1/3]" on a dim of 3) becomes R."""
    from distir.ir.types import DTensorType
    from distir.testing import assert_sharded_equivalent, random_inputs

    mod = distir.parse("""
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((1, 2), I.Range(0, 2))]})

    @R.function
    def main(p2: R.DTensor((1, 4), "float32", "mesh[0]", "S[1/2], R"), p3: R.Tensor((4,), "float32")):
        with R.dataflow():
            v4 = R.subtract(p2, p3)
            v5 = R.dist.annotate_sharding(v4, device_mesh="mesh[0]", placement="S[0], S[1/2]")
            R.output(v5)
        return v5
""")
    placed = distir.transform.get_pass("propagate-sharding")(mod)
    for p in placed["main"].params:
        assert isinstance(p.type, DTensorType)
        p.type.placement.validate(2, len(p.type.shape), shape=p.type.shape)
    assert_sharded_equivalent(mod, random_inputs(mod), num_workers=(1,))

    from distir.ir.placement import Placement
    from distir.transform.layout_choice.cost_model import _strided_fitted

    assert str(_strided_fitted(Placement.parse("S[0/2], R, S[0/2]"), (4,))) == "S[0/2], R, R"
    assert str(_strided_fitted(Placement.parse("S[1/3], S[1], R"), (12, 3, 24))) == "R, S[1], R"
    assert str(_strided_fitted(Placement.parse("S[1], S[1]"), (12, 8))) == "S[1], S[1]"


def test_a_reshape_never_makes_a_strided_dim_cut_by_two_mesh_axes():
    """(2, s) "S[1], S[1]" merged to (2 * s,): each axis's cut lands inside the merged dim, and the
    reshape's rule gave "S[0/2], S[0/2]", no layout (a strided dim is cut by one mesh axis only);
    lowering crashed with an IndexError (fuzz finding n19). The rule refuses it now, and propagation
    redistributes the input first."""
    from distir.ir.types import DTensorType
    from distir.testing import assert_sharded_equivalent, random_inputs

    mod = distir.parse("""
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((2, 3), I.Range(0, 6))]})

    @R.function
    def main(p0: R.DTensor((2, 8), "int32", "mesh[0]", "S[1], S[1]")):
        with R.dataflow():
            v1 = R.reshape(p0, R.shape([16]))
            R.output(v1)
        return v1
""")
    (b,) = mod["main"].bindings()
    assert not isinstance(b.var.type, DTensorType)  # no layout fits the rule: propagation decides
    placed = distir.transform.get_pass("propagate-sharding")(mod)
    for b in placed["main"].bindings():
        if isinstance(b.var.type, DTensorType):
            b.var.type.placement.validate(2, len(b.var.type.shape), shape=b.var.type.shape)
    assert_sharded_equivalent(mod, random_inputs(mod), num_workers=(1,))
