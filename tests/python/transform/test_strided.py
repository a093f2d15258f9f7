"""Strided shards S[d/k] (docs/strided.md): the text form, the local storage, the fused QKV
weight laid out per head inside each third with no gather, and every redistribute to and from a
strided layout on the simulator, whose numbers must equal the input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import distir
from distir.analysis import comm_volume, memory_footprint
from distir.driver import Driver, random_inputs
from distir.errors import DistirError
from distir.ir import Call, DeviceMesh, Placement, Range, get_op, sym
from distir.ir.layout import cut_block, local_shape
from distir.ir.placement import PlacementError, StridedShard
from distir.transform.pipelines import distribute_pipeline
from distir.transform.specialize import specialize
from helpers import redistribute_module

W = sym.var("num_workers")

QKV = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(x: R.Tensor((6, 32), "float32"), w: WEIGHT) -> R.Tensor((4, 6, 8), "float32"):
        with R.dataflow():
            WS
            qkv: R.Tensor((6, 96), "float32") = R.matmul(x, ws, out_dtype=None)
            h: R.Tensor((6, 3, 4, 8), "float32") = R.reshape(qkv, R.shape([6, 3, 4, 8]))
            t: R.Tensor((3, 4, 6, 8), "float32") = R.permute_dims(h, axes=[1, 2, 0, 3])
            q: R.Tensor((4, 6, 8), "float32") = R.take(t, R.const(0, "int64"), axis=0)
            k: R.Tensor((4, 6, 8), "float32") = R.take(t, R.const(1, "int64"), axis=0)
            v: R.Tensor((4, 6, 8), "float32") = R.take(t, R.const(2, "int64"), axis=0)
            kt: R.Tensor((4, 8, 6), "float32") = R.permute_dims(k, axes=[0, 2, 1])
            sc: R.Tensor((4, 6, 6), "float32") = R.matmul(q, kt, out_dtype=None)
            p: R.Tensor((4, 6, 6), "float32") = R.nn.softmax(sc, axis=-1)
            o: R.Tensor((4, 6, 8), "float32") = R.matmul(p, v, out_dtype=None)
            R.output(o)
        return o
"""

DECLARED = QKV.replace("WEIGHT", 'R.DTensor((32, 96), "float32", "mesh[0]", "S[1/3]")').replace(
    "WS", 'ws: R.DTensor((32, 96), "float32", "mesh[0]", "S[1/3]") = w')
HINTED = QKV.replace("WEIGHT", 'R.Tensor((32, 96), "float32")').replace(
    "WS", 'ws: R.Tensor((32, 96), "float32") = R.dist.annotate_sharding(w, device_mesh="mesh[0]", placement="S[1/3]")')

FREE = (QKV.replace("WEIGHT", 'R.Tensor((32, 96), "float32")').replace("            WS\n", "")
        .replace("R.matmul(x, ws,", "R.matmul(x, w,")
        .replace('t: R.Tensor((3, 4, 6, 8), "float32") = R.permute_dims(h,',
                 'hs: R.Tensor((6, 3, 4, 8), "float32") = R.dist.annotate_sharding(h, device_mesh="mesh[0]", '
                 'placement="S[2]")\n            t: R.Tensor((3, 4, 6, 8), "float32") = R.permute_dims(hs,'))


# ------------------------------------------------------------------ text form


@pytest.mark.parametrize("text", ["S[1/3]", "S[0], S[2/4]", "R, S[1/2]", "S[ 1 / 3 ]"])
def test_placement_round_trips(text):
    p = Placement.parse(text)
    assert Placement.parse(str(p)) == p
    assert str(Placement.parse(str(p))) == str(p)


@pytest.mark.parametrize("text, words", [
    ("S[1/1]", "needs at least 2 parts"),
    ("S[1/0]", "needs at least 2 parts"),
    ("S[1/x]", "is not R, S[dim], S[dim/parts]"),
    ("S[1/3/2]", "is not R, S[dim], S[dim/parts]"),
    ("S[-1/3]", "shards a negative dim"),
    ("S[1/-2]", "needs at least 2 parts"),
])
def test_bad_syntax_is_one_line(text, words):
    with pytest.raises(PlacementError) as err:
        Placement.parse(text)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_layouts_that_do_not_fit_are_refused_naming_the_place():
    with pytest.raises(PlacementError, match="3 does not divide it"):
        Placement.parse("S[1/3]").validate(1, 2, shape=(4, 10))
    with pytest.raises(PlacementError, match="a strided dim is cut by one mesh axis only"):
        Placement.parse("S[1/3], S[1]").validate(2, 2, shape=(4, 9))
    with pytest.raises(PlacementError, match="for every value of the symbolic size"):
        Placement.parse("S[1/3]").validate(1, 2, shape=(4, sym.var("n")))
    Placement.parse("S[1/3]").validate(1, 2, shape=(4, sym.mul(3, sym.var("n"))))  # provably divisible
    bad = DECLARED.replace('"S[1/3]")', '"S[1/5]")', 1)
    with pytest.raises(DistirError) as err:
        distir.parse(bad)
    assert "5 does not divide it" in str(err.value)


def test_module_round_trips_through_the_pipeline():
    mod = distir.parse(DECLARED)
    for m in (mod, distribute_pipeline()(mod)):
        text = m.script()
        assert distir.parse(text).script() == text


# ------------------------------------------------------------------ storage


def test_each_worker_holds_its_block_of_every_part():
    x = np.arange(2 * 30).reshape(2, 30)
    p = Placement.parse("S[1/3]")
    piece = cut_block(x, p, (1,), (4,))  # parts of 10 in blocks of 3: worker 1 holds 3..5 of each
    assert piece[0].tolist() == [3, 4, 5, 13, 14, 15, 23, 24, 25]
    assert cut_block(x, p, (3,), (4,))[0].tolist() == [9, 0, 0, 19, 0, 0, 29, 0, 0]  # padded per part
    mesh = DeviceMesh((W,), Range(0, W))
    assert local_shape((2, 30), DeviceMesh((4,), Range(0, 4)), p) == (2, 9)
    assert sym.evaluate(local_shape((2, 30), mesh, p)[1], {"num_workers": 3}) == 12


def test_memory_counts_the_padded_parts():
    local = distribute_pipeline()(distir.parse(DECLARED))
    at3 = memory_footprint(specialize(local, {"num_workers": 3}))
    assert dict(at3.params)["w"] == 32 * 3 * 11 * 4  # three parts of ceil(32 / 3) columns


# ------------------------------------------------------------------ the fused QKV weight


@pytest.mark.parametrize("text", [DECLARED, HINTED], ids=["declared", "hinted"])
def test_fused_qkv_is_head_sharded_without_a_gather(text):
    mod = distir.parse(text)
    local = distribute_pipeline()(mod)
    assert "all_gather" not in local.script() and "exchange" not in local.script()
    d = Driver(mod)
    inputs = random_inputs(mod, seed=3)
    for w in (1, 2, 4):
        r = d.run(inputs, {"num_workers": w})
        assert r.ok, r.comparison.mismatch
        assert r.stats.records == []  # no communication at all
    for w, sent in ((3, 1080), (5, 720), (8, 2016)):  # 4 heads do not divide: whole heads re-blocked
        r = d.run(inputs, {"num_workers": w})
        assert r.ok, r.comparison.mismatch
        assert {rec.kind for rec in r.stats.records} <= {"regroup"}
        assert r.stats.total_bytes == sent == comm_volume(local).evaluate({"num_workers": w}).total_bytes
        assert sent == _regroups_lack(specialize(local, {"num_workers": w}), w)


def _regroups_lack(mod, w: int) -> int:
    """Bytes the regroups of ``mod`` need, from sets of indices: per regroup, the elements of each worker's
    new block its old block lacks, times the rows across the other dims (float32)."""
    import math

    def blocks(extent, unit):
        units = -(-(extent // unit) // w)
        return [set(range(j * units * unit, min((j + 1) * units * unit, extent))) for j in range(w)]

    total = 0
    for f in mod.functions.values():
        for b in f.bindings():
            if getattr(getattr(b.value, "op", None), "name", None) == "ccl.regroup":
                a, x = b.value.attrs, b.value.args[0].type
                src, dst = blocks(a["extent"], a.get("unit_from", 1)), blocks(a["extent"], a.get("unit_to", 1))
                row = math.prod(d for i, d in enumerate(x.shape) if i != a["axis"] % len(x.shape))
                total += sum(len(t - s) for s, t in zip(src, dst)) * row * 4
    return total


def test_a_free_weight_is_laid_out_per_head_inside_each_third():
    """Only the heads are hinted: propagation lays the plain weight out S[1/3] (docs/strided.md)."""
    from distir.transform import PropagateSharding

    mod = distir.parse(FREE)
    laid = PropagateSharding()(mod).functions["main"]
    assert str(laid.params[1].type.placement) == "S[1/3]"
    d = Driver(mod)
    inputs = random_inputs(mod, seed=4)
    for w in (2, 4, 3):
        r = d.run(inputs, {"num_workers": w})
        assert r.ok, r.comparison.mismatch
        assert {rec.kind for rec in r.stats.records} <= {"regroup"}


# ------------------------------------------------------------------ redistribute


def _check(shape, src, dst, counts):
    mod = redistribute_module((W,), shape, src, dst)
    d = Driver(mod)
    local = distribute_pipeline()(mod)
    inputs = random_inputs(mod, seed=1)
    for w in counts:
        r = d.run(inputs, {"num_workers": w})
        assert r.ok, f"{src} -> {dst} at {w}: {r.comparison.mismatch}"
        assert comm_volume(local).evaluate({"num_workers": w}).total_bytes == r.stats.total_bytes


@pytest.mark.parametrize("src, dst", [
    ("S[1/3]", "R"), ("R", "S[1/3]"), ("S[1/3]", "S[1]"), ("S[1]", "S[1/3]"), ("S[1/3]", "S[0]"),
    ("S[0]", "S[1/3]"), ("P", "S[1/3]"), ("S[1/3]", "S[1/2]"), ("S[1/3]", "P"),
])
def test_redistribute_to_and_from_strided(src, dst):
    _check((5, 12), src, dst, (1, 2, 3, 4, 5, 6, 7, 8))


def test_strided_to_replicated_is_one_gather_of_the_parts():
    mod = redistribute_module((W,), (4, 24), "S[1/3]", "R")
    text = specialize(distribute_pipeline()(mod), {"num_workers": 4}).script()
    assert text.count("R.ccl.all_gather") == 1 and "exchange" not in text


def test_on_a_two_d_mesh():
    mod = redistribute_module((2, 3), (4, 12), "S[1/2], S[0]", "R, S[1]")
    d = Driver(mod)
    r = d.run(random_inputs(mod, seed=2), {})
    assert r.ok, r.comparison.mismatch


@st.composite
def cases(draw):
    k = draw(st.integers(2, 4))
    shape = (draw(st.integers(1, 4)), k * draw(st.integers(2, 7)))
    plain = ["R", "S[0]", "S[1]", "P"]
    strided = f"S[1/{k}]"
    other = draw(st.sampled_from(plain + [f"S[1/{k * 2}]" if shape[1] % (4 * k) == 0 else strided]))
    src, dst = (strided, other) if draw(st.booleans()) else (other, strided)
    return shape, src, dst, draw(st.lists(st.integers(1, 8), min_size=1, max_size=3, unique=True))


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_every_redistribute_keeps_the_value(case):
    shape, src, dst, counts = case
    mod = redistribute_module((W,), shape, src, dst)
    d = Driver(mod)
    local = distribute_pipeline()(mod)
    inputs = random_inputs(mod, seed=5)
    for w in counts:
        r = d.run(inputs, {"num_workers": w})
        assert r.ok, f"{shape} {src} -> {dst} at {w}: {r.comparison.mismatch}"
        assert comm_volume(local).evaluate({"num_workers": w}).total_bytes == r.stats.total_bytes


def test_ops_that_reduce_a_strided_dim_redistribute_first():
    x = Placement.parse("S[1/3]")
    assert isinstance(x.specs[0], StridedShard)
    mod = distir.parse(DECLARED.replace(
        'qkv: R.Tensor((6, 96), "float32") = R.matmul(x, ws, out_dtype=None)',
        'qkv0: R.Tensor((6, 96), "float32") = R.matmul(x, ws, out_dtype=None)\n'
        '            tot: R.Tensor((6,), "float32") = R.sum(qkv0, axis=[1])\n'
        '            qkv: R.Tensor((6, 96), "float32") = R.add(qkv0, R.const(1.0, "float32"))'))
    d = Driver(mod)
    r = d.run(random_inputs(mod, seed=1), {"num_workers": 3})
    assert r.ok, r.comparison.mismatch


# ------------------------------------------------------------------ TVM / Disco


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_fused_qkv_on_disco_equals_one_device(workers):
    mod = distir.parse(DECLARED)
    d = Driver(mod)
    inputs = random_inputs(mod, seed=3)
    on_disco = d.run(inputs, {"num_workers": workers}, backend="tvm")
    assert on_disco.ok, on_disco.comparison.mismatch
    sim = d.run(inputs, {"num_workers": workers})
    assert on_disco.disco["bytes_sent"] == sim.stats.total_bytes


@pytest.mark.parametrize("src, dst", [("S[1/3]", "R"), ("P", "S[1/3]"), ("S[1]", "S[1/3]")])
def test_redistributes_on_disco(src, dst):
    mod = redistribute_module((W,), (4, 24), src, dst)
    d = Driver(mod)
    for w in (3, 4):
        r = d.run(random_inputs(mod, seed=1), {"num_workers": w}, backend="tvm")
        assert r.ok, r.comparison.mismatch


def test_show_refuses_a_strided_layout():
    from distir.analysis.errors import AnalysisError
    from distir.analysis.layout_view import layout_grid

    w = distir.parse(DECLARED).functions["main"].params[1]
    with pytest.raises(AnalysisError, match="strided shard, which is not drawn"):
        layout_grid("w", w.type, {"num_workers": 4})


# ------------------------------------------------------------------ what is refused


def test_steps_and_position_dependent_ops_refuse_a_strided_layout():
    head = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((2, 2), I.Range(0, 4))]})

    @R.function
    def main(x: R.DTensor((12, 12), "float32", "mesh[0]", "S[1/3], R")):
        with R.dataflow():
            y = BODY
            R.output(y)
        return y
"""
    with pytest.raises(DistirError, match=r'needs S\[d\] on that axis, found S\[1/3\]'):
        distir.parse(head.replace("BODY", "R.dist.all_gather(x, mesh_axis=0)"))
    with pytest.raises(DistirError, match="a strided dim is cut by one mesh axis only"):
        distir.parse(head.replace("BODY", "R.dist.local_shard(x, mesh_axis=1, dim=1)"))
    x = distir.parse(head.replace("BODY", "x")).functions["main"].params[0]
    with pytest.raises(DistirError, match="strided shard, but its per-worker form needs"):
        _ = Call(get_op("triu"), (x,), {"k": 1}).type
    with pytest.raises(DistirError, match="a strided shard S\\[1/3\\] of a dim R.sum reduces over"):
        _ = Call(get_op("sum"), (x,), {"axis": [1]}).type
    # unannotated, propagation redistributes first: the numbers are right
    mod = distir.parse(head.replace("y = BODY", "y: R.Tensor((12, 12), \"float32\") = R.triu(x, k=1)"))
    r = Driver(mod).run(random_inputs(mod, seed=1), {})
    assert r.ok, r.comparison.mismatch


@st.composite
def two_d_cases(draw):
    mesh_shape = draw(st.sampled_from([(2, 2), (2, 3), (3, 2), (1, 3)]))
    k = draw(st.integers(2, 3))
    shape = (draw(st.integers(1, 5)), k * draw(st.integers(2, 5)))
    strided = f"S[1/{k}]"
    strided_layouts = [f"{strided}, R", f"R, {strided}", f"{strided}, S[0]", f"S[0], {strided}", f"P, {strided}"]
    plain = ["R, R", "S[0], S[1]", "S[1], R", "R, S[1]", "P, S[0]", "S[1], S[0]"]
    a, b = draw(st.sampled_from(strided_layouts)), draw(st.sampled_from(plain + strided_layouts))
    src, dst = (a, b) if draw(st.booleans()) else (b, a)
    return mesh_shape, shape, src, dst


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(two_d_cases())
def test_every_redistribute_on_a_two_d_mesh_keeps_the_value(case):
    mesh_shape, shape, src, dst = case
    mod = redistribute_module(mesh_shape, shape, src, dst)
    local = distribute_pipeline()(mod)
    r = Driver(mod).run(random_inputs(mod, seed=6), {})
    assert r.ok, f"{mesh_shape} {shape} {src} -> {dst}: {r.comparison.mismatch}"
    assert comm_volume(local).evaluate({}).total_bytes == r.stats.total_bytes
