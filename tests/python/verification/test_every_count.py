"""distir verify at every count: the cutoff argument applies where it can be justified (counts 1..C run,
every count past C proved to compute what C computes), refuses by name where it cannot, and never
turns a wrong lowering into a pass."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir import examples
from distir.driver import Driver, random_inputs
from distir.ir.steps import get_step
from distir.verification import CHECKED, COUNTEREXAMPLE, EVERY_COUNT, verify
from distir.verification.cutoff import NotProved, cutoff

from test_verify_counts import gather_program, reduce_program


def test_integer_sum_over_a_cut_dim_holds_at_every_count():
    """7 columns cut: past 7 workers every block is one column or none, so C = 8."""
    text = reduce_program("sum", "int32", 6, 7)
    v = verify(distir.parse(text))
    assert v.status == EVERY_COUNT and v.ok, str(v)
    assert v.cutoff == 8 and v.counts == tuple(range(1, 9))
    assert "every count past 8 computes what 8 computes" in str(v) and "other sizes and inputs" in str(v)


def test_attention_holds_at_every_count():
    v = verify(examples.load("attention"), dims={"s": 3})
    assert v.status == EVERY_COUNT, str(v)
    assert v.cutoff == 129 and v.counts[-1] == 129  # 128 columns of wq cut, the largest dim


def test_a_replan_is_not_proved_and_named():
    """An uneven S[0] -> R is planned per count (R.ccl.replan): the argument does not cover it, the
    counts 1..8 are checked, and the verdict says why not every count."""
    v = verify(distir.parse(gather_program(12, 3)))
    assert v.status == CHECKED and v.counts == tuple(range(1, 9)), str(v)
    assert "every count not proved: R.ccl.replan at `x_r`" in str(v)


def _local_text(text: str) -> str:
    d = Driver(distir.parse(text))
    d.distribute()
    return d.local.script()


def test_an_unmasked_idle_part_is_not_proved():
    """Without the mask, the workers past the 7th add their padding: zeros in fact, but nothing in the
    program says so, so the sum is not proved for every count (only checked)."""
    text = reduce_program("sum", "int32", 6, 7)
    local = _local_text(text)
    start = local.index("R.mask_tail(")
    line_end = local.index("\n", start)
    unmasked = local[:start] + "R.add(x, x)" + local[line_end:]
    unmasked = unmasked.replace("R.sum(y_masked", "R.sum(x")
    v = verify(distir.parse(text), distir.parse(unmasked), every_count=True)
    assert v.status == CHECKED, str(v)
    assert "the all-reduce by sum of `y` (at `r`)" in v.not_proved


def test_a_formula_that_keeps_changing_is_not_proved():
    """A mask length with a term in num_workers - worker_id never settles: z3 gives a count past C where
    it differs from count C, and the verdict is only a sampled check."""
    text = reduce_program("sum", "int32", 6, 7)
    local = _local_text(text)
    bad = local.replace("length=T.min(", "length=T.min(T.max(num_workers - worker_id - 8, 0), 1) + T.min(", 1)
    v = verify(distir.parse(text), distir.parse(bad), every_count=True)
    assert v.status == CHECKED, str(v)
    assert v.not_proved.startswith("the formula ") and "still changes past count 9" in v.not_proved


def test_cutoff_refuses_a_two_axis_mesh():
    d = Driver(examples.load("blocks"))
    d.distribute()
    with pytest.raises(NotProved, match=r"the mesh \(2, 3\)"):
        cutoff(d.local["main"], "num_workers", {})


def test_mutation_sum_where_max_belongs_is_a_counterexample_at_every_count(monkeypatch):
    kind = get_step("all_reduce")
    real = kind.lower

    def as_sum(call, x):
        c = real(call, x)
        return type(c)(c.op, c.args, {**c.attrs, "op_type": "sum"}, c.span)

    monkeypatch.setattr(kind, "lower", as_sum)
    text = reduce_program("max", "float32", 5, 9)
    v = verify(distir.parse(text))
    assert v.status == COUNTEREXAMPLE and v.counterexample.count == 2, str(v)
    x = random_inputs(distir.parse(text), seed=0)[0]
    assert v.counterexample.expected == pytest.approx(float(x[v.counterexample.index[0]].max()))


def test_mutation_integer_mean_is_a_counterexample_at_every_count(monkeypatch):
    import distir.ops.reduce as reduce_mod

    real = reduce_mod.leaves
    monkeypatch.setattr(reduce_mod, "leaves", lambda name, dtype: "sum" if name == "mean" else real(name, dtype))
    text = reduce_program("mean", "int32", 7, 11)
    v = verify(distir.parse(text))
    assert v.status == COUNTEREXAMPLE and v.counterexample.count == 2, str(v)
    x = random_inputs(distir.parse(text), seed=0)[0].astype(np.int64)
    assert v.counterexample.expected == int(x[v.counterexample.index[0]].sum() // 11)


def test_mutation_mask_one_short_is_a_counterexample(monkeypatch):
    """A mask that drops the last real column of every block (a wrong lowering of the uneven cut): the
    every-count run finds it at the first count whose blocks are cut short."""
    text = reduce_program("sum", "int32", 6, 7)
    local = _local_text(text)
    bad = local.replace("length=T.min(", "length=-1 + T.min(", 1)
    v = verify(distir.parse(text), distir.parse(bad), every_count=True)
    assert v.status == COUNTEREXAMPLE and v.counterexample.count == 1, str(v)
    x = random_inputs(distir.parse(text), seed=0)[0].astype(np.int64)
    assert v.counterexample.expected == int(x[v.counterexample.index[0]].sum())


def test_sym_fold_agrees_with_evaluate():
    """fold into Python integers (floor division as Python's) gives what evaluate gives, negative values too."""
    from distir.ir import sym, sym_parse

    e = sym_parse.parse("T.min(T.max(7 - T.min(w, n - 1) * T.ceildiv(7, n), 0), T.ceildiv(7, n)) + (w - 9) % n")
    ops = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "floordiv": lambda a, b: a // b, "floormod": lambda a, b: a % b, "min": min, "max": max}
    for n in range(1, 12):
        for w in range(n):
            env = {"n": n, "w": w}
            assert sym.fold(e, env.__getitem__, int, ops) == sym.evaluate(e, env)
