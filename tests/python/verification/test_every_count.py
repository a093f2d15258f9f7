"""distir verify at every count: the cutoff argument applies where it can be justified (counts 1..C run,
every count past C proved to compute what C computes), refuses by name where it cannot, and never
turns a wrong lowering into a pass."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir import examples
from distir.driver import Driver, random_inputs
from distir.verification import CHECKED, COUNTEREXAMPLE, EVERY_COUNT, verify
from distir.verification.cutoff import NotProved, cutoff
from test_verify_counts import gather_program, reduce_program, sum_where_max_belongs


def test_integer_sum_over_a_cut_dim_holds_at_every_count():
    """7 columns cut: blocks of ceildiv(7, W) columns. Counts 4, 5 and 6 cut in blocks of 2 columns, 4
    of them real: 5 is run, 6 has its workers and one more holding none (5 stands for it from below),
    4 has 5's workers but the last, which holds none (5 stands for it from above). Likewise 8 for 7
    (blocks of one column) and for every count past 8."""
    text = reduce_program("sum", "int32", 6, 7)
    v = verify(distir.parse(text))
    assert v.status == EVERY_COUNT and v.ok, str(v)
    assert v.cutoff == 8 and v.counts == tuple(range(1, 9))  # the default domain 1..8 is run as well
    assert "every other count computes what one of them computes" in str(v) and "other sizes and inputs" in str(v)
    cut = cutoff(Driver(distir.parse(text)).local["main"], "num_workers", {})
    assert cut.counts == (1, 2, 3, 5, 8) and cut.horizon == 8 and cut.tail == 8
    assert cut.stood_for == ((4, 5), (6, 5), (7, 8)) and cut.standing(1000) == 8


def _outputs(text: str, count: int, dims=None):
    d = Driver(distir.parse(text))
    d.distribute()
    xs = random_inputs(distir.parse(text), "main", dims or {}, seed=3)
    from distir.runtime.spmd import run_spmd

    return run_spmd(d.specialize(count), *xs)


def test_a_count_not_run_computes_what_its_class_runs():
    """The claim itself, against the simulator: counts the argument skips give bit for bit the outputs of
    the count run that stands for them (4 and 6 for 5; 7, and 12 and 40 past the horizon, for 8), on
    other inputs."""
    text = reduce_program("sum", "int32", 6, 7)
    assert np.array_equal(_outputs(text, 6), _outputs(text, 5))
    assert np.array_equal(_outputs(text, 4), _outputs(text, 5))
    assert np.array_equal(_outputs(text, 7), _outputs(text, 8))
    for far in (12, 40):
        assert np.array_equal(_outputs(text, far), _outputs(text, 8))
    float_text = reduce_program("sum", "float32", 5, 30)
    v = verify(distir.parse(float_text))
    assert v.status == EVERY_COUNT, str(v)
    cut = cutoff(Driver(distir.parse(float_text)).local["main"], "num_workers", {})
    skipped = sorted(set(range(1, 36)) - set(cut.counts))
    assert skipped and any(cut.standing(c) > c for c in skipped), cut  # some stood for from above
    for w_count in skipped:
        rep = cut.standing(w_count)
        assert rep in cut.counts
        assert np.array_equal(_outputs(float_text, w_count), _outputs(float_text, rep)), w_count


def test_a_bug_at_one_count_only_is_not_skipped():
    """A mask one column short at count 100 only (a formula 1 at W = 100, 0 elsewhere): count 100 is in a
    class of its own, run, and the counterexample is there, not a pass."""
    text = reduce_program("sum", "int32", 6, 7)
    local = _local_text(text)
    only_100 = "T.min(T.max(num_workers - 99, 0), 1) - T.min(T.max(num_workers - 100, 0), 1)"
    bad = local.replace("length=T.min(", f"length=T.min(T.max(7 - worker_id, 0), 1) * ({only_100}) * -1 + T.min(", 1)
    v = verify(distir.parse(text), distir.parse(bad), every_count=True)
    assert v.status == COUNTEREXAMPLE and v.counterexample.count == 100, str(v)
    assert v.counts == tuple(range(1, 9))  # 9..99 are count 8's class: not run, and 100 is the next one run


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
    sum_where_max_belongs(monkeypatch)
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


def test_a_count_variant_is_run_at_its_counts_and_stands_for_none():
    """A wrong variant of @main guarded for count 60 only (for @main itself, count 8 stands for every
    count past 8): the argument runs 60 apart, with the variant, and finds it, instead of letting 8
    stand for it."""
    text = reduce_program("sum", "int32", 6, 7)
    local = _local_text(text)
    start = local.index("    @R.function")
    variant = local[start:].replace("def main(", "def main__w60(", 1).replace('op_type="sum"', 'op_type="max"', 1)
    variant = variant.replace('R.func_attr({', 'R.func_attr({"count_guard": {"num_workers": [60]}, '
                              '"count_variant_of": "main", ', 1)
    assert '"count_variant_of": "main"' in variant and 'op_type="max"' in variant
    with_variant = local.rstrip() + "\n\n" + variant
    v = verify(distir.parse(text), distir.parse(with_variant), every_count=True)
    assert v.status == COUNTEREXAMPLE and v.counterexample.count == 60, str(v)
    assert v.counts == tuple(range(1, 9))
    cut = cutoff(distir.parse(with_variant)["main"], "num_workers", {}, guarded={60})
    assert cut.counts == (1, 2, 3, 5, 8, 60) and cut.tail == 8
    plain = verify(distir.parse(text), distir.parse(local), every_count=True)
    assert plain.status == EVERY_COUNT and 60 not in plain.counts, str(plain)


def test_with_a_maximum_over_workers_no_count_stands_for_a_smaller_one():
    """An all-reduce by max along the count's axis: a count with one more worker adds that worker's value
    to the maximum, so it never stands for the count below it; the counts below still stand for those
    above them, and the simulator agrees."""
    text = reduce_program("max", "float32", 5, 9)
    cut = cutoff(Driver(distir.parse(text)).local["main"], "num_workers", {})
    assert cut.stood_for and all(rep < count for count, rep in cut.stood_for), cut
    assert 4 in cut.counts and 5 in cut.counts  # 4 (blocks of 3, its last worker holding none) stands for no other
    for count, rep in cut.stood_for:
        assert np.array_equal(_outputs(text, count), _outputs(text, rep)), count
