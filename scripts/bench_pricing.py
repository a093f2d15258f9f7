#!/usr/bin/env python3
"""Planning time against mesh size and tensor size (issue 22: costs that do not loop over devices).

Each case is a module with one redistribute; the time is the distribute pipeline's (propagation,
legalize with the planner, lowering), measured in a child process after a warm-up on another
module (so imports and lazy pass loading are not counted). ``new`` is this tree; ``old`` is the
same program on ``--baseline`` (default: the last commit before the pricing without device
loops, extracted with ``git archive``), stopped after ``--old-limit`` seconds. Both columns are
measured in one run, case by case, so they share the machine's load.

  mesh size:   a gather of a (64, 64) tensor, S[0] -> R, on static 1-D meshes of 4 ... 2^20
               devices; the swap S[0], S[1] -> S[1], S[0] of a (4096, 4096) tensor on k x k meshes
  tensor size: (N, N) "B[1, 1]" -> "B[2, 3]" on 4 devices (the old cost was chunks x chunks)
  issue 22:    a block layout with a run-time dim on (3, num_workers); (num_workers, 2) ->
               (2, num_workers, 3) over shared devices; a static mesh of 10^9 devices (refused)

usage: PYTHONPATH=python python scripts/bench_pricing.py [--baseline REV] [--old-limit SECONDS] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time

ONE = '''
@I.ir_module
class Module:
    I.module_global_infos({{"mesh": [{meshes}]}})

    @R.function
    def main(x: R.DTensor(({shape}), "float32", "mesh[0]", "{src}")):
        with R.dataflow():
            y = R.dist.redistribute(x, device_mesh="mesh[{target}]", placement="{dst}")
            R.output(y)
        return y
'''


def module(meshes, shape, src, dst, target=0) -> str:
    return ONE.format(meshes=", ".join(meshes), shape=shape, src=src, dst=dst, target=target)


def static(*sizes) -> str:
    n = 1
    for s in sizes:
        n *= s
    dims = ", ".join(map(str, sizes)) + ("," if len(sizes) == 1 else "")
    return f"R.device_mesh(({dims}), I.Range(0, {n}))"


def cases(quick: bool) -> list[tuple[str, str, str]]:
    """(table, size, IR text)."""
    out = []
    for e in (2, 6, 10, 14, 17, 20)[: 4 if quick else None]:
        out.append(("gather (64, 64) S[0] -> R, 1-D mesh", f"2^{e} devices", module([static(2**e)], "64, 64", "S[0]", "R")))
    for k in (2, 8, 32, 128, 1024)[: 3 if quick else None]:
        out.append(("swap (4096, 4096), k x k mesh", f"{k} x {k}",
                    module([static(k, k)], "4096, 4096", "S[0], S[1]", "S[1], S[0]")))
    for n in (20, 40, 80, 160, 640, 2560)[: 4 if quick else None]:
        out.append(('(N, N) "B[1, 1]" -> "B[2, 3]", 4 devices', f"N = {n}", module([static(4)], f"{n}, {n}", "B[1, 1]", "B[2, 3]")))
    out.append(("issue 22", "block, run-time dim s", module(['R.device_mesh((3, "num_workers"), I.Range(0, "3 * num_workers"))'],
                                                          '"s", 16', "B[1, 1]", "B[2, 3]")))
    out.append(("issue 22", "(nw, 2) -> (2, nw, 3)", module(
        ['R.device_mesh(("num_workers", 2), I.Range(0, "2 * num_workers"))',
         'R.device_mesh((2, "num_workers", 3), I.Range(0, "6 * num_workers"))'], "16, 12, 8", "S[0], S[1]", "S[2], R, S[1]", 1)))
    out.append(("issue 22", "10^9 devices", module([static(10**9)], "64, 64", "S[0]", "R")))
    return out


WARM = module(['R.device_mesh(("num_workers",), I.Range(0, "num_workers"))'], "8, 8", "S[0]", "R")


def child() -> None:
    """Time the pipeline on each module read from stdin (JSON list of texts); print one JSON line per case."""
    import distir
    from distir.errors import DistirError
    from distir.transform.pipelines import distribute_pipeline

    distribute_pipeline()(distir.parse(WARM))
    for text in json.loads(sys.stdin.read()):
        t0 = time.process_time()
        try:
            distribute_pipeline()(distir.parse(text))
            note = ""
        except DistirError as err:
            note = str(err).splitlines()[0]
        print(json.dumps({"seconds": time.process_time() - t0, "note": note}), flush=True)


def run_tree(python_dir: str, texts: list[str], limit: float) -> list[dict | None]:
    """Times of the cases, in order, on the tree at ``python_dir`` (one child process); a case past
    ``limit`` seconds stops the child, and it and the cases after it (they grow) are None."""
    import queue
    import threading

    env = dict(os.environ, PYTHONPATH=python_dir)
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    proc.stdin.write(json.dumps(texts))
    proc.stdin.close()
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout] and None, daemon=True).start()
    out: list[dict | None] = []
    wait = limit + 120  # the first case also waits for the imports
    try:
        while len(out) < len(texts):
            try:
                line = lines.get(timeout=wait)
            except queue.Empty:
                break
            if line.startswith("{"):
                out.append(json.loads(line))
                wait = limit
    finally:
        proc.kill()
        proc.wait()
    return out + [None] * (len(texts) - len(out))


def baseline_tree(rev: str, into: str) -> str | None:
    """The package at ``rev`` of this repository, extracted under ``into``; None without git or the revision."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    archive = os.path.join(into, "old.tar")
    try:
        subprocess.run(["git", "-C", root, "archive", "-o", archive, rev, "python"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return os.path.join(into, "python")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="7c87a68", help="revision for the old column (default 7c87a68; '' for none)")
    ap.add_argument("--old-limit", type=float, default=30.0, help="seconds before a case counts as too slow (default 30)")
    ap.add_argument("--quick", action="store_true", help="the smaller sizes only")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child()
        return 0
    todo = cases(args.quick)
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
    with tempfile.TemporaryDirectory() as tmp:
        old_dir = baseline_tree(args.baseline, tmp) if args.baseline else None
        new = run_tree(here, [text for *_, text in todo], args.old_limit)
        old: list[dict | None] = [None] * len(todo)
        if old_dir:
            for table in dict.fromkeys(t for t, *_ in todo):
                rows = [i for i, (t, size, _) in enumerate(todo) if t == table and "10^9" not in size]
                for i, result in zip(rows, run_tree(old_dir, [todo[i][2] for i in rows], args.old_limit)):
                    old[i] = result if result is not None else {"seconds": None}
        print(f"{'case':42} {'size':22} {'new':>10} {'old':>10} {'old / new':>9}  note")
        for (table, size, _), n, o in zip(todo, new, old):
            new_s = f"{n['seconds'] * 1e3:.1f} ms" if n else "too slow"
            if o is None:
                old_s, ratio = "-", ""
            elif o["seconds"] is None:
                old_s, ratio = f"> {args.old_limit:.0f} s", f"> {args.old_limit / n['seconds']:.0f}" if n else ""
            else:
                old_s, ratio = f"{o['seconds'] * 1e3:.1f} ms", f"{o['seconds'] / n['seconds']:.1f}" if n else ""
            note = (n or {}).get("note", "")
            print(f"{table:42} {size:22} {new_s:>10} {old_s:>10} {ratio:>9}  {note[:80]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
