"""The campaign: the command line, cases over processes, findings and the summary."""


from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import warnings
from collections import Counter
from dataclasses import replace

from . import __doc__ as USAGE
from .cases import generate_case
from .execute import CLASSES, FAILURES, FATAL, SEVERITY, CaseResult, Options, Outcome, _words, execute
from .generate import GenConfig
from .model import Case
from .repro import _parse_workers, replay, repro_text
from .shrink import shrink
from .tvm_child import TvmRunner

_WORKER_STATE: dict = {}


def _pool_init(state):
    _WORKER_STATE.update(state)
    warnings.simplefilter("ignore")


def _pool_run(index):
    s = _WORKER_STATE
    case = generate_case(s["seed"], index, s["cfg"])
    return index, execute(case, s["opts"])


class Stats:
    def __init__(self):
        self.cases = Counter()
        self.runs = Counter()
        self.refusals = Counter()
        self.suspects = Counter()
        self.invalid = Counter()
        self.n = 0
        self.case_seconds = 0.0

    def add(self, res: CaseResult):
        self.n += 1
        self.case_seconds += res.seconds
        self.cases[res.cls] += 1
        for o in res.outcomes:
            self.runs[o.cls] += 1
            if o.cls == "CLEAN-REFUSAL":
                self.refusals[f"{o.stage}: {_words(o.message, 20)}"] += 1
            elif o.cls == "SUSPECT-REFUSAL":
                self.suspects[f"{o.stage}: {_words(o.message, 20)}"] += 1
            elif o.cls == "INVALID":
                self.invalid[f"{o.stage}: {_words(o.message, 20)}"] += 1

    def counts_line(self) -> str:
        return "  ".join(f"{c} {self.cases[c]}" for c in CLASSES if self.cases[c])


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="scripts/fuzz.py", description=USAGE.split("\n\n")[0],
        epilog="\n\n".join(USAGE.split("\n\n")[1:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_argument_group("how much")
    g.add_argument("--cases", type=int, help="number of cases (default 200 unless --minutes is given)")
    g.add_argument("--minutes", type=float, help="fuzz for this long (shrinking included); with --cases, whichever ends first")
    g.add_argument("--seed", type=int, default=0, help="run seed: case I of seed S is the same program everywhere (default 0)")
    g.add_argument("--start", type=int, default=0, help="first case index (default 0)")
    g.add_argument("--only", type=int, action="append", metavar="I",
                   help="run only case I of --seed, verbosely (repeatable)")
    g.add_argument("--jobs", "-j", type=int, default=1, help="processes running cases in parallel (default 1)")
    g = ap.add_argument_group("what")
    g.add_argument("--workers", default="1-8", help="num_workers values to specialize to, e.g. 1-8 or 1,2,3,4,8 (default 1-8)")
    g.add_argument("--counts-per-case", type=int, default=3, metavar="K",
                   help="device counts tried per case, drawn from --workers (default 3)")
    g.add_argument("--max-ops", type=int, default=8, help="most ops per program (default 8)")
    g.add_argument("--max-devices", type=int, default=16, help="most simulated devices (default 16)")
    g.add_argument("--even-only", action="store_true",
                   help="only device counts at which every stated layout divides evenly (tells uneven-layout "
                        "bugs from others)")
    g.add_argument("--device-lists", choices=("any", "ordered", "none"), default="any",
                   help="explicit device lists of static meshes: any (out of order, with gaps; default), "
                        "ordered (ascending), none (ranges only)")
    g.add_argument("--strided", action="store_true",
                   help="also strided shards S[d/k]: parameters, hints and redistributes, fused-QKV chains (matmul, "
                        "reshapes that split and merge the strided dim), meshes of 6 and 7 devices")
    g.add_argument("--axis-costs", action="store_true",
                   help="sometimes plan by time: random per-mesh-axis costs when every mesh has two or more axes")
    g.add_argument("--dtypes", action="store_true",
                   help="dtype-directed cases: int8/int16/int32/int64/uint8/bool/float16/bfloat16/float32/float64 "
                   "programs, partials of every kind the dtype holds, inputs at the ends of each dtype's range, "
                   "integer and bool results compared exactly")
    g = ap.add_argument_group("block layouts, two meshes, time (issue 22)")
    g.add_argument("--blocks", action="store_true",
                   help="also block layouts B[...]: parameters, hints and redistributes to and from them (tensors up to "
                        "160 x 160, run-time dims), elementwise ops and reductions on the chunks")
    g.add_argument("--cross", action="store_true",
                   help="two meshes in every program (the same devices in another grid, overlapping ranges, or the next "
                        "stage; e.g. (num_workers, 2) and (2, num_workers, 3)) and more values moved between them")
    g.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help="a case still running after this much CPU time is stopped and counted SLOW, a failure class of "
                        "its own (named after the stage it was in); replaces --timeout")
    g = ap.add_argument_group("backends and checks")
    g.add_argument("--tvm", action="store_true", help="also export to TVM, build and run on Disco (slow: ~1-2 s per case)")
    g.add_argument("--tvm-per-count", action="store_true",
                   help="with --tvm: BindSymbolicVars + tvm.compile per count instead of one symbolic build")
    g.add_argument("--no-cost", action="store_true", help="do not compare the simulator's bytes with the cost model")
    g.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (default 1e-4)")
    g.add_argument("--atol", type=float, default=1e-4,
                   help="absolute tolerance, relative to the largest expected magnitude (default 1e-4)")
    g.add_argument("--timeout", type=float, default=30.0, help="seconds per case before it counts as a CRASH (default 30)")
    g = ap.add_argument_group("output")
    g.add_argument("--out", default="fuzz-out", help="folder for reproducers and summary.json (default fuzz-out)")
    g.add_argument("--no-shrink", action="store_true", help="write failures as found, without shrinking")
    g.add_argument("--shrink-seconds", type=float, default=60.0, help="time to shrink one failure (default 60)")
    g.add_argument("--max-shrinks", type=int, default=3,
                   help="failures shrunk per kind of failure (same stage and message gist), default 3")
    g.add_argument("--suspects", action="store_true", help="also shrink and write SUSPECT-REFUSAL and COST-MISMATCH cases")
    g.add_argument("--print", action="store_true", dest="print_only", help="with --only: print the program and stop")
    g.add_argument("--replay", metavar="FILE", help="re-run a reproducer written by the fuzzer (or any IR file)")
    g.add_argument("--bind", action="append", default=[], metavar="NAME=INT", help="with --replay: a run-time size")
    g.add_argument("--input-seed", type=int, help="with --replay: seed of the inputs (default: the file's)")
    g.add_argument("-v", "--verbose", action="store_true", help="print every case's outcome")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    args = ap.parse_args(argv)
    args.workers_given = any(a == "--workers" or a.startswith("--workers=") for a in (argv or sys.argv[1:]))
    workers = _parse_workers(args.workers)
    opts = Options(rtol=args.rtol, atol=args.atol, timeout=args.timeout, check_cost=not args.no_cost)
    cfg = GenConfig(tuple(workers), args.counts_per_case, args.max_ops, args.max_devices, args.even_only, args.device_lists,
                    args.strided, args.axis_costs, dtypes=args.dtypes)
    cfg, opts = _issue22_options(args, cfg, opts)
    warnings.simplefilter("ignore")

    if args.replay:
        return replay(args.replay, args, opts)

    if args.only:
        worst = "OK"
        tvm = TvmRunner(per_count=args.tvm_per_count) if args.tvm else None
        for i in args.only:
            case = generate_case(args.seed, i, cfg)
            print(f"# {case.origin}: num_workers {list(case.workers)}, input seed {case.seed}, "
                  f"run-time sizes {case.program.dim_values or 'none'}")
            print(case.text)
            if args.print_only:
                continue
            res = execute(case, opts, verbose=True)
            outs = list(res.outcomes) + (tvm.run(case, opts) if tvm else [])
            for o in outs:
                if o.cls in FAILURES and o.detail:
                    print("  " + o.detail.strip().replace("\n", "\n  "))
            cls = min((o.cls for o in outs), key=SEVERITY.__getitem__, default="OK")
            print(f"class: {cls}  ({res.seconds * 1e3:.0f} ms)")
            worst = min(worst, cls, key=SEVERITY.__getitem__)
        if tvm:
            tvm.close()
        return 1 if worst in FATAL else 0

    return fuzz(args, cfg, opts)


def _issue22_options(args, cfg: GenConfig, opts: Options) -> tuple[GenConfig, Options]:
    """--blocks and --cross (what the generator writes) and --time-limit (SLOW cases)."""
    cfg = replace(cfg, blocks=args.blocks, cross=args.cross)
    if args.time_limit:
        opts = replace(opts, timeout=args.time_limit, slow=True)
    return cfg, opts


def fuzz(args, cfg: GenConfig, opts) -> int:
    n_cases = args.cases if args.cases is not None else (None if args.minutes else 200)
    t_start = time.perf_counter()
    deadline = t_start + args.minutes * 60 if args.minutes else None
    os.makedirs(args.out, exist_ok=True)
    stats = Stats()
    tvm = TvmRunner(per_count=args.tvm_per_count) if args.tvm else None
    shrink_tasks: dict[str, int] = Counter()
    found: list[dict] = []
    shrink_seconds = 0.0
    last_print = t_start
    tty = sys.stderr.isatty() and not args.verbose

    def log(msg):
        if not args.quiet:
            if tty:
                sys.stderr.write("\r\033[K")
            print(msg, file=sys.stderr, flush=True)

    def progress(force=False):
        nonlocal last_print
        now = time.perf_counter()
        if args.quiet or (not force and now - last_print < (0.5 if tty else 10)):
            return
        last_print = now
        el = now - t_start
        rate = stats.n / max(el - shrink_seconds, 1e-9)
        line = f"[{el:6.0f}s] {stats.n} cases, {rate:.1f} cases/s  {stats.counts_line()}"
        if tty:
            sys.stderr.write("\r\033[K" + line[:200])
            sys.stderr.flush()
        else:
            print(line, file=sys.stderr, flush=True)

    def indices():
        i = args.start
        while n_cases is None or i < args.start + n_cases:
            yield i
            i += 1

    def results():
        if args.jobs <= 1:
            for i in indices():
                if deadline and time.perf_counter() > deadline:
                    return
                case = generate_case(args.seed, i, cfg)
                yield i, execute(case, opts)
            return
        import concurrent.futures as cf
        import multiprocessing as mp

        state = {"seed": args.seed, "cfg": cfg, "opts": opts}
        with cf.ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("fork"), initializer=_pool_init,
                                    initargs=(state,)) as ex:
            it = indices()
            pending = []
            for i in it:
                pending.append(ex.submit(_pool_run, i))
                if len(pending) >= 4 * args.jobs:
                    break
            while pending:
                fut = pending.pop(0)
                yield fut.result()
                if deadline and time.perf_counter() > deadline:
                    for f in pending:
                        f.cancel()
                    return
                nxt = next(it, None)
                if nxt is not None:
                    pending.append(ex.submit(_pool_run, nxt))

    try:
        for i, res in results():
            if tvm is not None and not any(o.cls == "INVALID" or o.stage in ("parse", "reference") for o in res.outcomes):
                res.outcomes += tvm.run(res.case, opts)
            stats.add(res)
            if args.verbose:
                log(f"case {i}: {res.cls}" + "".join(f"\n    {o.line()}" for o in res.outcomes if o.cls != "OK"))
            wanted = FATAL + (("COST-MISMATCH", "SUSPECT-REFUSAL") if args.suspects else ())
            keys_here = set()
            for o in res.outcomes:
                if o.cls not in FAILURES or o.key in keys_here:
                    continue  # one record per kind of failure and case (not one per device count)
                keys_here.add(o.key)
                key = o.key
                bucket = _bucket(res.case, o)
                rec = {"case": i, "cls": o.cls, "stage": o.stage, "workers": o.workers, "key": key,
                       "message": o.message[:2000], "origin": res.case.origin}
                found.append(rec)
                if o.cls not in wanted or shrink_tasks[bucket] >= args.max_shrinks:
                    continue
                shrink_tasks[bucket] += 1
                log(f"case {i}: {o.line()}")
                t0 = time.perf_counter()
                if args.no_shrink:
                    small, so, runs = replace(res.case, workers=(o.workers,) if o.workers else res.case.workers), o, 0
                else:
                    budget = args.shrink_seconds
                    if deadline:
                        budget = max(1.0, min(budget, deadline - time.perf_counter()))
                    small, so, runs = shrink(res.case, o, opts, budget=budget, tvm=tvm)
                shrink_seconds += time.perf_counter() - t0
                n = sum(1 for r in found if r.get("file")) + 1
                name = f"{o.cls.lower()}-{n:03d}-{_slug(o.stage + '-' + _words(o.message, 5))}"
                path = os.path.join(args.out, name + ".ir")
                note = (f", shrunk from {len(res.case.program.binds)} to {len(small.program.binds)} bindings in "
                        f"{runs} runs") if not args.no_shrink else ""
                with open(path, "w") as f:
                    f.write(repro_text(small, so, note, path))
                with open(os.path.join(args.out, name + ".orig.ir"), "w") as f:
                    f.write(repro_text(replace(res.case, workers=(o.workers,) if o.workers else res.case.workers),
                                       o, " (as found)", os.path.join(args.out, name + ".orig.ir")))
                rec.update(file=path, shrunk_message=so.message[:2000], signature=_signature(small, so))
                log(f"    -> {path} ({len(small.program.binds)} bindings, {runs} runs)")
            progress()
    except KeyboardInterrupt:
        log("interrupted")
    finally:
        if tvm is not None:
            tvm.close()
    progress(force=True)
    if tty and not args.quiet:
        sys.stderr.write("\n")
    elapsed = time.perf_counter() - t_start
    return _summary(args, stats, found, elapsed, shrink_seconds)


def _mesh_features(p) -> list[str]:
    out = []
    for m in p.meshes:
        if m.ids is not None and list(m.ids) != list(range(min(m.ids), min(m.ids) + len(m.ids))):
            out.append("device list out of order or with gaps")
            break
    if len(p.meshes) > 1:
        out.append("two meshes")
    return out


def _bucket(case: Case, o: Outcome) -> str:
    """A failure's kind for deciding whether to shrink another one: its key plus the case's
    features that often make a different bug (device lists, uneven layouts, two meshes)."""
    feats = _mesh_features(case.program)
    if o.valid is False:
        feats.append("uneven")
    return o.key + "|" + ",".join(feats)


def _signature(case: Case, o: Outcome) -> str:
    """What a minimized failure looks like, to group failures that are likely one bug."""
    p = case.program
    ops = sorted({b.op.replace("R.", "") for b in p.binds} - {"item"})
    meshes = "; ".join(m.describe() for m in p.meshes)
    if o.cls == "WRONG-NUMBER":
        valid = "stated layouts divide" if o.valid is not False else "stated layouts do not divide"
        dyn = "run-time sizes" if p.dims else "static sizes"
        return f"{o.cls}|{o.stage}|{','.join(ops)}|{meshes}|{valid}|{dyn}"
    return o.key + "|" + ",".join(_mesh_features(p))


def _summary(args, stats: Stats, found: list, elapsed: float, shrink_seconds: float) -> int:
    fuzz_s = max(elapsed - shrink_seconds, 1e-9)
    print()
    print(f"distir fuzz: seed {args.seed}, {stats.n} cases in {elapsed:.1f} s "
          f"({stats.n / fuzz_s:.1f} cases/s fuzzing, {shrink_seconds:.1f} s shrinking; "
          f"{stats.case_seconds / max(stats.n, 1) * 1e3:.0f} ms per case)")
    print("cases by class (a case's class is its worst over its device counts):")
    for c in CLASSES:
        if stats.cases[c]:
            print(f"  {c:16} {stats.cases[c]:6}   (runs: {stats.runs[c]})")
    for title, counter in (("clean refusals", stats.refusals), ("suspect refusals", stats.suspects),
                           ("invalid programs (generator)", stats.invalid)):
        if counter:
            print(f"{title}, most common messages:")
            for msg, n in counter.most_common(8):
                print(f"  {n:5}  {msg[:150]}")
    written = [r for r in found if r.get("file")]
    if found:
        groups = Counter(r["key"] for r in found)
        print(f"failures: {len(found)} ({len(groups)} kinds by stage and message gist)")
        for k, n in groups.most_common(20):
            print(f"  {n:5}  {k[:160]}")
    if written:
        print("reproducers (shrunk):")
        seen = {}
        for r in written:
            seen.setdefault(r["signature"], r)
        for r in seen.values():
            print(f"  {r['file']}: {r['cls']} at {r['stage']}, {r['origin']}")
            print(f"      {(r.get('shrunk_message') or r['message']).strip().splitlines()[0][:200]}")
    summary = {"seed": args.seed, "cases": stats.n, "seconds": elapsed, "shrink_seconds": shrink_seconds,
               "cases_per_second": stats.n / fuzz_s, "classes": dict(stats.cases), "runs": dict(stats.runs),
               "refusals": dict(stats.refusals.most_common(50)), "suspects": dict(stats.suspects.most_common(50)),
               "invalid": dict(stats.invalid.most_common(50)), "failures": found}
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    fatal = sum(stats.cases[c] for c in FATAL)
    print(f"summary written to {os.path.join(args.out, 'summary.json')}; "
          + (f"{' or '.join(FATAL)} found: exit 1" if fatal else f"no {' or '.join(FATAL)}"))
    return 1 if fatal else 0

