"""distir-opt -p shard-params with --shard and --shard-plan: plans from the command line or a
JSON/TOML file; usage mistakes exit 2, plans that do not fit the module exit 1, one line each."""

from __future__ import annotations

import sys

import pytest

import distir
from distir.cli import opt
from distir.ir.types import DTensorType
from helpers import NN_MLP as MLP
from helpers import run_cli

TOML = sys.version_info >= (3, 11)  # tomllib; on Python 3.10 a .toml plan is a clear error instead
NO_TOML = "reading TOML needs Python 3.11 (tomllib); write the plan as JSON"


@pytest.fixture
def model(tmp_path):
    p = tmp_path / "mlp.py"
    p.write_text(MLP)
    return str(p)


def run(argv, capsys) -> tuple[int, str, str]:
    return run_cli(opt.main, argv, capsys)


def layouts(text: str) -> dict[str, str]:
    f = distir.parse(text)["main"]
    return {p.name: str(p.type.placement) for p in f.params if isinstance(p.type, DTensorType)}


def test_shard_options_lay_out_parameters(model, capsys):
    code, out, err = run([model, "-p", "shard-params", "--shard", "mlp.up.*=colwise", "--shard", "mlp.down.weight=S[1]"],
                         capsys)
    assert code == 0, err
    assert layouts(out) == {"up": "S[0]", "up_b": "S[0]", "down": "S[1]"}


def test_a_plan_file_and_shard_options_together(model, tmp_path, capsys):
    plan = tmp_path / "plan.toml"
    plan.write_text('"mlp.up.*" = "colwise"\n"mlp.down.weight" = "rowwise"\n')
    code, out, err = run([model, "-p", "shard-params,distribute", "--shard-plan", str(plan), "--shard",
                          "embed.weight=vocab", "--bind", "num_workers=3"], capsys)
    if not TOML:
        assert code == 1 and NO_TOML in err
    else:
        assert code == 0, err
        assert "R.ccl.all_reduce" in out and '"T.ceildiv' not in out  # distributed and specialized to 3 workers
    js = tmp_path / "plan.json"
    js.write_text('{"mlp.up.*": "S[0]", "mlp.down.weight": "S[1]"}')
    code, out, err = run([model, "-p", "shard-params", "--shard-plan", str(js)], capsys)
    assert code == 0, err
    assert layouts(out) == {"up": "S[0]", "up_b": "S[0]", "down": "S[1]"}


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--shard", "mlp.up.weight"], "argument --shard: expected PATTERN=PLACEMENT"),
        (["--shard", "mlp.up.weight=S[x]"], "argument --shard: mlp.up.weight: placement \"S[x]\": entry 0"),
        (["--shard", "mlp.up.weight=colwize"], "or name a strategy (colwise, rowwise, vocab, replicate)"),
        ([], "-p shard-params needs a plan: --shard PATTERN=PLACEMENT (repeatable) or --shard-plan FILE"),
        (["--shard", "a=R", "--shard", "a=S[0]"], "pattern 'a' is given twice (as R)"),
    ],
)
def test_usage_mistakes_exit_2(model, argv, fragment, capsys):
    code, out, err = run([model, "-p", "shard-params", *argv], capsys)
    assert code == 2 and out == ""
    assert fragment in err and err.strip().splitlines()[-1].startswith("distir-opt: error:")


def test_shard_without_the_pass_exits_2(model, capsys):
    code, _, err = run([model, "-p", "distribute", "--shard", "a=R"], capsys)
    assert code == 2
    assert "--shard lays out parameters for the shard-params pass; add it, e.g. -p shard-params,distribute" in err


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("plan.json", '{"mlp.up.*": ', "not JSON (line 1, column 14"),
        ("plan.json", '["S[0]"]', "expected a JSON object of pattern: placement, got a list"),
        ("plan.json", '{"mlp.up.*": 1}', "pattern 'mlp.up.*' maps to 1, not a placement or strategy name"),
        ("plan.json", '{"mlp.up.*": "S[0]]"}', "pattern 'mlp.up.*': placement \"S[0]]\""),
        ("plan.json", "{}", "is empty"),
        ("plan.toml", 'mlp.up.weight = "S[0]"', "'mlp' is a table, not a placement; quote dotted patterns in TOML"),
        ("plan.toml", '"a" = ', "not TOML"),
        ("plan.yaml", "a: R", "expected a .json or .toml file"),
        ("plan.json", '{"mlp.gate*": "colwise"}', "pattern 'mlp.gate*' matches no plain tensor parameter"),
        ("plan.json", '{"norm.weight": "S[1]"}', "mesh axis 0 shards dim 1, but the tensor has rank 1"),
        ("plan.json", '{"mlp.*": "S[0]", "*up.w*": "S[1]"}', "match parameter 'mlp.up.weight' equally specifically"),
        # deep nesting and huge numbers: one line, not a RecursionError or ValueError
        ("plan.json", '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply; a plan is one flat object"),
        ("plan.toml", "a = " + "[" * 100_000 + "]" * 100_000, "nested too deeply; a plan is one flat table"),
        ("plan.json", '{"a": 1' + "0" * 5000 + "}", "not a plan (Exceeds the limit (4300 digits)"),
        ("plan.json", '{"a": [[[1]]]}', "pattern 'a' maps to a list, not a placement"),
    ],
)
def test_plans_that_do_not_fit_exit_1(model, tmp_path, name, content, fragment, capsys):
    p = tmp_path / name
    p.write_text(content)
    code, out, err = run([model, "-p", "shard-params", "--shard-plan", str(p)], capsys)
    assert code == 1 and out == ""
    assert (fragment if TOML or not name.endswith(".toml") else NO_TOML) in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("distir-opt: error:")


def test_a_missing_plan_file_exits_1(model, tmp_path, capsys):
    code, _, err = run([model, "-p", "shard-params", "--shard-plan", str(tmp_path / "nope.json")], capsys)
    assert code == 1 and "cannot read it" in err


def test_a_partial_the_dtype_cannot_hold_is_refused_in_one_line(tmp_path, capsys):
    ir = tmp_path / "ints.ir"
    ir.write_text('''@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(x: R.Tensor((4,), "int32"), y: R.DTensor((4,), "int32", "mesh[0]", "R")):
        with R.dataflow():
            z = R.add(x, y)
            R.output(z)
        return z
''')
    code, out, err = run([str(ir), "-p", "shard-params", "--shard", "x=P[avg]"], capsys)
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "lays out parameter 'x'" in err and 'the layout is "P[avg]": int32 values cannot be P[avg]' in err


def test_a_strided_part_count_that_does_not_divide_is_refused_at_the_plan(model, capsys):
    # docs/strided.md's message, at the plan: before, it passed and a reshape failed deep in lowering
    code, out, err = run([model, "-p", "shard-params,distribute", "--shard", "mlp.up.weight=S[0/3]"], capsys)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert ("pattern 'mlp.up.weight' lays out parameter 'mlp.up.weight'" in err
            and "views dim 0 (size 64) as 3 parts, but 3 does not divide it" in err), err
    # a part count that divides is laid out as written
    code, out, err = run([model, "-p", "shard-params", "--shard", "mlp.up.weight=S[0/4]"], capsys)
    assert code == 0 and layouts(out)["up"] == "S[0/4]", err
