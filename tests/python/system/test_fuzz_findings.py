"""Every reproducer the differential fuzzer wrote (scripts/fuzz_findings/*.ir) is replayed:
each must match the single-device run at every device count it names, on the simulator
and, for the ones found on TVM, on Disco: uneven layouts (k2, k3, n06, n09) are computed,
not refused. A finding marked ``expect=refusal`` in its header (n17, a documented limitation that
crashed) must give its one-line refusal instead."""

from __future__ import annotations

import pathlib

import pytest

from test_fuzz_slice import fuzz

FINDINGS = sorted((pathlib.Path(__file__).resolve().parents[3] / "scripts" / "fuzz_findings").glob("*.ir"))
ON_TVM = ("k1", "n01b", "n02", "n03", "n07", "n08", "n10", "n11", "n13", "d01", "d02", "d03")  # found on TVM, or broken there too


def _case(path: pathlib.Path):
    return fuzz.repro_case(str(path))


def _bad(outcomes, path=None) -> list[str]:
    """Outcomes other than OK; for a finding marked ``expect=refusal`` (a documented limitation,
    once a crash), outcomes other than its clean one-line refusal."""
    want = "CLEAN-REFUSAL" if path is not None and fuzz.read_repro(str(path))[1].get("expect") == "refusal" else "OK"
    return [o.line() for o in outcomes if o.cls != want]


def test_findings_are_there():
    assert len(FINDINGS) >= 20


@pytest.mark.parametrize("path", FINDINGS, ids=lambda p: p.stem.split("-")[0])
def test_finding_replays_and_matches_one_device(path):
    res = fuzz.execute(_case(path), fuzz.Options())
    assert res.outcomes and not _bad(res.outcomes, path), f"{path.name}: " + "; ".join(_bad(res.outcomes, path))


@pytest.fixture(scope="module")
def tvm_runner():
    """One child process for every finding (the fuzzer's own: a Disco crash kills the child, not
    pytest; the runner starts a new child after one dies)."""
    runner = fuzz.TvmRunner(per_count=True)
    yield runner
    runner.close()


@pytest.mark.parametrize("path", [p for p in FINDINGS if p.stem.split("-")[0] in ON_TVM], ids=lambda p: p.stem.split("-")[0])
def test_finding_replays_on_disco(path, tvm_runner):
    outcomes = tvm_runner.run(_case(path), fuzz.Options())
    assert outcomes and all(o.cls == "OK" for o in outcomes), f"{path.name}: " + "; ".join(o.line() for o in outcomes)
