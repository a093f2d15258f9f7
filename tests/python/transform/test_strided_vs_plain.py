"""A strided shard is never worse than the plain one (issue 23, docs/strided.md): a declared strided
layout that makes the function send more than its plain twin is named in a warning, and the fused-QKV
plan of a GPT-2 block sends no more than colwise."""

from __future__ import annotations

import warnings

import pytest

import distir
from distir.transform import PassContext, ShardParams, get_pass
from distir.transform.layout_choice.measure import function_bytes
from distir.transform.layout_choice.propagate_sharding import StridedLayoutWarning
from distir.transform.legalize_redistribute import fuse_reshapes
from distir.tvm import from_nn
from distir.examples.nn import gpt2 as G

# the strided dim is summed over: a reduction refuses a strided input, so the declared S[1/3] weight
# is converted to S[1] first, where the plain S[1] is one all-reduce of the sums
SUMMED = '''
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(x: R.DTensor((s, 32), "float32", "mesh[0]", "R"), w: R.DTensor((32, 96), "float32", "mesh[0]", "WEIGHT")):
        with R.dataflow():
            y = R.matmul(x, w)
            z = R.sum(y, axis=[1])
            R.output(z)
        return z
'''


def _strided_warnings(src: str, config=None) -> list[str]:
    with warnings.catch_warnings(record=True) as caught, PassContext(config=config or {}):
        warnings.simplefilter("always")
        get_pass("propagate-sharding")(distir.parse(src))
    return [str(w.message) for w in caught if w.category is StridedLayoutWarning]


def test_a_declared_strided_layout_that_costs_more_is_named():
    (msg,) = _strided_warnings(SUMMED.replace("WEIGHT", "S[1/3]"))
    assert "'w' S[1/3]" in msg and "'w' S[1]" in msg and "num_workers=4, s=64" in msg, msg
    assert _strided_warnings(SUMMED.replace("WEIGHT", "S[1]")) == []
    # the greedy choice alone makes no comparison
    assert _strided_warnings(SUMMED.replace("WEIGHT", "S[1/3]"), {"propagate-sharding.search": "greedy"}) == []


@pytest.fixture(scope="module")
def gpt2_block():
    model = G.GPT2(G.GPT2Config(n_layer=1))
    return from_nn(model, G.spec(model.config))


def _bytes(mod, plan: dict[str, str], hints) -> list[int]:
    """Bytes all workers send at 2 and 4 workers, s = 10."""
    with warnings.catch_warnings(), PassContext(config={"propagate-sharding.size_hints": hints}):
        warnings.simplefilter("ignore")
        f = fuse_reshapes(get_pass("propagate-sharding")(ShardParams(plan)(mod))["forward"])
    return [int(sum(function_bytes(f, {"num_workers": n, "s": 10}))) for n in (2, 4)]


@pytest.mark.parametrize("hints", [{}, {"s": 10}], ids=["no-hints", "s=10"])
def test_the_fused_qkv_strided_plan_sends_no_more_than_colwise(gpt2_block, hints):
    colwise = {**G.TP_PLAN, "h.*.attn.c_attn.weight": "S[0]", "h.*.attn.c_attn.bias": "S[0]"}
    strided, plain = _bytes(gpt2_block, G.TP_PLAN, hints), _bytes(gpt2_block, colwise, hints)
    assert all(a <= b for a, b in zip(strided, plain)), (strided, plain)
