"""Layouts planned for the device counts a program is declared for (``propagate-sharding.counts``):
classes of counts, a guarded variant per class whose layout differs, specialization keeping the
variant of its count. The oracle of bytes is the same plan laid out on a static mesh of each count
(what distir does when told the count), run on the simulator; numbers are compared with one device."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from distir.driver import Driver
from distir.errors import DistirError
from distir.ir.mesh import DeviceMesh, Range
from distir.script import parse
from distir.transform import PassContext, ShardParams, get_pass
from distir.transform.count_variants import COUNT_GUARD, COUNT_VARIANT_OF
from distir.transform.layout_choice.count_classes import count_classes
from distir.transform.layout_choice.sharding_graph import build_graph
from distir.transform.specialize import specialize

COUNTS = (1, 2, 3, 4)


def _static(n: int) -> DeviceMesh:
    return DeviceMesh((n,), Range(0, n))


def _bytes(mod, func, inputs, weights, counts, declared):
    """Bytes per worker at each count, each run checked against one device."""
    d = Driver(mod, func=func, counts=declared)
    out = {}
    for n in counts:
        r = d.run(inputs, n, weights=weights, rtol=1e-4, atol=1e-4)
        assert r.ok, (n, r.comparison.mismatch)
        out[n] = float(r.stats.bytes_per_worker)
    return d, out


def _static_bytes(mod_for_mesh, func, inputs, weights, counts):
    out = {}
    for n in counts:
        r = Driver(mod_for_mesh(_static(n)), func=func).run(inputs, n, weights=weights, rtol=1e-4, atol=1e-4)
        assert r.ok, (n, r.comparison.mismatch)
        out[n] = float(r.stats.bytes_per_worker)
    return out


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _moe():
    from distir.examples.nn import moe as M
    from distir.tvm import from_nn

    m = M.MoEConfig()
    model = M.MoE(m)
    x = np.random.default_rng(0).standard_normal((16, m.hidden_size)).astype("float32")
    return from_nn(model, M.spec(m)), M.EP_PLAN, [x], M.random_weights(model)


def _gqa():
    from distir.examples.nn import gqa as Q
    from distir.tvm import from_nn

    q = Q.GQAConfig()
    model = Q.GQALlama(q)
    plan = {**Q.tp_plan(q, q.num_kv_heads), "*.k_proj.weight": "colwise", "*.v_proj.weight": "colwise"}
    ids = np.random.default_rng(0).integers(0, q.vocab_size, 16).astype("int32")
    return from_nn(model, Q.spec(q)), plan, [ids, *Q.rope_tables(16, q.head_dim)], Q.random_weights(model)


def test_moe_expert_parallel_at_every_declared_count():
    """4 experts cut over 2-4 workers: one all-reduce (the static plan's bytes, 4,096 B per worker at
    2; the layout weighed over the sampled counts alone gathers every expert, 131,072 B at 2). The
    program planned for the default counts (1-8, none declared) sends the same."""
    mod, plan, inputs, weights = _moe()
    d, got = _bytes(ShardParams(plan)(mod), "forward", inputs, weights, COUNTS, list(COUNTS))
    static = _static_bytes(lambda m: ShardParams(plan, mesh=m)(mod), "forward", inputs, weights, COUNTS)
    _, silent = _bytes(ShardParams(plan)(mod), "forward", inputs, weights, COUNTS, None)
    assert got == static == silent
    assert got[2] == 4096


def test_moe_variant_for_the_counts_the_experts_fit():
    """Declared 2 and 8: 4 experts fit 2 workers, not 8; each count its own layout in one module, the
    IR text carries the guard and parses back, and specialization keeps the variant of the count."""
    mod, plan, inputs, weights = _moe()
    d = Driver(ShardParams(plan)(mod), func="forward", counts=[2, 8])
    local = d.local
    assert sorted(local.functions) == ["forward", "forward__w2"]
    assert dict(local["forward__w2"].attrs[COUNT_GUARD]) == {"num_workers": [2]}
    assert local["forward__w2"].attrs[COUNT_VARIANT_OF] == "forward"
    text = local.script()
    assert '"count_guard": {"num_workers": [2]}' in text
    back = parse(text)
    for n in (2, 8):
        a, b = specialize(local, {"num_workers": n}), specialize(back, {"num_workers": n})
        assert list(a.functions) == ["forward"] and COUNT_GUARD not in a["forward"].attrs
        assert a.script() == b.script()
    static = _static_bytes(lambda m: ShardParams(plan, mesh=m)(mod), "forward", inputs, weights, (2, 8))
    for n in (2, 8):
        r = d.run(inputs, n, weights=weights, rtol=1e-4, atol=1e-4)
        assert r.ok and float(r.stats.bytes_per_worker) <= static[n]


def test_gqa_two_kv_heads_cut_at_two_workers():
    """2 KV heads, k/v colwise: at 1-2 workers the heads are cut (no k/v gather: 20,480 B per worker at
    2, the static plan's), at 3-4 the KV heads stay whole; one module with a variant for 1-2."""
    mod, plan, inputs, weights = _gqa()
    d, got = _bytes(ShardParams(plan)(mod), "forward", inputs, weights, COUNTS, list(COUNTS))
    static = _static_bytes(lambda m: ShardParams(plan, mesh=m)(mod), "forward", inputs, weights, COUNTS)
    assert all(got[n] <= static[n] for n in COUNTS), (got, static)
    assert got[2] == 20480
    assert sorted(d.local.functions) == ["forward", "forward__w1_2"]


@pytest.mark.parametrize("form", ["split", "reshape"])
def test_gpt2_block_no_more_than_static_or_silent(form):
    """The GPT-2 block, fused QKV colwise, b and s dynamic (b=2, s=64): declared counts send no more
    than the static plan of each count, nor than the program planned without counts."""
    from distir.examples.nn.gpt2 import BLOCK_COLWISE_PLAN, block_module

    mod = block_module(form)
    rng = np.random.default_rng(0)
    inputs = []
    for p in mod["forward"].params:
        shape = [d if isinstance(d, int) else {"b": 2, "s": 64}[str(d)] for d in p.type.shape]
        inputs.append((rng.standard_normal(shape) / math.sqrt(shape[-1])).astype("float32"))
    _, got = _bytes(ShardParams(BLOCK_COLWISE_PLAN)(mod), "forward", inputs, None, COUNTS, list(COUNTS))
    _, silent = _bytes(ShardParams(BLOCK_COLWISE_PLAN)(mod), "forward", inputs, None, COUNTS, None)
    static = _static_bytes(lambda m: ShardParams(BLOCK_COLWISE_PLAN, mesh=m)(mod), "forward", inputs, None, COUNTS)
    for n in COUNTS:
        assert got[n] <= static[n] and got[n] <= silent[n], (n, got, static, silent)


SMALL = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((num_workers,), I.Range(0, num_workers))]})

    @R.function
    def main(x: R.Tensor((8, 6), "float32"), w: R.DTensor((6, 4), "float32", "mesh[0]", "S[1]"),
             v: R.Tensor((2, 5), "float32")):
        h = R.matmul(x, w)
        return h
"""


def test_classes_split_by_fit_and_divisibility():
    """Static dims 8, 6, 4 (and 2, 5 of a value nothing distributes): 2 divides and fits all; 3 divides
    6 only; 4 divides 8 and 4, not 6; 5 and 6 fit all but 8 divides by neither, 6 divides 6; 8 is above 6
    and 4. Count 1 joins the smallest count's class."""
    mod = parse(SMALL)
    graph = build_graph(mod["main"], {m: f"mesh[{i}]" for i, m in enumerate(mod.meshes())})
    assert count_classes(graph, (1, 2, 3, 4, 5, 6, 8)) == [(1, 2), (3,), (4,), (5,), (6,), (8,)]
    assert count_classes(graph, (2, 4)) == [(2,), (4,)]


def test_counts_that_agree_leave_one_function():
    """Where every class gets the same layout, the module has no variant: 1-4 workers all hold the
    weight's 4 columns cut, the result left sharded (nothing sent)."""
    mod = parse(SMALL)
    with PassContext(config={"propagate-sharding.counts": [1, 2, 3, 4]}):
        out = get_pass("propagate-sharding")(mod)
    assert list(out.functions) == ["main"] and COUNT_GUARD not in out["main"].attrs
    x = np.random.default_rng(0).standard_normal((8, 6)).astype("float32")
    w = np.random.default_rng(1).standard_normal((6, 4)).astype("float32")
    v = np.zeros((2, 5), "float32")
    for n in (2, 3, 4):
        declared = Driver(mod, counts=[1, 2, 3, 4]).run([x, w, v], n)
        assert declared.ok and declared.stats.bytes_per_worker == 0


def test_default_counts_a_variant_where_a_cut_leaves_workers_empty():
    """Nothing declared: the counts 1-8 are planned for, in classes by which cuts leave workers
    empty. The layout weighed over the sampled counts gathers the weight (6 x 4 floats, (n-1)/n of it
    per worker); at 1-4 workers its 4 columns stay cut and nothing is sent (a variant for 1-4), at
    5-8 a cut would leave workers empty and the gather stays, in `main`, which also serves counts
    above 8. Oracles: the arithmetic of an all-gather, and the plan on a static mesh of each count;
    each run compared with one device."""
    mod = parse(SMALL)
    out = get_pass("propagate-sharding")(mod)
    assert sorted(out.functions) == ["main", "main__w1_2_3_4"]
    assert dict(out["main__w1_2_3_4"].attrs[COUNT_GUARD]) == {"num_workers": [1, 2, 3, 4]}
    x = np.random.default_rng(0).standard_normal((8, 6)).astype("float32")
    w = np.random.default_rng(1).standard_normal((6, 4)).astype("float32")
    v = np.zeros((2, 5), "float32")
    d = Driver(mod)
    static = _static_bytes(lambda m: parse(SMALL.replace(
        "R.device_mesh((num_workers,), I.Range(0, num_workers))",
        f"R.device_mesh(({m.shape[0]},), I.Range(0, {m.shape[0]}))")), "main", [x, w, v], None, (2, 4, 6, 8))
    for n in (1, 2, 3, 4, 6, 8, 16):
        r = d.run([x, w, v], n)
        assert r.ok
        gathered = 0 if n <= 4 else 6 * 4 * 4 * (n - 1) / n
        assert float(r.stats.bytes_per_worker) == pytest.approx(gathered), n
        assert n not in static or float(r.stats.bytes_per_worker) <= static[n]
    assert list(specialize(d.local, {"num_workers": 16}).functions) == ["main"]


@pytest.mark.parametrize("value, match", [
    ([], "non-empty list"),
    ("2,4", "non-empty list"),
    ([2, 0], "at least 1"),
    ([2, True], "at least 1"),
])
def test_bad_counts_are_one_line(value, match):
    with PassContext(config={"propagate-sharding.counts": value}), pytest.raises(DistirError, match=match):
        get_pass("propagate-sharding")(parse(SMALL))


def test_a_malformed_guard_is_named():
    mod = parse(SMALL.replace("        h = R.matmul", '        R.func_attr({"count_guard": [2]})\n        h = R.matmul'))
    with pytest.raises(DistirError, match="@main: a count variant needs both count_guard"):
        specialize(mod, {"num_workers": 2})


def test_the_plain_export_of_count_variants_builds_with_tvm_s_own_pipeline_and_runs_each_branch():
    """``to_relax(local)`` without ``dispatch`` (what ``distir-opt --emit relax`` prints and a user's own
    ``tvm.compile`` builds, static memory planning on) writes the count's ``if`` chain over the variants;
    built that way it runs the variant at 2 and the default at 3, each equal to one device."""
    import tvm

    from distir.driver import run_disco
    from distir.tvm import to_relax

    mod, plan, inputs, weights = _moe()
    d = Driver(ShardParams(plan)(mod), func="forward", counts=[2, 8])
    assert any(f.attrs.get(COUNT_GUARD) for f in d.local.functions.values())
    exported = to_relax(d.local)
    head = str(exported["forward"])
    assert "if num_workers == 2:" in head and "forward__w2(" in head and "forward__default(" in head
    built = tvm.compile(exported, target="llvm")  # TVM's default pipeline: StaticPlanBlockMemory included
    one = np.asarray(d.run(inputs, 1, weights=weights).outputs)
    arrays = [*inputs, *weights.values()]  # the model's parameter order
    for n in (2, 3):
        got = run_disco(built, d.local, *arrays, num_workers=n, func="forward")
        np.testing.assert_allclose(np.asarray(got), one, rtol=1e-5, atol=1e-5)


def test_distir_run_counts(tmp_path, capsys):
    """``distir run --counts``: the GQA module declared for 2 and 4 runs at 2 with the KV heads cut
    (all-reduces only, 20,480 B per worker), as the run planned for the default counts does."""
    from distir import examples
    from distir.cli.main import main as distir_main

    path = tmp_path / "gqa.py"
    path.write_text(examples.load("gqa").script())
    args = ["run", str(path), "-n", "2", "--func", "forward", "--bind", "s=16"]
    assert distir_main([*args, "--counts", "2,4"]) == 0
    declared = capsys.readouterr().out
    assert "all_reduce x5; 20480 bytes sent per worker" in declared and "matches" in declared
    assert distir_main(args) == 0
    assert "all_reduce x5; 20480 bytes sent per worker" in capsys.readouterr().out


def test_static_mesh_ignores_counts():
    """A function on a static mesh has its count: declared counts change nothing."""
    mod = parse(SMALL.replace("R.device_mesh((num_workers,), I.Range(0, num_workers))",
                              "R.device_mesh((4,), I.Range(0, 4))"))
    prop = get_pass("propagate-sharding")
    with PassContext(config={"propagate-sharding.counts": [2, 3]}):
        out = prop(mod)
    assert out.script() == prop(mod).script()


def test_a_class_priced_alike_is_not_laid_out_again(monkeypatch):
    """The bundled Llama layer (every static dim at least 8): the default counts are one class, laid
    out once; declared 1, 2, 4 and 8, the class's costs are the sampled ones' (2, 4, 8) multiple and no
    solve is added; declared 1-4, the classes weigh the counts otherwise (an all-to-all's share,
    (n-1)/n², scales unlike an all-gather's) and each is laid out again. The bytes, each run against one device,
    are the static plan's at every count (the oracle: the same layer on a static mesh)."""
    from distir import examples
    from distir.driver import random_inputs
    from distir.transform.layout_choice import propagate_sharding as P

    calls = []
    real = P.lay_out
    monkeypatch.setattr(P, "lay_out", lambda graph, ctx, counts=None, trace=None: calls.append(counts) or real(
        graph, ctx, counts, trace))
    mod = examples.load("llama")
    mesh = 'R.device_mesh(("num_workers",), I.Range(0, "num_workers"))'
    text = examples.text("llama")
    inputs = random_inputs(mod, "main", {"s": 16})
    static = {n: float(Driver(parse(text.replace(mesh, f"R.device_mesh(({n},), I.Range(0, {n}))"))).run(
        inputs, n, rtol=1e-4, atol=1e-4).stats.bytes_per_worker) for n in (2, 3, 4)}
    for declared, laid in ((None, [None]), ([1, 2, 4, 8], [None]), ([1, 2, 3, 4], [None, (1, 2, 4), (3,)])):
        calls.clear()
        d = Driver(mod, counts=declared)
        d.local  # noqa: B018 (distributes)
        assert calls == laid, declared
        for n in (2, 3, 4):
            r = d.run(inputs, n, rtol=1e-4, atol=1e-4)
            assert r.ok and float(r.stats.bytes_per_worker) == static[n], (declared, n)


def test_the_symbolic_cost_formula_reads_the_variant_at_its_counts():
    """``comm_volume`` of a function with count variants: at a count a variant is laid out for, the
    numbers are the variant's (what runs there, as the simulator counts it), elsewhere the function's."""
    from distir.analysis import comm_volume

    mod, plan, inputs, weights = _gqa()
    d = Driver(ShardParams(plan)(mod), func="forward")
    guarded = [f for f in d.local.functions.values() if f.attrs.get(COUNT_GUARD)]
    assert guarded, "the GQA block planned for the default counts has a variant"
    volume = comm_volume(d.local, "forward")
    for n in (2, 3, 4):
        r = d.run(inputs, n, weights=weights, rtol=1e-4, atol=1e-4)
        assert r.ok
        at = volume.evaluate({"num_workers": n, "s": 16})
        assert (at.total_bytes, at.counts) == (r.stats.total_bytes, r.stats.counts), n
