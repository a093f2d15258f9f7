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


# block layouts and two meshes (scripts/fuzz.py --blocks --cross, issue 22): B[...] parameters, hints
# and redistributes, tensors up to 160 x 160 and run-time dims; values moved between meshes that
# often share devices, e.g. (num_workers, 2) and (2, num_workers, 3)
BLOCK_CASES = 6
_BLOCK_RESULTS: dict = {}


def _block_result(index: int):
    if index not in _BLOCK_RESULTS:
        case = fuzz.generate_case(SEED, index, fuzz.GenConfig(blocks=True, cross=True))
        _BLOCK_RESULTS[index] = fuzz.execute(case, fuzz.Options())
    return _BLOCK_RESULTS[index]


@pytest.mark.parametrize("index", range(BLOCK_CASES))
def test_block_and_cross_mesh_fuzz_case_matches_one_device(index):
    res = _block_result(index)
    bad = [o for o in res.outcomes if o.cls not in ("OK", "CLEAN-REFUSAL")]
    assert not bad, _report(res, bad)


def test_the_block_slice_has_block_layouts_two_meshes_and_run_time_dims():
    cases = [fuzz.generate_case(SEED, i, fuzz.GenConfig(blocks=True, cross=True)) for i in range(BLOCK_CASES)]
    assert all(len(c.program.meshes) == 2 for c in cases)
    assert sum(bool(re.search(r'"B\[[^"]*\]"', c.text)) for c in cases) >= BLOCK_CASES // 3
    assert sum(bool(c.program.dims) for c in cases) >= BLOCK_CASES // 3
    assert sum('"mesh[0]"' in c.text and '"mesh[1]"' in c.text for c in cases) >= BLOCK_CASES // 2  # both meshes used
    assert fuzz.generate_case(SEED, 3).text == fuzz.generate_case(SEED, 3, fuzz.GenConfig()).text


def test_a_case_past_the_time_limit_is_slow_and_names_its_stage(monkeypatch):
    """--time-limit: a case that uses more CPU time than the limit is stopped and counted SLOW, a
    failure class of its own (not a crash), keyed by the stage it was in. The case is made to take
    50 ms of CPU in its parse: with the caches of a worker that has run half the suite warm, the case
    itself can finish within the limit (and, run first in a fresh process, a limit reached inside
    an import would leave that module half imported)."""
    import time

    import distir

    parse = distir.parse

    def slow_parse(*args, **kw):
        end = time.process_time() + 0.05
        while time.process_time() < end:
            pass
        return parse(*args, **kw)

    assert fuzz.execute(fuzz.generate_case(SEED, 1)).cls == "OK"  # its imports done, as in a campaign
    monkeypatch.setattr(distir, "parse", slow_parse)
    res = fuzz.execute(fuzz.generate_case(SEED, 1), fuzz.Options(timeout=0.01, slow=True))
    assert res.cls == "SLOW" and "SLOW" in fuzz.FATAL, [o.line() for o in res.outcomes]
    (o,) = res.outcomes
    assert o.key == f"SLOW|{o.stage}" and "of CPU time" in o.message
    assert fuzz.execute(fuzz.generate_case(SEED, 1), fuzz.Options(timeout=0.01)).cls == "CRASH"


# --dtypes cases of seed 0 on float16, uint8, int8, bfloat16, bool and int32, bool, int64, int16 that run in
# well under a second (case 7 propagates for about a minute: slow propagation, not a dtype matter)
DTYPE_CASES = (1, 3, 8, 10, 11, 12, 14, 19)
_DTYPES = fuzz.GenConfig(dtypes=True)


@pytest.mark.parametrize("index", DTYPE_CASES)
def test_dtype_directed_case_matches_one_device(index):
    """``--dtypes``: programs on every dtype, inputs at each dtype's ends, integers compared exactly."""
    case = fuzz.generate_case(SEED, index, _DTYPES)
    assert case.program.values == "extreme" and "--dtypes" in case.origin
    res = fuzz.execute(case, fuzz.Options())
    bad = [o for o in res.outcomes if o.cls not in ("OK", "CLEAN-REFUSAL")]
    assert not bad, "\n".join([f"re-run: python scripts/fuzz.py {case.origin}"] + [o.line() for o in bad])


def test_dtype_directed_cases_draw_every_dtype_and_leave_the_default_cases_alone():
    dtypes = {p.dtype for i in range(40) for p in fuzz.generate_case(SEED, i, _DTYPES).program.params}
    assert {"int8", "int16", "int64", "uint8", "bool", "float16", "bfloat16"} <= dtypes
    default = {p.dtype for i in range(40) for p in fuzz.generate_case(SEED, i).program.params}
    assert default <= {"float32", "float64", "int32"}
    assert fuzz.generate_case(SEED, 3).program.values == ""


def test_the_dtype_comparison_tells_rounding_from_wrong_numbers():
    # the --dtypes comparison (compare_case) accepts what float rounding explains and nothing more
    import ml_dtypes
    import numpy as np

    fuzz = _load()

    class Extreme:
        values = "extreme"

    def same(got, expected, dtype):
        g, e = np.array(got, dtype=dtype), np.array(expected, dtype=dtype)
        return fuzz.compare_case(Extreme(), (g,), (e,), [e], 0.0, 0.0)[0]

    bf16 = ml_dtypes.bfloat16
    assert same([8.8856e25], [6.9211e25], bf16)  # exp of 59 +- one last place (seed 603, case 673)
    assert same([np.nan], [np.inf], np.float32)  # inf * a + inf * b against inf * (a + b) (f02)
    assert same([2.72e38], [np.inf], bf16)  # one run overflows, the other rounds below (f01)
    assert not same([6.0], [3.0], bf16)  # a factor 2 on a moderate value
    assert not same([8.8856e25], [6.9211e25], np.float32)  # float32 rounds 2^16 times finer
    assert not same([1.0], [np.inf], np.float32)  # a finite value far from the range's end
    assert not same([-np.inf], [np.inf], np.float32)  # overflows of opposite signs
    # a float16 program that overflows on one device: a partial sum held in float16 may too (f04)
    assert same([np.nan, np.inf], [1.0, np.inf], np.float16)
    assert not same([np.nan, 2.0], [1.0, 2.0], np.float16)  # no overflow on one device: a wrong number
