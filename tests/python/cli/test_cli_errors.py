"""Every subcommand on wrong arguments and awkward inputs: one ``prog: error: ...`` line naming the
argument and the fix, exit status 2 for bad arguments and 1 for errors the input shows, never a
traceback; and `distir show` answers quickly on a huge mesh."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from distir import examples
from distir.analysis.layout_view import MAX_COLS, MAX_DEVICES, MAX_LABEL, layout_grid
from distir.cli import main as distir_main
from distir.cli import opt, report_errors
from distir.cli.args import MAX_SWEEP_WORKERS, MAX_WORKERS
from distir.ir import DeviceMesh, DTensorType, Placement, Range
import helpers

MLP = str(examples.path("mlp"))
ATTENTION = str(examples.path("attention"))

STATIC = """\
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((2,), I.Range(0, 2))]})

    @R.function
    def main(x: R.DTensor((8, 4), "float32", "mesh[0]", "S[0]")) -> R.DTensor((8, 4), "float32", "mesh[0]", "R"):
        with R.dataflow():
            y: R.DTensor((8, 4), "float32", "mesh[0]", "R") = R.dist.redistribute(x, device_mesh="mesh[0]", placement="R")
            R.output(y)
        return y
"""

HUGE_MESH = """\
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((1000000,), I.Range(0, 1000000))]})

    @R.function
    def main(x: R.DTensor((8000000, 4), "float32", "mesh[0]", "S[0]")) -> R.DTensor((8000000, 4), "float32", "mesh[0]", "S[0]"):
        with R.dataflow():
            y: R.DTensor((8000000, 4), "float32", "mesh[0]", "S[0]") = R.nn.relu(x)
            R.output(y)
        return y
"""

NO_MESH = """\
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((8, 4), "float32")) -> R.Tensor((8, 4), "float32"):
        with R.dataflow():
            y: R.Tensor((8, 4), "float32") = R.nn.relu(x)
            R.output(y)
        return y
"""

DP_TP = """\
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("dp", "tp"), I.Range(0, "dp * tp"))]})

    @R.function
    def main(x: R.DTensor((8, 8), "float32", "mesh[0]", "S[0], S[1]")):
        with R.dataflow():
            y = R.nn.relu(x)
            z = R.dist.redistribute(y, device_mesh="mesh[0]", placement="R, R")
            R.output(z)
        return z
"""

BIG = str(2**64)  # 18446744073709551616: beyond int64
HUGE = "1" + "0" * 30


@pytest.fixture
def static(tmp_path: Path) -> str:
    p = tmp_path / "static.py"
    p.write_text(STATIC)
    return str(p)


def run_cli(argv, capsys, main=distir_main.main) -> tuple[int, str, str]:
    return helpers.run_cli(main, argv, capsys)


def assert_one_error_line(err: str, prog: str, fragment: str) -> None:
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if ": error:" in line]
    assert len(errors) == 1, err
    assert errors[0].startswith(f"{prog}: error: ") and err.rstrip("\n").endswith(errors[0]), err
    assert fragment in errors[0], err


# ---------------------------------------------------------------- bad arguments: exit status 2


USAGE_ERRORS = [
    # -n/--num-workers: positive, and at most what distir simulates or draws
    (["run", MLP, "-n", BIG], "argument -n/--num-workers: 18446744073709551616 is too large: at most 4096 workers"),
    (["run", MLP, "-n", str(MAX_WORKERS + 1)], f"at most {MAX_WORKERS} workers"),
    (["run", MLP, "-n", "512", "--backend", "tvm"], "-n/--num-workers 512 with --backend tvm: at most 256 workers"),
    (["run", MLP, "-n", "0"], "argument -n/--num-workers: expected a positive number of workers, got 0"),
    (["run", MLP, "-n", "two"], "argument -n/--num-workers: expected a positive number of workers, got 'two'"),
    (["demo", "-n", BIG], "argument -n/--num-workers: 18446744073709551616 is too large"),
    (["show", MLP, "-n", "-4"], "argument -n/--num-workers: expected a positive number of workers, got -4"),
    (["show", MLP, "-n", BIG], "argument -n/--num-workers: 18446744073709551616 is too large"),
    (["sweep", MLP, "--num-workers", BIG], f"'{BIG}' goes above {MAX_SWEEP_WORKERS}"),
    (["sweep", MLP, "--num-workers", f"1-{BIG}"], f"goes above {MAX_SWEEP_WORKERS}"),
    (["sweep", MLP, "--num-workers", "0,2"], "'0' is not a positive integer"),
    # --bind: sizes within int64
    (["sweep", MLP, "--bind", f"num_workers={HUGE}"],
     f"argument --bind: num_workers: {HUGE} is too large: at most 9223372036854775807 (int64)"),
    (["sweep", ATTENTION, "--bind", f"s={BIG}"], "argument --bind: s: 18446744073709551616 is too large"),
    (["run", ATTENTION, "-n", "2", "--bind", f"s={HUGE}"], "argument --bind: s: 1000000000000000000000000000000"),
    (["run", ATTENTION, "-n", "2", "--bind", "s=0"], "argument --bind: s: expected a size >= 1, got 0"),
    (["show", ATTENTION, "--bind", "s=-1"], "argument --bind: s: expected a size >= 1, got -1"),
    (["opt", MLP, "--bind", f"num_workers={HUGE}"], "argument --bind: num_workers: 1000000000000000000000000000000"),
    # a bound name that is the mesh size: it is set by -n
    (["run", ATTENTION, "-n", "2", "--bind", "num_workers=4"],
     "--bind num_workers=4: num_workers is the number of workers; set it with -n/--num-workers (now 2)"),
    (["sweep", MLP, "--bind", "num_workers=4"], "--bind num_workers=4: num_workers is the swept size"),
    (["show", MLP, "--bind", "num_workers=2"], "--bind num_workers=2: num_workers is the mesh size"),
    # seeds, tolerances, the communication model, opt levels
    (["run", MLP, "-n", "2", "--seed", "-1"], "argument --seed: expected a seed (an integer >= 0), got -1"),
    (["demo", "--seed", "-1"], "argument --seed: expected a seed (an integer >= 0), got -1"),
    (["demo", "--seq-len", "0"], "argument --seq-len: expected a positive integer, got 0"),
    (["run", MLP, "-n", "2", "--rtol", "nan"], "argument --rtol: expected a finite number >= 0, got nan"),
    (["run", MLP, "-n", "2", "--atol", "-1"], "argument --atol: expected a finite number >= 0, got -1"),
    (["sweep", MLP, "--latency", "-1"], "argument --latency: expected a finite number >= 0, got -1"),
    (["sweep", MLP, "--bandwidth", "0"], "argument --bandwidth: expected a finite number > 0, got 0"),
    (["sweep", MLP, "--bandwidth", "inf"], "argument --bandwidth: expected a finite number > 0, got inf"),
    (["opt", MLP, "--opt-level", "-1"], "argument --opt-level: expected an integer >= 0, got -1"),
    # pictures: matplotlib takes the format from the extension (without one it wrote NAME.png)
    (["sweep", MLP, "--plot", "sweep.txt"], "argument --plot: 'sweep.txt' is not an image file name: name one"),
    (["show", MLP, "--png", "layout"], "argument --png: 'layout' is not an image file name"),
    # an argument of thousands of digits is quoted short
    (["run", MLP, "-n", "9" * 5000], "argument -n/--num-workers: expected a positive number of workers, got '999"),
]


@pytest.mark.parametrize(("argv", "fragment"), USAGE_ERRORS, ids=lambda v: " ".join(v)[:60] if isinstance(v, list) else "")
def test_bad_arguments_exit_2_with_one_line(argv, fragment, capsys):
    code, out, err = run_cli(argv, capsys)
    assert code == 2, err
    assert_one_error_line(err, f"distir {argv[0]}", fragment)
    assert len(err) < 1000 and out == ""


def test_distir_opt_checks_its_arguments_too(capsys):
    code, _, err = run_cli([MLP, "--bind", f"num_workers={BIG}"], capsys, opt.main)
    assert code == 2
    assert_one_error_line(err, "distir-opt", "argument --bind: num_workers: 18446744073709551616 is too large")


# ---------------------------------------------------------------- arguments that do not fit the module: exit 1


def test_unknown_bound_names_are_errors_not_ignored(capsys):
    code, _, err = run_cli(["run", ATTENTION, "-n", "2", "--bind", "t=4"], capsys)
    assert code == 1
    assert_one_error_line(err, "distir run", "--bind t=4: the module has no symbolic size 't' (its symbolic sizes "
                                             "besides num_workers: s)")
    code, _, err = run_cli(["run", MLP, "-n", "2", "--bind", "s=4"], capsys)
    assert code == 1 and "(its symbolic sizes besides num_workers: none)" in err
    code, _, err = run_cli(["run", ATTENTION, "-n", "2", "--bind", "S=4"], capsys)
    assert code == 1 and "did you mean 's'?" in err
    for cmd in (["sweep", ATTENTION, "--bind", "t=2"], ["show", ATTENTION, "--bind", "t=2"],
                ["opt", MLP, "-p", "distribute", "--bind", "nope=2"]):
        code, _, err = run_cli(cmd, capsys)
        assert code == 1
        assert_one_error_line(err, f"distir {cmd[0]}", "the module has no symbolic size")


def test_a_symbol_the_meshes_lack(capsys):
    code, out, err = run_cli(["run", MLP, "-n", "2", "--symbol", "nope"], capsys)
    assert code == 1 and out == ""
    assert_one_error_line(err, "distir run", "--symbol nope: the module's device meshes have no size 'nope'; "
                                             "their sizes are num_workers: pass --symbol num_workers")
    code, _, err = run_cli(["sweep", MLP, "--symbol", "nope"], capsys)
    assert code == 1
    assert_one_error_line(err, "distir sweep", "no symbolic size 'nope' to sweep (its symbolic sizes: num_workers)")


def test_static_meshes(static, tmp_path, capsys):
    code, out, err = run_cli(["run", static, "-n", "4"], capsys)
    assert code == 1 and out == ""
    assert_one_error_line(err, "distir run", "-n/--num-workers 4: the module's device meshes are static and use 2 "
                                             "devices (no 'num_workers' to set); pass -n 2")
    code, out, err = run_cli(["run", static, "-n", "2"], capsys)
    assert code == 0, err
    assert "distribute pipeline (static meshes)" in out and "sim result on 2 workers matches" in out
    code, out, err = run_cli(["run", static], capsys)  # no -n: the meshes' own devices
    assert code == 0, err
    assert "sim result on 2 workers matches" in out
    code, out, err = run_cli(["run", MLP], capsys)  # a symbolic mesh needs its value
    assert code == 2 and out == ""
    assert_one_error_line(err, "distir run", "-n/--num-workers is required: the module's mesh size 'num_workers' is "
                                             "symbolic (e.g. -n 4)")
    code, _, err = run_cli(["sweep", static], capsys)
    assert code == 1
    assert_one_error_line(err, "distir sweep", "its device meshes are static, so every count would give the same")
    code, out, err = run_cli(["show", static, "--plain"], capsys)  # drawn as it is, with no -n
    assert code == 0 and 'x: (8, 4) float32, "S[0]" on mesh[0] (2,): 2 blocks of (4, 4)' in out
    code, _, err = run_cli(["show", static, "-n", "3"], capsys)
    assert code == 1 and "static and use 2 devices" in err
    no_mesh = tmp_path / "plain.py"
    no_mesh.write_text(NO_MESH)
    code, _, err = run_cli(["run", str(no_mesh), "-n", "2"], capsys)
    assert code == 1
    assert_one_error_line(err, "distir run", "the module has no device mesh, so there is nothing to distribute")


@pytest.mark.parametrize("backend", ["sim", "tvm"])
def test_run_a_mesh_of_two_symbolic_sizes(backend, tmp_path, capsys):
    p = tmp_path / "dp_tp.py"
    p.write_text(DP_TP)
    code, _, err = run_cli(["run", str(p), "-n", "2", "--symbol", "dp", "--backend", backend], capsys)
    assert code == 1
    assert_one_error_line(err, "distir run", "the mesh size tp needs a value: -n sets only dp; give the others with "
                                             "--bind, e.g. --bind tp=2")
    code, out, err = run_cli(["run", str(p), "-n", "2", "--symbol", "dp", "--bind", "tp=2", "--backend", backend],
                             capsys)
    assert code == 0, err
    assert f"{backend} result on 4 workers matches" in out  # dp * tp workers
    code, _, err = run_cli(["run", str(p), "-n", "128", "--symbol", "dp", "--bind", "tp=64", "--backend", backend],
                           capsys)
    assert code == 1
    limit = 4096 if backend == "sim" else 256
    assert_one_error_line(err, "distir run", f"the module's device meshes need 8192 workers at dp=128, tp=64; "
                                             f"--backend {backend} runs at most {limit}")


def test_a_count_that_does_not_divide_matches_on_the_tvm_backend_too(capsys):
    # the TVM build used to run and report "DOES NOT match"; uneven blocks now give the right numbers
    code, out, err = run_cli(["run", MLP, "-n", "3", "--backend", "tvm"], capsys)
    assert code == 0 and "DOES NOT match" not in out and "matches" in out, err


def test_show_draws_the_uneven_blocks_a_count_that_does_not_divide_makes(capsys):
    code, out, err = run_cli(["show", MLP, "-n", "3", "--tensor", "w1"], capsys)
    assert code == 0, err
    assert 'w1: (256, 512) float32, "S[1]" on mesh[0] (3,) (num_workers=3): 3 blocks of up to (256, 171)' in out
    assert "dim 1 (512) in blocks of 171 x2, 170" in out


def test_sizes_too_large_for_the_inputs_or_for_int64_arithmetic(capsys):
    code, _, err = run_cli(["run", ATTENTION, "-n", "2", "--bind", f"s={2**63 - 1}"], capsys)
    assert code == 1
    assert_one_error_line(err, "distir run", "cannot make random inputs for @main with s=9223372036854775807: ")
    assert err.rstrip().endswith("; use smaller sizes with --bind")
    code, _, err = run_cli(["demo", "--seq-len", str(2**63 - 1)], capsys)
    assert code == 1
    assert_one_error_line(err, "distir demo", "cannot make the random inputs with --seq-len 9223372036854775807")
    code, _, err = run_cli(["sweep", ATTENTION, "-n", "2", "--bind", f"s={2**62}"], capsys)
    assert code == 1
    assert_one_error_line(err, "distir sweep", "int64")


def test_opt_disable_pass_must_name_a_pass(capsys):
    code, _, err = run_cli(["opt", MLP, "--disable-pass", "canonicalise"], capsys)
    assert code == 1
    assert_one_error_line(err, "distir opt", "--disable-pass canonicalise: no pass or pipeline has that name; "
                                             "did you mean 'canonicalize'?")
    code, out, _ = run_cli(["opt", MLP, "-p", "distribute", "--disable-pass", "distribute"], capsys)
    assert code == 0 and "annotate_sharding" in out  # a pipeline's name disables the pipeline


# ---------------------------------------------------------------- --inputs files


def test_inputs_must_be_an_npz_archive(tmp_path, capsys):
    npy = tmp_path / "plain.npy"
    np.save(npy, np.zeros((128, 256), "float32"))
    code, _, err = run_cli(["run", MLP, "-n", "2", "--inputs", str(npy)], capsys)
    assert code == 1
    assert_one_error_line(err, "distir run", f"--inputs '{npy}' is a single .npy array; give an .npz archive with one "
                                             "array per parameter (x, w1, w2)")
    text = tmp_path / "text.npz"
    text.write_text("x = 1\n")
    code, _, err = run_cli(["run", MLP, "-n", "2", "--inputs", str(text)], capsys)
    assert code == 1
    assert_one_error_line(err, "distir run", f"--inputs '{text}' is not an .npz archive")
    good = tmp_path / "good.npz"
    np.savez(good, x=np.zeros((128, 256), "float32"), w1=np.zeros((256, 512), "float32"))
    cut = tmp_path / "cut.npz"
    cut.write_bytes(good.read_bytes()[:200])
    code, _, err = run_cli(["run", MLP, "-n", "2", "--inputs", str(cut)], capsys)
    assert code == 1
    assert_one_error_line(err, "distir run", f"cannot read '{cut}' as an .npz archive")
    objects = tmp_path / "objects.npz"
    np.savez(objects, x=np.array([{"a": 1}], dtype=object))
    code, _, err = run_cli(["run", MLP, "-n", "2", "--inputs", str(objects)], capsys)
    assert code == 1
    assert_one_error_line(err, "distir run", "member 'x.npy' holds Python objects (pickled arrays), which are not read")
    code, _, err = run_cli(["run", MLP, "-n", "2", "--inputs", str(tmp_path)], capsys)
    assert code == 1
    assert_one_error_line(err, "distir run", f"cannot read '{tmp_path}': it is a directory")
    code, _, err = run_cli(["run", MLP, "-n", "2", "--inputs", str(good)], capsys)
    assert code == 1
    assert_one_error_line(err, "distir run", "has no array for parameter 'w2' (it has: x, w1)")


def _npz_member(archive, name: str, header: dict, data_bytes: int, chunk: int = 1 << 22) -> None:
    """Write member ``name`` of ``archive``: a .npy header saying ``header`` then ``data_bytes`` zero bytes
    (deflated, so a large array costs little on disk), the way numpy.savez writes a member."""
    import zipfile

    from numpy.lib import format as npy

    info = zipfile.ZipInfo(name)
    info.compress_type = archive.compression
    with archive.open(info, "w", force_zip64=True) as fh:
        npy.write_array_header_1_0(fh, header)
        zeros = bytes(min(chunk, data_bytes))
        left = data_bytes
        while left:
            fh.write(zeros[: min(left, chunk)])
            left -= min(left, chunk)


def _load_peak(path, func, names, sizes=None):
    """(the error load_inputs raised, the most memory Python held meanwhile)."""
    import tracemalloc

    from distir.cli.inputs import load_inputs
    from distir.errors import DistirError

    tracemalloc.start()
    try:
        load_inputs(str(path), names, None, func, sizes or {})
    except DistirError as err:
        return str(err), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    raise AssertionError("load_inputs accepted the archive")


def test_inputs_are_checked_from_the_headers_before_anything_is_inflated(tmp_path, capsys):
    """An archive is checked member by member from its .npy headers against the parameters (names,
    dtypes, shapes, the bytes each member holds) before any array is read: a 0.1 MB archive of a
    128 MiB array of the wrong shape, or a header claiming 40 GB over a few bytes, is one line at
    once, with Python holding a few hundred KiB at most."""
    import zipfile

    import distir

    mod = distir.parse_file(MLP)
    func, names = mod["main"], [p.name for p in mod["main"].params]
    rows = {"descr": "<f4", "fortran_order": False}
    big = tmp_path / "big.npz"  # x is (128, 256) float32; this one is (128, 2**18): 128 MiB inflated
    with zipfile.ZipFile(big, "w", zipfile.ZIP_DEFLATED) as z:
        _npz_member(z, "x.npy", {**rows, "shape": (128, 2**18)}, 128 * 2**18 * 4)
        _npz_member(z, "w1.npy", {**rows, "shape": (256, 512)}, 256 * 512 * 4)
        _npz_member(z, "w2.npy", {**rows, "shape": (512, 256)}, 512 * 256 * 4)
    assert big.stat().st_size < 4 << 20
    t0 = time.perf_counter()
    message, peak = _load_peak(big, func, names)
    assert time.perf_counter() - t0 < 5
    assert message == f"'{big}': parameter 'x' dim 1: expected size 256, got 262144"
    assert peak < 1 << 20, peak
    code, _, err = run_cli(["run", MLP, "-n", "2", "--inputs", str(big)], capsys)
    assert code == 1
    assert_one_error_line(err, "distir run", "parameter 'x' dim 1: expected size 256, got 262144")

    liar = tmp_path / "liar.npz"  # a header claiming (100000, 100000) float32 over 16 bytes of data
    with zipfile.ZipFile(liar, "w", zipfile.ZIP_DEFLATED) as z:
        _npz_member(z, "x.npy", {**rows, "shape": (100000, 100000)}, 16)
    message, peak = _load_peak(liar, func, names)
    assert "member 'x.npy' says it holds 144 bytes, but its header (shape (100000, 100000), float32) needs " \
           "40000000128" in message
    assert peak < 1 << 20, peak

    wrong = tmp_path / "wrong.npz"  # the right shapes in float64
    with zipfile.ZipFile(wrong, "w") as z:
        for name, shape in (("x", (128, 256)), ("w1", (256, 512)), ("w2", (512, 256))):
            _npz_member(z, f"{name}.npy", {"descr": "<f8", "fortran_order": False, "shape": shape},
                        int(np.prod(shape)) * 8)
    message, _ = _load_peak(wrong, func, names)
    assert message == f"'{wrong}': parameter 'x': expected dtype float32, got float64; convert it with .astype"

    other = tmp_path / "other.npz"  # not an array at all
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("x.npy", b"\x93NUMPY\x09\x00garbage")
    message, _ = _load_peak(other, func, names)
    assert message.startswith(f"cannot read '{other}' as an .npz archive: member 'x.npy': ")
    assert "version" in message


def test_symbolic_sizes_are_bound_alike_across_the_archive_and_memory_is_checked(tmp_path, monkeypatch):
    import distir
    from distir.cli import inputs

    mod = distir.parse_file(ATTENTION)
    func, names = mod["main"], [p.name for p in mod["main"].params]
    rng = np.random.default_rng(0)
    arrays = {p.name: rng.standard_normal([8 if not isinstance(d, int) else d for d in p.type.shape]).astype("float32")
              for p in func.params}
    path = tmp_path / "in.npz"
    np.savez(path, **arrays)
    got = inputs.load_inputs(str(path), names, None, func, {})
    assert all(np.array_equal(g, arrays[n]) for g, n in zip(got, names))
    message, _ = _load_peak(path, func, names, {"s": 16})  # --bind s=16 against arrays of s = 8
    assert message == f"'{path}': parameter 'x' dim 0: 's' is 16 (from sym_values), but this dim is 8"
    monkeypatch.setattr(inputs.os, "sysconf", lambda name: {"SC_PHYS_PAGES": 4, "SC_PAGE_SIZE": 4096}[name])
    message, _ = _load_peak(path, func, names)
    total = sum(a.nbytes for a in arrays.values())
    assert message == f"'{path}' holds arrays of {total} bytes in all, more than this machine's memory (16384 bytes)"


# ---------------------------------------------------------------- errors nobody foresaw


def test_an_unexpected_exception_is_one_line_unless_the_traceback_is_asked_for(monkeypatch, capsys):
    def boom():
        raise RuntimeError("first\nlast line")

    monkeypatch.delenv("DISTIR_TRACEBACK", raising=False)
    assert report_errors("distir x", boom) == 1
    err = capsys.readouterr().err
    assert err == ("distir x: internal error: RuntimeError: last line (a bug in distir; set DISTIR_TRACEBACK=1 "
                   "for the traceback)\n")
    monkeypatch.setenv("DISTIR_TRACEBACK", "1")
    with pytest.raises(RuntimeError, match=r"^first\nlast line$"):  # the exception itself, every line
        report_errors("distir x", boom)

    def no_memory():
        raise MemoryError("Unable to allocate 93.1 TiB")

    assert report_errors("distir x", no_memory) == 1
    assert capsys.readouterr().err == "distir x: error: out of memory (Unable to allocate 93.1 TiB); use smaller sizes\n"


# ---------------------------------------------------------------- distir show on large meshes


def test_show_on_a_million_device_mesh_summarizes_quickly(tmp_path, capsys):
    p = tmp_path / "huge.py"
    p.write_text(HUGE_MESH)
    assert distir_main.main(["show", MLP, "--plain", "--tensor", "x"]) == 0  # imports done before the clock starts
    capsys.readouterr()
    t0 = time.perf_counter()
    code = distir_main.main(["show", str(p), "--plain"])
    seconds = time.perf_counter() - t0
    out = capsys.readouterr().out
    assert code == 0
    assert seconds < 2.0  # it took 18 s when every device was visited
    assert out.splitlines()[:2] == [
        'x: (8000000, 4) float32, "S[0]" on mesh[0] (1000000,): 1000000 blocks of (8, 4)',
        f"  not drawn: the mesh has 1000000 devices, more than the {MAX_DEVICES} a picture shows",
    ]


def test_show_draws_the_first_and_last_blocks_of_a_wide_grid(capsys):
    code, out, err = run_cli(["show", MLP, "-n", "64", "--tensor", "w1", "--plain"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == 'w1: (256, 512) float32, "S[1]" on mesh[0] (64,) (num_workers=64): 64 blocks of (256, 8)'
    row = lines[3]  # the middle of the three text lines of a block
    assert row.count("|") == MAX_COLS + 1 and "|   ...   |" in row and "|    62   |    63   |" in row
    assert f"showing the first {MAX_COLS - 3} and the last 2 of 64 columns of blocks" in out


def test_long_labels_are_clipped():
    mesh = DeviceMesh((64, 2), Range(0, 128))
    t = DTensorType((8, 8), "float32", mesh, Placement.parse("R, P"))
    grid = layout_grid("t", t, {})
    assert grid.cells[0][0].startswith("sum(0,1), sum(2,3), ") and len(grid.cells[0][0]) > 500  # the full label
    (shown,) = grid.shown()[0]
    assert len(shown) <= MAX_LABEL and shown.endswith(", ...") and shown.startswith("sum(0,1), sum(2,3)")


# ---------------------------------------------------------------- argparse's own refusals: exit 2, no traceback


@pytest.mark.parametrize("argv", [
    ["sweep", MLP, "--num-workers", BIG],
    ["sweep", MLP, "--bind", f"num_workers={HUGE}"],
    ["run", MLP, "-n", "2", "--seed", "-1"],
])
def test_no_traceback_from_argument_types(argv, capsys):
    with pytest.raises(SystemExit) as info:  # argparse's exit: the process's status
        distir_main.main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and "Traceback" not in err
    assert err.splitlines()[-1].startswith(f"distir {argv[0]}: error: argument ")


# ---------------------------------------------------------------- a table of input errors: exit 1, one line

SHARDED_SYMBOLIC = """\
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(x: R.DTensor(("s", 4), "float32", "mesh[0]", "S[0]")):
        with R.dataflow():
            y = R.sum(x, axis=[0])
            R.output(y)
        return y
"""


@pytest.fixture(scope="module")
def inputs_dir(tmp_path_factory) -> Path:
    """Files for the table below: a local-view module, broken modules and broken input archives."""
    d = tmp_path_factory.mktemp("inputs")
    text = examples.text("mlp")
    (d / "mlp.py").write_text(text)
    (d / "local.py").write_text(opt_text(text))
    (d / "unknown_op.py").write_text(text.replace("R.nn.gelu(h)", "R.nn.gelux(h)"))
    (d / "bad_place.py").write_text(text.replace('placement="S[1]")\n', 'placement="S[7]")\n', 1))
    (d / "syntax.py").write_text(text.replace("def main(", "def main(((", 1))
    (d / "sharded_symbolic.py").write_text(SHARDED_SYMBOLIC)
    (d / "no_mesh.py").write_text(NO_MESH)
    (d / "shrunk.py").write_text(text.replace('R.device_mesh(("num_workers",), I.Range(0, "num_workers"))',
                                              'R.device_mesh(("num_workers - 1",), I.Range(0, "num_workers - 1"))'))
    ones = {"x": np.ones((128, 256), "float32"), "w1": np.ones((256, 512), "float32"),
            "w2": np.ones((512, 256), "float32")}
    np.savez(d / "extra.npz", **ones, w3=np.ones(2))
    np.savez(d / "missing.npz", x=ones["x"])
    np.savez(d / "shape.npz", **{**ones, "x": np.ones((128, 255), "float32")})
    np.save(d / "one.npy", np.ones(3))
    (d / "text.npz").write_text("not an archive\n")
    (d / "adir").mkdir()
    return d


def opt_text(text: str) -> str:
    from distir import parse
    from distir.transform.pipelines import distribute_pipeline

    return distribute_pipeline()(parse(text)).script()


INPUT_ERRORS = [
    # modules in the wrong view or with nothing to do
    (["run", "local.py", "-n", "2"], "'local.py' is already in the local view"),
    (["run", "no_mesh.py", "-n", "2"], "the module has no device mesh, so there is nothing to distribute"),
    (["sweep", "shrunk.py", "-n", "1"], "num_workers=1: mesh axis 0 has size 0"),
    # input archives
    (["run", "mlp.py", "-n", "2", "--inputs", "extra.npz"], "'extra.npz' has an array 'w3' that no parameter reads"),
    (["run", "mlp.py", "-n", "2", "--inputs", "missing.npz"], "'missing.npz' has no array for parameter 'w1'"),
    (["run", "mlp.py", "-n", "2", "--inputs", "shape.npz"], "parameter 'x' dim 1: expected size 256, got 255"),
    (["run", "mlp.py", "-n", "2", "--inputs", "text.npz"], "--inputs 'text.npz' is not an .npz archive"),
    (["run", "mlp.py", "-n", "2", "--inputs", "one.npy"], "--inputs 'one.npy' is a single .npy array"),
    (["run", "mlp.py", "-n", "2", "--inputs", "nofile.npz"], "cannot read 'nofile.npz': no such file"),
    # files
    (["run", "nofile.py", "-n", "2"], "cannot read 'nofile.py': no such file"),
    (["run", "adir", "-n", "2"], "cannot read 'adir': it is a directory"),
    (["show", "nofile.py"], "cannot read 'nofile.py': no such file"),
    (["opt", "mlp.py", "-o", "adir"], "cannot write 'adir'"),
    # the program text
    (["run", "unknown_op.py", "-n", "2"], "unknown op 'R.nn.gelux'; did you mean R.nn.gelu"),
    (["run", "bad_place.py", "-n", "2"], "problem(s) found by the verifier"),
    (["run", "syntax.py", "-n", "2"], "distir run: error: invalid syntax"),
    # names that are not in the module
    (["show", "mlp.py", "--tensor", "nope"], "@main has no tensor 'nope' with a layout (it has: x, w1, w2,"),
    (["show", "mlp.py", "--func", "nope"], "the module has no function 'nope' (it has: main)"),
    (["run", "mlp.py", "-n", "2", "--func", "nope"], "the module has no function 'nope' (it has: main)"),
    (["sweep", "mlp.py", "--func", "nope"], "the module has no function 'nope' (it has: main)"),
    (["sweep", "mlp.py", "--symbol", "nw"], "the module has no symbolic size 'nw' to sweep"),
    (["run", "mlp.py", "-n", "2", "--symbol", "nw"], "--symbol nw: the module's device meshes have no size 'nw'"),
    (["opt", "mlp.py", "-p", "nope"], "unknown pass 'nope'"),
    (["opt", "mlp.py", "-p", "distribute", "--disable-pass", "nope"], "--disable-pass nope: no pass or pipeline"),
    (["opt", "mlp.py", "-p", "distribute", "--bind", "nw=4"], "--bind nw=4: the module has no symbolic size 'nw'"),
    (["run", "sharded_symbolic.py", "-n", "2", "--bind", "t=3"], "--bind t=3: the module has no symbolic size 't'"),
    # sizes the module needs
    (["show", "sharded_symbolic.py", "-n", "2", "--tensor", "x"], "'x': dim 0 has the symbolic size s and is sharded; give s with --bind"),
    (["sweep", "sharded_symbolic.py"], "the formulas also depend on s; give its value with --bind (e.g. --bind s=128)"),
]


@pytest.mark.parametrize(("argv", "fragment"), INPUT_ERRORS, ids=lambda v: " ".join(v)[:60] if isinstance(v, list) else "")
def test_input_errors_exit_1_with_one_line(argv, fragment, inputs_dir, capsys, monkeypatch):
    monkeypatch.chdir(inputs_dir)
    code, _, err = run_cli(argv, capsys)
    assert code == 1, err
    if "\n --> " in err or "found by the verifier" in err:  # a diagnostic: the error line, then where
        lines = err.splitlines()
        assert lines[0].startswith(f"distir {argv[0]}: error: ") and fragment in lines[0], err
        assert sum(": error:" in line for line in lines) == 1 and "Traceback" not in err
        assert ".py:" in err  # it names the place in the file
    else:
        assert_one_error_line(err, f"distir {argv[0]}", fragment)


def test_the_tables_cover_at_least_sixty_cases():
    assert len(USAGE_ERRORS) + len(INPUT_ERRORS) >= 60


# ---------------------------------------------------------------- --axis-cost

TWO_AXES = """\
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((2, 4), I.Range(0, 8))]})

    @R.function
    def main(x: R.DTensor((1024, 1024), "float32", "mesh[0]", "P, R")) -> R.DTensor((1024, 1024), "float32", "mesh[0]", "R, R"):
        with R.dataflow():
            y: R.DTensor((1024, 1024), "float32", "mesh[0]", "R, R") = R.dist.redistribute(x, device_mesh="mesh[0]", placement="R, R")
            R.output(y)
        return y
"""


def test_opt_axis_cost_plans_by_time(tmp_path, capsys):
    """With a slow axis 0 the all-reduce runs on a quarter of the tensor, cut and gathered over the fast axis."""
    path = tmp_path / "two_axes.py"
    path.write_text(TWO_AXES)
    code, out, _ = run_cli(["opt", str(path), "-p", "legalize-redistribute"], capsys)
    assert code == 0 and out.count("R.dist.") == 1 and "R.dist.all_reduce(x, mesh_axis=0)" in out
    for flags in (["--axis-cost", "0=10us:10GB/s", "--axis-cost", "1=1us:100GB/s"], ["--axis-cost", "0=10us:10GB/s,1=1us:100GB/s"]):
        code, out, _ = run_cli(["opt", str(path), "-p", "legalize-redistribute", *flags], capsys)
        assert code == 0, out
        assert "R.dist.local_shard(x, mesh_axis=1, dim=0)" in out and "R.dist.all_gather(y_1, mesh_axis=1)" in out


@pytest.mark.parametrize("flags, fragment", [
    (["--axis-cost", "0=10:10GB/s"], "argument --axis-cost: '0=10:10GB/s': the latency '10' has no unit"),
    (["--axis-cost", "0=10us"], "argument --axis-cost: '0=10us': expected LATENCY:BANDWIDTH"),
    (["--axis-cost", "a=1us:1GB/s"], "argument --axis-cost: 'a=1us:1GB/s': the mesh axis 'a' is not an integer"),
    (["--axis-cost", "0=1us:1GB/s", "--axis-cost", "0=2us:1GB/s"], "--axis-cost 0=2us:1GB/s: mesh axis 0 is given twice"),
    (["--axis-cost", "2=1us:1GB/s"], "--axis-cost 2=1us:1GB/s: mesh[0] (2, 4) has 2 axes (0 to 1)"),
    # non-finite or absurd values: refused at the flag (they used to fail later, blaming hints)
    (["--axis-cost", "0=1e400us:1GB/s"], "argument --axis-cost: '0=1e400us:1GB/s': the latency '1e400us' is out of range"),
    (["--axis-cost", "0=1us:1e-300GB/s"], "'0=1us:1e-300GB/s': the bandwidth '1e-300GB/s' is out of range"),
    (["--axis-cost", "0=2h:1GB/s"], "the latency '2h' has the unit 'h'"),
    (["--axis-cost", "0=7200s:1GB/s"], "'0=7200s:1GB/s': latency 7.20e+3 s is out of range: 0, or from 1e-12 s"),
])
def test_opt_axis_cost_errors_are_one_line(tmp_path, capsys, flags, fragment):
    path = tmp_path / "two_axes.py"
    path.write_text(TWO_AXES)
    code, _, err = run_cli(["opt", str(path), "-p", "legalize-redistribute", *flags], capsys)
    assert code == 2
    assert_one_error_line(err, "distir opt", fragment)


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan", "soon"])
def test_opt_solver_seconds_errors_are_one_line(tmp_path, capsys, value):
    path = tmp_path / "attention.py"
    path.write_text(examples.text("attention"))
    code, _, err = run_cli(["opt", str(path), "-p", "distribute", "--solver-seconds", value], capsys)
    assert code == 2
    assert_one_error_line(err, "distir opt", "argument --solver-seconds: expected a finite number > 0")


def test_opt_solver_seconds_reach_the_solver(tmp_path, capsys, monkeypatch):
    """With no time at all (and no least time per program), the layout is the greedy one and the
    warning names the flag; with time, the same command prints no such warning."""
    from distir.transform.layout_choice import solution

    monkeypatch.setattr(solution, "MIN_SOLVE_SECONDS", 1e-9)
    solution.forget_solved()  # no optimum solved before in this process
    path = tmp_path / "attention.py"
    path.write_text(examples.text("attention"))
    code, out, err = run_cli(["opt", str(path), "-p", "distribute", "--solver-seconds", "1e-9"], capsys)
    assert code == 0 and "@R.function" in out
    assert "the layout solver found no layout in time: the greedy layout is kept (propagate-sharding.solver_seconds " \
           "= 1e-09, distir-opt --solver-seconds)" in err
    code, out, err = run_cli(["opt", str(path), "-p", "distribute", "--solver-seconds", "60"], capsys)
    assert code == 0 and "layout solver" not in err
