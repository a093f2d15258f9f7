"""A slice of scripts/fuzz_weights.py run in process: each random damage to a weight set (both kinds)
is refused in one line naming the set, or read back as the undamaged weights (never a raw exception,
never another model's numbers)."""

from __future__ import annotations

import random
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))

import fuzz_weights  # noqa: E402  (scripts/ is on the path only from here)


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    return fuzz_weights.write_sets(tmp_path_factory.mktemp("good"))


@pytest.mark.parametrize("index", range(6))
def test_damaged_sets_are_refused_or_right(sets, tmp_path, index):
    rng = random.Random(f"test-fuzz-weights:{index}")
    kind = fuzz_weights.KINDS[index % 2]
    d = tmp_path / "set"
    shutil.copytree(sets[kind], d, symlinks=True)
    # no FIFO here: an in-process read that blocked would hang the test (the script runs each case in a child)
    what = [fuzz_weights.damage_manifest(d, rng) if rng.random() < 0.5 else "kept" for _ in range(2)]
    data = sorted(d.rglob("*.bin"))[0]
    data.write_bytes(data.read_bytes()[:-4])  # and one data file cut short: never read as right
    cls, detail = fuzz_weights.run_case(kind, d, 2 + index % 2)
    assert cls == "OK", (what, detail)
    assert detail.startswith("refused by"), (what, detail)
