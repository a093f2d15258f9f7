"""`distir verify` on every bundled IR example, as a user runs it (no options: every count where the
argument applies), so the suite keeps the examples verified. Each takes a few seconds: the argument
runs one count per class (docs/verify.md, "Every count"). The nn examples (built with TVM) are
checked through the Python API, with the construct named where the argument does not apply."""

from __future__ import annotations

import re

import pytest

import distir
from distir import examples
from distir.cli.main import main

EVERY_COUNT = ["attention", "llama", "mesh2d", "mlp"]  # mesh2d: a (2, num_workers) mesh and an exchange
# what keeps each other example from the every-count argument, named in its verdict
SAMPLED = {"blocks": "on the module's static meshes"}


def test_every_ir_example_is_listed():
    assert sorted(EVERY_COUNT + list(SAMPLED)) == examples.ir_names()


def _largest_dim(name: str) -> int:
    """The largest constant dim of the example's parameters: past it, every cut dim is in blocks of one
    element or none, so the argument's horizon is one past it (read off the text, not the verifier)."""
    f = distir.parse(examples.text(name))["main"]
    return max(d for p in f.params for d in p.type.shape if isinstance(d, int))


@pytest.mark.parametrize("name", EVERY_COUNT)
def test_example_is_checked_at_every_count(name, capsys):
    assert main(["verify", str(examples.path(name))]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CHECKED AT EVERY COUNT num_workers >= 1"), out
    horizon = _largest_dim(name) + 1
    assert f"every count past {horizon} has them equal to count {horizon}'s (z3" in out, out
    run = set()
    for part in re.search(r"counts (.*?) run,", out).group(1).split(", "):
        lo, _, hi = part.partition("..")
        run |= set(range(int(lo), int(hi or lo) + 1))
    # 1..8 always; the horizon, not the count before it (every worker holds one element there: the
    # horizon, with one more worker holding none, stands for it); fewer than all counts up to the horizon
    assert set(range(1, 9)) | {horizon} <= run and (horizon - 1 <= 8 or horizon - 1 not in run), run
    assert horizon < 10 or len(run) < horizon, run


@pytest.mark.parametrize("name", sorted(SAMPLED))
def test_static_mesh_example_is_checked_and_says_why_not_every_count(name, capsys):
    assert main(["verify", str(examples.path(name))]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CHECKED ") and "Sampled, not proved" in out and SAMPLED[name] in out, out


# the nn models (built with TVM's relax.frontend.nn; taken through the Python API, as `distir verify`
# reads IR text only): (model, function, the construct that keeps the argument out, or None)
NN = [("gpt2", "forward", None), ("nn_llama", "forward", None), ("moe", "forward", None),
      ("gqa", "forward", None), ("decode", "prefill", None), ("decode", "decode", "R.ccl.replan at")]


@pytest.mark.parametrize("name,func,why", NN, ids=[f"{n}.{f}" for n, f, _ in NN])
def test_nn_model_is_checked_at_every_count_or_says_why_not(name, func, why):
    import warnings

    from distir.verification import CHECKED, EVERY_COUNT, verify

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v = verify(examples.load(name), func=func)
    if why is None:
        assert v.status == EVERY_COUNT, str(v)
        assert v.counts[-1] == v.cutoff and len(v.counts) < v.cutoff  # one count per class, up to the horizon
    else:
        assert v.status == CHECKED and v.not_proved.startswith(why), str(v)
