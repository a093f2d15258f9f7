"""The TVM/Disco runs, in a child process (an error inside Disco aborts it, not the fuzzer)."""


from __future__ import annotations

import dataclasses
import os
import warnings

from .compare import _differences, case_inputs, compare_case
from .execute import Options, Outcome, _exc_outcome, _words, layouts_divide, user_layouts
from .model import NW, Case, _TextProgram


def _tvm_child(conn, stderr_path):
    """Runs cases on TVM/Disco; a Disco error aborts this process, not the fuzzer."""
    fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    warnings.simplefilter("ignore")
    while True:
        try:
            req = conn.recv()
        except EOFError:
            return
        if req is None:
            return
        conn.send(_tvm_case(*req))


def _tvm_case(text, dims, seed, workers, rtol, atol, per_count, costs="", values=""):
    import numpy as np

    import distir
    from distir.errors import DistirError
    from distir.runtime import run
    from distir.transform import PassContext
    from distir.transform.legalize_redistribute import AXIS_COSTS_KEY
    from distir.transform.pipelines import distribute_pipeline
    from distir.transform.specialize import specialize

    res = []
    try:
        mod = distir.parse(text)
        prog = _TextProgram(text, dims, mod, costs, values)
        inputs = case_inputs(mod, prog, dims, seed)
        expected = run(mod, *inputs)
        with PassContext(config={AXIS_COSTS_KEY: costs} if costs else {}):
            lowered = distribute_pipeline()(mod)
        layouts = user_layouts(mod)
        valid = {w: layouts_divide(layouts, w, dims) is None for w in workers}
        valid_any = any(valid.values())
    except Exception as e:  # noqa: BLE001  (the simulator run reports these)
        return [("OK", "tvm", None, f"not run on TVM: {type(e).__name__}", "", "")]
    try:
        import tvm

        from distir.driver import run_disco
        from distir.tvm import specialize_and_build, to_relax

        exported = to_relax(lowered)
    except Exception as e:  # noqa: BLE001
        return [dataclasses.astuple(_exc_outcome(e, "tvm-export", None, valid_any))]
    try:
        built = None if per_count else tvm.compile(exported, target="llvm")
    except Exception as e:  # noqa: BLE001
        return [dataclasses.astuple(_exc_outcome(e, "tvm-build", None, valid_any))]
    for w in workers:
        try:
            specialize(lowered, {NW: w})  # a count the specializer refuses is not run
        except DistirError:
            continue
        try:
            b = specialize_and_build(exported, {NW: w}) if per_count else built
            got = run_disco(b, lowered, *inputs, num_workers=w, seed=seed)
        except Exception as e:  # noqa: BLE001
            res.append(dataclasses.astuple(_exc_outcome(e, "tvm-run", w, valid[w])))
            continue
        ok, worst = compare_case(prog, got, expected, inputs, rtol, atol)
        if ok:
            res.append(("OK", "tvm-run", w, f"TVM matches (largest difference {worst:.3g})", "", "", valid[w]))
        else:
            note = "" if valid[w] else " (uneven)"
            res.append(("WRONG-NUMBER", "tvm-run", w, f"TVM/Disco result differs, largest difference {worst:.3g}{note}",
                        "WRONG-NUMBER|tvm-run", _differences(got, expected, np), valid[w]))
    return res


class TvmRunner:
    def __init__(self, timeout: float = 300.0, per_count: bool = False):
        import multiprocessing as mp
        import tempfile

        self.ctx = mp.get_context("spawn")
        self.timeout = timeout
        self.per_count = per_count
        self.stderr_path = os.path.join(tempfile.mkdtemp(prefix="distir-fuzz-tvm-"), "stderr.txt")
        self.proc = None

    def _start(self):
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_tvm_child, args=(child, self.stderr_path), daemon=True)
        self.proc.start()

    def run(self, case: Case, opts: Options) -> list[Outcome]:
        if self.proc is None or not self.proc.is_alive():
            self._start()
        req = (case.text, case.program.dim_values, case.seed, case.workers, opts.rtol, opts.atol, self.per_count,
               getattr(case.program, "costs", ""), getattr(case.program, "values", ""))
        self.conn.send(req)
        if not self.conn.poll(self.timeout):
            self.proc.kill()
            self.proc = None
            return [Outcome("CRASH", "tvm", None, f"TVM run took more than {self.timeout:g} s", key="CRASH|tvm|timeout")]
        try:
            rows = self.conn.recv()
        except (EOFError, ConnectionError):
            self.proc.join(5)
            code = self.proc.exitcode
            self.proc = None
            tail = ""
            try:
                with open(self.stderr_path, errors="replace") as f:
                    tail = " | ".join(ln.strip() for ln in f.read().strip().splitlines()[-3:])
            except OSError:
                pass
            return [Outcome("CRASH", "tvm", None, f"the TVM/Disco process died (exit code {code}): {tail[:400]}",
                            key="CRASH|tvm|died|" + _words(tail, 6))]
        return [Outcome(*row) for row in rows]

    def close(self):
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(None)
                self.proc.join(5)
            except (OSError, ValueError):
                pass
            if self.proc.is_alive():
                self.proc.kill()


