"""Reproducers: a failing case written as IR text with a header, read back and replayed."""


from __future__ import annotations

import argparse
import re

from .execute import FAILURES, FATAL, SEVERITY, Options, Outcome, execute
from .model import Case, _TextProgram
from .tvm_child import TvmRunner

HEADER_RE = re.compile(r"^# fuzz: (.*)$", re.MULTILINE)


def repro_text(case: Case, outcome: Outcome, note: str = "", path: str = "REPRO.ir") -> str:
    w = case.workers[0] if case.workers else 1
    dims = " ".join(f"--bind {n}={v}" for n, v in case.program.dims)
    backend = " --backend tvm" if outcome.stage.startswith("tvm") else ""
    costs = getattr(case.program, "costs", "")
    meta = f"workers={','.join(map(str, case.workers))} seed={case.seed}" + "".join(
        f" {n}={v}" for n, v in case.program.dims) + (f" axis_costs={costs}" if costs else "") + (
        f" values={case.program.values}" if getattr(case.program, "values", "") else "")
    msg = "\n".join("#   " + ln for ln in (outcome.message.strip().splitlines() or [""])[:12])
    det = "\n".join("#   " + ln for ln in outcome.detail.strip().splitlines()[:12]) if outcome.detail else ""
    lines = [
        f"# distir fuzz reproducer: {outcome.cls} at {outcome.stage}"
        + (f", num_workers={outcome.workers}" if outcome.workers is not None else ""),
        f"# found by: python scripts/fuzz.py {case.origin}{note}",
        "# message:",
        msg,
    ]
    if det:
        lines += ["# detail:", det]
    lines += [
        "# reproduce:",
        f"#   PYTHONPATH=python python scripts/fuzz.py --replay {path}" + (" --tvm" if backend else ""),
        # a module on static meshes only has no count to set: `distir run` refuses -n there
        f"#   distir run {path}{f' -n {w}' if case.program.uses_workers() else ''} --seed {case.seed}"
        f"{(' ' + dims) if dims else ''}{backend}" if not costs else
        f"#   distir-opt {path} -p distribute" + "".join(f" --axis-cost {c}" for c in costs.split(",")),
        f"# fuzz: {meta}",
        "",
    ]
    return "\n".join(lines) + case.text


def read_repro(path: str) -> tuple[str, dict]:
    with open(path) as f:
        text = f.read()
    meta = {}
    m = HEADER_RE.search(text)
    if m:
        for item in m.group(1).split():
            k, _, v = item.partition("=")
            meta[k] = v
    return text, meta


# a reproducer header's keys that are not run-time sizes; expect=refusal marks a finding fixed by
# making it a clean one-line refusal (a documented limitation) rather than computing it
META_KEYS = ("workers", "seed", "axis_costs", "expect", "values")


def repro_case(path: str, workers=None, seed: int | None = None, binds=()) -> Case:
    """The case a reproducer file states (its header: counts, input seed, run-time sizes, axis costs)."""
    import distir

    text, meta = read_repro(path)
    workers = workers or [int(x) for x in meta.get("workers", "1").split(",")]
    seed = int(meta.get("seed", 0)) if seed is None else seed
    dims = {k: int(v) for k, v in meta.items() if k not in META_KEYS}
    for b in binds:
        k, _, v = b.partition("=")
        dims[k] = int(v)
    prog = _TextProgram(text, dims, distir.parse(text), meta.get("axis_costs", ""), meta.get("values", ""))
    return Case(prog, tuple(workers), seed, origin=path)


def replay(path: str, args, opts: Options) -> int:
    """Re-run a written reproducer (its header says the counts, seed and run-time sizes)."""
    case = repro_case(path, _parse_workers(args.workers) if args.workers_given else None, args.input_seed, args.bind)
    workers, seed, dims, costs = list(case.workers), case.seed, case.program.dim_values, case.program.costs
    print(f"replaying {path}: num_workers {workers}, seed {seed}" + (f", {dims}" if dims else "")
          + (f", axis costs {costs}" if costs else ""))
    res = execute(case, opts, verbose=args.verbose)
    outs = list(res.outcomes)
    if args.tvm:
        runner = TvmRunner(per_count=args.tvm_per_count)
        try:
            outs += runner.run(case, opts)
        finally:
            runner.close()
    for i, o in enumerate(outs):
        if not args.verbose or i >= len(res.outcomes):  # verbose: the simulator's lines are printed already
            print(o.line())
        if o.detail and o.cls in FAILURES:
            print("  " + o.detail.strip().replace("\n", "\n  "))
    cls = min((o.cls for o in outs), key=SEVERITY.__getitem__, default="OK")
    print(f"class: {cls}")
    return 1 if cls in FATAL else 0


def _parse_workers(text: str) -> list[int]:
    out = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            out.update(range(int(a), int(b) + 1))
        else:
            out.add(int(part))
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"expected worker counts like 1-8 or 1,2,4,8, got '{text}'")
    return sorted(out)
