"""distir.ir.sym, the one symbolic module: its analyzer's assumptions and its helpers."""

from __future__ import annotations

import ast
import itertools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distir.errors import DistirError
from distir.ir import sym, sym_parse

P = sym_parse.parse
n, m = sym.var("n"), sym.var("m")


def ceil_ref(a: int, b: int) -> int:
    """The smallest q with q * b >= a (b > 0), by search from a floor-free bound."""
    q = a // b
    while q * b < a:
        q += 1
    while (q - 1) * b >= a:
        q -= 1
    return q


# ---------------------------------------------------------------- one analyzer, one assumption

EXPRS = ["n", "m", "n + 1", "n - 1", "n * 2", "n + m", "n * m", "0", "1", "4", "T.max(n, m)", "T.min(n, 4)", "n % 4"]


@pytest.mark.parametrize("a,b", list(itertools.product(EXPRS, repeat=2)))
def test_prove_ge_agrees_with_prove_and_equal(a, b):
    x, y = P(a), P(b)
    ge = sym.prove_ge(x, y)
    assert ge == sym.prove(sym.to_prim(x) >= sym.to_prim(y))
    assert sym.prove_le(y, x) == ge
    assert sym.prove_lt(x, y) == sym.prove(sym.to_prim(x) < sym.to_prim(y))
    if sym.equal(x, y):
        assert ge and sym.prove_ge(y, x)
    if ge and sym.prove_ge(y, x):
        assert sym.equal(x, y) and sym.prove_equal(x, y)
    if sym.prove_lt(x, y):
        assert not ge and not sym.equal(x, y)


def test_every_variable_is_non_negative():
    fresh = sym.var("a_size_no_other_test_uses")
    for v in (n, sym.var("worker_id"), fresh):
        assert sym.prove_ge(v, 0)
        assert not sym.prove_lt(v, 0)
        assert sym.identical(sym.max_(v, 0), v)
        assert sym.min_(v, 0) == 0
        assert not sym.prove_ge(v, 1)  # zero is allowed: a worker id starts there
    assert sym.prove_ge(P("n + 1"), 1)
    assert not sym.prove_ge(P("n - 1"), 0)
    assert sym.prove_ge(P("n * m"), 0)
    assert sym.prove_lt(n, P("n + 1")) and not sym.prove_lt(n, n)
    assert sym.identical(P("T.max(n, 0)"), n)  # parsing simplifies under the same assumption


def test_simplify_uses_the_assumption_everywhere():
    raw = sym_parse.from_ast(ast.parse("T.max(n, 0) + T.min(0, m)", mode="eval").body)
    assert not sym.identical(raw, n)
    assert sym.identical(sym.simplify(raw), n)
    assert sym.equal(raw, n) and sym.prove_equal(raw, n)
    assert sym.identical(sym.clamp(n, 0, P("n + 5")), n)


def test_prove_equal_does_not_read_division_as_exact():
    # shapes' // is exact (specialization checks it), so equal says yes; the analyzer alone cannot
    x = P("n // 4 * 4")
    assert sym.equal(x, n)
    assert not sym.prove_equal(x, n)
    assert not sym.prove_ge(x, n) or not sym.prove_le(x, n)


def test_assume_positive_is_scoped():
    assert not sym.prove_le(m, P("m * n"))  # n may be 0
    with sym.assume_positive({"n"}):
        assert sym.prove_le(m, P("m * n"))
        assert sym.prove_ge(n, 1)
    assert not sym.prove_le(m, P("m * n"))
    assert not sym.prove_ge(n, 1)
    with pytest.raises(RuntimeError, match="leaving the scope by an exception"), sym.assume_positive({"n", "m"}):
        assert sym.prove_ge(P("n * m"), 1)
        raise RuntimeError("leaving the scope by an exception")
    assert not sym.prove_ge(P("n * m"), 1)


def test_int_fast_paths_stay_ints():
    assert sym.prove_ge(3, 2) and not sym.prove_ge(2, 3)
    assert sym.prove_le(2, 2) and not sym.prove_lt(2, 2)
    assert sym.prove_equal(5, 5) and not sym.prove_equal(5, 6)
    for f, args in ((sym.ceildiv, (7, 2)), (sym.clamp, (7, 0, 3)), (sym.min_, (1, 2)), (sym.max_, (1, 2))):
        assert type(f(*args)) is int
    assert sym.to_prim(3).value == 3 and str(sym.to_prim(3).ty) == "int64"
    assert sym.to_prim(n) is n


# ---------------------------------------------------------------- ceildiv

DIVIDENDS = [0, 1, 2, 3, 4, 5, 6, 7, 11, 12, 13, 96, 97, 2**31 - 1, 2**62 + 1]
DIVISORS = [1, 2, 3, 4, 5, 7, 13, 97, 2**61 - 1]  # primes, powers of two, a Mersenne prime


@pytest.mark.parametrize("b", DIVISORS)
def test_ceildiv_ints(b):
    for a in DIVIDENDS + [b - 1, b, b + 1, 10**30 + 1]:
        assert sym.ceildiv(a, b) == ceil_ref(a, b)
    assert sym.ceildiv(0, b) == 0
    if b > 1:
        assert sym.ceildiv(b - 1, b) == 1  # below the divisor: one (partial) piece
        assert sym.ceildiv(1, b) == 1


@pytest.mark.parametrize("b", [1, 2, 3, 4, 7, 13])
def test_ceildiv_symbolic_dividend(b):
    c = sym.ceildiv(n, b)
    for a in [0, 1, b - 1, b, b + 1, 2 * b - 1, 97, 1009]:
        assert sym.evaluate(c, {"n": a}) == ceil_ref(a, b)
    assert sym.identical(sym.ceildiv(sym.mul(n, b), b), n)
    if b > 1:
        assert not sym.equal(c, sym.floordiv(n, b))
        assert sym.prove_ge(sym.mul(c, b), n)
        assert sym.prove_lt(sym.mul(c, b), sym.add(n, b))


def test_block_sizes_multiplied_out_print_as_ceildiv_and_read_back_equal():
    w = sym.var("num_workers")
    cases = {
        # the simplifier's 383 // w * 2048 + 133120 is a block of ceil(384 / w) rows of 2048 bytes
        sym.add(sym.mul(sym.ceildiv(384, w), 2048), 131072): "T.ceildiv(384, num_workers) * 2048 + 131072",
        sym.add(sym.add(sym.mul(sym.ceildiv(384, w), 2048), 131072), sym.mul(sym.ceildiv(n, w), 4)):
            "T.ceildiv(384, num_workers) * 2048 + T.ceildiv(n, num_workers) * 4 + 131072",
        sym.add(sym.mul(sym.ceildiv(384, w), 3), 3): "T.ceildiv(384, num_workers) * 3 + 3",
        # an even split stays a floor division (384 -> 385 is not rounder)
        sym.add(sym.mul(sym.floordiv(384, w), 2048), 131072): "384 // num_workers * 2048 + 131072",
        # not enough constant to take the 1 back: left as it is
        sym.add(sym.mul(sym.floordiv(383, w), 2048), 5): "383 // num_workers * 2048 + 5",
    }
    for e, text in cases.items():
        assert sym.to_str(e) == text
        back = sym_parse.parse(text)
        for k in (1, 2, 3, 5, 7, 384, 1000):
            assert sym.evaluate(back, {"num_workers": k, "n": 11}) == sym.evaluate(e, {"num_workers": k, "n": 11})


def test_substituting_a_zero_divisor_is_a_symbolic_error():
    with pytest.raises(sym.SymbolicError, match="divides by zero at m=0"):
        sym.substitute(sym.floordiv(n, m), {"m": 0})


def test_ceildiv_symbolic_divisor():
    c = sym.ceildiv(n, m)
    for a, b in itertools.product([0, 1, 2, 3, 5, 12, 13, 97], [1, 2, 3, 5, 13, 97]):
        assert sym.evaluate(c, {"n": a, "m": b}) == ceil_ref(a, b)
    assert sym.identical(sym.ceildiv(P("n * m"), m), n)
    assert sym.ceildiv(P("2 * m"), m) == 2
    assert sym.ceildiv(0, m) == 0
    c7 = sym.ceildiv(7, m)
    assert [sym.evaluate(c7, {"m": b}) for b in (1, 2, 3, 7, 8, 100)] == [7, 4, 3, 1, 1, 1]


def test_ceildiv_prints_and_parses_back():
    for c in (sym.ceildiv(n, 4), sym.ceildiv(n, m), sym.ceildiv(P("n * 3 + 1"), 8), sym.ceildiv(7, m)):
        text = sym.to_str(c)
        assert sym.identical(P(text), c), text


@given(a=st.integers(0, 10**6), b=st.integers(1, 10**4))
def test_ceildiv_property(a, b):
    q = sym.ceildiv(a, b)
    assert q * b >= a > (q - 1) * b
    assert sym.evaluate(sym.ceildiv(n, b), {"n": a}) == q
    assert sym.evaluate(sym.ceildiv(n, m), {"n": a, "m": b}) == q


def test_ceildiv_refuses_bad_divisors():
    for a in (5, n):
        with pytest.raises(sym.SymbolicError, match="by zero"):
            sym.ceildiv(a, 0)
        with pytest.raises(sym.SymbolicError, match="positive divisor"):
            sym.ceildiv(a, -2)
    with pytest.raises(sym.SymbolicError, match="by zero"):
        sym.ceildiv(n, P("m - m"))


# ---------------------------------------------------------------- clamp, min, max

def test_clamp():
    assert [sym.clamp(x, 0, 3) for x in (-2, 0, 2, 3, 9)] == [0, 0, 2, 3, 3]
    assert sym.clamp(5, 4, 2) == 2  # hi wins when lo > hi, as min(max(x, lo), hi)
    c = sym.clamp(P("n - 4"), 0, m)
    for a, b in itertools.product([0, 3, 4, 6, 20], [0, 1, 5]):
        assert sym.evaluate(c, {"n": a, "m": b}) == min(max(a - 4, 0), b)
    assert sym.identical(sym.clamp(n, 0, n), n)
    assert sym.clamp(n, 0, 0) == 0
    assert sym.identical(sym.clamp(P("n + 2"), 1, P("n + 8")), P("n + 2"))


# ---------------------------------------------------------------- overflow and bad input

def test_overflow_is_a_symbolic_error():
    assert issubclass(sym.SymbolicError, DistirError)
    with pytest.raises(sym.SymbolicError, match="int64 range"):
        sym.to_prim(2**63)
    with pytest.raises(sym.SymbolicError, match="int64 range"):
        sym.add(n, 2**63)
    with pytest.raises(sym.SymbolicError, match="overflows int64"):
        sym.mul(sym.mul(n, 2**62), 4)
    with pytest.raises(sym.SymbolicError, match="int64 range"):
        sym.ceildiv(n, 2**63)
    with pytest.raises(sym.SymbolicError, match=r"the size T\.ceildiv\(n \+ 9223372036854775800, 16\) overflows int64"):
        sym.ceildiv(P("n + 9223372036854775800"), 16)  # n + c + 15 leaves int64
    with pytest.raises(sym.SymbolicError, match="int64 range"):
        P("9223372036854775807 + 1")
    with pytest.raises(sym.SymbolicError, match="expected an integer"):
        sym.to_prim(True)
    assert sym.to_prim(2**63 - 1).value == 2**63 - 1  # the edges themselves are fine
    assert sym.to_prim(-(2**63)).value == -(2**63)


# ---------------------------------------------------------------- printing and parsing

TEXTS = [
    "n",
    "128 // num_workers",
    "m * num_workers",
    "n * 2 + 1",
    "T.min(n, 8)",
    "T.max(n - 4, m)",
    "(n + 3) // 4",
    "n % 4",
    "(n - 1) // m + 1",
    "n - m",
    "0 - n",
    "n * m // 2 - 7",
    "-1 // n + 2",
]


@pytest.mark.parametrize("text", TEXTS)
def test_print_parse_round_trip(text):
    x = P(text)
    printed = sym.to_str(x)
    y = P(printed)
    assert sym.identical(x, y), (text, printed)
    assert sym.to_str(y) == printed
    assert sym.key(x) == sym.key(y) and sym.structural_hash(x) == sym.structural_hash(y)
    env = {"n": 13, "m": 5, "num_workers": 4}
    assert sym.evaluate(x, env) == sym.evaluate(y, env) == _python_value(text, env)


def _python_value(text: str, env) -> int:
    tree = ast.parse(text, mode="eval")

    class T:  # the T in T.min / T.max
        min = min
        max = max

    return eval(compile(tree, "<dim>", "eval"), {"T": T, "__builtins__": {}}, dict(env))


# ---------------------------------------------------------------- keys and identity

def test_identical_and_hashes():
    a, b = P("n * 2 + 1"), P("n * 2 + 1")
    assert sym.identical(a, b) and sym.structural_hash(a) == sym.structural_hash(b) and sym.key(a) == sym.key(b)
    assert not sym.identical(a, P("n * 2 + 2"))
    assert sym.identical(3, 3) and not sym.identical(3, 4)
    assert not sym.identical(3, n) and not sym.identical(n, 3)
    assert sym.structural_hash(7) == hash(7) and sym.key(7) == 7


# ---------------------------------------------------------------- expressions over other TVM variables

def test_from_tvm_renames_to_distir_variables():
    from tvm import tirx  # a Relax function's own variables, as the exporter makes them

    own_n = tirx.Var("n", "int64")
    assert own_n is not n
    assert sym.identical(sym.from_tvm(own_n * 2 + 1), P("n * 2 + 1"))
    assert sym.identical(sym.from_tvm(tirx.max(own_n, tirx.IntImm("int64", 0))), n)  # n >= 0 applies
    assert sym.from_tvm(tirx.IntImm("int64", 5)) == 5 and sym.from_tvm(7) == 7
    k32 = sym.from_tvm(tirx.Var("k", "int32") + 1)  # an int32 size becomes distir's int64 one
    assert sym.identical(k32, P("k + 1")) and str(k32.ty) == "int64"
    not_an_integer = "expected a TVM integer expression, got "
    for bad, message in (
        (tirx.Select(own_n > 0, own_n, tirx.IntImm("int64", 1)), "unsupported symbolic expression T.Select("),
        (own_n > 0, not_an_integer + "n > T.int64(0)"),
        (tirx.FloatImm("float32", 1.5), not_an_integer + "T.float32(1.5)"),
        (tirx.IntImm("bool", 1), not_an_integer + "T.bool(True)"),
        (True, not_an_integer + "True"),
        ("n", not_an_integer + "'n'"),
    ):
        with pytest.raises(sym.SymbolicError, match=re.escape(message)):
            sym.from_tvm(bad)


# ---------------------------------------------------------------- nobody else talks to TVM's integer API

def test_only_sym_and_the_tvm_package_use_tvm_integer_api():
    import pathlib

    import distir

    root = pathlib.Path(distir.__file__).parent
    banned_modules = ("tvm.sym", "tvm.tirx", "tvm.arith")
    offenders = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in ("ir/sym.py", "ir/sym_parse.py") or rel.startswith("tvm/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id == "tvm_ffi" and node.attr.startswith("structural_"):
                    names = [f"tvm_ffi.{node.attr}"]
                elif node.value.id == "tvm" and node.attr in ("sym", "tirx", "arith"):
                    names = [f"tvm.{node.attr}"]
            for name in names:
                if name.startswith(banned_modules) or name.startswith("tvm_ffi.structural_"):
                    offenders.append(f"{rel}:{node.lineno}: {name}")
    assert not offenders, "use distir.ir.sym instead:\n" + "\n".join(offenders)
