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

import ast
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
from distir.ir import Call, DeviceMesh, Placement, Var, sym, sym_parse
from distir.ir.op import all_ops
from distir.script.source import decode_source
from test_script_roundtrip import CORPUS

_EXPLORE = os.environ.get("HYPOTHESIS_PROFILE") == "explore"
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "2000" if _EXPLORE else "300"))
SECONDS = 2.0  # of CPU per case (not wall time: a busy machine does not make parsing slower)
PEAK_BYTES = 256 * 1024 * 1024  # per case, as tracemalloc counts Python's allocations

SEEDS = [examples.text(name) for name in examples.ir_names()] + [CORPUS[k] for k in sorted(CORPUS)]
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


# ---------------------------------------------------------------- the seeds, read twice

_NOT_OPS = {"const", "shape", "prim_value", "str", "output", "dataflow", "tuple"}  # R.* calls that make no binding's op


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def _literal(node: ast.AST):
    """A keyword's value as Python reads it, lists for tuples; ``None`` marks one that is not a literal."""
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return _NOT_LITERAL
    return _plain(value)


_NOT_LITERAL = object()


def _plain(value):
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _dim_text(node: ast.AST) -> int | str:
    if isinstance(node, ast.Constant):
        return node.value
    return ast.unparse(node)  # a T.int64() variable by name, or an expression of them


def seed_as_python_reads_it(text: str) -> dict[str, dict]:
    """Each @R.function of ``text``, read by Python's own ast (not distir's parser): its
    parameters (name, annotation, shape, dtype, mesh, placement) and, in source order, each
    binding of an op: (name, op, the names passed, the keywords and their literal values)."""
    out = {}
    for fn in ast.walk(ast.parse(text)):
        if not isinstance(fn, ast.FunctionDef) or not any(
            _dotted(d.func if isinstance(d, ast.Call) else d) == "R.function" for d in fn.decorator_list
        ):
            continue
        params = []
        for a in fn.args.args:
            ann = a.annotation
            assert isinstance(ann, ast.Call), ast.unparse(ann)
            given = [*ann.args, *(k.value for k in ann.keywords)]  # shape, dtype, then mesh and placement
            params.append((a.arg, _dotted(ann.func), [_dim_text(d) for d in given[0].elts],
                           *(ast.literal_eval(g) for g in given[1:])))
        bindings = []
        assignments = (n for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AnnAssign)))
        for node in sorted(assignments, key=lambda n: n.lineno):
            call = node.value
            name = _dotted(call.func) if isinstance(call, ast.Call) else ""
            if not name.startswith("R.") or name[2:] in _NOT_OPS:
                continue
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            names = [x.id if isinstance(x, ast.Name) else None for x in call.args]
            bindings.append((target.id, name[2:], names, {k.arg: _literal(k.value) for k in call.keywords}))
        out[fn.name] = {"params": params, "bindings": bindings}
    return out


def _same_dim(written: int | str, parsed) -> bool:
    if isinstance(written, int):
        return parsed == written
    return sym.prove_equal(sym_parse.parse(written), parsed)


def _attr_value(v):
    if isinstance(v, (list, tuple)):
        return [_attr_value(x) for x in v]
    return v


def _same_value(written, parsed, meshes) -> bool:
    """Whether the parsed attribute is the written one: a mesh by its place in the module's
    list, a placement by its text (spaces aside), anything else as Python compares it."""
    if isinstance(parsed, DeviceMesh):
        m = re.fullmatch(r"mesh\[(\d+)\]", str(written))
        return m is not None and meshes[int(m.group(1))] is parsed
    if isinstance(parsed, Placement):
        return str(parsed).replace(" ", "") == str(written).replace(" ", "")
    return _attr_value(parsed) == written


@pytest.mark.parametrize("index", range(len(SEEDS)))
def test_seeds_parse_to_what_they_say(index):
    """Every seed parses, and the module holds what Python's ast reads in the text: the same
    functions, parameters with the written shapes, dtypes, meshes and placements, and the same
    bindings in order, each the written op on the written names with every written attribute
    at its written value (and the others at the op's defaults). A parser that dropped or
    reordered anything, or lost an attribute, fails here rather than mutating an empty seed."""
    text = SEEDS[index]
    mod = distir.parse(text)
    written = seed_as_python_reads_it(text)
    assert written, "a seed with no @R.function"
    assert sorted(mod.functions) == sorted(written)
    meshes = mod.global_infos.get("mesh", ())
    for fname, want in written.items():
        fn = mod[fname]
        assert [p.name for p in fn.params] == [w[0] for w in want["params"]], fname
        for p, (name, kind, shape, dtype, *where) in zip(fn.params, want["params"]):
            t = p.type
            assert type(t).__name__ == {"R.Tensor": "TensorType", "R.DTensor": "DTensorType"}[kind], (fname, name)
            assert t.dtype == dtype and len(t.shape) == len(shape), (fname, name, t)
            assert all(_same_dim(w, d) for w, d in zip(shape, t.shape)), (fname, name, shape, t.shape)
            if kind == "R.DTensor":
                mesh, placement = where
                assert _same_value(mesh, t.mesh, meshes), (fname, name, t.mesh)
                assert _same_value(placement, t.placement, meshes), (fname, name, t.placement)
        calls = [b for block in fn.blocks for b in block.bindings if isinstance(b.value, Call)]
        assert [(b.var.name, b.value.op.name) for b in calls] == [w[:2] for w in want["bindings"]], fname
        for b, (name, op, args, keywords) in zip(calls, want["bindings"]):
            got_args = [a.name if isinstance(a, Var) else None for a in b.value.args]
            assert [g for g, w in zip(got_args, args) if w is not None] == [w for w in args if w is not None], (
                fname, name, got_args)
            attrs = dict(b.value.attrs)
            for key, value in keywords.items():
                assert key in attrs, (fname, name, key)
                if value is not _NOT_LITERAL:
                    assert _same_value(value, attrs[key], meshes), (fname, name, key, attrs[key])
            for key in attrs.keys() - keywords.keys():  # filled in: the declared default
                assert _attr_value(attrs[key]) == _attr_value(b.value.op.param(key).default), (fname, name, key)


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
