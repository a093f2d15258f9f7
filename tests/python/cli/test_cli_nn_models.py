"""`distir run`, `show` and `sweep` on a module imported from relax.frontend.nn: its only function
(`forward`) is picked without --func, its parameters are laid out with --shard / --shard-plan as
distir-opt lays them out, and state-dict names (`mlp.up.weight`) work where parameter names do."""

from __future__ import annotations

import json

import numpy as np
import pytest

from distir.cli import main as cli
from distir.driver import DEFAULT_TOLERANCES, FLOAT_TOLERANCE, compare
from helpers import NN_MLP, run_cli

PLAN = {"embed.weight": "S[0]", "mlp.up.*": "colwise", "mlp.down.weight": "rowwise"}


@pytest.fixture
def model(tmp_path):
    p = tmp_path / "mlp_nn.py"
    p.write_text(NN_MLP.replace("def main(", "def forward("))  # from_nn names the function as the spec does
    plan = tmp_path / "tp.json"
    plan.write_text(json.dumps(PLAN))
    return str(p), str(plan)


def call(argv, capsys) -> tuple[int, str, str]:
    return run_cli(cli.main, argv, capsys)


@pytest.mark.parametrize("workers", [1, 3])
def test_run_picks_the_only_function_and_takes_a_shard_plan(model, workers, capsys):
    path, plan = model
    code, out, err = call(["run", path, "-n", str(workers), "--shard-plan", plan, "--bind", "s=5"], capsys)
    assert code == 0, err
    assert ("all_reduce" in out) == (workers > 1) and "matches the single-device result" in out  # one worker: none


def test_run_reads_state_dict_names_from_npz(model, tmp_path, capsys):
    path, plan = model
    rng = np.random.default_rng(0)
    arrays = {"ids": np.array([1, 7, 3], dtype="int32"), "embed.weight": rng.standard_normal((50, 16), "float32"),
              "norm.weight": rng.standard_normal(16, "float32"), "mlp.up.weight": rng.standard_normal((64, 16), "float32"),
              "up_b": rng.standard_normal(64, "float32"),  # the text's name works too
              "mlp.down.weight": rng.standard_normal((16, 64), "float32"), "head": rng.standard_normal((16, 50), "float32")}
    npz = tmp_path / "in.npz"
    np.savez(npz, **arrays)
    code, out, err = call(["run", path, "-n", "2", "--shard", "mlp.up.*=colwise", "--inputs", str(npz)], capsys)
    assert code == 0, err
    assert f"inputs from {npz}" in out
    both = tmp_path / "both.npz"
    np.savez(both, **arrays, up=arrays["mlp.up.weight"])
    code, _, err = call(["run", path, "-n", "2", "--shard", "mlp.up.*=colwise", "--inputs", str(both)], capsys)
    assert code == 1 and "two arrays for parameter 'up': 'up' and 'mlp.up.weight'" in err


def test_without_a_plan_the_error_says_how_to_give_one(model, capsys):
    code, _, err = call(["run", model[0], "-n", "2"], capsys)
    assert code == 1 and "--shard PATTERN=PLACEMENT or --shard-plan FILE" in err


def test_show_draws_a_parameter_by_its_state_dict_name(model, capsys):
    path, plan = model
    code, out, err = call(["show", path, "-n", "2", "--shard-plan", plan, "--tensor", "mlp.down.weight", "--plain"],
                          capsys)
    assert code == 0, err
    assert out.startswith('mlp.down.weight: (16, 64) float32, "S[1]"')  # the name the user gave, not the text's
    code, out, err = call(["show", path, "-n", "2", "--shard-plan", plan, "--tensor", "down", "--plain"], capsys)
    assert code == 0 and out.startswith('mlp.down.weight: (16, 64) float32, "S[1]"'), err
    # every tensor drawn: the weights under their state-dict names, the rest (inputs, results) as written
    code, out, err = call(["show", path, "-n", "2", "--shard-plan", plan, "--plain"], capsys)
    titles = [line.split(":")[0] for line in out.splitlines() if line and line[0].isalpha()]
    assert titles[:3] == ["ids", "embed.weight", "norm.weight"] and "mlp.up.bias" in titles and "up_b" not in titles
    code, out, err = call(["show", path, "-n", "2", "--shard-plan", plan, "--tensor", "mlp.down.wieght"], capsys)
    assert code == 1 and "did you mean 'mlp.down.weight'? (it has: ids, embed.weight, norm.weight" in err, err


def test_sweep_takes_a_shard_plan(model, capsys):
    path, _ = model
    code, out, err = call(["sweep", path, "-n", "1-3", "--bind", "s=8", "--shard", "mlp.up.*=colwise",
                           "--shard", "mlp.down.weight=rowwise"], capsys)
    assert code == 0, err
    assert "all_reduce x1" in out  # the plan cut the MLP colwise then rowwise: one all-reduce


def test_a_pattern_given_twice_is_a_usage_error(model, capsys):
    path, plan = model
    code, _, err = call(["run", path, "-n", "2", "--shard-plan", plan, "--shard", "embed.weight=R"], capsys)
    assert code == 2 and "pattern 'embed.weight' is given twice" in err


def test_default_tolerances_follow_the_dtype():
    expected = np.linspace(-1, 1, 64)
    # float16: a sum cut over workers rounds differently; within its default, not float32's
    half = expected.astype("float16")
    off = (half.astype("float64") + 3e-3).astype("float16")
    assert compare([off], [half]).ok
    assert not compare([off], [half], rtol=FLOAT_TOLERANCE[0], atol=FLOAT_TOLERANCE[1]).ok
    assert not compare([off.astype("float32")], [half.astype("float32")]).ok  # float32 as before: 1e-5
    # integers are exact: one unit off in a large value is a mismatch
    big = np.array([10**9, 5], dtype="int64")
    assert not compare([big + np.array([1, 0])], [big]).ok and compare([big.copy()], [big]).ok
    assert DEFAULT_TOLERANCES["int32"] == (0.0, 0.0) and DEFAULT_TOLERANCES["bfloat16"] == (1e-2, 2e-2)


def test_help_states_the_default_tolerances():
    from distir.cli.run import TOLERANCE_HELP

    def fmt(x: float) -> str:
        return f"{x:.0e}".replace("e-0", "e-")

    lo, hi = DEFAULT_TOLERANCES["float16"]
    assert DEFAULT_TOLERANCES["float16"] == DEFAULT_TOLERANCES["bfloat16"] and FLOAT_TOLERANCE[0] == FLOAT_TOLERANCE[1]
    assert TOLERANCE_HELP == (f"float16 and bfloat16 {fmt(lo)} (atol {fmt(hi)}), float32 and float64 "
                              f"{fmt(FLOAT_TOLERANCE[0])}, integers and bool exact")


def test_a_float16_model_matches_at_its_default_tolerance():
    """CountResult.ok of a float16 model cut over workers: sums rounded in another order differ
    from one device's by more than float32's 1e-5, within float16's default."""
    import distir
    from distir.driver import Driver, random_inputs
    from distir.transform import ShardParams

    mod = ShardParams(PLAN)(distir.parse(NN_MLP.replace("float32", "float16")))
    driver = Driver(mod)
    inputs = random_inputs(mod, dims={"s": 12}, seed=3)
    r = driver.run(inputs, 3)
    assert r.ok, r.comparison.mismatch
    assert r.max_diff > 0 and not driver.run(inputs, 3, rtol=1e-5, atol=1e-5).ok


NN_FILE = '''\
import pathlib
from tvm.relax.frontend import nn

pathlib.Path(__file__).with_name("ran.txt").write_text("the file was run")  # distir must never run it


class MLP(nn.Module):
    def __init__(self):
        self.up = nn.Linear(16, 64)
        self.down = nn.Linear(64, 16)

    def forward(self, x):
        return self.down(nn.op.silu(self.up(x)))


SPEC = {"forward": {"x": nn.spec.Tensor((4, 16), "float32")}}
'''


@pytest.mark.parametrize("command", ["run", "show", "sweep"])
@pytest.mark.parametrize("given", ["model.py", "model.py:MLP"])
def test_a_python_nn_model_gets_a_hint_and_is_never_run(tmp_path, monkeypatch, capsys, command, given):
    (tmp_path / "model.py").write_text(NN_FILE)
    monkeypatch.chdir(tmp_path)
    code, out, err = call([command, given], capsys)
    assert code == 1 and out == "" and err.count("\n") == 1, err
    assert "is Python defining the nn.Module 'MLP', not IR text" in err
    assert not (tmp_path / "ran.txt").exists()
    # the command the hint gives writes IR that distir reads (run here in process: it imports model.py)
    code_text = err.split("python -c '", 1)[1].split("'", 1)[0]
    monkeypatch.syspath_prepend(str(tmp_path))
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code_text, "<hint>", "exec"), {})  # noqa: S102 - the test's own file, as the user would
    monkeypatch.delitem(__import__("sys").modules, "model", raising=False)
    (tmp_path / "model_ir.py").write_text(buf.getvalue())
    code, out, err = call(["run", "model_ir.py", "-n", "2", "--shard", "up.weight=colwise",
                           "--shard", "down.weight=rowwise"], capsys)
    assert code == 0 and "all_reduce x1" in out and "matches" in out, err


def test_a_class_the_file_lacks_is_named(tmp_path, monkeypatch, capsys):
    (tmp_path / "model.py").write_text(NN_FILE)
    monkeypatch.chdir(tmp_path)
    code, out, err = call(["run", "model.py:Llama"], capsys)
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "'model.py' has no nn.Module class 'Llama' (it defines: MLP)" in err
    assert not (tmp_path / "ran.txt").exists()
    # a Python file of no nn.Module keeps the parser's own error, with its position
    (tmp_path / "other.py").write_text("import os\nx = 1\n")
    code, _out, err = call(["run", "other.py"], capsys)
    assert code == 1 and "unsupported import" in err and "other.py:1:1" in err
