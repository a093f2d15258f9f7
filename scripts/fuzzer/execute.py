"""Running a case: distribute once, specialize, simulate, compare; each run's outcome class."""


from __future__ import annotations

import re
import signal
import time
import traceback
import warnings
from dataclasses import dataclass, field

from .compare import _differences, case_inputs, compare_case
from .model import NW, Case

CLASSES = ["WRONG-NUMBER", "CRASH", "SLOW", "COST-MISMATCH", "SUSPECT-REFUSAL", "CLEAN-REFUSAL", "OK", "INVALID"]
SEVERITY = {c: i for i, c in enumerate(CLASSES)}
FATAL = ("WRONG-NUMBER", "CRASH", "SLOW")
FAILURES = ("WRONG-NUMBER", "CRASH", "SLOW", "COST-MISMATCH", "SUSPECT-REFUSAL")


@dataclass
class Outcome:
    cls: str
    stage: str  # parse, reference, <pass name>, specialize, simulate, compare, cost, tvm-...
    workers: int | None = None
    message: str = ""
    key: str = ""  # what a shrunk case must keep reproducing
    detail: str = ""
    valid: bool | None = None  # every stated layout divides evenly at this count (None: not known); a
    # feature of the case that tells failures apart, not a licence to refuse

    def line(self) -> str:
        w = f" num_workers={self.workers}" if self.workers is not None else ""
        msg = self.message.strip().splitlines()[0] if self.message.strip() else ""
        return f"{self.cls} at {self.stage}{w}: {msg[:300]}"


@dataclass
class CaseResult:
    case: Case
    outcomes: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def cls(self) -> str:
        return min((o.cls for o in self.outcomes), key=SEVERITY.__getitem__, default="OK")

    def worst(self) -> Outcome | None:
        return min(self.outcomes, key=lambda o: SEVERITY[o.cls], default=None)


# DistirError messages of documented limitations: a refusal with one of these is clean; any
# other refusal is a suspect. (distir computes every layout at every count; the one limitation is
# docs/strided.md's: a strided layout does not move between meshes.)
KNOWN_LIMITATIONS: list[str] = [
    r"a strided layout \(.*\) moves between meshes only after it is redistributed to a plain one",
    # docs/blocks.md: a block layout is exchanged to R / S before it moves to another mesh
    r"between two meshes: the block layout .* is not handled here",
]


class CaseTimeout(BaseException):
    """Raised by the alarm (BaseException: no library `except Exception` swallows it)."""


def _on_alarm(signum, frame):
    raise CaseTimeout(*_stopped_in(frame))


# distir's plumbing: a slow case is named after the first frame below these
_PLUMBING = ("transform/pass_infra.py", "transform/rewrite.py", "transform/__init__.py", "errors.py")


def _stopped_in(frame) -> tuple[str, str]:
    """Where the alarm stopped a case: the outermost frame of distir past its plumbing (the stage:
    a pass, specialize, the simulator) and the innermost one (file:function)."""
    names = []
    while frame is not None:
        path = frame.f_code.co_filename.replace("\\", "/")
        if "/distir/" in path:
            names.append((path.split("/distir/")[-1], frame.f_code.co_name))
        frame = frame.f_back
    if not names:
        return "outside distir", "outside distir"
    stage = next((f for f, _ in reversed(names) if f not in _PLUMBING), names[-1][0])
    return stage, f"{names[0][0]}:{names[0][1]}"


def _stopped_outcome(stop: CaseTimeout, opts: Options) -> Outcome:
    """A case stopped at the time limit: SLOW (a failure class of its own) with --time-limit, else
    the old CRASH at "timeout"."""
    if not opts.slow:
        return Outcome("CRASH", "timeout", None, f"the case took more than {opts.timeout:g} s", key="CRASH|timeout")
    stage, inner = stop.args if len(stop.args) == 2 else ("outside distir", "outside distir")
    return Outcome("SLOW", stage, None, f"the case took more than {opts.timeout:g} s of CPU time: stopped in {inner}",
                   key=f"SLOW|{stage}")


def _words(message: str, n: int = 14) -> str:
    """A message's gist, stable under shrinking: its first line, names, numbers and types dropped."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    first = re.sub(r"^error:\s*", "", first)
    first = re.sub(r"'[^']*'|\"[^\"]*\"", " ", first)
    first = re.sub(r"\([^()]*\)", " ", first)
    words = [w for w in re.findall(r"[A-Za-z_][A-Za-z_\-]+", first) if len(w) > 2 and not re.search(r"\d", w)]
    return " ".join(words[:n])


def _crash_site(exc: BaseException) -> str:
    """The innermost frame of distir in the traceback (file:function:line)."""
    site = ""
    for fr in traceback.extract_tb(exc.__traceback__):
        if "/distir/" in fr.filename.replace("\\", "/"):
            site = f"{fr.filename.split('/distir/')[-1]}:{fr.name}:{fr.lineno}"
    return site or "outside distir"


def _exc_outcome(exc: BaseException, stage: str, w, valid: bool | None) -> Outcome:
    """The outcome of an exception at ``stage``; ``valid``: whether every stated layout divides
    (None: not known or not relevant)."""
    o = _exc_outcome_(exc, stage, w, valid)
    o.valid = valid
    return o


def _exc_outcome_(exc: BaseException, stage: str, w, valid: bool | None) -> Outcome:
    from distir.errors import DistirError

    msg = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, CaseTimeout):
        return Outcome("CRASH", stage, w, f"timeout during {stage}", key=f"CRASH|timeout|{stage}")
    if isinstance(exc, DistirError):
        if stage == "simulate" and "replicas disagree" in str(exc):
            return Outcome("WRONG-NUMBER", stage, w, msg, key="WRONG-NUMBER|simulate|replicas disagree")
        known = any(re.search(p, str(exc)) for p in KNOWN_LIMITATIONS)
        cls = "CLEAN-REFUSAL" if known else "SUSPECT-REFUSAL"
        return Outcome(cls, stage, w, msg, key=f"{cls}|{stage}|{type(exc).__name__}|{_words(str(exc))}")
    site = _crash_site(exc)
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, chain=False)[-7:])
    return Outcome("CRASH", stage, w, f"{msg} [at {site}]", key=f"CRASH|{stage}|{type(exc).__name__}|{site}",
                   detail=tb)


def user_layouts(mod) -> list:
    """(what, shape, mesh, placement) of every layout the program states: DTensor parameters,
    hints and redistribute targets."""
    from distir.ir.types import DTensorType

    f = mod["main"]
    out = [(f"parameter '{p.name}'", p.type.shape, p.type.mesh, p.type.placement)
           for p in f.params if isinstance(p.type, DTensorType)]
    for b in f.bindings():
        v = b.value
        name = getattr(getattr(v, "op", None), "name", "")
        if name == "dist.annotate_sharding":
            out.append((f"hint '{b.var.name}'", v.args[0].type.shape, v.attrs["device_mesh"], v.attrs["placement"]))
        elif name == "dist.redistribute" and isinstance(b.var.type, DTensorType):
            out.append((f"redistribute '{b.var.name}'", b.var.type.shape, b.var.type.mesh, b.var.type.placement))
    return out


def layouts_divide(layouts, w: int, dims: dict) -> str | None:
    """None when every stated layout cuts its dims evenly at num_workers=w, else why not."""
    from distir.ir import sym
    from distir.ir.placement import Shard, StridedShard

    env = dict(dims)
    env[NW] = w
    for what, shape, mesh, placement in layouts:
        if placement.is_block:
            continue  # chunks at the edges are partial by design (docs/blocks.md)
        try:
            sizes = [sym.evaluate(d, env) for d in mesh.shape]
        except Exception:  # noqa: BLE001
            return f"{what}: mesh size unknown"
        for d, dim in enumerate(shape):
            n, parts = 1, 1
            for ax, spec in enumerate(placement.specs):
                if isinstance(spec, (Shard, StridedShard)) and spec.dim == d:
                    n *= sizes[ax]
                if isinstance(spec, StridedShard) and spec.dim == d:
                    parts = spec.split
            try:
                v = sym.evaluate(dim, env) // parts  # a strided shard cuts each of its parts
            except Exception:  # noqa: BLE001  (a size nothing binds: not checkable)
                v = 0
            if v % n:
                return f"{what} dim {d} of size {v} is cut over {n} devices"
    return None


@dataclass
class Options:
    rtol: float = 1e-4
    atol: float = 1e-4
    timeout: float = 30.0
    check_cost: bool = True
    slow: bool = False  # a case stopped at the time limit is SLOW, not a CRASH (--time-limit)


def execute(case: Case, opts: Options | None = None, verbose: bool = False) -> CaseResult:
    """Run one case: parse, reference, pipeline once, then per device count specialize,
    simulate, compare and check the bytes. Never raises (except KeyboardInterrupt)."""
    opts = opts or Options()
    t0 = time.perf_counter()
    res = CaseResult(case)
    use_alarm = opts.timeout and hasattr(signal, "SIGALRM") and _main_thread()
    # --time-limit counts the process's CPU time (a shared machine's load does not make a case SLOW)
    timer, sig = (signal.ITIMER_PROF, signal.SIGPROF) if opts.slow else (signal.ITIMER_REAL, signal.SIGALRM)
    if use_alarm:
        old = signal.signal(sig, _on_alarm)
        signal.setitimer(timer, opts.timeout)
    try:
        _execute(case, opts, res, verbose)
    except CaseTimeout as stop:
        res.outcomes.append(_stopped_outcome(stop, opts))
    finally:
        if use_alarm:
            signal.setitimer(timer, 0)
            signal.signal(sig, old)
    res.seconds = time.perf_counter() - t0
    return res


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _execute(case: Case, opts: Options, res: CaseResult, verbose: bool) -> None:
    import numpy as np

    import distir
    from distir.analysis import comm_volume
    from distir.errors import DistirError
    from distir.runtime import run
    from distir.runtime.spmd import SpmdStats, run_spmd
    from distir.transform import PassContext, get_pass
    from distir.transform.legalize_redistribute import AXIS_COSTS_KEY
    from distir.transform.pipelines import _DISTRIBUTE
    from distir.transform.specialize import specialize

    out = res.outcomes
    prog = case.program
    dims = prog.dim_values
    text = prog.render()
    say = print if verbose else (lambda *a, **k: None)

    # 1. the program and its single-device result (a refusal here is the generator's fault)
    try:
        mod = distir.parse(text)
        inputs = case_inputs(mod, prog, dims, case.seed)
    except DistirError as e:
        out.append(Outcome("INVALID", "parse", None, f"{type(e).__name__}: {e}", key="INVALID|parse"))
        say(out[-1].line())
        return
    except CaseTimeout:
        raise
    except Exception as e:  # noqa: BLE001
        out.append(_exc_outcome(e, "parse", None, None))
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = run(mod, *inputs)
    except DistirError as e:
        out.append(Outcome("INVALID", "reference", None, f"{type(e).__name__}: {e}", key="INVALID|reference"))
        say(out[-1].line())
        return
    except CaseTimeout:
        raise
    except Exception as e:  # noqa: BLE001
        out.append(_exc_outcome(e, "reference", None, None))
        return
    layouts = user_layouts(mod)
    why_not = {w: layouts_divide(layouts, w, dims) for w in case.workers}
    valid_any = any(v is None for v in why_not.values())
    say(f"stated layouts: {len(layouts)}; " + "; ".join(f"num_workers={w}: {why or 'all divide'}" for w, why in why_not.items()))

    # 2. the distribute pipeline, once, num_workers symbolic; pass by pass to name the stage;
    # with axis costs, propagation and legalize plan by time (specialize reads the replans' costs)
    lowered = mod
    config = {AXIS_COSTS_KEY: prog.costs} if getattr(prog, "costs", "") else {}
    if config:
        say(f"axis costs: {prog.costs}")
    for name in _DISTRIBUTE:
        try:
            with warnings.catch_warnings(), PassContext(config=config):
                warnings.simplefilter("ignore")
                lowered = get_pass(name)(lowered)
        except CaseTimeout:
            raise
        except Exception as e:  # noqa: BLE001
            out.append(_exc_outcome(e, name, None, valid_any))
            say(out[-1].line())
            return
    if verbose:
        print("--- after the distribute pipeline:")
        print(lowered.script())
    formula = None
    if opts.check_cost:
        try:
            formula = comm_volume(lowered)
        except DistirError:
            formula = None  # e.g. transfers between meshes that share devices: exact only when specialized
        except CaseTimeout:
            raise
        except Exception as e:  # noqa: BLE001
            out.append(_exc_outcome(e, "cost-formula", None, None))

    # 3. per device count
    for w in case.workers:
        valid = why_not[w] is None
        try:
            local = specialize(lowered, {NW: w})
        except CaseTimeout:
            raise
        except Exception as e:  # noqa: BLE001
            out.append(_exc_outcome(e, "specialize", w, valid))
            say(out[-1].line())
            continue
        stats = SpmdStats()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = run_spmd(local, *inputs, stats=stats, seed=case.seed)
        except CaseTimeout:
            raise
        except Exception as e:  # noqa: BLE001
            out.append(_exc_outcome(e, "simulate", w, valid))
            say(out[-1].line())
            continue
        try:
            ok, worst = compare_case(prog, got, expected, inputs, opts.rtol, opts.atol)
        except Exception as e:  # noqa: BLE001
            out.append(_exc_outcome(e, "compare", w, None))
            continue
        if not ok:
            detail = _differences(got, expected, np)
            note = "" if valid else f" (uneven: {why_not[w]})"
            out.append(Outcome("WRONG-NUMBER", "simulate", w,
                               f"simulated result differs from the single-device run, largest difference {worst:.3g}{note}",
                               key="WRONG-NUMBER|simulate", detail=detail, valid=valid))
            say(out[-1].line())
            say(detail)
            continue
        o = Outcome("OK", "simulate", w, f"matches (largest difference {worst:.3g}); {stats.summary()}", valid=valid)
        if opts.check_cost:
            problem = _cost_problem(local, formula, stats, w, dims, comm_volume, DistirError)
            if problem and not valid:
                problem += f" (uneven: {why_not[w]})"
            if problem:
                o = Outcome("COST-MISMATCH", "cost", w, problem, key="COST-MISMATCH|" + _words(problem, 6), valid=valid)
        out.append(o)
        say(o.line())


def _cost_problem(local, formula, stats, w, dims, comm_volume, DistirError) -> str | None:
    env = dict(dims)
    env[NW] = w
    try:
        nums = comm_volume(local).evaluate(env)
    except DistirError as e:
        if dims and "concrete sizes" in str(e):
            return None  # a transfer between meshes sharing devices, of a tensor with run-time sizes
        return f"comm_volume of the specialized module fails: {e}"
    measured = stats.total_bytes
    if nums.total_bytes != measured or nums.counts != stats.counts:
        return (f"cost model (specialized module): {nums.total_bytes} bytes {nums.counts}, "
                f"simulator: {measured} bytes {stats.counts}")
    if formula is not None:
        try:
            f_nums = formula.evaluate(env)
        except Exception as e:  # noqa: BLE001
            return f"the symbolic cost formula cannot be evaluated at num_workers={w}: {e}"
        if f_nums.total_bytes != measured or f_nums.counts != stats.counts:
            return (f"symbolic cost formula at num_workers={w}: {f_nums.total_bytes} bytes {f_nums.counts}, "
                    f"simulator: {measured} bytes {stats.counts}")
    return None


