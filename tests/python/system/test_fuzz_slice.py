"""A derandomized slice of the differential fuzzer (scripts/fuzz.py).

Cases 0 .. CASES-1 of seed SEED: each is a random program (meshes, layouts, redistribute
chains, ops, hints), distributed once with num_workers symbolic, specialized to a few counts
in 1..8 (uneven layouts included), simulated and compared with the single-device run. Each
must match, with the simulator's bytes equal to the cost model's; only a documented
limitation may be refused (``fuzz.KNOWN_LIMITATIONS``). A failing case names the command
that re-runs it (``python scripts/fuzz.py --seed SEED --only I``) and shows a shrunk
reproducer.

The test suite runs the first QUICK_CASES (and QUICK_STRIDED_CASES); the rest of the slice is
a sweep, marked ``sweep`` and deselected by default: ``python -m pytest -q tests/python -m sweep``
runs it (docs/architecture.md, "How it is checked").
"""

from __future__ import annotations

import pathlib
import re
import sys

import pytest

SEED = 0
CASES = 80
QUICK_CASES = 24  # run by default; the others are marked sweep

_PATH = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "fuzz.py"


def _load():
    """scripts/fuzz.py as the module ``fuzz`` (importable by name, so that the child process that
    runs TVM cases can import it too)."""
    scripts = str(_PATH.parent)
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    import fuzz as module

    return module


fuzz = _load()
_RESULTS: dict = {}


def _result(index: int):
    if index not in _RESULTS:
        case = fuzz.generate_case(SEED, index)
        _RESULTS[index] = fuzz.execute(case, fuzz.Options())
    return _RESULTS[index]


def _report(res, bad) -> str:
    case = res.case
    lines = [f"case {case.origin.split()[3]} of seed {SEED} (re-run: python scripts/fuzz.py {case.origin})"]
    lines += [f"  {o.line()}" for o in bad]
    small, outcome, _ = fuzz.shrink(case, bad[0], fuzz.Options(), budget=10.0)
    lines += ["shrunk reproducer:", fuzz.repro_text(small, outcome, path="repro.ir")]
    return "\n".join(lines)


def _cases(count: int, quick: int) -> list:
    return [i if i < quick else pytest.param(i, marks=pytest.mark.sweep) for i in range(count)]


@pytest.mark.parametrize("index", _cases(CASES, QUICK_CASES))
def test_fuzz_case_matches_one_device(index):
    res = _result(index)
    bad = [o for o in res.outcomes if o.cls not in ("OK", "CLEAN-REFUSAL")]
    assert not bad, _report(res, bad)


@pytest.mark.parametrize("count", [QUICK_CASES, pytest.param(CASES, marks=pytest.mark.sweep)])
def test_the_slice_runs_programs_end_to_end(count):
    """The slice is worth something: the generator's programs parse and most run to the end."""
    results = [_result(i) for i in range(count)]
    invalid = [r.case.origin for r in results if r.cls == "INVALID"]
    assert len(invalid) <= count // 20, f"the generator wrote programs the parser rejects: {invalid}"
    ran = sum(1 for r in results if any(o.stage in ("simulate", "cost") for o in r.outcomes))
    assert ran >= count // 2, f"only {ran} of {count} cases reached the simulator"
    assert sum(len(r.case.program.binds) for r in results) >= 2 * count


def test_generation_is_deterministic():
    a = fuzz.generate_case(SEED, 7)
    b = fuzz.generate_case(SEED, 7)
    assert a == b and a.text == b.text
    assert fuzz.generate_case(SEED, 8).text != a.text


# strided shards and time costs (scripts/fuzz.py --strided --axis-costs): programs with S[d/k]
# parameters, hints and redistributes, fused-QKV chains, and 2-D meshes planned by random axis costs
STRIDED_CASES = 24
QUICK_STRIDED_CASES = 8
_STRIDED_RESULTS: dict = {}


def _strided_result(index: int):
    if index not in _STRIDED_RESULTS:
        case = fuzz.generate_case(SEED, index, fuzz.GenConfig(strided=True, costs=True))
        _STRIDED_RESULTS[index] = fuzz.execute(case, fuzz.Options())
    return _STRIDED_RESULTS[index]


@pytest.mark.parametrize("index", _cases(STRIDED_CASES, QUICK_STRIDED_CASES))
def test_strided_fuzz_case_matches_one_device(index):
    res = _strided_result(index)
    bad = [o for o in res.outcomes if o.cls not in ("OK", "CLEAN-REFUSAL")]
    assert not bad, _report(res, bad)


@pytest.mark.parametrize("count", [QUICK_STRIDED_CASES, pytest.param(STRIDED_CASES, marks=pytest.mark.sweep)])
def test_the_strided_slice_has_strided_layouts_and_costs(count):
    results = [_strided_result(i) for i in range(count)]
    strided = [r for r in results if re.search(r'"[^"]*S\[\d+/\d+\][^"]*"', r.case.text)]
    costs = [r for r in results if r.case.program.costs]
    assert len(strided) >= count // 3 and len(costs) >= 2, (len(strided), len(costs))
    ran = [r for r in strided if any(o.stage in ("simulate", "cost") for o in r.outcomes)]
    assert len(ran) >= len(strided) // 2
