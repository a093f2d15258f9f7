"""The package around the code: metadata, console scripts, bundled examples, README and CI agree."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import distir
from distir import examples
from distir.errors import DistirError
from distir.ir import verify

ROOT = Path(__file__).resolve().parents[3]


def readme_commands() -> list[str]:
    """The commands of the README's quick-start block."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block, "README quick start has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_has_exactly_two_commands_and_ci_runs_them():
    main_cmd, test_cmd = readme_commands()  # exactly two
    assert "pip install -e '.[test]'" in main_cmd and main_cmd.endswith("distir demo")
    assert test_cmd == ".venv/bin/python -m pytest -q tests/python"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "set -euo pipefail" in ci
    # .ci/run runs the same commands, with its temporary venv for .venv and $PYTHON for python3.
    ci_unquoted = ci.replace('"', "")
    for part in [*main_cmd.split(" && "), test_cmd]:
        expected = part.replace(".venv", "$VENV").replace("python3 ", "$PYTHON ", 1)
        assert expected in ci_unquoted, expected

def test_console_scripts_are_declared():
    eps = {ep.name: ep.value for ep in metadata.entry_points(group="console_scripts")}
    assert eps.get("distir-opt") == "distir.cli.opt:main"
    assert eps.get("distir") == "distir.cli.main:main"


def test_pinned_dependencies():
    if sys.version_info < (3, 11):
        pytest.skip("tomllib needs Python 3.11")
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"]
    assert "apache-tvm==0.27.0.post1" in deps and "apache-tvm-ffi==0.1.15.post2" in deps
    assert {"pytest", "hypothesis"} <= set(project["optional-dependencies"]["test"])
    assert metadata.version("apache-tvm") == "0.27.0.post1"
    assert metadata.version("apache-tvm-ffi") == "0.1.15.post2"


NN_EXAMPLES = {"nn_llama": "llama", "gpt2": "gpt2", "gqa": "gqa", "decode": "decode", "moe": "moe"}


def test_bundled_examples_load_and_verify():
    assert "mlp" in examples.names()
    assert set(NN_EXAMPLES) <= set(examples.names())
    for name in sorted(set(examples.names()) - set(NN_EXAMPLES)):
        p = examples.path(name)
        assert p.is_file() and p.parent == Path(examples.__file__).parent
        mod = examples.load(name)
        verify(mod)
        assert "main" in mod


@pytest.mark.parametrize("name", sorted(NN_EXAMPLES))
def test_bundled_nn_models_load_laid_out_by_their_plans(name):
    """An nn model is a module of distir.examples.nn, loaded as the tests import it: from_nn with its
    spec, then every weight its plan names laid out (a DTensor), every other parameter a plain input."""
    from fnmatch import fnmatchcase

    from distir.ir.types import DTensorType
    from distir.transform.weights import param_names
    from distir.tvm import from_nn

    p = examples.path(name)
    assert p.is_file() and p == Path(examples.__file__).parent / "nn" / f"{NN_EXAMPLES[name]}.py"
    model, spec, plan = examples.nn.model(name)
    mod = examples.load(name)
    verify(mod)
    assert list(mod.functions) == list(spec) == list(from_nn(model, spec).functions)
    for func in mod.functions.values():
        names = param_names(func)
        laid_out = {n for n, prm in zip(names, func.params) if isinstance(prm.type, DTensorType)}
        named = {n for n in names if any(fnmatchcase(n, pattern) for pattern in plan)}
        assert named and named <= laid_out, (name, func.name, sorted(named - laid_out))


def test_mlp_example_keeps_num_workers_symbolic():
    mod = examples.load("mlp")
    (mesh,) = mod.meshes()
    assert not mesh.is_static
    text = examples.text("mlp")
    assert "R.dist.annotate_sharding" in text and "R.nn.gelu" in text


def test_unknown_example_is_a_clear_error():
    with pytest.raises(DistirError, match="did you mean 'mlp'"):
        examples.path("mpl")


def test_version():
    assert distir.__version__ == metadata.version("distir")


def test_readme_python_example_runs(capsys):
    """The README's "From Python" block is real: it runs and prints one summary per device count."""

    text = (ROOT / "README.md").read_text()
    section = text.split("## From Python", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert block, "README has no Python example"
    exec(compile(block.group(1), "README.md (From Python)", "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out
    assert "1 worker: no collectives; 0 bytes sent per worker (0 in all)" in out  # one device communicates nothing
    for w in (2, 4, 8):
        assert f"{w} workers: all_reduce x2" in out


def test_imports_follow_the_layers():
    """import-linter's contracts (pyproject.toml): layers, no cycles in a package, private modules kept private."""
    import shutil

    root = Path(__file__).resolve().parents[3]
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert exe, "lint-imports (import-linter) is not installed; pip install -e '.[test]'"
    done = subprocess.run([exe, "--no-cache"], cwd=root, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def normalized_demo_lines(text: str) -> list[str]:
    """Demo output with what varies between machines blanked: timings, the package path and the
    rounding error's last digits (float32 sums differ with the BLAS kernel the processor picks)."""
    text = re.sub(r"\d+ ms", "N ms", text)
    text = re.sub(r"largest difference [0-9.e+-]+\)", "largest difference X)", text)
    text = re.sub(r"\((?:\S*)/distir/examples/", "(.../distir/examples/", text)
    return [line.rstrip() for line in text.strip().splitlines()]


def test_readme_demo_output_is_what_the_demo_prints(capsys):
    """In process (the console command's exit status and streams are tests/python/cli/test_cli.py's
    process test, piping its output into a file tests/python/system/test_quiet.py's)."""
    from distir.cli import main as distir_main

    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("## From Python", 1)[0]
    shown = re.findall(r"```\n(distir demo:.*?)```", section, re.DOTALL)
    assert shown, "README quick start shows no demo output"
    assert distir_main.main(["demo"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert normalized_demo_lines(out) == normalized_demo_lines(shown[0])


# What each step imports, in one fresh interpreter (a process of its own per check would cost a
# second or more each): the checks run in the order that keeps each meaningful.
FIRST_USE = """
import contextlib, io, sys
from distir.cli import main as distir_main, opt
for command in (distir_main.main, opt.main):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        command(["--help"])
heavy = sorted({"numpy", "scipy", "tvm", "rich", "distir.transform", "distir.script"} & set(sys.modules))
assert not heavy, f"--help imports {heavy}"

import distir
assert "tvm" not in sys.modules, "import distir imports TVM"

# IR built without the parser prints too: the IR layer loads distir.script by name when asked
from distir.ir.builder import FunctionBuilder, dtensor, mesh, module_of
m = mesh(("num_workers",))
b = FunctionBuilder("main", meshes=[m])
x = b.param("x", dtensor((8,), "float32", m, "S[0]"))
b.ret(x)
mod = module_of(b)
assert "distir.script" not in sys.modules, "the builder imports the text format"
# the ops are declared on their first look-up: the builder's calls need only `import distir`
assert "distir.ops" not in sys.modules, "import distir imports the op declarations"
c = FunctionBuilder("main", meshes=[m])
cx = c.param("x", dtensor((8, "s"), "float32", m, "S[0]"))
with c.dataflow():
    cy = c.call("dist.redistribute", cx, device_mesh=m, placement="R", name="y")
c.ret(cy)
assert "distir.ops" in sys.modules and module_of(c)["main"].result.type.placement.is_replicated
print(mod.script())

from distir import examples
from distir.driver import Driver, random_inputs
mlp = examples.load("mlp")
assert Driver(mlp).run(random_inputs(mlp), 2).ok
assert "distir.tvm" not in sys.modules, "the driver's simulator run imports distir.tvm"
assert "gpt2" in examples.names() and examples.path("gpt2").name == "gpt2.py"
assert not [m for m in sys.modules if m.startswith("distir.examples.nn.")], "listing imports the nn models"
assert "distir.tvm" not in sys.modules, "listing the examples imports distir.tvm"

# import distir, then distir.transform works, as tvm.relax does after import tvm
print(distir.transform.PropagateSharding.__name__, distir.runtime.__name__, distir.tvm.__name__)
"""


def test_imports_happen_on_first_use():
    """``distir --help`` and ``distir-opt --help`` import no numpy, TVM or passes (they start fast,
    scripts/bench_startup.py); ``import distir`` no TVM; printing loads the text format; the driver
    loads distir.tvm only for the tvm backend; subpackages are attributes of ``distir``."""
    proc = subprocess.run([sys.executable, "-c", FIRST_USE], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert 'R.DTensor((8,), "float32", "mesh[0]", "S[0]")' in proc.stdout
    assert proc.stdout.split()[-3:] == ["PropagateSharding", "distir.runtime", "distir.tvm"]
    with pytest.raises(AttributeError, match="no attribute 'tranform'"):
        distir.tranform  # noqa: B018
