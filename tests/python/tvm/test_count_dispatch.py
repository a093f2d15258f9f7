"""One TVM build of a module with count variants (``count_guard``): its function dispatches on the
count at run time to the variant laid out for it. The oracles: the build specialized to each count
(its own program, built apart), the simulator on the module specialized to the count, and one
device's numbers."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from distir.driver import Driver, run_disco
from distir.errors import DistirError
from distir.script import parse
from distir.transform import ShardParams
from distir.transform.count_variants import choose_variants
from distir.tvm import to_relax
from distir.tvm.errors import DiscoRunError, TvmExportError
from distir.tvm.relax.export import dispatch_callee

#: MoE with 4 experts, S[0]: declared for 1-4 and 6, 8, the experts are cut where they fit (1-4, a variant)
#: and laid out otherwise at 6 and 8 (the function's own body)
MOE_COUNTS = [1, 2, 3, 4, 6, 8]


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.fixture(scope="module")
def moe():
    from distir.examples.nn import moe as M
    from distir.tvm import from_nn

    m = M.MoEConfig()
    model = M.MoE(m)
    x = np.random.default_rng(0).standard_normal((16, m.hidden_size)).astype("float32")
    mod = ShardParams(M.EP_PLAN)(from_nn(model, M.spec(m)))
    return Driver(mod, func="forward", counts=MOE_COUNTS, specialize=False), [x], M.random_weights(model)


def _steps(r):
    return r.disco["calls"], r.disco["bytes_sent"], r.disco["transport"]["bytes_sent"]


def test_one_build_runs_each_class_as_the_build_for_its_count(moe):
    """ONE build, run at 1, 2, 3, 4 and 6 workers: the result matches one device, and the steps, the
    bytes reported and the bytes Disco's collectives carried are those of the build specialized to
    the count, which are the simulator's on the module specialized to it. The two classes are laid
    out differently (one all-reduce where the experts are cut, gathers at 6), so the dispatch is seen."""
    driver, inputs, weights = moe
    assert sorted(driver.local.functions) == ["forward", "forward__w1_2_3_4"]
    built = driver.build(specialize=False)
    seen = {}
    for n in (1, 2, 3, 4, 6):
        r = driver.run(inputs, n, weights=weights, backend="tvm", rtol=1e-4, atol=1e-4)
        assert r.ok, (n, r.comparison.mismatch)
        assert r.disco["build"] == "symbolic" and driver.build(specialize=False) is built
        per_count = driver.run(inputs, n, weights=weights, backend="tvm", specialize=True, rtol=1e-4, atol=1e-4)
        assert per_count.ok and per_count.disco["build"] == "specialized"
        assert _steps(r) == _steps(per_count), n
        if n > 1:
            assert r.disco["transport"]["calls"] == per_count.disco["transport"]["calls"], n
        sim = driver.run(inputs, n, weights=weights, rtol=1e-4, atol=1e-4).stats
        assert (r.disco["calls"], r.disco["bytes_sent"]) == (sim.counts, sim.total_bytes), n
        np.testing.assert_allclose(r.outputs, per_count.outputs, rtol=1e-5, atol=1e-6)
        seen[n] = r.disco["calls"]
    assert seen[2] == {"all_reduce": 1} and "all_reduce" not in seen[6]  # two layouts did run


def test_the_dispatch_reads_plainly(moe):
    """The exported function is an R.If chain on num_workers calling the variant for 1-4 and the
    function's own body otherwise; without dispatch the export writes the same chain, its members
    without run-time plan choices (no ``if`` inside them)."""
    driver, _, _ = moe
    text = driver.export().script()
    head = text[text.index("def forward("):text.index("def forward__default(")]
    assert "if num_workers == 1 or num_workers == 2 or num_workers == 3 or num_workers == 4:" in head
    assert "cls.forward__w1_2_3_4(size_num_workers, size_t, x, gate_weight, w_up, w_down)" in head
    assert "else:" in head and "cls.forward__default(size_num_workers, size_t, x, gate_weight, w_up, w_down)" in head
    assert "def forward__w1_2_3_4(" in text
    plain = to_relax(driver.local).script()
    assert plain[plain.index("def forward("):plain.index("def forward__default(")] == head
    members = plain[plain.index("def forward__default("):]
    assert "if " not in members


def test_an_artifact_carries_the_dispatch(moe, tmp_path):
    """``distir build -o DIR --counts``'s artifact, loaded in a driver of its own, runs each class's
    layout: at 2 one all-reduce, at 6 the default layout, both matching one device."""
    from distir.cli.main import main as distir_main

    driver, inputs, weights = moe
    src = tmp_path / "moe.py"
    src.write_text(driver.mod.script())
    assert distir_main(["build", str(src), "-o", str(tmp_path / "art"), "--func", "forward",
                        "--counts", ",".join(map(str, MOE_COUNTS))]) == 0
    art = Driver.from_artifact(tmp_path / "art")
    assert sorted(art.local.functions) == ["forward", "forward__w1_2_3_4"]
    for n in (2, 6):
        r = art.run(inputs, n, weights=weights, backend="tvm", rtol=1e-4, atol=1e-4)
        want = driver.run(inputs, n, weights=weights, backend="tvm", rtol=1e-4, atol=1e-4)
        assert r.ok and r.disco["build"] == "artifact", (n, r.comparison.mismatch)
        assert _steps(r) == _steps(want), n


#: a variant that lays a parameter out otherwise than its function: w cut by rows at 2 and 3, by columns else
HAND = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((num_workers,), I.Range(0, num_workers))]})

    @R.function
    def main(x: R.Tensor((8, 6), "float32"), w: R.DTensor((6, 4), "float32", "mesh[0]", "S[1]")):
        h = R.matmul(x, w)
        return h

    @R.function
    def main__w2_3(x: R.Tensor((8, 6), "float32"), w: R.DTensor((6, 4), "float32", "mesh[0]", "S[0]")):
        R.func_attr({"count_guard": {"num_workers": [2, 3]}, "count_variant_of": "main"})
        h = R.matmul(x, w)
        return h
"""


def test_variants_with_other_parameter_layouts():
    """Where the variants cut a parameter differently, the dispatching function takes it by rank and
    dtype; each run's pieces are cut by, and checked against, the variant that runs, and the one build
    matches one device and the build for each count."""
    import tvm

    from distir.tvm.disco import shared_library
    from distir.tvm.disco.signature import param_specs

    driver = Driver(parse(HAND), specialize=False)
    text = driver.export().script()
    assert 'w: R.Tensor(dtype="float32", ndim=2)' in text[text.index("def main("):]
    assert "if num_workers == 2 or num_workers == 3:" in text
    local = driver.local
    assert dispatch_callee(local, "main", {"num_workers": 3}) == "main__w2_3"
    assert dispatch_callee(local, "main", {"num_workers": 4}) == "main__default"
    lib = tvm.runtime.load_module(shared_library(driver.build(specialize=False)))
    assert param_specs(lib, "main")[2].dims == ("?", "?")
    assert param_specs(lib, "main__w2_3")[2].dims[1] == "4"  # the rows cut: (ceil(6 / n), 4)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((8, 6)).astype("float32"), rng.standard_normal((6, 4)).astype("float32")
    for n in (1, 2, 3, 4):
        r = driver.run([x, w], n, backend="tvm")
        per_count = driver.run([x, w], n, backend="tvm", specialize=True)
        assert r.ok and per_count.ok, n
        np.testing.assert_allclose(r.outputs, x @ w, rtol=1e-5, atol=1e-5)
        assert _steps(r) == _steps(per_count), n


def test_a_variant_guarded_on_a_size_the_run_does_not_give_is_one_line():
    local = Driver(parse(HAND.replace('{"num_workers": [2, 3]}', '{"tp": [2, 3]}')), specialize=False).local
    with pytest.raises(DistirError, match="guarded on 'tp'"):
        choose_variants(local, {"num_workers": 2})
    with pytest.raises(DiscoRunError, match="guarded on 'tp'"):
        run_disco(None, local, np.zeros((8, 6), "float32"), np.zeros((6, 4), "float32"), num_workers=2)


def test_distir_run_build_once_with_counts(tmp_path, capsys):
    """``distir run --backend tvm --build-once --counts 2,4`` on the GQA block: one build runs the variant
    for 2 (KV heads cut: all-reduces only, 20,480 B per worker) and the layout for 4, each count's steps
    and bytes those of the simulator's run of the module declared alike."""
    import re

    from distir import examples
    from distir.cli.main import main as distir_main

    path = tmp_path / "gqa.py"
    path.write_text(examples.load("gqa").script())
    args = ["run", str(path), "--func", "forward", "--bind", "s=16", "--counts", "2,4"]
    steps = re.compile(r"\d workers: (.*?) bytes sent per worker")
    for n in ("2", "4"):
        assert distir_main([*args, "-n", n, "--backend", "tvm", "--build-once"]) == 0
        tvm_out = capsys.readouterr().out
        assert "(one build for every count)" in tvm_out and "matches" in tvm_out
        assert distir_main([*args, "-n", n]) == 0
        sim_out = capsys.readouterr().out
        assert steps.search(tvm_out)[1] == steps.search(sim_out)[1], n
        if n == "2":
            assert steps.search(tvm_out)[1] == "all_reduce x5; 20480"


def test_presharded_weights_follow_the_variant_of_their_count(tmp_path):
    """``shard_weights`` of a module whose variant cuts the weight by rows at 2 and 3 (by columns
    otherwise) writes, for each count, the pieces of the layout that count runs; the one build runs
    from each set and gives x @ w."""
    from distir.tvm import shard_weights

    driver = Driver(parse(HAND), specialize=False)
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((8, 6)).astype("float32"), rng.standard_normal((6, 4)).astype("float32")
    for n, placement, piece in ((2, "S[0]", [3, 4]), (4, "S[1]", [6, 1])):
        path = shard_weights(driver.local, [w], n, tmp_path / f"w{n}", func="main", num_input=1)
        meta = json.loads((path / "tensor-cache.json").read_text())["metadata"]["distir"]["params"][0]
        assert (meta["placement"], meta["local_shape"]) == (placement, piece), n
        r = driver.run([x], n, weights=str(path), backend="tvm")
        assert r.ok, (n, r.comparison.mismatch)
        np.testing.assert_allclose(r.outputs, x @ w, rtol=1e-5, atol=1e-5)


EXTRA = """
    @R.function
    def {name}(x: R.Tensor((8, 6), "float32"), w: R.DTensor((6, 4), "float32", "mesh[0]", "S[1]")):
        {attrs}
        h = R.matmul(x, w)
        return h
"""


@pytest.mark.parametrize("name, attrs, match", [
    ("main__w2", 'R.func_attr({"count_guard": {"num_workers": [2]}, "count_variant_of": "main"})',
     r"@main__w2 and another variant of @main both claim num_workers = \[2\]"),
    ("main__default", 'R.func_attr({"num_input": 1})', r"exported as @main__default, a name the module already uses"),
])
def test_variants_one_dispatch_cannot_serve_are_one_line(name, attrs, match):
    local = Driver(parse(HAND + EXTRA.format(name=name, attrs=attrs))).local
    with pytest.raises(TvmExportError, match=match):
        to_relax(local, dispatch=True)
