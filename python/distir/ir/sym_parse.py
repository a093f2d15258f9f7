"""Reading symbolic integers: text or a Python ``ast`` to a Dim, bounded, without eval.

Kept apart from the arithmetic (:mod:`distir.ir.sym`), which it builds with: every reader of
a dim (the parser, placements, the builder, weights files) goes through these checks, so a
malformed or oversized expression is one SymbolicError at its place, never TVM's error.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

from tvm import tirx

from .sym import INT64_MAX, INT64_MIN, Dim, PrimExpr, SymbolicError, _is_zero, ceildiv, normalize, to_prim, var

__all__ = ["MAX_EXPR_CHARS", "MAX_EXPR_DEPTH", "MAX_EXPR_NODES", "check_ast", "from_ast", "normalize_checked", "parse"]

# Reading is bounded before anything is built: a symbolic expression has at most this
# many characters (as text), operator nesting levels and names/integers/operators.
MAX_EXPR_CHARS = 4096
MAX_EXPR_DEPTH = 200
MAX_EXPR_NODES = 2000


def parse(text: str) -> Dim:
    """Read ``"m * num_workers"`` into a Dim without eval: only names, ints and + - * // %."""
    if not isinstance(text, str):
        raise SymbolicError(f"expected a symbolic integer expression as text, got {type(text).__name__}")
    if len(text) > MAX_EXPR_CHARS:
        raise SymbolicError(f"symbolic integer expression is too long ({len(text)} characters; at most {MAX_EXPR_CHARS})")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise SymbolicError(f"'{text}' is not a symbolic integer expression") from err
    except (RecursionError, MemoryError):  # Python's parser giving up on deep nesting
        raise SymbolicError(f"'{text}' is not a symbolic integer expression: it nests too deeply") from None
    except (ValueError, UnicodeError):  # a null byte or a lone surrogate
        raise SymbolicError(f"{text!r} is not a symbolic integer expression") from None
    return normalize_checked(from_ast(tree.body, text), tree.body, text)


_AST_OPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: tirx.floordiv,
    ast.Mod: tirx.floormod,
}
_FOLD = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}


def _is_minmax(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "T"
        and node.func.attr in ("min", "max", "ceildiv")
        and len(node.args) == 2
        and not node.keywords
    )


def _unsupported(node: ast.AST, text: str) -> SymbolicError:
    where = f" in '{text}'" if text else ""
    return SymbolicError(f"unsupported syntax{where}: symbolic integers use names, integers and + - * // % only", node)


def check_ast(node: ast.AST, text: str = "") -> None:
    """Refuse, without recursion, what :func:`from_ast` must not build: other syntax, nesting
    deeper than MAX_EXPR_DEPTH, more than MAX_EXPR_NODES parts, integers outside int64.
    The SymbolicError's ``node`` is the offending part."""
    where = f" in '{text}'" if text else ""
    stack: list[tuple[ast.AST, int]] = [(node, 1)]
    count = 0
    while stack:
        n, depth = stack.pop()
        count += 1
        if count > MAX_EXPR_NODES:
            raise SymbolicError(f"symbolic integer expression is too long{where}: more than {MAX_EXPR_NODES} parts", n)
        if depth > MAX_EXPR_DEPTH:
            raise SymbolicError(
                f"symbolic integer expression is nested too deeply{where}: more than {MAX_EXPR_DEPTH} levels", n
            )
        if isinstance(n, ast.Constant):
            v = n.value
            if not isinstance(v, int) or isinstance(v, bool):
                raise _unsupported(n, text)
            if not INT64_MIN <= v <= INT64_MAX:
                raise SymbolicError(f"integer {_short_int(v)} is out of the int64 range{where}", n)
        elif isinstance(n, ast.Name):
            pass
        elif isinstance(n, ast.BinOp) and type(n.op) in _AST_OPS:
            stack.append((n.right, depth + 1))
            stack.append((n.left, depth + 1))
        elif isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            stack.append((n.operand, depth + 1))
        elif _is_minmax(n):
            stack.extend((a, depth + 1) for a in reversed(n.args))  # type: ignore[attr-defined]
        else:
            raise _unsupported(n, text)


def _short_int(v: int) -> str:
    s = str(v)
    return s if len(s) <= 24 else f"{s[:10]}...{s[-10:]} ({len(s)} digits)"


def from_ast(node: ast.AST, text: str = "", names: Mapping[str, Dim] | None = None) -> PrimExpr:
    """Build a PrimExpr from a Python expression AST (names, ints, + - * // %, T.min/T.max).

    The tree is checked first (:func:`check_ast`); constant parts are computed exactly, so
    a division by zero or a constant outside int64 is a SymbolicError naming that part,
    never an error from TVM."""
    check_ast(node, text)
    return to_prim(_build(node, text, names))


def _build(node: ast.AST, text: str, names: Mapping[str, Dim] | None) -> Dim:
    """An int for constant parts (computed exactly, range-checked), else a PrimExpr."""
    where = f" in '{text}'" if text else ""
    if isinstance(node, ast.Constant):
        return int(node.value)
    if isinstance(node, ast.Name):
        if names is not None and node.id in names:
            return names[node.id]
        return var(node.id)
    if isinstance(node, ast.UnaryOp):
        a = _build(node.operand, text, names)
        if isinstance(a, int):
            return _in_range(-a, node, where)
        return tirx.IntImm("int64", 0) - a
    if isinstance(node, ast.BinOp):
        a = _build(node.left, text, names)
        b = _build(node.right, text, names)
        op = type(node.op)
        if op in (ast.FloorDiv, ast.Mod) and _is_zero(b):
            what = "division" if op is ast.FloorDiv else "modulo"
            raise SymbolicError(f"{what} by zero{where}", node.right)
        if isinstance(a, int) and isinstance(b, int):
            return _in_range(_FOLD[op](a, b), node, where)
        return _guarded(lambda: _AST_OPS[op](to_prim(a), to_prim(b)), node, where)
    assert isinstance(node, ast.Call)  # T.min / T.max / T.ceildiv, by check_ast
    a, b = (_build(x, text, names) for x in node.args)
    if node.func.attr == "ceildiv":  # type: ignore[attr-defined]
        if _is_zero(b) or (isinstance(b, int) and b < 0):
            raise SymbolicError(f"T.ceildiv needs a positive divisor{where}", node.args[1])
        return _guarded(lambda: ceildiv(a, b), node, where)
    is_min = node.func.attr == "min"  # type: ignore[attr-defined]
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b) if is_min else max(a, b)
    return _guarded(lambda: (tirx.min if is_min else tirx.max)(to_prim(a), to_prim(b)), node, where)


def _in_range(v: int, node: ast.AST, where: str) -> int:
    if not INT64_MIN <= v <= INT64_MAX:
        raise SymbolicError(f"the value {_short_int(v)} is out of the int64 range{where}", node)
    return v


_TVM_FAILED = "a constant in it overflows int64, or a divisor in it is zero"


def _guarded(build, node: ast.AST, where: str) -> PrimExpr:
    try:
        return build()
    except (ValueError, RuntimeError):  # TVM's constant folding refusing a value
        raise SymbolicError(f"cannot build this symbolic expression{where}: {_TVM_FAILED}", node) from None


def normalize_checked(x: Dim, node: ast.AST | None = None, text: str = "") -> Dim:
    """:func:`normalize` for an expression just read: TVM's errors (a constant overflowing
    int64 while simplifying) become a SymbolicError at ``node``."""
    try:
        return normalize(x)
    except SymbolicError:
        raise
    except (ValueError, RuntimeError):  # TVM's simplifier folding constants that overflow int64
        where = f" in '{text}'" if text else ""
        raise SymbolicError(f"cannot simplify this symbolic expression{where}: {_TVM_FAILED}", node) from None
