"""What the parser reads: distir.parse takes only text, distir.parse_file reads a file,
input is UTF-8 of at most a documented size, and every failure is a DistirError.
Also how distir-opt reads its FILE argument and stdin."""

from __future__ import annotations

import io
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import distir
from distir.cli import opt
from distir.errors import ParseError
from distir.script import parser, source

MODULE = '''\
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((4, 8), dtype="float32")) -> R.Tensor((4, 8), dtype="float32"):
        y = R.nn.relu(x)
        return y
'''

SECRET = "DISTIR_TEST_SECRET_VALUE_41"


# -- distir.parse takes text only ----------------------------------------------------------


def test_parse_never_reads_a_file_named_by_its_text(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(f"token = {SECRET}\n")
    with pytest.raises(ParseError) as info:
        distir.parse(str(secret))
    shown = str(info.value)
    assert SECRET not in shown
    assert str(secret) in shown  # the error shows the text it was given, and nothing more
    assert "distir.parse_file(path)" in shown


def test_parse_of_proc_self_environ_does_not_disclose_the_environment():
    # /proc/self/environ shows a process's environment as it started: use a fresh process
    code = (
        "import distir\n"
        "try:\n    distir.parse('/proc/self/environ')\n"
        "except distir.ParseError as err:\n    print(err)\n"
    )
    env = dict(os.environ, DISTIR_TEST_SECRET=SECRET, PYTHONPATH=str(Path(distir.__file__).parent.parent))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True)
    assert "1 | /proc/self/environ" in proc.stdout
    assert SECRET not in proc.stdout and SECRET not in proc.stderr


def test_parse_of_a_valid_module_file_name_does_not_parse_the_file(tmp_path):
    p = tmp_path / "m.py"
    p.write_text(MODULE)
    with pytest.raises(ParseError, match=r"distir\.parse reads its argument as IR text, never as a file name"):
        distir.parse(str(p))
    assert distir.parse_file(str(p))["main"] is not None


def test_parse_refuses_paths_and_other_types_with_a_hint(tmp_path):
    p = tmp_path / "m.py"
    p.write_text(MODULE)
    with pytest.raises(ParseError, match=r"distir.parse_file\(path\)"):
        distir.parse(p)
    for bad in (MODULE.encode(), None, 3):
        with pytest.raises(ParseError, match="takes IR text"):
            distir.parse(bad)


def test_parse_file_names_the_file_in_errors(tmp_path):
    p = tmp_path / "bad.py"
    p.write_text(MODULE.replace("R.nn.relu(x)", "R.nn.relu(z)"))
    with pytest.raises(ParseError) as info:
        distir.parse_file(p)
    assert info.value.span.source_name == str(p) and info.value.span.line == 5
    assert f" --> {p}:5:" in str(info.value)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "missing.py", "no such file"),
        (lambda d: d, "it is a directory"),
        (lambda d: str(d / "a\0b"), "cannot read"),
    ],
)
def test_parse_file_errors_are_parse_errors(tmp_path, make, message):
    with pytest.raises(ParseError, match=message):
        distir.parse_file(make(tmp_path))


def test_parse_file_refuses_a_non_path():
    with pytest.raises(ParseError, match="takes a path"):
        distir.parse_file(0)  # never a file descriptor


# -- UTF-8 only ------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["\ud800", MODULE.replace("relu(x)", "relu(x)  # \udcff"), "x = '\udfff'\n"])
def test_lone_surrogates_are_parse_errors(text):
    with pytest.raises(ParseError) as info:
        distir.parse(text)
    err = info.value
    assert "lone surrogate" in err.message and err.span is not None
    str(err).encode("utf-8")  # the message itself is UTF-8 text


def test_lone_surrogate_is_positioned():
    text = MODULE.replace("relu(x)", "relu(x)  # \udcff")
    with pytest.raises(ParseError) as info:
        distir.parse(text)
    assert (info.value.span.line, info.value.span.column) == (5, 29)


def test_parse_file_refuses_bytes_that_are_not_utf8(tmp_path):
    p = tmp_path / "latin1.py"
    p.write_bytes(MODULE.encode() + b"# caf\xe9\n")
    with pytest.raises(ParseError) as info:
        distir.parse_file(p)
    offset = len(MODULE.encode()) + 5
    assert str(info.value) == f"error: {p}: not UTF-8 text (byte 0xe9 at offset {offset})"


def test_parse_file_accepts_a_byte_order_mark(tmp_path):
    p = tmp_path / "bom.py"
    p.write_bytes(b"\xef\xbb\xbf" + MODULE.encode())
    assert distir.parse_file(p)["main"] is not None


def test_lines_are_numbered_as_python_numbers_them():
    # \x0c and \u2028 end lines for str.splitlines but not for Python: the caret stays on the right line
    text = MODULE.replace("    @R.function\n", "    # a\x0cb\u2028c\n    @R.function\n").replace("relu(x)", "relu(z)")
    with pytest.raises(ParseError) as info:
        distir.parse(text)
    span = info.value.span
    assert span.line == 6 and "R.nn.relu(z)" in span.source_line


# -- size limit ------------------------------------------------------------------------------


def test_inputs_larger_than_the_limit_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(source, "MAX_INPUT_BYTES", len(MODULE) - 1)
    p = tmp_path / "m.py"
    p.write_text(MODULE)
    for call in (lambda: distir.parse_file(p), lambda: distir.parse(MODULE)):
        with pytest.raises(ParseError, match="input is larger than 64 MiB"):
            call()
    monkeypatch.setattr(source, "MAX_INPUT_BYTES", len(MODULE))
    assert distir.parse_file(p)["main"] is not None


def test_read_stream_reads_at_most_the_limit_plus_one_byte(monkeypatch):
    monkeypatch.setattr(source, "MAX_INPUT_BYTES", 100)

    requested: list[int] = []

    class Endless(io.RawIOBase):
        def readable(self):
            return True

        def read(self, n=-1):
            assert n is not None and n >= 0, "an unbounded read"
            requested.append(n)
            return b" " * n

    with pytest.raises(ParseError, match="larger than"):
        source.read_stream(Endless(), "<stdin>")
    assert requested == [101]


# -- distir-opt ------------------------------------------------------------------------------


class _Stdin:
    def __init__(self, data: bytes):
        self.buffer = io.BytesIO(data)


def test_opt_random_bytes_on_stdin_is_one_clean_error(monkeypatch, capsys):
    data = random.Random(0).randbytes(100_000)
    monkeypatch.setattr(sys, "stdin", _Stdin(data))
    assert opt.main(["-"]) == 1
    err = capsys.readouterr().err
    first = data.decode("utf-8", errors="replace").index("\ufffd")
    assert err == f"distir-opt: error: <stdin>: not UTF-8 text (byte 0x{data[first]:02x} at offset {first})\n"


def test_opt_reads_utf8_stdin_as_bytes(monkeypatch, capsys):
    text = MODULE.replace("return y", "return y  # ünïcode")
    monkeypatch.setattr(sys, "stdin", _Stdin(text.encode()))
    assert opt.main(["-"]) == 0
    assert "R.nn.relu" in capsys.readouterr().out


def test_opt_stdin_larger_than_the_limit(monkeypatch, capsys):
    monkeypatch.setattr(source, "MAX_INPUT_BYTES", 64)
    monkeypatch.setattr(sys, "stdin", _Stdin(MODULE.encode()))
    assert opt.main(["-"]) == 1
    assert capsys.readouterr().err == "distir-opt: error: <stdin>: input is larger than 64 MiB, the limit for one module\n"


def test_opt_reads_a_file_argument_with_parse_file(tmp_path, monkeypatch, capsys):
    p = tmp_path / "m.py"
    p.write_text(MODULE)
    seen = []
    real = parser.parse_file
    monkeypatch.setattr(parser, "parse_file", lambda path, source_name=None: seen.append(path) or real(path, source_name))
    assert opt.main([str(p)]) == 0
    assert seen == [str(p)]


def _run_opt(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(Path(distir.__file__).parent.parent), LC_ALL="C")
    return subprocess.run(
        [sys.executable, "-m", "distir.cli.opt", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
        env=env,
    )


def test_opt_dev_zero_is_refused_with_bounded_memory(capsys):
    assert opt.main(["/dev/zero"]) == 1  # it reads at most 64 MiB and one byte
    assert capsys.readouterr().err == "distir-opt: error: /dev/zero: input is larger than 64 MiB, the limit for one module\n"


def test_opt_random_bytes_on_stdin_in_a_c_locale_process():
    data = random.Random(1).randbytes(100_000)
    proc = _run_opt("-", stdin=data)
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert err.startswith("distir-opt: error: <stdin>: not UTF-8 text (byte 0x") and err.count("\n") == 1, err


def test_python_warnings_about_the_text_are_not_raised():
    # "\e" is an invalid escape sequence to Python (a DeprecationWarning, or under -W error a
    # SyntaxError): in IR it is just a string with a backslash
    import warnings

    text = MODULE.replace("        y = R.nn.relu(x)\n", '        R.func_attr({"note": "a\\e"})\n        y = R.nn.relu(x)\n')
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        mod = distir.parse(text)
    assert not warned, [str(w.message) for w in warned]
    assert mod["main"].attrs["note"] == "a\\e"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        distir.parse(text)


def test_opt_stdin_errors_have_no_library_hint(monkeypatch, capsys):
    # the hint to call distir.parse_file is for Python callers of distir.parse
    monkeypatch.setattr(sys, "stdin", _Stdin(b"model.py\n"))
    assert opt.main(["-"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("distir-opt: error: ") and " --> <stdin>:1:1" in err and "parse_file" not in err
