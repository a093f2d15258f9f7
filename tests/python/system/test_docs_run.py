"""Every Python and shell block of README.md and docs/*.md runs, and shown output is what the code prints.

A page's Python blocks run in order as one session (a later block uses what an earlier one
defined), in a scratch folder that holds the files the commands name. A block that is not a
whole program says so on the line before its fence:

- ``<!-- fragment: why -->``: a piece of a program or of IR (a signature, a few bindings); it is
  only parsed, so it must still be Python syntax;
- ``<!-- not run: why -->``: a block that cannot run in a test (installing the package, the whole
  test suite, a benchmark of minutes); there must be few of them.

A block after ``<!-- output -->`` shows what the page's Python block before it prints; each of its
lines must be printed (whitespace collapsed; floats in exponent notation, such as a largest
difference whose last digits depend on the order of a sum, are compared to one significant digit).

Shell blocks (```` ```bash ````, and blocks whose lines start with ``$ ``) run command by command:
``distir`` and ``distir-opt`` in process through their ``main([...])``, ``python -c`` in process,
with ``|``, ``<`` and ``>`` handled here. After a ``$ `` command the shown output must appear in
what it prints, line by line (whitespace collapsed; lines with timings, and ``...``, are skipped).
The files the commands name are the ones the README's ``distir example`` commands write
(``distir.cli.example.main_files``: ``model.py`` the bundled attention block, ``plain.py`` the MLP
without layouts, ``llama_nn.py`` and ``tp.json`` the shipped nn Llama and its plan, ``mesh2d.py`` a
module on a 2-D mesh), made by the ``workdir`` fixture for the pages that use them without writing them.
"""

from __future__ import annotations

import ast
import contextlib
import io
import linecache
import os
import re
import shlex
import sys
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"^<!--\s*(fragment|not run|output)(?::\s*(.+?))?\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
# A timing in shown output (``86.5 ms``, ``2.3 s``, ``104 µs``): such a line differs from run to run.
TIMING = re.compile(r"\d(\.\d+)?\s?(ms|µs|us|s)\b|\d+(\.\d+)?s\b")
MAX_NOT_RUN = 6


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str  # "python", "bash", "console" (lines starting with "$ "), "output" (marked) or another
    text: str
    marker: str | None  # "fragment", "not run" or None
    reason: str | None

    @property
    def id(self) -> str:
        return f"{self.page.name}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        j = i + 1
        while not lines[j].startswith(indent + "```"):
            j += 1
        text = textwrap.dedent("\n".join(lines[i + 1 : j]))
        if not lang and text.startswith("$ "):
            lang = "console"
        marked = MARKER.match(lines[i - 1].strip()) if i else None
        if marked and marked.group(1) == "output":
            lang, marked = "output", None
        out.append(Block(page, i + 1, lang, text, *(marked.groups() if marked else (None, None))))
        i = j + 1
    return out


ALL = [b for page in PAGES for b in blocks_of(page)]
CODE = [b for b in ALL if b.lang in ("python", "bash", "console")]


def test_blocks_found_and_few_not_run():
    assert len([b for b in CODE if b.lang == "python"]) >= 15
    assert len([b for b in CODE if b.lang != "python"]) >= 8
    not_run = [b.id for b in CODE if b.marker == "not run"]
    assert len(not_run) <= MAX_NOT_RUN, not_run
    stray = [b.id for b in ALL if b.marker and b.lang not in ("python", "bash", "console")]
    assert OUTPUT, "no <!-- output --> block"
    assert not stray, f"markers on blocks that are not code: {stray}"


# ---------------------------------------------------------------------------------------------
# the scratch folder: the files the docs' commands name


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from distir.cli.example import main_files

    d = tmp_path_factory.mktemp("docs")
    (d / "python").symlink_to(ROOT / "python")
    (d / "scripts").symlink_to(ROOT / "scripts")
    (d / "docs" / "images").mkdir(parents=True)
    for name, text in main_files().items():  # what the README's `distir example` commands write
        (d / name).write_text(text)
    old = os.getcwd()
    os.chdir(d)
    yield d
    os.chdir(old)


# ---------------------------------------------------------------------------------------------
# Python: one session per page


class Session:
    """A page's Python blocks run so far, in one module whose source file holds them all (so
    `inspect` finds the classes `@I.ir_module` parses)."""

    def __init__(self, page: Path, tmp: Path):
        self.name = "docs_" + re.sub(r"\W", "_", page.stem)
        self.module = types.ModuleType(self.name)
        self.file = tmp / f"{self.name}.py"
        self.module.__file__ = str(self.file)
        self.source: list[str] = []
        self.done: set[int] = set()
        self.printed: dict[int, str] = {}  # what each Python block printed, by its line

    def run(self, block: Block) -> str:
        offset = block.line  # the block's first line is the fence's line + 1
        padded = "\n" * offset + block.text
        self.source += [""] * (offset - len(self.source)) + block.text.split("\n")
        self.file.write_text("\n".join(self.source) + "\n")
        linecache.checkcache(str(self.file))
        code = compile(padded, str(self.file), "exec")
        sys.modules[self.name] = self.module
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(code, self.module.__dict__)
        finally:
            sys.modules.pop(self.name, None)
            self.done.add(block.line)
        return out.getvalue()


@pytest.fixture(scope="module")
def sessions(workdir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sessions")
    made: dict[Path, Session] = {}

    def get(block: Block) -> Session:
        s = made.setdefault(block.page, Session(block.page, tmp))
        for earlier in blocks_of(block.page):  # blocks a test selection skipped run first
            if earlier.line >= block.line:
                break
            if earlier.line not in s.done and earlier.marker is None and earlier.lang in ("python", "bash"):
                run_block(earlier, s)
        return s

    return get


def run_block(block: Block, session: Session) -> None:
    if block.lang == "python":
        session.printed[block.line] = session.run(block)
        session.done.add(block.line)
    elif block.lang == "bash":
        for command in commands_of(block.text):
            rc, out = run_command(command)
            assert rc == 0, f"{block.id}: `{command}` exited with {rc}:\n{out}"
        session.done.add(block.line)
    else:  # console
        for command, shown in console_steps(block.text):
            rc, out = run_command(command)
            check_shown(block, command, shown, out)


PY = [b for b in CODE if b.lang == "python"]
SHELL = [b for b in CODE if b.lang != "python"]


@pytest.mark.parametrize("block", PY, ids=[b.id for b in PY])
def test_python_block(block, sessions):
    if block.marker == "fragment":
        ast.parse(block.text, filename=block.id)
        return
    assert block.marker is None, f"{block.id}: a Python block is run or parsed: {block.reason}"
    run_block(block, sessions(block))


OUTPUT = [b for b in ALL if b.lang == "output"]
FLOAT = re.compile(r"\d+(\.\d+)?e[-+]\d+")


def rounded(line: str) -> str:
    return FLOAT.sub(lambda m: f"{float(m.group(0)):.0e}", normalized(line))


@pytest.mark.parametrize("block", OUTPUT, ids=[b.id for b in OUTPUT])
def test_shown_output_is_printed(block, sessions):
    session = sessions(block)
    before = [line for line in session.printed if line < block.line]
    assert before, f"{block.id}: an output block with no Python block before it"
    printed = {rounded(x) for x in session.printed[max(before)].split("\n")}
    missing = [x for x in block.text.split("\n") if x.strip() and rounded(x) not in printed]
    assert not missing, f"{block.id}: the block before no longer prints:\n" + "\n".join(missing)


@pytest.mark.parametrize("block", SHELL, ids=[b.id for b in SHELL])
def test_shell_block(block, sessions):
    if block.marker == "not run":
        return  # counted by test_blocks_found_and_few_not_run
    assert block.marker is None, f"{block.id}: a shell block is run or marked not run"
    run_block(block, sessions(block))


# ---------------------------------------------------------------------------------------------
# shell: commands run in process


def commands_of(text: str) -> list[str]:
    """The block's commands: a line, or lines joined while a quote is open."""
    out, acc = [], ""
    for line in text.split("\n"):
        acc = f"{acc}\n{line}" if acc else line
        try:
            shlex.split(acc, comments=True)
        except ValueError:
            continue  # an open quote: the command goes on
        if shlex.split(acc, comments=True):
            out.append(acc)
        acc = ""
    assert not acc, f"unclosed quote in {text!r}"
    return out


def console_steps(text: str) -> list[tuple[str, list[str]]]:
    steps: list[tuple[str, list[str]]] = []
    for line in text.split("\n"):
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


def run_command(command: str) -> tuple[int, str]:
    """Run one shell command line in process; return its exit status and what it printed
    (stdout, then stderr)."""
    lex = shlex.shlex(command, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    tokens = list(lex)
    stages, cur = [], []
    for t in tokens:
        if t == "|":
            stages.append(cur)
            cur = []
        else:
            cur.append(t)
    stages.append(cur)
    stdin = None
    if stages[0][0] == "cat":
        stdin = Path(stages[0][1]).read_text()
        stages = stages[1:]
    argv, target = stages[0], None
    if "<" in argv:
        k = argv.index("<")
        stdin, argv = Path(argv[k + 1]).read_text(), argv[:k] + argv[k + 2 :]
    if ">" in argv:
        k = argv.index(">")
        target, argv = argv[k + 1], argv[:k] + argv[k + 2 :]
    rc, out, err = call(argv, stdin)
    for stage in stages[1:]:
        assert stage[0] == "grep" and len(stage) == 2, f"unsupported pipe stage {stage}"
        out = "".join(line for line in out.splitlines(keepends=True) if stage[1] in line)
    if target is not None:
        Path(target).write_text(out)
        out = ""
    return rc, out + err


def call(argv: list[str], stdin: str | None) -> tuple[int, str, str]:
    from distir.cli import main as distir_main
    from distir.cli import opt

    out, err = io.StringIO(), io.StringIO()
    old_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin or "")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if argv[0] == "distir":
                rc = distir_main.main(argv[1:])
            elif argv[0] == "distir-opt":
                rc = opt.main(argv[1:])
            elif argv[0] == "python" and argv[1] == "-c":
                exec(compile(argv[2], "<python -c>", "exec"), {"__name__": "__main__"})
                rc = 0
            else:
                raise AssertionError(f"a shell command the docs test cannot run in process: {argv}")
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    finally:
        sys.stdin = old_stdin
    return rc, out.getvalue(), err.getvalue()


def normalized(line: str) -> str:
    return " ".join(line.split())


def check_shown(block: Block, command: str, shown: list[str], printed: str) -> None:
    got = {normalized(line) for line in printed.split("\n")}
    missing = [
        line
        for line in shown
        if line.strip() and line.strip() != "..." and not TIMING.search(line) and "_seconds" not in line
        and normalized(line) not in got
    ]
    assert not missing, f"{block.id}: `{command}` no longer prints:\n" + "\n".join(missing) + "\n--- it prints:\n" + printed
