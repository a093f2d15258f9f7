"""TVM-style Before/Expected tests of legalize-redistribute and the lowering, num_workers symbolic."""

from __future__ import annotations

import pytest

import distir
from distir.ir import assert_structural_equal
from distir.transform import get_pass

HEADER = '''
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers")), R.device_mesh((2, "num_workers"), I.Range(0, "2 * num_workers"))]})

    @R.function
'''

# (source placement, target placement, expected body lines) on the 1-D symbolic mesh
CASES = {
    "S-to-R": ("S[0]", "R", ['y: R.DTensor((840, 840), "float32", "mesh[0]", "R") = R.dist.all_gather(x, mesh_axis=0)']),
    "P-to-R": ("P", "R", ['y: R.DTensor((840, 840), "float32", "mesh[0]", "R") = R.dist.all_reduce(x, mesh_axis=0)']),
    "Pmax-to-R": ("P[max]", "R", ['y: R.DTensor((840, 840), "float32", "mesh[0]", "R") = R.dist.all_reduce(x, mesh_axis=0)']),
    "P-to-S": ("P", "S[1]", ['y: R.DTensor((840, 840), "float32", "mesh[0]", "S[1]") = R.dist.reduce_scatter(x, mesh_axis=0, dim=1)']),
    "S-to-S": ("S[0]", "S[1]", ['y: R.DTensor((840, 840), "float32", "mesh[0]", "S[1]") = R.dist.all_to_all(x, mesh_axis=0, dim=1)']),
    "R-to-S": ("R", "S[0]", ['y: R.DTensor((840, 840), "float32", "mesh[0]", "S[0]") = R.dist.local_shard(x, mesh_axis=0, dim=0)']),
    "R-to-P": ("R", "P", ['y: R.DTensor((840, 840), "float32", "mesh[0]", "P") = R.dist.local_partial(x, mesh_axis=0, op_type="sum")']),
}


def module(src: str, dst: str, body: list[str] | None, mesh: str = "mesh[0]") -> str:
    sig = f'def main(x: R.DTensor((840, 840), "float32", "{mesh}", "{src}")):'
    lines = body if body is not None else [f'y = R.dist.redistribute(x, device_mesh="{mesh}", placement="{dst}")']
    inner = "\n".join("            " + ln for ln in lines)
    result = "y" if lines else "x"
    if not lines:
        return HEADER + f"    {sig}\n        return x\n"
    return HEADER + f"    {sig}\n        with R.dataflow():\n{inner}\n            R.output({result})\n        return {result}\n"


@pytest.mark.parametrize("name", sorted(CASES))
def test_legalize_each_transition(name):
    src, dst, expected = CASES[name]
    before = distir.parse(module(src, dst, None))
    after = get_pass("legalize-redistribute")(before)
    assert_structural_equal(after, distir.parse(module(src, dst, expected)))


def test_same_placement_is_removed():
    before = distir.parse(module("S[0]", "S[0]", None))
    after = get_pass("legalize-redistribute")(before)
    assert_structural_equal(after, distir.parse(module("S[0]", "S[0]", [])))


def test_two_d_mesh_swap_is_one_exchange():
    # was local_shard, all_gather, all_to_all: 1/(2n) + (n-1)/n^2 of the tensor per device; the
    # exchange sends each device only what its new block lacks, 1/(2n)
    before = distir.parse(module("S[0], R", "R, S[0]", None, mesh="mesh[1]"))
    after = get_pass("legalize-redistribute")(before)
    expected = ['y: R.DTensor((840, 840), "float32", "mesh[1]", "R, S[0]") = R.dist.exchange(x, placement="R, S[0]")']
    assert_structural_equal(after, distir.parse(module("S[0], R", "R, S[0]", expected, mesh="mesh[1]")))
    assert distir.parse(after.script()).script() == after.script()


LOCAL_HEADER = '''
@I.ir_module
class Module:
    I.module_global_infos({{"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers")), R.device_mesh((2, "num_workers"), I.Range(0, "2 * num_workers"))]}})

    @R.function
    def main(x: R.Tensor(({x_shape}), dtype="float32")):
        R.func_attr({{"distir.global_params": [R.DTensor((840, 840), "float32", "mesh[0]", "{src}")], "distir.global_result": R.DTensor((840, 840), "float32", "mesh[0]", "{dst}")}})
        with R.dataflow():
            {line}
            R.output(y)
        return y
'''

LOWERED = {
    "S-to-R": ('"T.ceildiv(840, num_workers)", 840', 'y: R.Tensor((840, 840), dtype="float32") = R.ccl.all_gather(x, num_workers="num_workers", axis=0, extent=840, device_mesh="mesh[0]", mesh_axis=0)'),
    "P-to-R": ("840, 840", 'y: R.Tensor((840, 840), dtype="float32") = R.ccl.all_reduce(x, op_type="sum", device_mesh="mesh[0]", mesh_axis=0)'),
    "P-to-S": ("840, 840", 'y: R.Tensor((840, "T.ceildiv(840, num_workers)"), dtype="float32") = R.ccl.reduce_scatter(x, op_type="sum", num_workers="num_workers", axis=1, device_mesh="mesh[0]", mesh_axis=0)'),
    "S-to-S": ('"T.ceildiv(840, num_workers)", 840', 'y: R.Tensor((840, "T.ceildiv(840, num_workers)"), dtype="float32") = R.ccl.all_to_all(x, num_workers="num_workers", split_axis=1, concat_axis=0, extent=840, device_mesh="mesh[0]", mesh_axis=0)'),
    "R-to-S": ("840, 840", 'y: R.Tensor(("T.ceildiv(840, num_workers)", 840), dtype="float32") = R.ccl.local_shard(x, num_workers="num_workers", axis=0, device_mesh="mesh[0]", mesh_axis=0)'),
}


@pytest.mark.parametrize("name", sorted(LOWERED))
def test_lower_each_transition(name):
    src, dst, _ = CASES[name]
    before = distir.parse(module(src, dst, None))
    lowered = get_pass("lower-global-view-to-local-view")(get_pass("legalize-redistribute")(before))
    x_shape, line = LOWERED[name]
    expected = distir.parse(LOCAL_HEADER.format(x_shape=x_shape, src=src, dst=dst, line=line))
    assert_structural_equal(lowered, expected)
    # nothing in the lowered text names a concrete worker count
    text = lowered.script()
    assert "num_workers" in text
    for n in ("num_workers=2", "num_workers=4", "num_workers=8"):
        assert n not in text


def _plan_text(shape: str, src: str, dst: str, mesh: str = "mesh[1]") -> str:
    text = module(src, dst, None, mesh=mesh).replace("(840, 840)", shape)
    return get_pass("legalize-redistribute")(distir.parse(text)).script()


def test_layouts_on_the_way_may_cut_any_dim():
    """P,P -> R,R on a (2, num_workers) mesh reduce-scatters a dim on the way and gathers it back:
    the plan made for every count is the same whatever the sizes, since a cut that does not divide is
    padded (7 over 2: 4 and 3); where the shape is known and some count does better, legalize leaves the
    plan to specialize (R.dist.replan)."""
    plans = {shape: _plan_text(shape, "P, P", "R, R") for shape in ("(8, 4)", "(7, 4)", "(7, 5)", '("s", 5)')}
    steps = {shape: [ln.split("R.dist.")[1].split("(")[0] for ln in text.splitlines() if "R.dist." in ln]
             for shape, text in plans.items()}
    assert "reduce_scatter" in steps['("s", 5)']
    for shape, s in steps.items():
        assert s in (steps['("s", 5)'], ["replan"]), (shape, s)


def test_a_placement_mixing_reductions_gets_no_plan():
    """Built through the Python API (the parser already refuses it), "P[max], P" is still refused."""
    from distir.ir import DeviceMesh, Placement, PlacementError, Range
    from distir.transform.redistribute_plan import plan_redistribute

    mesh = DeviceMesh((2, 2), Range(0, 4))
    with pytest.raises(PlacementError, match="mixes partial reductions"):
        plan_redistribute(mesh, 2, Placement.parse("P[max], P"), Placement.parse("P, P"))


def test_a_plan_that_depends_on_the_count_is_made_by_specialize():
    """128 rows over 3 workers are blocks of 43, 43, 42: an all-gather sends the padded blocks, a block
    exchange only the rows each worker lacks. So legalize writes R.dist.replan, and specialize writes the
    all-gather at 4 (where it moves exactly the bound) and the exchange at 3."""
    from distir.transform.specialize import specialize

    text = module("S[0]", "R", None).replace("(840, 840)", "(128, 64)")
    legalized = get_pass("legalize-redistribute")(distir.parse(text))
    assert 'R.dist.replan(x, placement="R", shape=None' in legalized.script()
    lowered = get_pass("lower-global-view-to-local-view")(legalized)
    assert "R.ccl.replan(x, shape=[128, 64]" in lowered.script()
    kinds = {n: [b.value.op.name for b in specialize(lowered, {"num_workers": n})["main"].bindings()] for n in (1, 3, 4)}
    assert kinds == {1: [], 3: ["ccl.exchange"], 4: ["ccl.all_gather"]}
