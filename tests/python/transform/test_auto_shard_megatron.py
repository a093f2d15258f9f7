"""auto-shard against the hand-written Megatron plans at the user's sizes (issue 39, item 4): the
GPT-2 block (b = 2, s = 10 and 64) and the Llama layer send no more bytes per worker than their
tensor-parallel plans, the MLP's static activation ``x`` is not cut as a weight, and the numbers
equal one device's. The oracle is the hand plan's bytes after the same pipeline."""

from __future__ import annotations

import warnings

import pytest

from distir import examples
from distir.analysis import comm_volume, memory_footprint
from distir.driver import random_inputs
from distir.ir.types import DTensorType
from distir.testing import assert_sharded_equivalent
from distir.transform import AutoShard, PassContext, ShardParams
from distir.transform.layout_choice.auto_shard import AutoShardError, strip_layouts, weight_indices
from distir.transform.pipelines import distribute_pipeline
from distir.examples.nn.gpt2 import BLOCK_COLWISE_PLAN, TP_PLAN, block_module

# the block's Megatron plan: the fused QKV weight in blocks of q, k and v (S[0/3]), as the model's TP_PLAN
BLOCK_TP_PLAN = {k: v for k, v in TP_PLAN.items() if k.startswith("h.")}


def numbers(mod, env, hints=None):
    """(bytes each worker sends, peak live activations per worker) after distribute, at ``env``."""
    with warnings.catch_warnings(), PassContext(config={"propagate-sharding.size_hints": hints or env}):
        warnings.simplefilter("ignore")
        local = distribute_pipeline()(mod)
    return comm_volume(local).evaluate(env).bytes_per_worker, memory_footprint(local).evaluate(env).peak_bytes


@pytest.fixture(scope="module")
def block():
    return block_module("split")


@pytest.mark.parametrize("s, workers", [(10, 2), (10, 4), (10, 8), (64, 2), (64, 4)])
def test_gpt2_block_no_more_than_megatron(block, s, workers):
    # before the fused weight's strided cut was offered: 18,432 against TP_PLAN's 15,360 B at s = 10,
    # 4 workers; 98,304 against 86,016 at s = 64
    env = {"b": 2, "s": s, "num_workers": workers}
    auto = AutoShard(sizes=env)(block)
    sent, _ = numbers(auto, env)
    for plan in (BLOCK_COLWISE_PLAN, BLOCK_TP_PLAN):
        megatron, _ = numbers(ShardParams(plan)(block), env)
        assert sent <= megatron, (plan, sent, megatron)


def test_gpt2_block_at_megatrons_peak_sends_no_more(block):
    # at 8 workers, s = 64 (4 heads: Megatron runs the attention whole) the default activation budget
    # holds the peak near its least (73,728 B against Megatron's 311,296) and sends more (136,192
    # against 115,360); given Megatron's peak
    # as the budget, auto-shard sends no more than Megatron
    env = {"b": 2, "s": 64, "num_workers": 8}
    megatron, megatron_peak = numbers(ShardParams(BLOCK_TP_PLAN)(block), env)
    sent, peak = numbers(AutoShard(sizes=env, activation_budget=megatron_peak)(block), env)
    assert sent <= megatron and peak <= megatron_peak, (sent, megatron, peak, megatron_peak)


def test_gpt2_block_numbers_equal_one_device(block):
    auto = AutoShard(sizes={"b": 2, "s": 10, "num_workers": 4})(block)
    assert_sharded_equivalent(auto, random_inputs(auto, "forward", dims={"b": 2, "s": 10}), num_workers=(4,),
                              func="forward")


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_llama_layer_at_a_given_count_no_more_than_megatron(workers):
    annotated = examples.load("llama")
    env = {"s": 64, "num_workers": workers}
    sent, _ = numbers(AutoShard(sizes=env)(strip_layouts(annotated)), env)
    assert sent <= numbers(annotated, env)[0]


@pytest.fixture(scope="module")
def mlp():
    annotated = examples.load("mlp")
    return annotated, strip_layouts(annotated)


def test_the_mlps_static_activation_is_not_a_weight(mlp):
    _, plain = mlp
    names = [p.name for p in plain["main"].params]
    assert [names[i] for i in sorted(weight_indices(plain["main"]))] == ["w1", "w2"]
    # the user's say replaces the inference
    assert [names[i] for i in sorted(weight_indices(plain["main"], ("x", "w2")))] == ["w1"]


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_mlp_no_more_than_megatron(mlp, workers):
    # before: x cut as a weight and gathered, 1.5x Megatron (196,608 against 131,072 B at 2)
    annotated, plain = mlp
    env = {"num_workers": workers}
    megatron, _ = numbers(annotated, env)
    for auto in (AutoShard(sizes=env)(plain), AutoShard()(plain)):
        assert numbers(auto, env)[0] <= megatron
    x = AutoShard(sizes=env)(plain)["main"].params[0].type
    assert isinstance(x, DTensorType) and x.placement.is_replicated


def test_mlp_numbers_equal_one_device(mlp):
    auto = AutoShard()(mlp[1])
    assert_sharded_equivalent(auto, random_inputs(auto), num_workers=(2, 3, 4))


def test_inputs_by_name_and_by_config(mlp):
    _, plain = mlp
    by_name = AutoShard(inputs=("x",))(plain)
    with PassContext(config={"auto-shard.inputs": ["x"]}):
        by_config = AutoShard()(plain)
    assert by_name["main"].params[0].type == by_config["main"].params[0].type
    with pytest.raises(AutoShardError, match=r"inputs names 'y', not a parameter of @main \(it has: x, w1, w2\)"):
        AutoShard(inputs=("y",))(plain)
    with pytest.raises(AutoShardError, match="inputs must be a sequence of parameter names"):
        AutoShard(inputs="x")(plain)


def test_declared_counts_are_the_counts_planned_for(block):
    # Driver(counts=...) / propagate-sharding.counts: with the mesh size symbolic, the budgets hold and
    # the report is taken at the declared counts (count 1 left out), not at the sampled 2, 3, 4, 8
    with PassContext(config={"propagate-sharding.counts": [1, 8], "propagate-sharding.size_hints": {"b": 2, "s": 10}}):
        auto = AutoShard()
        auto(block)
    assert auto.report.env["num_workers"] == 8  # the sampled default reports at 4
    assert "num_workers=3" not in auto.report.render() and "num_workers = 8" in auto.report.render()
