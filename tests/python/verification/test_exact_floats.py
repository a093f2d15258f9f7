"""distir verify --exact-floats: float programs of sums, products, moves and maxima run in float64 on
small integers and compared bit for bit, so a wrong lowering whose error hides under the tolerance
is a counterexample; other programs keep the tolerance, the verdict naming the op."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir import examples
from distir.cli.main import main
from distir.ir.steps import get_step
from distir.verification import CHECKED, COUNTEREXAMPLE, verify
from distir.verification.exact import INPUT_MAX, ExactPlan, exact_plan

from test_verify_counts import program, reduce_program


def _nudged_all_reduce(monkeypatch, factor: float) -> None:
    """The all-reduce's result scaled by ``factor``: a relative error the tolerance (1e-5) lets through."""
    kind = get_step("all_reduce")
    real = kind.simulate

    def nudged(xs, attrs, env):
        out = real(xs, attrs, env)
        if isinstance(out, tuple):
            return {w: (y * factor).astype(y.dtype) for w, y in out[0].items()}, *out[1:]
        return {w: (y * factor).astype(y.dtype) for w, y in out.items()}

    monkeypatch.setattr(kind, "simulate", nudged)


def test_an_error_under_the_tolerance_is_found_exactly(monkeypatch, tmp_path, capsys):
    _nudged_all_reduce(monkeypatch, 1 + 1e-6)
    text = reduce_program("sum", "float32", 5, 9)
    # within rtol 1e-5: random floats alone miss it
    assert verify(distir.parse(text), max_count=4, exact_floats=False).ok
    v = verify(distir.parse(text), max_count=4, exact_floats=True, source="m.py")
    assert v.status == COUNTEREXAMPLE, str(v)
    cx = v.counterexample
    assert cx.count == 1 and v.counts == ()  # the lowering all-reduces at every count, one worker too
    assert cx.expected == round(cx.expected) and abs(cx.expected) <= 9 * INPUT_MAX  # a small integer sum
    assert cx.got == cx.expected * (1 + 1e-6) != cx.expected
    assert cx.replay == "distir verify m.py --counts 1 --exact-floats"
    f = tmp_path / "m.py"
    f.write_text(text)
    capsys.readouterr()
    assert main(["verify", str(f), "--counts", "1", "--exact-floats"]) == 1
    assert capsys.readouterr().out.startswith("COUNTEREXAMPLE at num_workers=1")


def test_a_correct_polynomial_lowering_is_checked_exactly():
    v = verify(distir.parse(reduce_program("sum", "float32", 5, 9)), max_count=5, exact_floats=True)
    assert v.status == CHECKED and v.exact == [0] and v.tolerant == [], str(v)
    assert "every value a multiple of 2^-0 at most 27 in size" in str(v)  # 9 terms of at most 3
    assert "within rtol" not in str(v)


def test_other_ops_keep_the_tolerance_and_are_named():
    v = verify(examples.load("mlp"), max_count=3, exact_floats=True)
    assert v.ok and v.tolerant and "not exactly, kept by op nn.gelu" in str(v)
    w = verify(distir.parse(reduce_program("mean", "float32", 4, 13)), max_count=3, exact_floats=True)
    assert w.ok and "mean over 13 elements (not a power of two)" in w.tolerance_kept


def _plan(text: str, **env):
    return exact_plan(distir.parse(text)["main"], env, 8)


def test_the_bound_follows_reductions_and_products():
    assert _plan(reduce_program("sum", "float32", 5, 9)) == ExactPlan(27.0, 0)
    assert _plan(reduce_program("mean", "float32", 5, 8)) == ExactPlan(3.0, 3)  # a multiple of 1/8
    body = ["            y0: R.Tensor((4,), dtype=\"float32\") = R.multiply(x, x)"]
    for k in range(1, 6):
        body.append(f"            y{k}: R.Tensor((4,), dtype=\"float32\") = R.multiply(y{k - 1}, y{k - 1})")
    body += ["            r: R.Tensor((4,), dtype=\"float32\") = R.dist.annotate_sharding(y5, device_mesh=\"mesh[0]\", placement=\"R\")",
             "            R.output(r)"]
    deep = program('x: R.DTensor((4,), "float32", "mesh[0]", "S[0]")', "\n".join(body), 'R.Tensor((4,), dtype="float32")')
    assert 3.0 ** 64 > 2.0 ** 53
    why = _plan(deep)
    assert isinstance(why, str) and "past 2^53" in why
    v = verify(distir.parse(deep), max_count=2, exact_floats=True)
    assert v.ok and "past 2^53" in v.tolerance_kept and v.tolerant


def test_no_exact_floats_keeps_the_tolerance_alone():
    v = verify(distir.parse(reduce_program("sum", "float32", 5, 9)), max_count=3, exact_floats=False)
    assert v.tolerant and not v.exact_floats and not v.tolerance_kept and not v.also_exact


def test_by_default_the_exact_set_runs_beside_the_random_one(monkeypatch, capsys):
    """Default: random floats within the tolerance and, where the ops allow it, the exact set too, so the
    error under the tolerance is found without asking; where they do not, nothing changes and nothing is said."""
    text = reduce_program("sum", "float32", 5, 9)
    v = verify(distir.parse(text), max_count=3)
    assert v.ok and v.tolerant and "within rtol" in str(v), str(v)
    assert "and every output exactly on a second input set (floats run in float64" in str(v)
    mlp = verify(examples.load("mlp"), max_count=2)
    assert mlp.ok and not mlp.also_exact and not mlp.tolerance_kept and "nn.gelu" not in str(mlp)
    _nudged_all_reduce(monkeypatch, 1 + 1e-6)
    v = verify(distir.parse(text), max_count=4, source="m.py")
    assert v.status == COUNTEREXAMPLE and v.counterexample.count == 1 and v.counterexample.inputs == "exact", str(v)
    assert v.counterexample.expected == round(v.counterexample.expected)  # a sum of small integers
    assert v.counterexample.replay == "distir verify m.py --counts 1 --exact-floats"
    assert "in float64 on small integer inputs, compared exactly" in str(v)
    assert main(["verify", "--no-exact-floats", "--counts", "1-3", str(examples.path("mesh2d"))]) == 0
    assert "exactly on a second input set" not in capsys.readouterr().out
