"""Nothing from a solver reaches stdout or stderr (distir.quiet).

HiGHS prints ``HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();`` to
fd 1 from C++ when it lays out the README's builder module (a sharded ``x`` redistributed to
``R``), past its display option: ``distir-opt small.py -p distribute > out.py`` wrote a file
that did not parse."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading

import distir
from distir.ir import verify
from distir.quiet import native_output_silenced
from distir.transform.pipelines import distribute_pipeline

# the README's builder module ("IR without text"), printed
SMALL = """\
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(x: R.DTensor((8, "s"), "float32", "mesh[0]", "S[0]")):
        with R.dataflow():
            y: R.DTensor((8, "s"), "float32", "mesh[0]", "R") = R.dist.redistribute(x, device_mesh="mesh[0]", placement="R")
            R.output(y)
        return y
"""


def _flush_c_stdio():
    """What C buffered for fd 1 and 2 written out now (HiGHS's line would otherwise wait for the process's exit)."""
    ctypes.CDLL(None).fflush(None)


def test_distir_opt_piped_into_a_file_parses_again(tmp_path):
    """The process boundary is the point: C's stdio buffers a file fully and flushes it at exit."""
    src = tmp_path / "small.py"
    src.write_text(SMALL)
    out = tmp_path / "out.py"
    with out.open("w") as f:
        proc = subprocess.run([sys.executable, "-m", "distir.cli.opt", str(src), "-p", "distribute"], stdout=f,
                              stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    text = out.read_text()
    assert text.startswith("# from distir.script import ir as I") and "Highs" not in text
    local = distir.parse_file(out)
    verify(local)
    assert "R.ccl.all_gather" in text


def test_distributing_in_process_prints_nothing_at_fd_level(capfd):
    mod = distir.parse(SMALL)
    local = distribute_pipeline()(mod)
    _flush_c_stdio()
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    assert "R.ccl.all_gather" in local.script()


def test_the_redirect_restores_the_descriptors_and_keeps_python_text_in_order(capfd):
    print("before", flush=False)  # buffered in Python: flushed before fd 1 moves
    with native_output_silenced():
        os.write(1, b"native out\n")
        os.write(2, b"native err\n")
        with native_output_silenced():  # nested: still silenced after the inner one ends
            pass
        os.write(1, b"still silenced\n")
    print("after")
    os.write(2, b"err after\n")
    out, err = capfd.readouterr()
    assert out == "before\nafter\n" and err == "err after\n"


def test_threads_solving_at_once_leave_the_descriptors_as_they_were(capfd):
    """Counted: the last thread to leave restores, whatever order the threads enter and leave in."""
    before = [os.fstat(fd).st_ino for fd in (1, 2)]
    entered, go = threading.Barrier(4), threading.Event()

    def solve():
        with native_output_silenced():
            entered.wait(timeout=30)
            os.write(1, b"noise\n")
            go.wait(timeout=30)

    threads = [threading.Thread(target=solve) for _ in range(4)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join(timeout=30)
    assert [os.fstat(fd).st_ino for fd in (1, 2)] == before
    os.write(1, b"heard\n")
    assert capfd.readouterr().out == "heard\n"
