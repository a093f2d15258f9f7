"""Parser fuzzing: mutated IR text either parses or raises a DistirError, in bounded time
and memory. Never another exception (RecursionError, MemoryError, TVM's InternalError,
UnicodeEncodeError, ...), whatever the text.

Seeds are valid IR: the bundled examples and the round-trip corpus. Mutations delete,
duplicate, swap and replace tokens and lines, insert characters (unicode, control
characters, lone surrogates), and put hostile expressions in place of a token (deep
nesting, huge literals, long operator chains, division by zero), bare or quoted as a dim.

Quick by default (derandomized, FUZZ_EXAMPLES examples per test); explore with
``HYPOTHESIS_PROFILE=explore FUZZ_EXAMPLES=5000``.
"""

from __future__ import annotations

import os
import re
import time
import tracemalloc
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import distir
from distir import examples
from distir.errors import DistirError
from distir.ir.op import all_ops
from distir.script.parser import decode_source
from test_script_roundtrip import CORPUS

_EXPLORE = os.environ.get("HYPOTHESIS_PROFILE") == "explore"
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "2000" if _EXPLORE else "300"))
SECONDS = 2.0  # of CPU per case (not wall time: a busy machine does not make parsing slower)
PEAK_BYTES = 256 * 1024 * 1024  # per case, as tracemalloc counts Python's allocations

SEEDS = [examples.text(name) for name in examples.names()] + [CORPUS[k] for k in sorted(CORPUS)]
TOKEN = re.compile(r"""[A-Za-z_]\w*|\d+|"[^"\n]*"|'[^'\n]*'|[ \t]+|\n|.""", re.DOTALL)

ODD_CHARS = [
    "\ud800", "\udfff", "\x00", "\x0c", "\x0b", "\x1c", "\x85", "\u2028", "\u2029", "\r", "\r\n", "\ufeff",
    "\t", "\x1b[31m", "é", "ñ", "𝕟", "\u0301", "\u200b", "'", '"', '"""', "\\", "#", ":", "(", ")", "[", "]", "{", "}",
    ",", "=", "@", ".", "-", "*", "//", "%", "**", " ", "\n", "    ",
]

HOSTILE_WORDS = [
    "n // 0", "n % 0", "n // (n - n)", "n % (2 - 2)", "0 // 0", "99999999999999999999", "-9223372036854775809",
    "9223372036854775807 + 1", "n * 4611686018427387904 * 4", "-9223372036854775808", "2 ** 64", "1e999",
    "-1e999", 'float("nan")', 'float("inf")', "T.min(n)", "T.max(n, m, k)", "T.min(n, 0 // 0)", "n / 2",
    "True", "None", "...", "b'x'", "f'{x}'", "1j", "0x10", "1_000", "__import__('os').system('true')",
    "lambda: 0", "[*x]", "{**x}", "x if y else z", "(yield)", "not x", "x < y < z", "x[1:2]", "x.y.z",
    '"\\ud800"', '"\\x00"', '"mesh[99999999999999999999]"', '"S[99999999999999999999]"', '"S[-1]"', '"P[sum]"',
    "R.Tuple()", "R.Tensor()", "R.Shape(ndim=-1)", "R.Shape(ndim=99999999999999999999)", 'R.Prim("str")',
    "R.const(99999999999999999999)", 'R.const(1e999, "float16")', "R.const([[1], [2, 3]])", "R.const([])",
    "R.shape([-1])", "R.prim_value(-1)", "R.prim_value(T.int8(1000))", "R.str('\\ud800')",
    'R.device_mesh((0,), I.Range(0, 0))', 'R.device_mesh((-2,), I.Range(0, -2))', "I.Range(5, 2)",
    "0", "-1", "-2", "1", "3", "7", "2147483648", "-9223372036854775808", "9223372036854775807", "None", "[]",
    "()", "[0, 0]", "[-1]", "[-5]", "[1, 2, 3, 4, 5, 6, 7]", "(0,)", "(-1, 4)", "[None]", '"n"', '"n * 0"', "n - 99",
]


def _nested(k: int) -> str:
    return "(" * k + "n" + ")" * k


HOSTILE = st.one_of(
    st.sampled_from(HOSTILE_WORDS),
    st.integers(1, 400).map(_nested),
    st.integers(1, 20000).map(lambda k: "-" * k + "1"),
    st.integers(1, 20000).map(lambda k: "+".join(["1"] * k)),
    st.integers(1, 3000).map(lambda k: " * ".join(["n"] * k)),
    st.integers(1, 6000).map(lambda k: "9" * k),
    st.integers(1, 4000).map(lambda k: "x" + ".y" * k),
    st.integers(1, 4000).map(lambda k: "f" + "()" * k),
    st.integers(1, 300).map(lambda k: "[" * k + "1" + "]" * k),
    st.integers(1, 300).map(lambda k: "R.Tuple(" * k + 'R.Prim("int64")' + ")" * k),
    st.integers(1, 300).map(lambda k: "(" * k + "x" + ",)" * k),
    st.integers(1, 300).map(lambda k: "{'a': " * k + "1" + "}" * k),
    st.integers(1, 3000).map(lambda k: "T.min(n, " * k + "1" + ")" * k),
    st.integers(1, 1000).map(lambda k: "    " * k + "x = 1"),
)

OP_NAMES = sorted(all_ops())
FRACTION = st.floats(0, 1, exclude_max=True)
INSERTED = st.one_of(st.sampled_from(ODD_CHARS), st.text(max_size=8), st.characters(codec=None).map(str))
MUTATION = st.one_of(
    st.tuples(st.sampled_from(["delete token", "duplicate token", "delete line", "duplicate line"]), FRACTION),
    st.tuples(st.sampled_from(["swap tokens", "copy token", "swap lines"]), FRACTION, FRACTION),
    st.tuples(st.just("insert"), FRACTION, INSERTED),
    st.tuples(st.sampled_from(["number", "string", "name", "any token"]), FRACTION, st.one_of(HOSTILE, INSERTED)),
    st.tuples(st.just("op"), FRACTION, st.sampled_from(OP_NAMES)),
)
_WHERE = {  # what kind of token a replacement goes to
    "number": lambda t: t[:1].isdigit(),
    "string": lambda t: t[:1] in "'\"" and len(t) >= 2,
    "name": lambda t: t[:1].isalpha() or t[:1] == "_",
    "any token": lambda t: True,
}


def _pick(items: list, f: float) -> int:
    return min(int(f * len(items)), len(items) - 1)


def mutate(text: str, mutation: tuple) -> str:
    kind = mutation[0]
    if "line" in kind:
        lines = text.split("\n")
        i = _pick(lines, mutation[1])
        if kind == "delete line":
            del lines[i]
        elif kind == "duplicate line":
            lines.insert(i, lines[i])
        else:
            j = _pick(lines, mutation[2])
            lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines)
    if kind == "insert":
        at = int(mutation[1] * (len(text) + 1))
        return text[:at] + mutation[2] + text[at:]
    if kind == "op":  # call another op with the same arguments
        calls = list(re.finditer(r"\bR\.([a-z_.]+)\(", text)) or [None]
        m = calls[_pick(calls, mutation[1])]
        return text if m is None else text[: m.start(1)] + mutation[2] + text[m.end(1) :]
    tokens = TOKEN.findall(text) or [""]
    if kind in _WHERE:
        # a number becomes an expression, a string gets new contents (a dim, a dtype, a
        # placement, a mesh reference), a name becomes an expression or other characters
        where = [k for k, t in enumerate(tokens) if _WHERE[kind](t)] or [0]
        k = where[_pick(where, mutation[1])]
        old = tokens[k]
        tokens[k] = old[0] + mutation[2] + old[-1] if kind == "string" and len(old) >= 2 else mutation[2]
        return "".join(tokens)
    i = _pick(tokens, mutation[1])
    if kind == "delete token":
        del tokens[i]
    elif kind == "duplicate token":
        tokens.insert(i, tokens[i])
    else:
        j = _pick(tokens, mutation[2])
        if kind == "swap tokens":
            tokens[i], tokens[j] = tokens[j], tokens[i]
        else:
            tokens[i] = tokens[j]
    return "".join(tokens)


def parses_or_raises_a_distir_error(text: str) -> None:
    """distir.parse(text) returns or raises a DistirError, quickly, within bounded memory,
    and warns nothing (Python's warnings about the text as Python are not the parser's)."""
    tracemalloc.start()
    start = time.process_time()
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            distir.parse(text)
    except DistirError as err:
        message = str(err)
        assert message.startswith("error: ")
    finally:
        elapsed = time.process_time() - start
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert not warned, [str(w.message) for w in warned]
    assert elapsed < SECONDS, f"{elapsed:.2f}s to parse {len(text)} characters"
    assert peak < PEAK_BYTES, f"{peak / 2**20:.0f} MiB to parse {len(text)} characters"


def test_seeds_are_valid_ir():
    for text in SEEDS:
        distir.parse(text)


_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


@_SETTINGS
@given(seed=st.integers(0, len(SEEDS) - 1), mutations=st.lists(MUTATION, min_size=1, max_size=4))
def test_mutated_ir_parses_or_raises_a_distir_error(seed, mutations):
    text = SEEDS[seed]
    for m in mutations:
        text = mutate(text, m)
    parses_or_raises_a_distir_error(text)


@_SETTINGS
@given(seed=st.integers(0, len(SEEDS) - 1), at=FRACTION, junk=st.binary(min_size=1, max_size=16))
def test_mutated_bytes_decode_and_parse_or_raise_a_distir_error(seed, at, junk):
    data = SEEDS[seed].encode()
    i = int(at * (len(data) + 1))
    data = data[:i] + junk + data[i:]
    try:
        text = decode_source(data, "<bytes>")
    except DistirError as err:
        assert str(err).startswith("error: <bytes>: not UTF-8 text (byte 0x")
        return
    parses_or_raises_a_distir_error(text)


@pytest.mark.parametrize("word", HOSTILE_WORDS)
def test_each_hostile_word_as_a_number_and_as_a_string(word):
    seed = SEEDS[HOSTILE_WORDS.index(word) % len(SEEDS)]  # every seed gets some words
    for where in ("number", "string"):
        for f in (0.2, 0.7):
            parses_or_raises_a_distir_error(mutate(seed, (where, f, word)))


@pytest.mark.parametrize("char", ODD_CHARS)
def test_each_odd_character_inserted(char):
    seed = SEEDS[ODD_CHARS.index(char) % len(SEEDS)]
    for f in (0.3, 0.8):
        parses_or_raises_a_distir_error(mutate(seed, ("insert", f, char)))
