"""The ops models need sharded where they used to need whole axes, through the pipeline and the
SPMD simulator against the interpreter: a vocab-parallel embedding (R.take from a table sharded
by rows gives a partial sum) and causal masks (R.tril / R.triu) sharded by rows or columns."""

from __future__ import annotations

import numpy as np
import pytest

from distir.ir import (
    Call,
    DeviceMesh,
    Placement,
    Range,
    ShapeExpr,
    sym,
)
from distir.ir.builder import FunctionBuilder, dtensor, module_of
from distir.runtime.spmd import SpmdStats, run_spmd
from distir.testing import assert_sharded_equivalent
from distir.transform.pipelines import distribute_pipeline
from distir.transform.specialize import specialize

W = sym.var("num_workers")
S = sym.var("s")
MESH = DeviceMesh((W,), Range(0, W))


def P(text):
    return Placement.parse(text)


class Prog:
    """A global-view function over DTensor parameters whose results are redistributed to R."""

    def __init__(self, mesh=MESH):
        self.mesh = mesh
        self.b = FunctionBuilder("main", meshes=[mesh], dataflow=True)

    def param(self, name, shape, placement, dtype="float32"):
        return self.b.param(name, dtensor(shape, dtype, self.mesh, placement))

    def op(self, name, op, *args, **attrs):
        return self.b.call(op, *args, name=name, **attrs)

    def module(self, *results):
        replicated = Placement.replicated(self.mesh.ndim)
        outs = [
            r if r.type.placement == replicated
            else self.op(f"out{i}", "dist.redistribute", r, device_mesh=self.mesh, placement=replicated)
            for i, r in enumerate(results)
        ]
        self.b.ret(outs[0] if len(outs) == 1 else outs)
        return module_of(self.b)


def _ids(shape, vocab, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, shape).astype("int32")


# ---------------------------------------------------------------- vocab-parallel embedding


def test_vocab_parallel_embedding_is_a_partial_sum_reduced_once():
    p = Prog()
    table = p.param("table", (64, 16), "S[0]")
    ids = p.param("ids", (2, S), "R", "int32")
    e = p.op("e", "take", table, ids, axis=0)
    assert e.type.placement == P("P")
    mod = p.module(e)
    table_v = np.random.default_rng(1).standard_normal((64, 16)).astype("float32")
    ids_v = _ids((2, 9), 64)
    ids_v[0, :4] = [0, 63, 15, 16]  # both ends of the vocabulary and of a 4-way block
    stats = assert_sharded_equivalent(mod, [table_v, ids_v], rtol=0, atol=0)
    for w, st in stats.items():
        assert st.counts == {"all_reduce": 1}, (w, st.summary())
        assert (st.total_bytes == 0) == (w == 1)


def test_vocab_parallel_lookup_lowers_to_shard_take_at_the_worker_rows():
    p = Prog()
    table = p.param("table", (64, 16), "S[0]")
    ids = p.param("ids", (S,), "R", "int32")
    mod = p.module(p.op("e", "take", table, ids, axis=0))
    lowered = distribute_pipeline()(mod)
    calls = [b.value for b in lowered["main"].bindings() if isinstance(b.value, Call)]
    takes = [c for c in calls if c.op.name in ("take", "shard_take")]
    assert [c.op.name for c in takes] == ["shard_take"]
    # the worker's first row, clamped to the table's rows (a worker past them holds none: it finds none)
    start = sym.mul(sym.var("worker_id"), sym.ceildiv(64, W))
    assert sym.equal(takes[0].attrs["offset"], sym.min_(start, 64))
    # the text of the local module round-trips (worker_id in an attribute)
    from distir import parse

    assert parse(lowered.script()).script() == lowered.script()


def test_vocab_parallel_embedding_on_a_2d_mesh_with_a_hidden_shard_too():
    mesh = DeviceMesh((2, W), Range(0, sym.mul(2, W)))
    p = Prog(mesh)
    table = p.param("table", (32, 8), "S[1], S[0]")  # rows over mesh axis 1, columns over mesh axis 0
    ids = p.param("ids", (3, 5), "R, R", "int32")
    e = p.op("e", "take", table, ids, axis=0)
    assert e.type.placement == P("S[2], P")
    table_v = np.random.default_rng(2).standard_normal((32, 8)).astype("float32")
    assert_sharded_equivalent(p.module(e), [table_v, _ids((3, 5), 32, 3)], num_workers=(1, 2, 4), rtol=0, atol=0)


def test_vocab_parallel_over_two_mesh_axes_uses_the_combined_block():
    mesh = DeviceMesh((2, W), Range(0, sym.mul(2, W)))
    p = Prog(mesh)
    table = p.param("table", (48, 4), "S[0], S[0]")
    ids = p.param("ids", (8,), "R, R", "int32")
    e = p.op("e", "take", table, ids, axis=0)
    assert e.type.placement == P("P, P")
    table_v = np.random.default_rng(4).standard_normal((48, 4)).astype("float32")
    ids_v = np.array([0, 47, 5, 6, 23, 24, 36, 11], dtype="int32")
    assert_sharded_equivalent(p.module(e), [table_v, ids_v], num_workers=(1, 2, 3), rtol=0, atol=0)


def test_vocab_parallel_then_a_linear_op_keeps_the_partial():
    p = Prog()
    table = p.param("table", (40, 8), "S[0]")
    ids = p.param("ids", (2, S), "R", "int32")
    w = p.param("w", (8, 8), "R")
    e = p.op("e", "take", table, ids, axis=0)
    y = p.op("y", "matmul", e, w)
    assert y.type.placement == P("P")
    table_v = np.random.default_rng(5).standard_normal((40, 8)).astype("float32")
    w_v = np.random.default_rng(6).standard_normal((8, 8)).astype("float32")
    assert_sharded_equivalent(p.module(y), [table_v, _ids((2, 6), 40, 7), w_v], rtol=1e-5, atol=1e-5)


def test_out_of_range_ids_are_reported_not_wrapped():
    from distir.runtime import RunError, run

    p = Prog()
    table = p.param("table", (8, 2), "S[0]")
    ids = p.param("ids", (2,), "R", "int32")
    mod = p.module(p.op("e", "take", table, ids, axis=0))
    with pytest.raises(RunError, match=r"binding 'e'.*index -1 is out of range \[0, 8\)"):
        run(mod, np.zeros((8, 2), "float32"), np.array([1, -1], "int32"))


# ---------------------------------------------------------------- causal masks sharded by rows or columns


@pytest.mark.parametrize("op", ["tril", "triu"])
@pytest.mark.parametrize("placement", ["S[1]", "S[2]", "S[0]"])
@pytest.mark.parametrize("k", [0, 1, -3])
def test_masks_sharded_by_rows_columns_or_heads(op, placement, k):
    p = Prog()
    x = p.param("x", (8, 24, 16), placement)
    m = p.op("m", op, x, k=k)
    assert m.type.placement == P(placement)
    x_v = np.random.default_rng(8).standard_normal((8, 24, 16)).astype("float32")
    stats = assert_sharded_equivalent(p.module(m), [x_v], rtol=0, atol=0)
    # the mask is computed where the data is: the only collective gathers the result (an all-gather,
    # or at a count that does not divide the dim a block exchange, which sends no padding; none on one device)
    assert all(sum(st.counts.values()) <= 1 and set(st.counts) <= {"all_gather", "exchange"} for st in stats.values())
    assert any(set(st.counts) == {"all_gather"} for st in stats.values())


def test_mask_sharded_by_rows_and_columns_on_a_2d_mesh():
    mesh = DeviceMesh((2, W), Range(0, sym.mul(2, W)))
    p = Prog(mesh)
    x = p.param("x", (16, 24), "S[0], S[1]")
    m = p.op("m", "tril", x, k=2)
    u = p.op("u", "triu", x, k=-5)
    x_v = np.random.default_rng(9).standard_normal((16, 24)).astype("float32")
    assert_sharded_equivalent(p.module(m, u), [x_v], num_workers=(1, 2, 4), rtol=0, atol=0)


def test_causal_attention_scores_sharded_by_query_rows():
    """Sequence-parallel scores: a worker's rows of q, all of k; the mask is built sharded."""
    p = Prog()
    q = p.param("q", (S, 16), "S[0]")
    k = p.param("k", (S, 16), "R")
    kt = p.op("kt", "permute_dims", k, axes=[1, 0])
    scores = p.op("scores", "matmul", q, kt)
    fill = p.param("fill", (), "R")
    big = p.op("big", "full", ShapeExpr((S, S)), fill, dtype="float32")
    big_s = p.op("big_s", "dist.redistribute", big, device_mesh=MESH, placement=P("S[0]"))
    mask = p.op("mask", "triu", big_s, k=1)
    probs = p.op("probs", "nn.softmax", p.op("masked", "add", scores, mask), axis=-1)
    assert probs.type.placement == P("S[0]")
    rng = np.random.default_rng(10)
    q_v, k_v = (rng.standard_normal((16, 16)).astype("float32") for _ in range(2))
    fill_v = np.array(-1e9, dtype="float32")
    assert_sharded_equivalent(p.module(probs), [q_v, k_v, fill_v], rtol=1e-5, atol=1e-6)


def test_spmd_of_a_specialized_mask_matches_numpy_directly():
    """Not only equal to the interpreter: equal to numpy's own tril at every worker count."""
    p = Prog()
    x = p.param("x", (S, S), "S[0]")
    mod = p.module(p.op("m", "tril", x, k=-1))
    lowered = distribute_pipeline()(mod)
    x_v = np.arange(36, dtype="float32").reshape(6, 6) + 1
    for w in (1, 2, 3, 6):
        got = run_spmd(specialize(lowered, {"num_workers": w}), x_v, stats=SpmdStats())
        np.testing.assert_array_equal(got, np.tril(x_v, -1))


def test_vocab_parallel_embedding_from_a_parameter_layout_through_propagation():
    """Only the table's layout is given; the lookup comes out partial and one all-reduce fixes it."""
    from distir import parse

    mod = parse(
        """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(
        ids: R.Tensor((2, "s"), dtype="int32"),
        table: R.DTensor((64, 32), "float32", "mesh[0]", "S[0]"),
        w: R.Tensor((32,), dtype="float32"),
    ):
        s = T.int64()
        with R.dataflow():
            e = R.take(table, ids, axis=0)
            y = R.nn.rms_norm(e, w, axes=[-1])
            R.output(y)
        return y
"""
    )
    rng = np.random.default_rng(11)
    inputs = [_ids((2, 5), 64, 12), rng.standard_normal((64, 32)).astype("float32"), np.ones(32, "float32")]
    stats = assert_sharded_equivalent(mod, inputs, rtol=1e-5, atol=1e-6)
    assert all(st.counts == {"all_reduce": 1} for st in stats.values())
