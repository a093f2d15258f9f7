"""``distir example``: the bundled models written to files, so that the README's commands run as
printed (the docs test runs the README's block, which writes its files with these commands)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import distir
from distir import examples
from distir.cli import main as cli
from distir.cli.example import main_files
from distir.ir.types import DTensorType
from helpers import run_cli

README = Path(__file__).resolve().parents[3] / "README.md"


def call(argv, capsys):
    return run_cli(cli.main, argv, capsys)


def test_lists_the_bundled_models(capsys):
    code, out, err = call(["example"], capsys)
    assert code == 0, err
    assert out.split() == sorted(examples.names()) and {"mesh2d", "nn_llama", "gpt2"} <= set(out.split())


def test_writes_the_shipped_text_and_the_plain_form(tmp_path, capsys):
    code, out, err = call(["example", "attention", "-o", str(tmp_path / "model.py")], capsys)
    assert code == 0 and out == "", err
    assert (tmp_path / "model.py").read_text() == examples.text("attention")  # the file as shipped, comments too
    code, out, err = call(["example", "mlp", "--plain"], capsys)
    assert code == 0, err
    plain = distir.parse(out)
    assert not any(isinstance(p.type, DTensorType) for p in plain["main"].params)
    assert "annotate_sharding" not in out and "annotate_sharding" in examples.text("mlp")


def test_the_nn_llama_and_its_plan(tmp_path, capsys):
    from distir.examples.nn import llama as L

    code, _out, err = call(["example", "nn_llama", "-o", str(tmp_path / "m.py"), "--plan", str(tmp_path / "tp.json")],
                          capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "tp.json").read_text()) == L.TP_PLAN_STRATEGIES
    mod = distir.parse((tmp_path / "m.py").read_text())
    assert [p.name for p in mod["forward"].params][:3] == ["ids", "cos", "sin"]


def test_mistakes_are_one_line(capsys):
    code, out, err = call(["example", "lama"], capsys)
    assert code == 1 and out == "" and err.count("\n") == 1 and "no bundled model 'lama'; did you mean 'llama'?" in err
    code, out, err = call(["example", "mlp", "--plan", "tp.json"], capsys)
    assert code == 1 and out == "" and "the relax.frontend.nn models (decode, gpt2, gqa, moe, nn_llama) have a plan" in err
    code, _out, err = call(["example", "-o", "x.py"], capsys)
    assert code == 1 and "name the model to write" in err


def test_the_readme_writes_the_files_its_commands_name(tmp_path, monkeypatch, capsys):
    block = README.read_text().split("## Command line", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0] for line in block.splitlines()]
    lines = [line for line in commands if line.startswith("distir example ")]
    named = set(re.findall(r"\b([\w-]+\.(?:py|json))\b", "\n".join(commands)))
    monkeypatch.chdir(tmp_path)
    for line in lines:
        code, _out, err = call(shlex.split(line)[1:], capsys)
        assert code == 0, (line, err)
    written = {p.name for p in tmp_path.iterdir()}
    assert named - {"sweep.png"} <= written, named - written  # every file a command names is written first
    assert {name: (tmp_path / name).read_text() for name in written} == {
        name: text if text.endswith("\n") else text + "\n" for name, text in main_files().items()}
