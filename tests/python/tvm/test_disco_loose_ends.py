"""What distir hands Disco cannot abort or hang the caller: pieces of the wrong shape or dtype given
to ``run_pieces`` directly, and a worker thread that never returns on a thread session. Each
case that could abort runs in a child process, whose exit code and last line are checked."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

# the bundled MLP at 2 workers: x replicated (128, 256), w1 (256, 512) S[1], w2 (512, 256) S[0]
_SETUP = """
import numpy as np
from distir import examples
from distir.driver import Driver
from distir.tvm import DiscoRunError, specialize_and_build, to_relax
from distir.tvm.disco import run_pieces
d = Driver(examples.load("mlp"))
values = {"num_workers": 2}
built = specialize_and_build(to_relax(d.local), values)
rng = np.random.default_rng(0)
x, w1, w2 = (rng.standard_normal(s).astype("float32") for s in ((128, 256), (256, 512), (512, 256)))
cut = [{0: x, 1: x}, {0: w1[:, :256], 1: w1[:, 256:]}, {0: w2[:256], 1: w2[256:]}]
"""


def _child(body: str, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    code = _SETUP + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO / "python"), **(env or {})})


def _last(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


@pytest.mark.parametrize("damage, pattern", [
    ("cut[0][1] = cut[0][1][:, :-1]", r"parameter 'x' of 'main', worker 1: expected shape \(128, 256\), got \(128, 255\)"),
    ("cut[1][0] = cut[1][0].astype('float64')", r"parameter 'w1' of 'main', worker 0: expected dtype float32, got float64"),
    ("cut[2] = {0: cut[2][0][None], 1: cut[2][1][None]}", r"parameter 'w2' of 'main', worker 0: expected shape \(256, 256\), got \(1, 256, 256\)"),
    ("cut.pop()", r"takes 3 tensors; got pieces for 2"),
])
def test_run_pieces_refuses_a_wrong_piece_before_any_worker_runs(damage, pattern):
    """Each damage once aborted the process inside TVM's VM check on a worker thread."""
    proc = _child(f"""
        {damage}
        for session in ("threads", "processes"):
            try:
                run_pieces(built, "main", 3, values, lambda total: cut, session=session)
            except DiscoRunError as err:
                print(session, "refused:", err)
        print("alive")
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    import re

    assert [ln.split()[0] for ln in lines if re.search(pattern, ln)] == ["threads", "processes"], proc.stdout
    assert _last(proc) == "alive"


def test_run_pieces_runs_the_right_pieces():
    """The check lets the exported function's own pieces through: the run equals numpy's MLP."""
    proc = _child("""
        from math import erf
        outs = run_pieces(built, "main", 3, values, lambda total: cut)
        want = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / np.sqrt(2))))(x.astype("float64") @ w1) @ w2
        print("max", max(float(np.max(np.abs(np.asarray(outs[w]) - want))) for w in (0, 1)))
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(_last(proc).split()[1]) < 1e-3, proc.stdout


def test_a_thread_worker_that_never_returns_is_an_error_within_the_bound():
    """Worker 1's all-reduce waits forever (a wedged peer): the thread session's run is a DiscoRunError
    within DISTIR_WORKER_TIMEOUT (3 s here), not the collectives' 120 s or a hang; worker 0's wait for it
    is recorded; the next run, on a new session, is right while the stuck thread still sleeps; and the
    process exits cleanly."""
    proc = _child("""
        import threading, time
        import tvm_ffi
        from distir.tvm.disco import host_ccl
        host_ccl.register()
        allreduce = host_ccl._FUNCS["allreduce"]
        worker_id = tvm_ffi.get_global_func("runtime.disco.worker_id")
        forever = threading.Event()

        def hooked(*a):
            if int(worker_id()[0]) == 1:
                forever.wait()
            return allreduce(*a)

        tvm_ffi.register_global_func("runtime.disco..allreduce", hooked, override=True)
        t0 = time.monotonic()
        try:
            run_pieces(built, "main", 3, values, lambda total: cut)
            print("no error")
        except DiscoRunError as err:
            print("error", round(time.monotonic() - t0, 1), err)
        tvm_ffi.register_global_func("runtime.disco..allreduce", allreduce, override=True)
        from math import erf
        outs = run_pieces(built, "main", 3, values, lambda total: cut)
        want = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / np.sqrt(2))))(x.astype("float64") @ w1) @ w2
        print("max", max(float(np.max(np.abs(np.asarray(outs[w]) - want))) for w in (0, 1)))
    """, timeout=120, env={"DISTIR_WORKER_TIMEOUT": "3"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    error = next(ln for ln in proc.stdout.splitlines() if ln.startswith(("error", "no error")))
    assert error.startswith("error "), proc.stdout
    seconds = float(error.split()[1])
    assert 2.5 <= seconds <= 3 + 10, error
    assert "did not finish within 3 s (the bound DISTIR_WORKER_TIMEOUT sets)" in error
    assert "worker 0 waited 2 s for worker 1" in error  # the collectives give up before the caller
    assert float(_last(proc).split()[1]) < 1e-3, proc.stdout


def test_the_signature_of_a_symbolic_build_is_read_and_evaluated_at_the_run_sizes():
    """llama exported once for every count: TVM records its parameters with expressions of the sizes
    (``127 // num_workers + 1``); read from the build, they evaluate to numpy's split of the weights."""
    import numpy as np
    import tvm

    from distir import examples
    from distir.driver import Driver
    from distir.tvm import DiscoRunError, to_relax
    from distir.tvm.disco.signature import check_pieces, param_specs
    from distir.tvm.targets import default_target

    d = Driver(examples.load("llama"))
    built = tvm.compile(to_relax(d.local), target=default_target())
    specs = param_specs(built.mod, "main")
    by_name = {s.name: (i, s) for i, s in specs.items()}
    i, wq = by_name["wq"]
    assert wq.dtype == "float32" and len(wq.dims) == 2 and wq.dims[0] == "128"
    values = {"num_workers": 3, "s": 8}
    n = by_name["x"][0]  # the first tensor parameter: the sizes come before it
    pieces: list = [None] * (max(specs) + 1 - n)
    cols = [c.shape[1] for c in np.array_split(np.zeros((128, 128)), 3, axis=1)]  # 43, 43, 42: ceil first
    pieces[i - n] = {w: np.zeros((128, 43), "float32") for w in range(3)}
    check_pieces(specs, n, pieces, values, 3, "main")  # every worker holds a padded block of ceil(128 / 3)
    assert cols[0] == 43
    pieces[i - n] = {w: np.zeros((128, 42), "float32") for w in range(3)}
    with pytest.raises(DiscoRunError, match=r"parameter 'wq' of 'main', worker 0: expected shape \(128, 43\), got \(128, 42\)"):
        check_pieces(specs, n, pieces, values, 3, "main")
