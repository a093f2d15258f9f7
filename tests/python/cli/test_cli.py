"""distir-opt and distir: in process through main(argv), and as real processes."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest

import distir
from distir.cli import main as distir_main
from distir.cli import opt
from distir.ir import Binding, Block, Var, assert_structural_equal, verify
from distir.ir.types import TensorType
from distir.transform import FunctionPass, pass_infra, register_pass

MODULE = '''\
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(x: R.DTensor((128, 64), "float32", "mesh[0]", "S[0]")) -> R.DTensor((128, 64), "float32", "mesh[0]", "R"):
        with R.dataflow():
            a: R.DTensor((128, 64), "float32", "mesh[0]", "S[0]") = R.dist.redistribute(x, device_mesh="mesh[0]", placement="S[0]")
            dead: R.DTensor((128, 64), "float32", "mesh[0]", "S[0]") = R.nn.relu(x)
            b: R.DTensor((128, 64), "float32", "mesh[0]", "R") = R.dist.redistribute(a, device_mesh="mesh[0]", placement="R")
            R.output(b)
        return b
'''

MALFORMED = '''\
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((4,), "float32")):
        y = R.nn.relu(x
        return y
'''

WRONG_TYPE = '''\
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((4, 8), "float32"), w: R.Tensor((8, 2), "float32")):
        y: R.Tensor((4, 8), dtype="float32") = R.matmul(x, w)
        return y
'''


@pytest.fixture
def src(tmp_path: Path) -> Path:
    p = tmp_path / "model.py"
    p.write_text(MODULE)
    return p


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def run_proc(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], input=stdin, capture_output=True, text=True, timeout=300, check=False
    )


# -- distir-opt in process ---------------------------------------------------------------


def test_no_passes_parses_verifies_and_prints(src, capsys):
    assert opt.main([str(src)]) == 0
    out = capsys.readouterr().out
    assert_structural_equal(distir.parse(out), distir.parse(MODULE))


def test_passes_run_and_output_file_is_written(src, tmp_path, capsys):
    out_file = tmp_path / "out.py"
    assert opt.main([str(src), "-p", "canonicalize", "-o", str(out_file)]) == 0
    assert capsys.readouterr().out == ""
    result = distir.parse(out_file.read_text())
    verify(result)
    names = [b.var.name for b in result["main"].bindings()]
    assert names == ["b"]  # the trivial redistribute and the dead relu are gone


def test_time_passes_prints_a_table(src, capsys):
    assert opt.main([str(src), "-p", "canonicalize", "--time-passes"]) == 0
    err = capsys.readouterr().err
    assert "Pass timing:" in err and "canonicalize" in err and "total" in err and "ms" in err


def test_print_ir_after_change_prints_only_changed_passes(src, capsys):
    assert opt.main([str(src), "-p", "canonicalize,canonicalize", "--print-ir-after-change"]) == 0
    err = capsys.readouterr().err
    assert err.count("IR after pass 'canonicalize'") == 1  # the second run changes nothing
    assert "R.nn.relu" not in err


def test_print_ir_after_all(src, capsys):
    assert opt.main([str(src), "-p", "canonicalize", "-p", "canonicalize", "--print-ir-after-all"]) == 0
    err = capsys.readouterr().err
    assert err.count("IR after pass 'canonicalize'") == 2 and "(unchanged)" in err


def test_verify_each_names_the_pass_that_broke_the_module(src, capsys, monkeypatch):
    pass_infra.list_passes()  # load the built-in passes before taking the copy
    monkeypatch.setattr(pass_infra, "_PASSES", dict(pass_infra._PASSES))

    @register_pass
    class Breaker(FunctionPass):
        """Records a wrong type."""

        name: ClassVar[str] = "test-breaker"

        def transform_function(self, func, mod, ctx):
            blk = func.blocks[0]
            b = blk.bindings[0]
            bindings = (Binding(Var(b.var.name, TensorType((1,), "float32")), b.value), *blk.bindings[1:])
            return func.replace(blocks=(Block(bindings, blk.is_dataflow, blk.outputs),))

    assert opt.main([str(src), "-p", "test-breaker", "--verify-each"]) == 1
    err = capsys.readouterr().err
    assert "after pass 'test-breaker'" in err and "Traceback" not in err


def test_opt_level_and_disable_pass(src, capsys):
    assert opt.main([str(src), "-p", "canonicalize", "--disable-pass", "canonicalize"]) == 0
    assert "R.nn.relu" in capsys.readouterr().out
    assert opt.main([str(src), "-p", "canonicalize", "--opt-level", "0"]) == 0  # canonicalize is level 1
    assert "R.nn.relu" in capsys.readouterr().out


def test_unknown_pass_is_exit_1_with_a_suggestion(src, capsys):
    assert opt.main([str(src), "-p", "canonicalise"]) == 1
    err = capsys.readouterr().err
    assert "did you mean 'canonicalize'" in err and "Traceback" not in err


def test_verify_error_is_exit_1(tmp_path, capsys):
    assert opt.main([str(write(tmp_path, "w.py", WRONG_TYPE))]) == 1
    err = capsys.readouterr().err
    assert "'y'" in err and "recorded type" in err and "w.py:5" in err


def test_missing_file_is_exit_1(tmp_path, capsys):
    assert opt.main([str(tmp_path / "nope.py")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_bind_runs_specialize(src, capsys):
    assert opt.main([str(src), "--bind", "num_workers=4"]) == 0
    out = capsys.readouterr().out
    assert "R.device_mesh((4,)" in out and "num_workers" not in out


def test_bind_without_specialize_pass_is_a_clear_error(src, capsys, monkeypatch):
    monkeypatch.setattr(pass_infra, "list_passes", dict)
    monkeypatch.setattr("distir.transform.list_passes", dict)
    assert opt.main([str(src), "--bind", "num_workers=4"]) == 1
    assert "'specialize' pass" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["num_workers", "num_workers=four", "=4"])
def test_bad_bind_is_a_usage_error(src, bad, capsys):
    with pytest.raises(SystemExit) as info:
        opt.main([str(src), "--bind", bad])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--bind" in err and ("NAME=INT" in err or "integer" in err)


def test_parse_binding():
    assert opt.parse_binding("num_workers=4,n=128") == {"num_workers": 4, "n": 128}


# -- distir in process -----------------------------------------------------------------


def test_distir_opt_subcommand_matches_distir_opt(src, capsys):
    assert distir_main.main(["opt", str(src), "-p", "canonicalize"]) == 0
    via_distir = capsys.readouterr().out
    assert opt.main([str(src), "-p", "canonicalize"]) == 0
    assert capsys.readouterr().out == via_distir


def test_distir_passes_lists_registered_passes(capsys):
    assert distir_main.main(["passes"]) == 0
    out = capsys.readouterr().out
    assert "canonicalize" in out and "Remove trivial redistributes" in out and "Canonicalize" in out
    assert distir_main.main(["passes", "--names"]) == 0
    assert "canonicalize" in capsys.readouterr().out.split()


def test_distir_demo(capsys):
    assert distir_main.main(["demo"]) == 0
    out = capsys.readouterr().out
    # the Llama layer, distributed once symbolically, specialized to 4, one all-reduce per block
    assert "'llama'" in out and "num_workers=4" in out and "simulated 4 workers" in out
    assert "all_reduce x2" in out and "result matches the single-device run" in out and out.endswith("OK\n")
    assert distir_main.main(["demo", "--list"]) == 0
    assert {"mlp", "attention", "llama"} <= set(capsys.readouterr().out.split())


def test_distir_demo_other_model_and_count(capsys):
    assert distir_main.main(["demo", "--example", "attention", "-n", "2", "--seq-len", "8", "--print-ir"]) == 0
    out = capsys.readouterr().out
    assert "all_reduce x1" in out and "R.ccl.all_reduce" in out and "num_workers=2" in out


def test_distir_demo_count_that_does_not_divide(capsys):
    """512 hidden over 3 workers: uneven blocks, and the result still matches."""
    assert distir_main.main(["demo", "--example", "mlp", "-n", "3"]) == 0
    out = capsys.readouterr().out
    assert "matches the single-device run" in out
    with pytest.raises(SystemExit) as info:
        distir_main.main(["demo", "-n", "0"])
    assert info.value.code == 2


def test_distir_demo_of_an_nn_model(capsys):
    """GPT-2 written with relax.frontend.nn, laid out by its plan: 2 layers, one all-reduce after each
    attention block and each MLP (c_proj cut by rows) and one after the vocabulary-cut lookup."""
    assert distir_main.main(["demo", "gpt2", "-n", "2", "--seq-len", "8"]) == 0
    out = capsys.readouterr().out
    assert "'gpt2'" in out and "examples/nn/gpt2.py" in out and "simulated 2 workers" in out
    assert "collectives: all_reduce x5;" in out and "result matches the single-device run" in out
    assert distir_main.main(["demo", "--list"]) == 0
    assert {"gpt2", "nn_llama", "gqa", "decode", "moe"} <= set(capsys.readouterr().out.split())
    assert distir_main.main(["demo", "gpt2", "--example", "mlp"]) == 2
    assert "two examples given: 'gpt2' and --example mlp" in capsys.readouterr().err


def test_distir_demo_unknown_example(capsys):
    assert distir_main.main(["demo", "--example", "mpl"]) == 1
    assert "did you mean 'mlp'" in capsys.readouterr().err


def test_distir_without_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        distir_main.main([])
    assert info.value.code == 2


def test_help_has_description_and_examples(capsys):
    with pytest.raises(SystemExit) as info:
        opt.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "--bind" in out and "-p" in out
    with pytest.raises(SystemExit) as info:
        distir_main.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("opt", "demo", "passes"):
        assert cmd in out


def test_malformed_file_exits_1_without_traceback(tmp_path, capsys):
    bad = write(tmp_path, "bad.py", MALFORMED)
    assert opt.main([str(bad)]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "error" in err and "bad.py:5" in err
    assert out == ""


def test_stdin_round_trip(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(MODULE.encode())))
    assert opt.main(["-", "-p", "canonicalize", "--time-passes"]) == 0
    out, err = capsys.readouterr()
    assert "Pass timing:" in err
    verify(distir.parse(out))


def test_usage_error_exits_2(capsys):
    with pytest.raises(SystemExit) as info:
        opt.main([])
    assert info.value.code == 2 and "usage:" in capsys.readouterr().err


# -- a real process: the exit status and streams of the console command (exit 0 with the output
# piped into a file: system/test_quiet.py); everything else calls main([...]) in process


def test_distir_command_as_a_process(tmp_path):
    proc = run_proc("-m", "distir.cli.main", "opt", str(write(tmp_path, "w.py", WRONG_TYPE)))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "recorded type" in proc.stderr
    assert proc.stdout == ""


AMBIGUOUS = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(x: R.Tensor((64, 64), "float32"), a: R.DTensor((64, 64), "float32", "mesh[0]", "S[0]"), b: R.DTensor((64, 64), "float32", "mesh[0]", "S[1]")):
        with R.dataflow():
            y = R.add(x, a)
            z = R.add(x, b)
            R.output(y, z)
        return (y, z)
"""


def test_propagation_warning_is_one_line_naming_the_tensor(tmp_path, capsys):
    assert opt.main([str(write(tmp_path, "amb.py", AMBIGUOUS)), "-p", "propagate-sharding"]) == 0
    out, err = capsys.readouterr()
    assert err.startswith("distir-opt: warning: propagate-sharding: 'x'") and err.count("\n") == 1, err
    assert "annotate_sharding on 'x'" in err and "warnings.warn" not in err
    verify(distir.parse(out))
