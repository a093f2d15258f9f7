"""The models TVM users write, shipped beside nn_llama: GPT-2, grouped-query attention, prefill and
decode with a KV cache, a mixture of experts. Each is distributed by its plan and run at 1-4
workers on the simulator and on Disco, and compared with TVM's own one-device build of the same
nn.Module (built once per session)."""

from __future__ import annotations

import numpy as np
import pytest
import tvm

from distir.driver import Driver, compare
from distir.ir.types import DTensorType
from distir.transform import PassContext, ShardParams
from distir.transform.weights import param_names
from distir.tvm import from_nn
from distir.examples.nn import decode as D
from distir.examples.nn import gpt2 as G
from distir.examples.nn import gqa as Q
from distir.examples.nn import moe as M
from tvm_build import one_device_vm

COUNTS = (1, 2, 3, 4)
BACKENDS = ("sim", "tvm")


def tvm_vm(model, spec):
    """TVM alone: the model exported and built for one device, and its weights' names in order."""
    exported, params = model.export_tvm(spec)
    return one_device_vm(exported), [n for n, _ in params]


def tvm_call(vm, names, method, inputs, weights):
    out = vm[method](*[tvm.runtime.tensor(a) for a in [*inputs, *(weights[n] for n in names)]])
    return tuple(o.numpy() for o in out) if isinstance(out, (list, tuple)) or type(out).__name__ == "Array" \
        else out.numpy()


def calls(r) -> dict[str, int]:
    """The collectives of a run, by kind, as the simulator names them (Disco says "allreduce")."""
    if r.stats is not None:
        return r.stats.counts
    return {{"allreduce": "all_reduce", "allgather": "all_gather"}.get(k, k): v for k, v in r.disco["calls"].items()}


def check(r, expected, what):
    assert r.ok, (what, r.comparison.mismatch)  # against distir's one-device interpreter
    c = compare(r.outputs, expected)
    assert c.ok, (what, c.mismatch)  # against TVM's own build on one device


# ---------------------------------------------------------------- GPT-2


@pytest.fixture(scope="session")
def gpt2():
    config = G.GPT2Config(n_layer=1)
    model = G.GPT2(config)
    weights = G.random_weights(model)
    ids = np.random.default_rng(3).integers(0, config.vocab_size, (1, 7)).astype("int32")
    vm, names = tvm_vm(model, G.spec(config))
    expected = tvm_call(vm, names, "forward", [ids], weights)
    driver = Driver(ShardParams(G.TP_PLAN)(from_nn(model, G.spec(config))), func="forward")
    return config, weights, ids, expected, driver


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("workers", COUNTS)
def test_gpt2_matches_tvm_on_one_device(gpt2, workers, backend):
    config, weights, ids, expected, driver = gpt2
    r = driver.run([ids], workers, weights=weights, backend=backend)
    check(r, expected, (workers, backend))
    # Megatron: one all-reduce for the vocabulary-parallel lookup, one per attention block and per MLP; at 3
    # workers the 4 heads come in blocks of 2, 2, 0 and q, k, v (and the bias) are re-blocked in whole heads
    got = calls(r)
    assert got.pop("all_reduce") == 1 + 2 * config.n_layer
    assert got == ({"regroup": 2 * config.n_layer} if workers == 3 else {})


def test_gpt2_positions_and_the_tied_head_are_distributed(gpt2):
    *_, driver = gpt2
    f = driver.local["forward"]
    text = driver.specialize(4).script()
    assert "R.arange(" in text and "R.nn.attention(" in text and 'causal_mask="TopLeft"' in text
    laid_out = {n: str(t.placement) for n, t in zip(param_names(f), f.attrs["distir.global_params"])
                if isinstance(t, DTensorType)}
    assert laid_out["h.0.attn.c_attn.weight"] == laid_out["h.0.attn.c_attn.bias"] == "S[0/3]"
    assert str(f.attrs["distir.global_result"].placement) == "S[2]"  # logits cut by vocabulary (tied to wte)


def test_gpt2_runs_from_a_presharded_set_of_its_own_plan(gpt2, tmp_path):
    """c_attn is S[0/3] (q, k, v each cut by heads): the set holds each worker's block of each of the three
    parts, Disco's workers load them, and the logits are TVM's own one-device build's."""
    from distir.tvm import reshard_weights, shard_weights
    from distir.tvm.weights import read_set

    config, weights, ids, expected, driver = gpt2
    three = shard_weights(driver.local, weights, 3, tmp_path / "w3")
    s = read_set(three)
    i = s.names.index("h.0.attn.c_attn.weight")
    assert s.meta["params"][i]["placement"] == "S[0/3]"
    w, d = weights["h.0.attn.c_attn.weight"], config.n_embd
    block = -(-d // 3)  # each of q, k, v (n_embd rows) in blocks of ceil(n_embd / 3), the last padded
    for worker in range(3):
        rows = [np.pad(w[part * d + worker * block:part * d + min(d, (worker + 1) * block)],
                       ((0, block - len(range(worker * block, min(d, (worker + 1) * block)))), (0, 0)))
                for part in range(3)]
        np.testing.assert_array_equal(s.piece(i, worker), np.concatenate(rows))
    for count, path in ((3, three), (2, reshard_weights(three, 2, tmp_path / "w2"))):
        r = driver.run([ids], count, weights=str(path), backend="tvm")
        check(r, expected, ("presharded", count))


# ---------------------------------------------------------------- grouped-query attention


@pytest.fixture(scope="session")
def gqa():
    config = Q.GQAConfig(num_layers=1)
    model = Q.GQALlama(config)
    mod = from_nn(model, Q.spec(config))
    weights = Q.random_weights(model)
    s = 7
    ids = np.random.default_rng(4).integers(0, config.vocab_size, s).astype("int32")
    inputs = [ids, *Q.rope_tables(s, config.head_dim)]
    vm, names = tvm_vm(model, Q.spec(config))
    expected = tvm_call(vm, names, "forward", inputs, weights)
    drivers: dict = {}

    def driver(n: int) -> Driver:
        # the plan is the count's: key/value heads cut on a mesh of that count (so that propagation sees the
        # count divide them); replicated, the plan is the same for every such count, laid out once for all
        cut = Q.kv_heads_cut(config, n)
        key = n if cut else "replicated"
        if key not in drivers:
            drivers[key] = Driver(ShardParams(Q.tp_plan(config, n), mesh=Q.mesh(n) if cut else None)(mod), func="forward")
        return drivers[key]

    return config, weights, inputs, expected, driver


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("workers", COUNTS)
def test_gqa_kv_heads_cut_when_they_divide_else_replicated(gqa, workers, backend):
    config, weights, inputs, expected, driver = gqa
    d = driver(workers)
    f = d.mod["forward"]
    kv = {n: p.type.placement for n, p in zip(param_names(f), f.params) if n.endswith(("k_proj.weight", "v_proj.weight"))}
    cut = Q.kv_heads_cut(config, workers)  # 2 key/value heads: cut at 1 and 2 workers, replicated at 3 and 4
    assert cut == (workers <= 2) and {str(p) for p in kv.values()} == {"S[0]" if cut else "R"}
    r = d.run(inputs, workers, weights=weights, backend=backend)
    check(r, expected, (workers, backend))
    got = calls(r)  # no key/value head moves: one all-reduce per block and for the lookup (none on one device)
    assert got.pop("all_reduce", 0) == (1 + 2 * config.num_layers if workers > 1 else 0)
    # 8 query heads over 3 workers: q_proj's output re-blocked in whole heads (Disco runs the regroup as an
    # all-gather and a slice, and counts it so)
    assert workers == 3 or not got
    assert set(got) <= {"regroup", "all_gather"}


def test_gqa_type_error_names_repeat():
    """Fewer key/value heads given straight to attention: the error says to repeat them."""
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import op

    from distir.tvm import TvmImportError

    class NoRepeat(nn.Module):
        def forward(self, q, k):
            return op.scaled_dot_product_attention(q, k, k)

    spec = {"forward": {"q": nn.spec.Tensor([1, 4, 8, 2], "float32"), "k": nn.spec.Tensor([1, 4, 2, 2], "float32")}}
    with pytest.raises(TvmImportError, match=r"key \(1, 4, 2, 2\) has heads 2, but 8 is expected; repeat the key and "
                       r"value heads \(R\.repeat\)"):
        from_nn(NoRepeat(), spec)


# ---------------------------------------------------------------- prefill and decode with a KV cache

STEPS = 4


@pytest.fixture(scope="session")
def decode():
    config = D.DecodeConfig(num_layers=1)
    model = D.DecoderLM(config)
    weights = D.random_weights(model)
    s = 6
    rng = np.random.default_rng(5)
    prompt = rng.integers(0, config.vocab_size, s).astype("int32")
    tokens = rng.integers(0, config.vocab_size, STEPS).astype("int32")
    cos, sin = D.rope_tables(s + STEPS, config.head_dim)
    steps = [[prompt, cos[:s], sin[:s]]] + [[tokens[i:i + 1], cos[s + i:s + i + 1], sin[s + i:s + i + 1]]
                                            for i in range(STEPS)]
    vm, names = tvm_vm(model, D.spec(config))
    expected = [tvm_call(vm, names, "prefill", steps[0], weights)]
    for step in steps[1:]:  # TVM's own decode, fed its own caches
        expected.append(tvm_call(vm, names, "decode", [*step, *expected[-1][1:]], weights))
    prefill = Driver(ShardParams(D.TP_PLAN)(from_nn(model, D.spec(config))), func="prefill")
    return config, weights, steps, expected, prefill, prefill.for_function("decode")


def run_decode(decode, workers, backend, n_steps):
    config, weights, steps, expected, prefill, dec = decode
    r = prefill.run(steps[0], workers, weights=weights, backend=backend)
    check(r, expected[0], ("prefill", workers, backend))
    caches = r.outputs[1:]
    for i, step in enumerate(steps[1:n_steps + 1], start=1):
        r = dec.run([*step, *caches], workers, weights=weights, backend=backend)
        check(r, expected[i], (f"decode step {i}", workers, backend))
        # the cache stays where it is: the only collectives are the layers' own
        assert calls(r) == {"all_reduce": 1 + 2 * config.num_layers}
        caches = r.outputs[1:]
    assert caches[0].shape == (config.num_layers, config.num_kv_heads, 6 + n_steps, config.head_dim)


@pytest.mark.parametrize("workers", COUNTS)
def test_decode_four_steps_after_prefill_match_tvm(decode, workers):
    run_decode(decode, workers, "sim", STEPS)


@pytest.mark.parametrize("workers", COUNTS)
def test_decode_on_disco_matches_tvm(decode, workers):
    """Every count: the prefill and a decode step; at 2 workers all four steps (each Disco call costs a
    code generation of the whole module, so the chain runs at one count)."""
    run_decode(decode, workers, "tvm", STEPS if workers == 2 else 1)


def test_the_cache_is_laid_out_by_heads_in_and_out(decode):
    *_, prefill, dec = decode
    for f in (prefill.local["prefill"], dec.local["decode"]):
        result = f.attrs["distir.global_result"]
        assert [str(t.placement) for t in result.fields[1:]] == ["S[1]"] * 2
    params = dict(zip(param_names(dec.local["decode"]), dec.local["decode"].attrs["distir.global_params"]))
    assert str(params["k_cache"].placement) == str(params["v_cache"].placement) == "S[1]"


# ---------------------------------------------------------------- mixture of experts

MOE_HINTS = {"propagate-sharding.size_hints": M.SIZE_HINTS}  # tokens per call: experts cut rather than gathered


@pytest.fixture(scope="session")
def moe():
    config = M.MoEConfig()
    model = M.MoE(config)
    weights = M.random_weights(model)
    x = np.random.default_rng(6).standard_normal((6, config.hidden_size)).astype("float32")
    vm, names = tvm_vm(model, M.spec(config))
    expected = tvm_call(vm, names, "forward", [x], weights)
    mod = from_nn(model, M.spec(config))
    drivers = {}
    with PassContext(config=MOE_HINTS):
        for name, plan in (("expert", M.EP_PLAN), ("tensor", M.TP_PLAN)):
            drivers[name] = Driver(ShardParams(plan)(mod), func="forward")
            drivers[name].local  # noqa: B018 - distributed under the hints
    return config, weights, x, expected, drivers


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("workers", COUNTS)
@pytest.mark.parametrize("parallel", ["expert", "tensor"])
def test_moe_expert_and_tensor_parallel_match_tvm(moe, parallel, workers, backend):
    config, weights, x, expected, drivers = moe
    r = drivers[parallel].run([x], workers, weights=weights, backend=backend)
    check(r, expected, (parallel, workers, backend))
    assert calls(r) == {"all_reduce": 1}  # the weighted sum over experts (expert) or the down projections (tensor)
    if backend == "sim":  # one all-reduce of the (tokens, hidden) output: 2 (W - 1) / W of its bytes per worker
        assert r.stats.bytes_per_worker == 2 * (workers - 1) * x.nbytes / workers


def test_moe_plans_cut_the_experts_or_inside_them(moe):
    *_, drivers = moe
    for parallel, want in (("expert", ["S[0]", "S[0]"]), ("tensor", ["S[1]", "S[2]"])):
        f = drivers[parallel].local["forward"]
        params = dict(zip(param_names(f), f.attrs["distir.global_params"]))
        assert [str(params[n].placement) for n in ("w_up", "w_down")] == want
