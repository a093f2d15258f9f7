"""distir verify: checked on correct lowerings, and a counterexample at the smallest failing count for
each deliberately wrong lowering (a mutation of a collective, of the lowering of a reduction, or of
the partial rules, injected with monkeypatch), replayed by `distir run`."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir import examples
from distir.cli.main import main
from distir.driver import random_inputs
from distir.errors import DistirError
from distir.ir.steps import get_step
from distir.verification import CHECKED, COUNTEREXAMPLE, NOT_CHECKED, verify

MESH = 'I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})'


def program(params: str, body: str, ret: str) -> str:
    return f"""
@I.ir_module
class Module:
    {MESH}

    @R.function
    def main({params}) -> {ret}:
        with R.dataflow():
{body}
        return r
"""


def gather_program(n: int, m: int) -> str:
    """x cut by rows, doubled, asked for replicated: one all-gather of an n-row tensor."""
    return program(
        f'x: R.DTensor(({n}, {m}), "float32", "mesh[0]", "S[0]")',
        f"""            y: R.Tensor(({n}, {m}), dtype="float32") = R.add(x, x)
            r: R.Tensor(({n}, {m}), dtype="float32") = R.dist.annotate_sharding(y, device_mesh="mesh[0]", placement="R")
            R.output(r)""",
        f'R.Tensor(({n}, {m}), dtype="float32")',
    )


def reduce_program(op: str, dtype: str, n: int, m: int) -> str:
    """x cut by columns, reduced over them, asked for replicated."""
    return program(
        f'x: R.DTensor(({n}, {m}), "{dtype}", "mesh[0]", "S[1]")',
        f"""            y: R.Tensor(({n},), dtype="{dtype}") = R.{op}(x, axis=[1])
            r: R.Tensor(({n},), dtype="{dtype}") = R.dist.annotate_sharding(y, device_mesh="mesh[0]", placement="R")
            R.output(r)""",
        f'R.Tensor(({n},), dtype="{dtype}")',
    )


# ---------------------------------------------------------------- correct lowerings are checked


@pytest.mark.parametrize("name", ["mlp", "attention", "llama", "blocks"])
def test_bundled_examples_are_checked(name):
    v = verify(examples.load(name), max_count=6)
    assert v.status == CHECKED and v.ok, str(v)
    assert "Sampled, not proved" in str(v)
    if name != "blocks":  # its meshes are static: one count
        assert v.counts == (1, 2, 3, 4, 5, 6)


def test_llama_stack_is_checked():
    v = verify(examples.llama_stack(2), max_count=5)
    assert v.ok, str(v)


def test_integer_outputs_are_compared_exactly():
    v = verify(distir.parse(reduce_program("sum", "int32", 6, 7)), max_count=4)
    assert v.ok and v.exact == [0] and v.tolerant == []
    assert "exactly" in str(v)


def test_hand_written_lowering_is_checked_against_its_global_program():
    from distir.driver import Driver

    g = distir.parse(gather_program(9, 3))
    local = Driver(g).local
    assert verify(g, local, max_count=5).ok


def test_a_hand_written_lowering_of_another_program_is_a_counterexample():
    from distir.driver import Driver

    g = distir.parse(gather_program(9, 3))
    other = distir.parse(gather_program(9, 3).replace("R.add(x, x)", "R.multiply(x, x)"))
    v = verify(g, Driver(other).local, max_count=5, source="g.py", against="l.py")
    assert v.status == COUNTEREXAMPLE and v.counterexample.count == 1
    assert v.counterexample.replay == "distir verify g.py --against l.py --counts 1"


# ---------------------------------------------------------------- wrong lowerings are counterexamples


def _replay_fails(tmp_path, capsys, text: str, count: int) -> None:
    """`distir run -n count` shows the wrong number the check found (same seed, same sizes)."""
    f = tmp_path / "m.py"
    f.write_text(text)
    capsys.readouterr()
    assert main(["run", str(f), "-n", str(count)]) == 1
    assert "DOES NOT match" in capsys.readouterr().out
    if count > 1:
        assert main(["run", str(f), "-n", str(count - 1)]) == 0


def test_mutation_all_gather_wrong_owner(monkeypatch, tmp_path, capsys):
    """All-gather concatenating the pieces in reverse worker order: wrong from 2 workers on."""
    kind = get_step("all_gather")
    real = kind.simulate

    def reversed_owner(xs, attrs, env):
        held = sorted(w for w, x in xs.items() if x is not None)  # worker k gets the piece of worker W-1-k
        return real({**xs, **{w: xs[v] for w, v in zip(held, reversed(held))}}, attrs, env)

    monkeypatch.setattr(kind, "simulate", reversed_owner)
    text = gather_program(12, 3)
    v = verify(distir.parse(text), max_count=8, source="m.py")
    assert v.status == COUNTEREXAMPLE, str(v)
    cx = v.counterexample
    assert cx.count == 2 and v.counts == (1,)
    x = random_inputs(distir.parse(text), seed=0)[0]
    assert cx.expected == pytest.approx(float(2 * x[cx.index]))  # the global value, from numpy alone
    assert cx.got != pytest.approx(cx.expected)
    assert "held by every worker" in cx.workers
    assert cx.replay == "distir run m.py -n 2"
    _replay_fails(tmp_path, capsys, text, 2)


def test_mutation_off_by_one_in_uneven_exchange(monkeypatch, tmp_path, capsys):
    """The block exchange (how an uneven S[0] -> R is carried once specialized) writing its rows one place
    off: wrong only where 12 rows do not divide the count, first at 5."""
    kind = get_step("exchange")
    real = kind.simulate

    def shifted(xs, attrs, env):
        out, sent = real(xs, attrs, env)
        return {w: np.roll(y, 1, axis=0) for w, y in out.items()}, sent

    monkeypatch.setattr(kind, "simulate", shifted)
    text = gather_program(12, 2)
    v = verify(distir.parse(text), max_count=8, source="m.py")
    assert v.status == COUNTEREXAMPLE, str(v)
    assert v.counterexample.count == 5 and v.counts == (1, 2, 3, 4)  # 12 = 1*12, 2*6, 3*4, 4*3; 5 pads
    _replay_fails(tmp_path, capsys, text, 5)


def test_mutation_sum_where_max_belongs(monkeypatch, tmp_path, capsys):
    """The lowering of P[max] -> R writing an all-reduce by sum: wrong from 2 workers on."""
    kind = get_step("all_reduce")
    real = kind.lower

    def as_sum(call, x):
        c = real(call, x)
        return type(c)(c.op, c.args, {**c.attrs, "op_type": "sum"}, c.span)

    monkeypatch.setattr(kind, "lower", as_sum)
    text = reduce_program("max", "float32", 5, 9)
    v = verify(distir.parse(text), max_count=8, source="m.py")
    assert v.status == COUNTEREXAMPLE, str(v)
    cx = v.counterexample
    assert cx.count == 2
    x = random_inputs(distir.parse(text), seed=0)[0]
    assert cx.expected == pytest.approx(float(x[cx.index[0]].max()))
    _replay_fails(tmp_path, capsys, text, 2)


def test_mutation_integer_mean_over_a_cut_dim(monkeypatch, tmp_path, capsys):
    """The bug fixed before: an integer mean over a cut dim taken as a sum of rounded shares."""
    import distir.ops.reduce as reduce_mod

    real = reduce_mod.leaves
    monkeypatch.setattr(reduce_mod, "leaves", lambda name, dtype: "sum" if name == "mean" else real(name, dtype))
    text = reduce_program("mean", "int32", 7, 11)
    v = verify(distir.parse(text), max_count=8, source="m.py")
    assert v.status == COUNTEREXAMPLE, str(v)
    cx = v.counterexample
    assert cx.count == 2 and v.exact == [0]
    x = random_inputs(distir.parse(text), seed=0)[0].astype(np.int64)
    assert cx.expected == int(x[cx.index[0]].sum() // 11)  # non-negative: floor is truncation
    assert cx.got != cx.expected
    _replay_fails(tmp_path, capsys, text, 2)


# ---------------------------------------------------------------- refusals and bad input


def test_a_module_already_lowered_is_refused_as_the_global_one():
    from distir.driver import Driver

    local = Driver(examples.load("mlp")).local
    with pytest.raises(DistirError, match="already in the local view"):
        verify(local)


def test_a_global_module_is_refused_as_the_local_one():
    g = examples.load("mlp")
    with pytest.raises(DistirError, match="not in the local view"):
        verify(g, g)


def test_bad_counts_are_refused():
    with pytest.raises(DistirError, match="counts must be positive"):
        verify(examples.load("mlp"), counts=[0, 1])


def test_cli_checks_an_example(capsys):
    assert main(["verify", str(examples.path("attention")), "--counts", "1-3", "--bind", "s=5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CHECKED for counts 1..3 with s=5")


def test_cli_bad_file_is_one_line(capsys, tmp_path):
    f = tmp_path / "bad.py"
    f.write_text("this is not a module")
    assert main(["verify", str(f)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("distir verify: error: invalid syntax") and "Traceback" not in "".join(err)


def refuse_three(monkeypatch) -> None:
    """Driver.specialize refuses the count 3 (a module a count cannot be made of)."""
    from distir.driver import Driver

    real = Driver.specialize

    def refusing(self, count):
        if count == 3:
            raise DistirError("refused here")
        return real(self, count)

    monkeypatch.setattr(Driver, "specialize", refusing)


def sum_where_max_belongs(monkeypatch) -> None:
    """A wrong lowering: P[max] -> R written as an all-reduce by sum (wrong from 2 workers on)."""
    from distir.ir.steps import get_step

    kind = get_step("all_reduce")
    real = kind.lower

    def as_sum(call, x):
        c = real(call, x)
        return type(c)(c.op, c.args, {**c.attrs, "op_type": "sum"}, c.span)

    monkeypatch.setattr(kind, "lower", as_sum)


def test_not_checked_names_the_count_a_module_refuses(monkeypatch):
    refuse_three(monkeypatch)
    v = verify(distir.parse(gather_program(9, 3)), max_count=5)
    assert v.status == NOT_CHECKED and v.counts == (1, 2)
    assert "count 3" in v.reason and "refused here" in v.reason


def test_unknown_size_is_refused():
    with pytest.raises(DistirError, match="no symbolic size t in @main"):
        verify(examples.load("llama"), dims={"t": 3})


# ---------------------------------------------------------------- the integer bugs fixed before, re-introduced


def _replicate_program(dtype: str, partial: str) -> str:
    """A (4, 3) input held as parts ``P[partial]``, asked for replicated: the simulator splits it."""
    return program(
        f'x: R.DTensor((4, 3), "{dtype}", "mesh[0]", "P[{partial}]")',
        f"""            r: R.DTensor((4, 3), "{dtype}", "mesh[0]", "R") = R.dist.redistribute(x, device_mesh="mesh[0]", placement="R")
            R.output(r)""",
        f'R.DTensor((4, 3), "{dtype}", "mesh[0]", "R")',
    )


def test_mutation_integer_avg_partial_overflows(monkeypatch, tmp_path, capsys):
    """The rule before it was fixed: integer P[avg] allowed, its parts adding up to the count times
    the value in the dtype (which wraps) and combined as that sum over the count. Inputs in [0, 4)
    never wrap, so only the integers drawn over the dtype's range find it, at the first count with
    parts."""
    import distir.ir.combine as combine_ir
    import distir.ir.sharding as sharding
    import distir.ops.collectives as collectives
    import distir.partials as partials
    import distir.runtime.spmd as spmd
    from distir.driver import extreme_inputs

    real_refusal, real_combine, real_split = partials.partial_refusal, partials.combine, partials.split

    def refusal(kind, dtype):
        return None if kind == "avg" and partials.dtype_class(dtype) == "int" else real_refusal(kind, dtype)

    def old_combine(kind, parts):
        st = parts if isinstance(parts, np.ndarray) else np.stack(parts)
        if kind == "avg" and partials.dtype_class(st.dtype) == "int":
            return np.asarray(np.add.reduce(st.astype(np.float64), axis=0) / len(st)).astype(st.dtype)
        return real_combine(kind, parts)

    def old_split(value, kind, n, rng):
        if kind == "avg" and partials.dtype_class(value.dtype) == "int" and n > 1:
            parts = [rng.integers(-3, 4, size=value.shape).astype(value.dtype) for _ in range(n - 1)]
            total = np.multiply(value, n, dtype=value.dtype)
            rest = np.add.reduce(np.stack(parts), axis=0, dtype=value.dtype)
            return [*parts, np.subtract(total, rest, dtype=value.dtype)]
        return real_split(value, kind, n, rng)

    for mod in (partials, combine_ir, sharding):
        monkeypatch.setattr(mod, "partial_refusal", refusal)
    for mod in (spmd, collectives):
        monkeypatch.setattr(mod, "combine", old_combine)
    monkeypatch.setattr(spmd, "split", old_split)
    text = _replicate_program("int32", "avg")
    v = verify(distir.parse(text), max_count=8, source="m.py")
    assert v.status == COUNTEREXAMPLE, str(v)
    cx = v.counterexample
    assert cx.count == 2 and v.counts == (1,) and cx.inputs == "extreme"  # the random inputs matched at 2
    x = extreme_inputs(random_inputs(distir.parse(text), seed=0), seed=0)[0]
    assert cx.expected == int(x[cx.index])  # P[avg] -> R keeps the value
    wrapped = (int(x[cx.index]) * 2 + 2**31) % 2**32 - 2**31  # twice the value in int32, wrapped
    assert cx.got == int(np.float64(wrapped) / 2) != cx.expected
    assert cx.replay == "distir verify m.py --counts 2"
    f = tmp_path / "m.py"
    f.write_text(text)
    capsys.readouterr()
    assert main(["verify", str(f), "--counts", "2"]) == 1
    assert f"is {cx.got}, the global program gives {cx.expected}" in capsys.readouterr().out


def _old_max_split(real_split):
    """The split before it was fixed: each part of an integer P[max] (P[min]) the value minus (plus)
    a small noise, cast back to the dtype: below 0 an unsigned part wraps to the top of the range
    (a signed one at its smallest value), becoming larger than the value."""
    from distir.partials import dtype_class

    def split(value, kind, n, rng):
        if kind in ("max", "min") and dtype_class(value.dtype) == "int" and n > 1:
            sign = -1 if kind == "max" else 1
            parts = [(value.astype(np.int64) + sign * np.abs(rng.integers(-3, 4, size=value.shape))).astype(value.dtype)
                     for _ in range(n)]
            owner = rng.integers(0, n, size=value.shape)
            return [np.where(owner == k, value, p) for k, p in enumerate(parts)]
        return real_split(value, kind, n, rng)

    return split


def test_mutation_unsigned_max_partial_split(monkeypatch, tmp_path, capsys):
    """Unsigned parts wrapping: found on the random inputs at 2 workers (the first count with parts)."""
    import distir.partials as partials
    import distir.runtime.spmd as spmd

    monkeypatch.setattr(spmd, "split", _old_max_split(partials.split))
    text = _replicate_program("uint8", "max")
    v = verify(distir.parse(text), max_count=8, source="m.py")
    assert v.status == COUNTEREXAMPLE, str(v)
    cx = v.counterexample
    assert cx.count == 2 and v.counts == (1,) and cx.inputs == "random"
    x = random_inputs(distir.parse(text), seed=0)[0]
    assert cx.expected == int(x[cx.index]) and cx.got > cx.expected  # a wrapped part above the value
    assert cx.got >= 256 - 3
    _replay_fails(tmp_path, capsys, text, 2)


def test_mutation_signed_max_partial_split_needs_the_range(monkeypatch):
    """The same split on int32 wraps only at the dtype's smallest value: the random inputs in [0, 4)
    never reach it; the integers over the range (which include it) do, at 2 workers."""
    import distir.partials as partials
    import distir.runtime.spmd as spmd

    monkeypatch.setattr(spmd, "split", _old_max_split(partials.split))
    v = verify(distir.parse(_replicate_program("int32", "max")), max_count=8, source="m.py")
    assert v.status == COUNTEREXAMPLE, str(v)
    cx = v.counterexample
    assert cx.count == 2 and cx.inputs == "extreme"
    assert cx.expected < -2**31 + 3 and cx.got > 2**31 - 4  # the smallest value, a part wrapped to the top


def test_integer_inputs_over_their_range_are_run_and_said():
    v = verify(distir.parse(reduce_program("sum", "int32", 6, 7)), max_count=3)
    assert v.ok and v.extreme and "integer inputs over their dtype's range" in str(v)
    f = verify(distir.parse(gather_program(9, 3)), max_count=2)
    assert f.ok and not f.extreme and "over their dtype's range" not in str(f)  # no integer input


def test_extreme_inputs_hold_the_ends_of_each_integer_dtype():
    from distir.driver import extreme_inputs

    xs = [np.zeros((5, 4), np.int8), np.zeros(7, np.uint8), np.ones(3, np.float32), np.zeros(2, bool)]
    a, b, c, d = extreme_inputs(xs, seed=1)
    assert {-128, 127, 0, 1, -1, 126, -127} <= set(a.reshape(-1).tolist()) and a.dtype == np.int8
    assert {0, 255, 1, 254} <= set(b.tolist()) and b.dtype == np.uint8
    assert c is xs[2] and d is xs[3]
    assert extreme_inputs([np.ones(3, np.float32)]) is None


# ---------------------------------------------------------------- the work is bounded


def test_huge_count_ranges_are_refused_in_one_line(capsys):
    from distir.verification.check import MAX_COUNT, MAX_SIMULATED

    mlp = examples.load("mlp")
    with pytest.raises(DistirError, match=r"^count 5000 is past 4096, the most workers a check simulates$"):
        verify(mlp, counts=[1, 5000])
    with pytest.raises(DistirError, match=r"^max_count 100000 is past 4096"):
        verify(mlp, max_count=100000)
    with pytest.raises(DistirError, match=r"^the counts 1\.\.400 simulate 80200 workers in all, past the 65536"):
        verify(mlp, counts=range(1, 401))
    assert sum(range(1, 257)) <= MAX_SIMULATED < sum(range(1, 363)) and MAX_COUNT == 4096
    assert main(["verify", str(examples.path("mlp")), "--counts", "1-1048576x2"]) == 1  # 21 counts, accepted by the parser
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "past 4096" in err[0] and "Traceback" not in err[0]


def test_max_seconds_stops_before_a_count(monkeypatch):
    import distir.verification.check as check

    clock = iter(float(t) for t in range(1000))  # every reading (here or in the driver) one second later
    monkeypatch.setattr(check.time, "perf_counter", lambda: next(clock))
    v = verify(distir.parse(gather_program(9, 3)), max_count=8, max_seconds=12.5)
    assert v.status == NOT_CHECKED and not v.ok, str(v)
    assert v.counts and len(v.counts) < 8
    assert f"count {len(v.counts) + 1}: the time limit of 12.5 s ran out" in str(v)
    with pytest.raises(DistirError, match="max_seconds must be a positive number"):
        verify(distir.parse(gather_program(9, 3)), max_seconds=0)
