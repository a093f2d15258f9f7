"""``distir run`` (simulator and TVM/Disco backends) and ``distir-opt --emit relax``."""

from __future__ import annotations

import numpy as np
import pytest

from distir import examples
from distir.cli import main as distir_main
from distir.cli import opt
from distir.driver import compare_outputs as compare

MLP = str(examples.path("mlp"))
ATTENTION = str(examples.path("attention"))


@pytest.mark.parametrize("backend", ["sim", "tvm"])
def test_run_reports_a_match_and_the_largest_difference(backend, capsys):
    assert distir_main.main(["run", ATTENTION, "--num-workers", "2", "--backend", backend, "--bind", "s=8"]) == 0
    out = capsys.readouterr().out
    assert f"{backend} result on 2 workers matches the single-device result (random inputs (seed 0))" in out
    assert "largest difference" in out
    if backend == "tvm":
        assert "tvm.compile for llvm" in out and "Disco ThreadedSession of 2 workers" in out
        assert "(specialized to this count)" in out and "all_reduce x1" in out
        assert "carried by Disco's collectives allreduce x1" in out


def test_run_reads_inputs_from_npz_by_parameter_name(tmp_path, capsys):
    rng = np.random.default_rng(0)
    path = tmp_path / "in.npz"
    arrays = {"x": (128, 256), "w1": (256, 512), "w2": (512, 256)}
    np.savez(path, **{k: rng.standard_normal(s).astype("float32") * 0.1 for k, s in arrays.items()})
    assert distir_main.main(["run", MLP, "-n", "4", "--inputs", str(path), "--backend", "tvm"]) == 0
    assert f"(inputs from {path})" in capsys.readouterr().out


def test_run_names_the_missing_input(tmp_path, capsys):
    path = tmp_path / "in.npz"
    np.savez(path, x=np.zeros((128, 256), "float32"))
    assert distir_main.main(["run", MLP, "-n", "2", "--inputs", str(path)]) == 1
    assert f"'{path}' has no array for parameter 'w1' (it has: x)" in capsys.readouterr().err


def test_compare_reports_a_mismatch():
    expected = np.ones((4, 4), "float32")
    assert compare(expected + 1e-7, expected, 1e-5, 1e-5) == (True, pytest.approx(1e-7, rel=0.2))
    ok, worst = compare(expected + 0.5, expected, 1e-5, 1e-5)
    assert not ok and worst == pytest.approx(0.5)
    assert compare((expected,), (expected[:2],), 1e-5, 1e-5) == (False, float("inf"))


def test_opt_emits_the_relax_export(capsys):
    assert opt.main([MLP, "-p", "distribute", "--emit", "relax"]) == 0
    out = capsys.readouterr().out
    assert "def main(size_num_workers: R.Shape([num_workers])" in out
    assert 'R.call_dps_packed("runtime.disco.allreduce"' in out
    assert "def distir_disco_layout" in out


def test_opt_emit_relax_of_a_global_module_says_what_to_run(capsys):
    assert opt.main([MLP, "--emit", "relax"]) == 1
    err = capsys.readouterr().err
    assert "R.dist.annotate_sharding has no TVM Relax form" in err and "run the distribute pipeline first" in err
    assert "Traceback" not in err


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


def test_run_a_static_mesh_on_tvm_binds_nothing(tmp_path, capsys):
    path = tmp_path / "static.py"
    path.write_text(STATIC)
    assert distir_main.main(["run", str(path), "-n", "2", "--backend", "tvm"]) == 0
    out, err = capsys.readouterr()
    assert "Disco ThreadedSession of 2 workers" in out and "tvm result on 2 workers matches" in out, err
    assert distir_main.main(["run", str(path), "-n", "4", "--backend", "tvm"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("distir run: error: -n/--num-workers 4: the module's device meshes are static and use 2 devices")


def test_specialize_and_build_binds_only_the_symbols_the_module_has():
    import distir
    from distir.transform.pipelines import distribute_pipeline
    from distir.tvm import specialize_and_build, to_relax
    from distir.tvm.disco import symbolic_var_names

    static = to_relax(distribute_pipeline()(distir.parse(STATIC)))
    assert symbolic_var_names(static) == set()
    assert specialize_and_build(static, {"num_workers": 2}) is not None  # TVM rejected the unused key
    symbolic = to_relax(distribute_pipeline()(examples.load("mlp")))
    assert "num_workers" in symbolic_var_names(symbolic)


def test_sweep_builds_a_module_without_num_workers():
    import distir
    from distir.analysis.sweep import sweep
    from distir.driver import tvm_builder

    result = sweep(distir.parse(STATIC), [2], build=tvm_builder())
    assert result.rows[0].error is None and result.rows[0].build_seconds > 0


REPLANNED = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((2, "num_workers"), I.Range(0, "num_workers * 2"))]})

    @R.function
    def main(x: R.DTensor((12, 12), "float32", "mesh[0]", "R, P")):
        num_workers = T.int64()
        with R.dataflow():
            y: R.DTensor((12, 12), "float32", "mesh[0]", "R, R") = R.dist.redistribute(x, device_mesh="mesh[0]", placement="R, R")
            R.output(y)
        return y
"""


def test_run_on_tvm_prints_the_steps_of_the_program_specialized_to_the_count(tmp_path, capsys):
    """Re-planned at 2: one all_reduce per group of 2 (576 B each way), not the plan made for every
    count (all_gather + all_reduce); the line names what Disco's collectives carried too."""
    path = tmp_path / "replanned.py"
    path.write_text(REPLANNED)
    for flag, build in (("--specialize", "(specialized to this count)"), ("--build-once", "(one build for every count)")):
        assert distir_main.main(["run", str(path), "-n", "2", "--backend", "tvm", flag]) == 0
        out = capsys.readouterr().out
        assert build in out
        assert ("4 workers: all_reduce x1; 576 bytes sent per worker (2304 in all); carried by Disco's collectives "
                "allreduce x2, 2304 bytes on the wire") in out
        assert "all_gather" not in out


def test_a_disco_run_of_a_model_with_an_embedding_prints_no_tvm_warning(tmp_path, capfd):
    # TVM logged "Fast mode segfaults when there are out-of-bounds indices" from C++ (fd 2) on every
    # build of a lookup; the export writes the lookups as "clip" (the same rows for valid indices)
    from helpers import NN_MLP

    path = tmp_path / "mlp_nn.py"
    path.write_text(NN_MLP.replace("def main(", "def forward("))
    for shard in ("embed.weight=vocab", "embed.weight=R"):  # the vocab-parallel lookup and the plain one
        code = distir_main.main(["run", str(path), "-n", "2", "--backend", "tvm", "--bind", "s=5", "--shard", shard])
        out, err = capfd.readouterr()
        assert code == 0 and "matches" in out, err
        assert "Fast mode segfaults" not in err and "distir" not in err, err


def test_a_cuda_target_without_a_gpu_is_distirs_one_line_only(capfd):
    from distir.tvm.errors import TargetError
    from distir.tvm.targets import parse_target, run_device

    parse_target("cuda")  # TVM logged "Unable to detect CUDA version" from C++ here
    assert capfd.readouterr().err == ""
    try:
        run_device("cuda")
    except TargetError as err:  # the machine has no GPU: distir's line says so
        assert "runs on cuda devices, and TVM finds none" in str(err)
    assert capfd.readouterr().err == ""
    print("distir's own line", file=__import__("sys").stderr)  # fd 2 is given back afterwards
    assert capfd.readouterr().err == "distir's own line\n"

