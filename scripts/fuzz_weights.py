#!/usr/bin/env python3
"""Damaged weight sets: random damage to a pre-sharded set and to a global checkpoint, read
through every public entry point, each case in a child process with a time limit.

A small model (an MLP whose weights are cut ``S[1]`` and ``S[0/2]`` strided, on a symbolic mesh)
is written once as a pre-sharded set for 3 workers (``shard_weights``) and once as a global set
(``save_global_weights``). Each case copies one of them and damages it one to three ways at
random:

- the manifest: a field of a record, of a file entry or of distir's metadata set to another
  value (negative, huge, zero, another type, a path up out of the set or absolute, a device),
  a key deleted, a record listed twice, the text cut short or made not JSON;
- a data file: cut short, grown, one byte flipped, emptied, swapped with another worker's,
  replaced by a symlink (to ``/etc/passwd``, ``/dev/zero``, another file of the set), a FIFO
  or a directory, or deleted.

Then it is read by ``read_set`` / ``read_global``, ``assemble_weights``, ``reshard_weights``
(pre-sharded sets) and a Disco run on threads (``Driver.run(..., weights=DIR, backend="tvm")``)
at 2 or 3 workers. Each must raise one ``WeightsError`` line naming the set, or give weights
(and outputs) equal to the undamaged model's; classes, the worst first:

  HANG          the case outlived its time limit (a read blocked)
  CRASH         the child died (an abort), an exception other than WeightsError, or a message
                of more than one line
  WRONG-NUMBER  weights or outputs that differ from the undamaged model's, with no error
  OK            refused in one line, or right

The exit status is 1 when a HANG, CRASH or WRONG-NUMBER case was found, else 0.

examples:
  PYTHONPATH=python python scripts/fuzz_weights.py --cases 40 --seed 1
  PYTHONPATH=python python scripts/fuzz_weights.py --minutes 5 --kind global
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

MLP = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(x: R.Tensor((4, 8), dtype="float32"), w1: R.Tensor((8, 12), dtype="float32"),
             w2: R.Tensor((12, 8), dtype="float32")) -> R.Tensor((4, 8), dtype="float32"):
        R.func_attr({"num_input": 1})
        with R.dataflow():
            w1_s = R.dist.annotate_sharding(w1, device_mesh="mesh[0]", placement="S[1]")
            w2_s = R.dist.annotate_sharding(w2, device_mesh="mesh[0]", placement="S[0/2]")
            h = R.matmul(x, w1_s)
            y = R.matmul(h, w2_s)
            y_r = R.dist.annotate_sharding(y, device_mesh="mesh[0]", placement="R")
            R.output(y_r)
        return y_r
"""
KINDS = ("presharded", "global")
CLASSES = ("HANG", "CRASH", "WRONG-NUMBER", "OK")
FATAL = CLASSES[:3]
CACHE_JSON = "tensor-cache.json"


def model():
    """(driver, x, w1, w2): the model and its undamaged arrays (the same in every process)."""
    import numpy as np

    import distir
    from distir.driver import Driver

    rng = np.random.default_rng(0)
    x, w1, w2 = (rng.standard_normal(s).astype("float32") for s in [(4, 8), (8, 12), (12, 8)])
    return Driver(distir.parse(MLP)), x, w1, w2


def write_sets(root: Path) -> dict[str, Path]:
    from distir.tvm import shard_weights
    from distir.tvm.checkpoint import save_global_weights

    driver, _, w1, w2 = model()
    return {"presharded": shard_weights(driver.local, [w1, w2], 3, root / "presharded"),
            "global": save_global_weights(driver.mod, [w1, w2], root / "global")}


# ----------------------------------------------------------------------------- damage

ODD_VALUES = [-1, 0, 1, 2**40, 10**9, -(2**63), 3.5, "", "x", None, [], {}, True, [100000, 100000], [-1, 4],
              "../outside.bin", "/etc/passwd", "/dev/zero", "/proc/self/environ", "worker_0", ".", "float64", "bool"]


def _paths(value, prefix=()):
    """Every (path, value) below a JSON value."""
    yield prefix, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


def _set(doc, path, value):
    for p in path[:-1]:
        doc = doc[p]
    doc[path[-1]] = value


def _delete(doc, path):
    for p in path[:-1]:
        doc = doc[p]
    del doc[path[-1]]


def damage_manifest(d: Path, rng: random.Random) -> str:
    text = (d / CACHE_JSON).read_text()
    how = rng.choice(["field", "field", "field", "delete", "duplicate", "cut", "garbage"])
    if how == "cut":
        (d / CACHE_JSON).write_text(text[: rng.randrange(len(text))])
        return "manifest cut short"
    if how == "garbage":
        (d / CACHE_JSON).write_text(text.replace("{", "[", 1))
        return "manifest not JSON"
    try:
        doc = json.loads(text)
    except ValueError:
        return "manifest already broken"
    paths = [p for p, _ in _paths(doc) if p]
    if not paths:
        return "manifest has no field"

    path = rng.choice(paths)
    if how == "field":
        value = rng.choice(ODD_VALUES)
        _set(doc, path, value)
        what = f"{'.'.join(map(str, path))} = {value!r}"
    elif how == "delete":
        _delete(doc, path)
        what = f"{'.'.join(map(str, path))} deleted"
    else:
        files = doc.get("records") if isinstance(doc.get("records"), list) else []
        entries = [f for f in files if isinstance(f, dict) and isinstance(f.get("records"), list) and f["records"]]
        if not entries:
            return "nothing to duplicate"
        entry = rng.choice(entries)
        record = rng.choice(entry["records"])  # an earlier damage may have made it another type
        entry["records"].append(json.loads(json.dumps(record)))
        what = f"a record of {entry.get('dataPath')} listed twice"
    (d / CACHE_JSON).write_text(json.dumps(doc))
    return "manifest: " + what


def damage_file(d: Path, rng: random.Random) -> str:
    files = sorted(p for p in d.rglob("*.bin") if p.is_file() and not p.is_symlink())
    if not files:
        return "no data file"
    f = rng.choice(files)
    rel = f.relative_to(d)
    size = f.stat().st_size
    how = rng.choice(["cut", "grow", "flip", "empty", "swap", "symlink", "fifo", "directory", "delete"])
    if how == "cut":
        with open(f, "r+b") as fh:
            fh.truncate(rng.randrange(size) if size else 0)
    elif how == "grow":
        with open(f, "ab") as fh:
            fh.write(b"\0" * rng.randint(1, 64))
    elif how == "flip" and size:
        data = bytearray(f.read_bytes())
        data[rng.randrange(size)] ^= 1 << rng.randrange(8)
        f.write_bytes(bytes(data))
    elif how == "empty":
        f.write_bytes(b"")
    elif how == "swap" and len(files) > 1:
        other = rng.choice([g for g in files if g != f])
        a, b = f.read_bytes(), other.read_bytes()
        f.write_bytes(b)
        other.write_bytes(a)
        return f"{rel} swapped with {other.relative_to(d)}"
    elif how == "symlink":
        target = rng.choice(["/etc/passwd", "/dev/zero", str(rng.choice(files))])
        f.unlink()
        f.symlink_to(target)
        return f"{rel} -> symlink to {target}"
    elif how == "fifo":
        f.unlink()
        os.mkfifo(f)
    elif how == "directory":
        f.unlink()
        f.mkdir()
    elif how == "delete":
        f.unlink()
    return f"{rel}: {how}"


# ----------------------------------------------------------------------------- one case, in a child


def _readers(kind: str, d: Path, out: Path):
    from distir.tvm.checkpoint import read_global
    from distir.tvm.weights import assemble_weights, read_set, reshard_weights

    if kind == "global":
        yield "read_global", lambda: read_global(d)
        return
    yield "read_set", lambda: read_set(d)
    yield "assemble_weights", lambda: assemble_weights(d)
    yield "reshard_weights", lambda: reshard_weights(d, 2, out / "resharded")


def run_case(kind: str, d: Path, workers: int) -> tuple[str, str]:
    """(class, detail) of the damaged set in ``d``; runs in the child process."""
    import numpy as np

    from distir.transform.weights import WeightsError

    driver, x, w1, w2 = model()
    good = {"w1": w1, "w2": w2}
    refused = []
    out = Path(tempfile.mkdtemp(prefix="distir-fuzz-weights-"))
    try:
        steps = [*_readers(kind, d, out), ("Disco run", None)]
        for name, read in steps:
            try:
                if read is None:
                    r = driver.run([x], workers, backend="tvm", weights=d)
                    expected = x @ w1 @ w2
                    got = np.asarray(r.outputs[0] if isinstance(r.outputs, (list, tuple)) else r.outputs)
                    if not np.allclose(got, expected, rtol=1e-5, atol=1e-5):
                        return "WRONG-NUMBER", f"{name}: outputs differ from the undamaged model's (ok={r.ok})"
                    continue
                got = read()
                if name == "assemble_weights":
                    for k, v in good.items():
                        if k not in got or not np.array_equal(got[k], v):
                            return "WRONG-NUMBER", f"{name}: weight {k} differs from the undamaged one"
            except WeightsError as err:
                text = str(err)
                if "\n" in text.strip():
                    return "CRASH", f"{name}: a message of {text.count(chr(10)) + 1} lines: {text[:200]}"
                if str(d) not in text:
                    return "CRASH", f"{name}: the message does not name the set: {text[:200]}"
                refused.append(name)
            except Exception as err:  # noqa: BLE001  (what the fuzzer is for)
                return "CRASH", f"{name}: {type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return "OK", "refused by " + ", ".join(refused) if refused else "read right"


def _child(conn, kind, d, workers):
    import warnings

    warnings.simplefilter("ignore")
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 2)  # TVM's own logging
    conn.send(run_case(kind, Path(d), workers))


def execute(kind: str, d: Path, workers: int, limit: float) -> tuple[str, str]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(child, kind, str(d), workers), daemon=True)
    proc.start()
    try:
        if not parent.poll(limit):
            return "HANG", f"no answer within {limit:g} s"
        return parent.recv()
    except (EOFError, ConnectionError):
        proc.join(5)
        return "CRASH", f"the child died (exit code {proc.exitcode})"
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)


def main(argv=None) -> int:
    doc = __doc__ or ""
    ap = argparse.ArgumentParser(prog="scripts/fuzz_weights.py", description=doc.split("\n\n")[0],
                                 epilog="\n\n".join(doc.split("\n\n")[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=30, help="number of cases (default 30; with --minutes, whichever ends first)")
    ap.add_argument("--minutes", type=float, help="fuzz for this long")
    ap.add_argument("--seed", type=int, default=0, help="case I of seed S is the same damage everywhere (default 0)")
    ap.add_argument("--kind", choices=(*KINDS, "both"), default="both", help="which set to damage (default both)")
    ap.add_argument("--case-limit", type=float, default=120.0, help="seconds a case may take before it is a HANG (default 120)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case, not only the failures")
    args = ap.parse_args(argv)
    if args.cases < 1 or args.case_limit <= 0 or (args.minutes is not None and args.minutes <= 0):
        ap.error("--cases, --minutes and --case-limit must be positive")
    kinds = KINDS if args.kind == "both" else (args.kind,)
    root = Path(tempfile.mkdtemp(prefix="distir-fuzz-weights-"))
    start = time.monotonic()
    counts: Counter = Counter()
    try:
        sets = write_sets(root / "good")
        for i in range(args.cases):
            if args.minutes is not None and time.monotonic() - start > args.minutes * 60:
                break
            rng = random.Random(f"distir-fuzz-weights:{args.seed}:{i}")
            kind = rng.choice(kinds)
            d = root / f"case{i}"
            shutil.copytree(sets[kind], d, symlinks=True)
            what = [rng.choice([damage_manifest, damage_file])(d, rng) for _ in range(rng.randint(1, 3))]
            cls, detail = execute(kind, d, rng.choice([2, 3]), args.case_limit)
            counts[cls] += 1
            if cls in FATAL or args.verbose:
                print(f"case {i} ({kind}; {'; '.join(what)}): {cls}: {detail}", flush=True)
            shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    n = sum(counts.values())
    print(f"distir fuzz_weights: seed {args.seed}, {n} cases in {time.monotonic() - start:.0f} s: "
          + ", ".join(f"{c} {counts[c]}" for c in CLASSES if counts[c]))
    return 1 if any(counts[c] for c in FATAL) else 0


if __name__ == "__main__":
    sys.exit(main())
