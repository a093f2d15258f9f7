"""distir-opt -p auto-shard with --memory-budget and --explain, and distir sweep --auto: usage mistakes
exit 2, budgets that cannot be met exit 1, one line each."""

from __future__ import annotations

import json

import pytest

import distir
from distir import examples
from distir.cli import main as distir_main
from distir.cli import opt
from distir.ir.types import DTensorType
from distir.transform.layout_choice.auto_shard import strip_layouts
from helpers import PLAIN_MLP
from helpers import run_cli as run


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    p = tmp_path_factory.mktemp("auto") / "attention_plain.py"
    p.write_text(strip_layouts(examples.load("attention")).script())
    return str(p)


def test_auto_shard_then_distribute(plain, capsys):
    code, out, err = run(opt.main, [plain, "-p", "auto-shard", "--bind", "num_workers=4"], capsys)
    assert code == 0, err
    params = {p.name: str(p.type.placement) for p in distir.parse(out)["main"].params if isinstance(p.type, DTensorType)}
    assert params == {"x": "R", "wq": "S[1]", "wk": "S[1]", "wv": "S[1]", "wo": "S[0]"}
    code, out, err = run(opt.main, [plain, "-p", "auto-shard,distribute", "--bind", "num_workers=4"], capsys)
    assert code == 0, err
    assert "R.ccl.all_reduce" in out and err == ""


def test_explain_prints_the_table_on_stderr(plain, capsys):
    code, out, err = run(opt.main, [plain, "-p", "auto-shard", "--explain", "--memory-budget", "1.1/W"], capsys)
    assert code == 0, err
    assert "parameter" in err and "sent/worker" in err and "over budget" in err and "budget 1.1/W" in err
    assert "@I.ir_module" in out and "parameter" not in out


@pytest.mark.parametrize("argv, code, says", [
    (["--memory-budget", "2parsecs"], 2, "argument --memory-budget: '2parsecs': unknown unit 'parsecs'"),
    (["--memory-budget", "lots"], 2, "argument --memory-budget: 'lots': not bytes"),
    (["--memory-budget", "10KB"], 1, ("memory budget '10KB' (9.77 KiB of weights per device) is below the smallest any "
                                      "layout reaches at num_workers=2: 128 KiB")),
])
def test_budget_errors_are_one_line(plain, capsys, argv, code, says):
    got, _, err = run(opt.main, [plain, "-p", "auto-shard", *argv], capsys)
    assert got == code and says in err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("distir-opt: error:")


@pytest.mark.parametrize("argv, code, says", [
    (["--activation-budget", "2parsecs"], 2, "argument --activation-budget: '2parsecs': unknown unit 'parsecs'"),
    (["--activation-budget", "1KB"], 1, "activation budget '1KB' (1,000 B per device) is below the least peak"),
])
def test_activation_budget_errors_are_one_line(plain, capsys, argv, code, says):
    got, _, err = run(opt.main, [plain, "-p", "auto-shard", *argv], capsys)
    assert got == code and says in err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("distir-opt: error:")


def test_activation_budget_none_leaves_activations_to_communication(plain, capsys):
    code, _, err = run(opt.main, [plain, "-p", "auto-shard", "--explain", "--activation-budget", "none",
                                  "--memory-budget", "100%"], capsys)
    assert code == 0 and "(not bounded)" in err and "bytes sent per worker: 0 B" in err
    code, _, err = run(opt.main, [plain, "-p", "auto-shard", "--explain", "--memory-budget", "100%"], capsys)
    assert code == 0 and "(budget min+25%)" in err and "activations/device" in err




def test_explain_checks_shows_what_is_not_proven_as_a_range(tmp_path, capsys):
    path = tmp_path / "mlp.py"
    path.write_text(PLAIN_MLP)
    code, out, err = run(opt.main, [str(path), "-p", "auto-shard", "--explain-checks", "2", "--bind", "num_workers=2",
                                    "--memory-budget", "100%"], capsys)
    assert code == 0, err
    assert "168..180 B" in err and "a..b is a range, no layout sends less than a, the best found sends b" in err
    assert "@I.ir_module" in out and ".." not in out
    code, out, _ = run(opt.main, ["--help"], capsys)
    assert code == 0 and "--explain-checks N" in out and "shown as a range a..b" in " ".join(out.split())
    code, _, err = run(opt.main, [str(path), "-p", "auto-shard", "--explain-checks", "0"], capsys)
    assert code == 2 and "argument --explain-checks" in err and "Traceback" not in err


@pytest.mark.parametrize("flag", [["--explain"], ["--explain-checks", "4"], ["--memory-budget", "50%"],
                                  ["--activation-budget", "none"]])
def test_auto_shard_options_need_the_pass(plain, capsys, flag):
    code, _, err = run(opt.main, [plain, "-p", "distribute", *flag], capsys)
    assert code == 2 and f"{flag[0]} is for the auto-shard pass" in err


def test_passes_lists_auto_shard(capsys):
    code, out, _ = run(distir_main.main, ["passes"], capsys)
    assert code == 0 and "auto-shard" in out and "AutoShard" in out


def test_sweep_auto_names_the_layouts_that_change(plain, capsys):
    code, out, err = run(distir_main.main, ["sweep", plain, "--auto", "-n", "2,4", "--bind", "s=64",
                                            "--memory-budget", "200KB"], capsys)
    assert code == 0, err
    assert "layout changes" in out and "layouts at num_workers = 2: x R, wq S[1]" in out
    code, out, err = run(distir_main.main, ["sweep", plain, "--auto", "-n", "1,2", "--bind", "s=64",
                                            "--memory-budget", "200KB", "--json"], capsys)
    assert code == 1 and "num_workers=1: auto-shard: memory budget '200KB'" in err
    rows = json.loads(out)["rows"]
    assert rows[0]["error"] and rows[1]["layouts"]["wq"] == "S[1]"
    assert json.loads(out)["auto_shard"] == {"memory_budget": "200KB", "activation_budget": "min+25%"}
    code, _, err = run(distir_main.main, ["sweep", plain, "--memory-budget", "50%"], capsys)
    assert code == 2 and "--memory-budget is for --auto" in err
    code, _, err = run(distir_main.main, ["sweep", plain, "--activation-budget", "none"], capsys)
    assert code == 2 and "--activation-budget is for --auto" in err


def test_sweep_auto_long_sequence_divides_activations(plain, capsys):
    """The peak activations column shrinks with the count under the default activation budget, and
    stays at one device's with activations not bounded."""
    argv = ["sweep", plain, "--auto", "-n", "1,4", "--bind", "s=512", "--json"]
    code, out, err = run(distir_main.main, argv, capsys)
    assert code == 0, err
    bounded = [r["peak_bytes"] for r in json.loads(out)["rows"]]
    code, out, err = run(distir_main.main, [*argv, "--activation-budget", "none", "--memory-budget", "100%"], capsys)
    assert code == 0, err
    unbounded = [r["peak_bytes"] for r in json.loads(out)["rows"]]
    assert bounded[1] < bounded[0] and unbounded[1] == unbounded[0]


def test_explain_prints_bounds_by_default_and_exact_on_request(plain, capsys):
    code, _, err = run(opt.main, [plain, "-p", "auto-shard", "--explain", "--memory-budget", "1.1/W",
                                  "--bind", "num_workers=4"], capsys)
    assert code == 0, err
    assert "<= 60.00 KiB" in err and "bounded without a solve" in " ".join(err.split())
    code, _, err = run(opt.main, [plain, "-p", "auto-shard", "--explain=exact", "--memory-budget", "1.1/W",
                                  "--bind", "num_workers=4"], capsys)
    assert code == 0, err
    assert "<=" not in err and "60 KiB" in err
    code, _, err = run(opt.main, [plain, "-p", "auto-shard", "--explain=fast"], capsys)
    assert code == 2 and "argument --explain: invalid choice: 'fast'" in err and "Traceback" not in err
