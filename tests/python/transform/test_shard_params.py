"""ShardParams (shard-params): parameters laid out by name from glob patterns, placements or
named strategies; every mistake in a plan is a one-line error naming the pattern and the parameter."""

from __future__ import annotations

import re

import numpy as np
import pytest

import distir
from distir.driver import Driver, random_inputs
from distir.ir import verify
from distir.ir.builder import mesh
from distir.ir.placement import Placement
from distir.ir.structural import structural_equal
from distir.ir.types import DTensorType, TensorType
from distir.transform import ShardParams, get_pass
from distir.transform.layout_choice.shard_params import ShardPlanError, specificity
from distir.transform.weights import WeightsError, param_names, weight_arguments
from helpers import NN_MLP as MLP

PLACEMENTS = {
    "embed.weight": "S[0]",
    "mlp.up.*": "S[0]",
    "mlp.down.weight": "S[1]",
    "head.weight": "S[1]",
}
STRATEGIES = {
    "embed.weight": "vocab",
    "mlp.up.*": "colwise",
    "mlp.down.weight": "rowwise",
    "head.weight": "vocab",
}


@pytest.fixture(scope="module")
def mod():
    return distir.parse(MLP)


def placements(m) -> dict[str, str]:
    f = m["main"]
    return {n: str(p.type.placement) for n, p in zip(param_names(f), f.params) if isinstance(p.type, DTensorType)}


def test_patterns_lay_out_the_matching_parameters_on_a_new_mesh(mod):
    out = ShardParams(PLACEMENTS)(mod)
    verify(out)
    assert placements(out) == {
        "embed.weight": "S[0]", "mlp.up.weight": "S[0]", "mlp.up.bias": "S[0]", "mlp.down.weight": "S[1]",
        "head.weight": "S[1]",
    }
    assert out.meshes() == (mesh(("num_workers",)),)  # declared: the module had none
    f = out["main"]
    assert isinstance(f.params[2].type, TensorType)  # norm.weight: unmatched, stays plain
    # every use now reads the DTensor parameter
    take = next(iter(f.bindings())).value
    assert take.args[0] is f.params[1]
    assert distir.parse(out.script()).script() == out.script()  # prints and parses back


def test_named_strategies_give_the_same_program_as_placements(mod):
    a, b = ShardParams(PLACEMENTS)(mod), ShardParams(STRATEGIES)(mod)
    assert structural_equal(a, b)
    d = get_pass("distribute")
    assert structural_equal(d(a), d(b))


@pytest.mark.parametrize("workers", [1, 2, 3, 4])
def test_a_sharded_plan_matches_the_single_device_run(mod, workers):
    out = ShardParams(STRATEGIES)(mod)
    inputs = random_inputs(out, dims={"s": 7}, seed=3)
    inputs[0] = np.random.default_rng(0).integers(0, 50, 7).astype("int32")
    r = Driver(out).run(inputs, workers)
    assert r.ok, r.comparison.mismatch


def test_the_most_specific_pattern_wins(mod):
    plan = {"*": "replicate", "mlp.*": "S[0]", "mlp.down.*": "S[1]", "mlp.down.weight": "R", "mlp.up.b?as": "R"}
    got = placements(ShardParams(plan)(mod))
    assert got["mlp.down.weight"] == "R"  # the exact name beats every glob
    assert got["mlp.up.weight"] == "S[0]"  # 'mlp.*' beats '*'
    assert got["mlp.up.bias"] == "R"  # 'mlp.up.b?as' has more literal characters than 'mlp.*'
    assert got["norm.weight"] == "R"  # only '*' matches
    assert got["ids"] == "R"  # inputs are parameters too
    assert specificity("layers.0.mlp.*") > specificity("layers.*.mlp.*") > specificity("*mlp*")
    assert specificity("a?c") > specificity("a*c") and specificity("abc") > specificity("a?c")
    assert specificity("a[bc]d") == specificity("a?d")


def test_two_equally_specific_patterns_are_an_error(mod):
    assert specificity("mlp.*") == specificity("*up.w*")  # 4 literal characters each
    with pytest.raises(ShardPlanError, match=r"patterns 'mlp\.\*' and '\*up\.w\*' match parameter "
                       r"'mlp\.up\.weight' equally specifically; make one more specific"):
        ShardParams({"mlp.*": "S[0]", "*up.w*": "S[1]"})(mod)


def test_a_pattern_matching_nothing_is_an_error(mod):
    with pytest.raises(ShardPlanError, match=r"^shard plan: pattern 'mlp\.gate\*' matches no plain tensor parameter "
                       r"\(parameters: embed\.weight, head\.weight, ids, .* and 1 more\); end its value with '\?' "
                       r"if it may match none$"):
        ShardParams({"mlp.up.weight": "S[0]", "mlp.gate*": "S[0]"})(mod)


def test_an_optional_pattern_may_match_nothing(mod):
    # a plan for a model family: the head is laid out where a variant has one, no error where it is tied
    out = ShardParams({"mlp.up.weight": "S[0]", "lm_head.weight": "vocab?", "mlp.gate*": "S[0]?"})(mod)
    laid = {p.name: str(p.type.placement) for p in out["main"].params if isinstance(p.type, DTensorType)}
    assert laid == {"up": "S[0]"}
    # where it matches, it lays out as without the mark (a strategy or a placement)
    out = ShardParams({"mlp.up.weight": "S[0]?", "head.weight": "vocab?"})(mod)
    laid = {p.name: str(p.type.placement) for p in out["main"].params if isinstance(p.type, DTensorType)}
    assert laid == {"up": "S[0]", "head": "S[1]"}
    with pytest.raises(ShardPlanError, match=r"pattern 'head\.weight': .*or name a strategy"):
        ShardParams({"head.weight": "S[7?"})(mod)


@pytest.mark.parametrize(("pattern", "suggested"), [
    ("mlp.up.weigt", "mlp.up.weight"),  # a typo: suggested
    ("embed.wieght", "embed.weight"),
    ("lm_head.weight", "head.weight"),
    ("ln_f.weight", None),  # another weight that shares the '.weight' suffix (norm.weight, 0.73 alike): not
    ("mlp.gate.weight", None),
])
def test_did_you_mean_suggests_only_close_names(mod, pattern, suggested):
    with pytest.raises(ShardPlanError, match=f"pattern '{re.escape(pattern)}' matches no plain tensor") as err:
        ShardParams({pattern: "S[0]"})(mod)
    if suggested is None:
        assert "did you mean" not in str(err.value)
    else:
        assert f"did you mean '{suggested}'?" in str(err.value)


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ({"norm.weight": "S[1]"}, (r"pattern 'norm\.weight' lays out parameter 'norm\.weight' \(Tensor\(\(16,\), "
         r"\"float32\"\)\): placement \"S\[1\]\": mesh axis 0 shards dim 1, but the tensor has rank 1")),
        ({"mlp.up.weight": "S[0], R"}, r"pattern 'mlp\.up\.weight' .* has 2 entries but the mesh has 1 axis"),
        ({"head.weight": "S[x]"}, r"pattern 'head\.weight': placement \"S\[x\]\": entry 0"),
        ({"head.weight": "colwize"}, r"pattern 'head\.weight': .*or name a strategy \(colwise, rowwise, vocab"),
        ({"head.weight": 3}, r"pattern 'head\.weight' maps to 3"),
        ({"norm.weight": "colwise"}, (r"pattern 'norm\.weight' \(colwise\), parameter 'norm\.weight' of @main: its "
         r"use by R\.nn\.rms_norm in 'xn' is not a matmul operand, a take table or a bias")),
        ({}, r"shard-params needs a plan"),
    ],
)
def test_invalid_plans_name_the_pattern_and_the_parameter(mod, plan, message):
    with pytest.raises(ShardPlanError, match=message) as err:
        ShardParams(plan)(mod)
    assert "\n" not in str(err.value)


def test_a_parameter_already_laid_out_is_not_laid_out_again(mod):
    once = ShardParams({"head.weight": "S[1]"})(mod)
    with pytest.raises(ShardPlanError, match=r"matches parameter 'head\.weight' of @main, which is already laid out \(S\[1\]\)"):
        ShardParams({"head.*": "S[0]"})(once)


def test_strategies_per_role():
    """colwise / rowwise / vocab on a (in, out) matmul operand, an (out, in) one, a bias, a table."""
    out = ShardParams({"mlp.up.weight": "rowwise", "mlp.up.bias": "rowwise", "embed.weight": "colwise",
                       "head.weight": "colwise"})(distir.parse(MLP))
    got = placements(out)
    assert got == {"mlp.up.weight": "S[1]", "mlp.up.bias": "R", "embed.weight": "S[1]", "head.weight": "S[1]"}


def test_a_strategy_that_two_uses_read_differently_is_an_error():
    text = MLP.replace("R.matmul(z, head, out_dtype=None)", "R.matmul(z, R.permute_dims(emb, axes=[1, 0]), out_dtype=None)")
    text = text.replace("logits: R.Tensor", "emb_t: R.Tensor((16, 50), dtype=\"float32\") = R.permute_dims(emb, axes=None)\n"
                        "            logits: R.Tensor").replace("R.matmul(z, R.permute_dims(emb, axes=[1, 0]), out_dtype=None)",
                                                        "R.matmul(z, emb_t, out_dtype=None)")
    tied = distir.parse(text)  # the embedding table is also the LM head (tied weights)
    assert placements(ShardParams({"embed.weight": "vocab"})(tied)) == {"embed.weight": "S[0]"}  # both uses agree
    with pytest.raises(ShardPlanError, match=r"R\.take in 'x' wants S\[1\] but R\.matmul in 'logits' wants S\[0\]"):
        ShardParams({"embed.weight": "colwise"})(tied)


def test_mesh_argument_and_modules_with_meshes(mod):
    m2 = mesh((2, "num_workers"))
    out = ShardParams({"mlp.up.weight": "R, S[0]"}, mesh=m2)(mod)
    assert out.meshes() == (m2,) and placements(out) == {"mlp.up.weight": "R, S[0]"}
    again = ShardParams({"head.weight": "S[1], R"})(out)  # the module's only mesh
    assert again.meshes() == (m2,)
    with pytest.raises(ShardPlanError, match="strategies lay out on a 1-D mesh; this mesh has 2 axes"):
        ShardParams({"head.weight": "colwise"})(out)
    two = ShardParams({"head.weight": "S[1]"}, mesh=mesh(("num_workers",)))(out)
    with pytest.raises(ShardPlanError, match="the module has 2 device meshes; say which one"):
        ShardParams({"norm.weight": "R"})(two)


def test_placement_objects_are_accepted(mod):
    out = ShardParams({"mlp.up.weight": Placement.parse("S[0]")})(mod)
    assert placements(out) == {"mlp.up.weight": "S[0]"}


def test_weights_by_name_or_in_order(mod):
    f = mod["main"]
    rng = np.random.default_rng(0)
    shapes = {"embed.weight": (50, 16), "norm.weight": (16,), "mlp.up.weight": (64, 16), "mlp.up.bias": (64,),
              "mlp.down.weight": (16, 64), "head.weight": (16, 50)}
    w = {k: rng.standard_normal(s).astype("float32") for k, s in shapes.items()}
    ids = np.zeros(3, "int32")
    by_name = weight_arguments(f, [ids], w)
    in_order = weight_arguments(f, [ids], list(w.values()))
    assert all(a is b for a, b in zip(by_name, in_order)) and len(by_name) == 7
    with pytest.raises(WeightsError, match=r"weights lack 1 of the 6 weights of @main: 'head\.weight'"):
        weight_arguments(f, [ids], {k: v for k, v in w.items() if k != "head.weight"})
    with pytest.raises(WeightsError, match=r"unknown weight of @main: 'head\.weights' \(did you mean 'head\.weight'\?\)"):
        weight_arguments(f, [ids], {**w, "head.weights": w["head.weight"]})
    with pytest.raises(WeightsError, match=r"weight 'mlp\.up\.bias': expected shape \(64\), got \(63,\)"):
        weight_arguments(f, [ids], {**w, "mlp.up.bias": np.zeros(63, "float32")})
    with pytest.raises(WeightsError, match=r"weight 'norm\.weight': expected dtype float32, got float64"):
        weight_arguments(f, [ids], {**w, "norm.weight": np.zeros(16)})
    with pytest.raises(WeightsError, match=r"@main has 6 weights, got a list of 5"):
        weight_arguments(f, [ids], list(w.values())[:5])
    with pytest.raises(WeightsError, match=r"@main takes 1 input \(ids\) before its weights, got 2"):
        weight_arguments(f, [ids, ids], w)


def test_gpt2_tied_head_plan_with_an_optional_lm_head():
    # the bundled GPT-2 ties its head to wte: a plan naming lm_head.weight used to suggest ln_f.weight
    from distir.tvm import from_nn
    from distir.examples.nn import gpt2 as G

    config = G.GPT2Config()
    gpt2 = from_nn(G.GPT2(config), G.spec(config))
    with pytest.raises(ShardPlanError, match=r"pattern 'lm_head\.weight' matches no plain tensor parameter") as err:
        ShardParams({**G.TP_PLAN, "lm_head.weight": "vocab"})(gpt2)
    assert "did you mean" not in str(err.value)
    out = ShardParams({**G.TP_PLAN, "lm_head.weight": "vocab?"})(gpt2)
    assert structural_equal(out, ShardParams(G.TP_PLAN)(gpt2))
