"""Literal forms shared by the parser and the printer: dims, numbers, strings, attr values.

Each form has both directions here (Python ``ast`` node -> value, value -> text) so that
the printer and the parser cannot drift apart. Nothing here evaluates code: an ``ast``
node is only inspected, and a symbolic dimension is built by :mod:`distir.ir.sym`.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import DistirError
from ..ir import sym, sym_parse
from ..ir.mesh import DeviceMesh
from ..ir.op import Param
from ..ir.placement import Placement, PlacementError
from ..ir.sym import Dim
from ..ir.types import DTYPES

__all__ = [
    "FormError",
    "MeshTable",
    "attr_from_ast",
    "attr_text",
    "dim_from_ast",
    "dim_text",
    "dims_from_ast",
    "dotted_name",
    "dtype_from_ast",
    "float_from_ast",
    "float_text",
    "generic_from_ast",
    "generic_text",
    "int_from_ast",
    "quote",
    "shape_text",
    "str_from_ast",
]


class FormError(Exception):
    """A literal is malformed; the parser turns it into a ParseError at ``node``.

    ``inner`` is a (start, end) range of characters inside the string literal ``node``
    (a quoted dimension such as ``"n // 0"``) when the fault is at a part of it."""

    def __init__(self, message: str, node: ast.AST, inner: tuple[int, int] | None = None):
        super().__init__(message)
        self.message = message
        self.node = node
        self.inner = inner


def dotted_name(node: ast.AST) -> str | None:
    """``R.nn.softmax`` -> ``"R.nn.softmax"``; None for anything that is not names and dots."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


# ---------------------------------------------------------------- dims

_DIM_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
_BAD_BINOPS = {
    ast.Pow: "'**' is not allowed in a dimension",
    ast.Div: "'/' is not allowed in a dimension; use '//' for integer division",
    ast.MatMult: "'@' is not allowed in a dimension",
    ast.LShift: "'<<' is not allowed in a dimension",
    ast.RShift: "'>>' is not allowed in a dimension",
    ast.BitAnd: "'&' is not allowed in a dimension",
    ast.BitOr: "'|' is not allowed in a dimension",
    ast.BitXor: "'^' is not allowed in a dimension",
}
_DIM_HINT = "symbolic dimensions use names, integers and + - * // % (and T.min, T.max, T.ceildiv)"
_STR_DIMS: dict[str, Dim] = {}


def _check_dim_ast(node: ast.AST, where: ast.AST, text: str | None) -> None:
    """Reject everything but the symbolic-integer grammar, saying what is wrong (no recursion:
    depth and size are bounded afterwards by sym_parse.check_ast). In a quoted dimension the error
    is at the whole string, whose text the message quotes."""
    inside = f" in '{_shown(text)}'" if text is not None else ""
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Constant):
            if isinstance(node.value, int) and not isinstance(node.value, bool):
                continue
            raise _grammar_error(f"expected an integer dimension{inside}, got {_shown(repr(node.value))}", where, text, node)
        if isinstance(node, ast.Name):
            continue
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, _DIM_BINOPS):
                stack.append(node.right)
                stack.append(node.left)
                continue
            msg = _BAD_BINOPS.get(type(node.op), "this operator is not allowed in a dimension")
            raise _grammar_error(f"{msg}{inside}: {_DIM_HINT}", where, text, node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            stack.append(node.operand)
            continue
        if isinstance(node, ast.Call) and dotted_name(node.func) in ("T.min", "T.max", "T.ceildiv"):
            if len(node.args) != 2 or node.keywords:
                raise _grammar_error(f"{dotted_name(node.func)} takes two dimensions{inside}", where, text, node)
            stack.extend(reversed(node.args))
            continue
        raise _grammar_error(f"malformed dimension{inside}: {_DIM_HINT}", where, text, node)


def _grammar_error(message: str, where: ast.AST, text: str | None, part: ast.AST) -> FormError:
    return FormError(message, part if text is None else where)


def _dim_error(message: str, where: ast.AST, text: str | None, part: ast.AST) -> FormError:
    """A FormError at ``part`` of a bare dimension, or inside the string literal ``where``."""
    if text is None:
        return FormError(message, part)
    return FormError(message, where, _inner(text, part))


def _inner(text: str, part: ast.AST) -> tuple[int, int] | None:
    """Characters of ``text`` that ``part`` (from ast.parse(text.strip())) covers, if on line 1."""
    if getattr(part, "lineno", None) != 1 or getattr(part, "end_lineno", None) != 1:
        return None
    lead = len(text) - len(text.lstrip())
    first = text.strip().split("\n", 1)[0].encode("utf-8")
    start = len(first[: part.col_offset].decode("utf-8", errors="replace"))  # type: ignore[attr-defined]
    end = len(first[: part.end_col_offset].decode("utf-8", errors="replace"))  # type: ignore[attr-defined]
    return lead + start, lead + end


def _shown(text: str) -> str:
    """``text`` as it can be shown in a message: escaped if not printable, shortened if long."""
    if len(text) > 80:
        text = text[:60] + "..." + text[-15:]
    if not text.isprintable() or _has_surrogate(text):
        text = quote(text)[1:-1]
    return text


def _has_surrogate(text: str) -> bool:
    return not text.isascii() and any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def _int64(v: int, node: ast.AST) -> int:
    if not sym.INT64_MIN <= v <= sym.INT64_MAX:
        raise FormError(f"integer {_short_int(v)} is out of the int64 range", node)
    return v


def _short_int(v: int) -> str:
    s = str(v)
    return s if len(s) <= 24 else f"{s[:10]}...{s[-10:]} ({len(s)} digits)"


def dim_from_ast(node: ast.AST) -> Dim:
    """An int literal, a quoted expression (``"m * num_workers"``) or a bare one (``n * 2``).

    Integers are int64; a division by zero is refused; an expression may nest at most
    sym_parse.MAX_EXPR_DEPTH levels and have sym_parse.MAX_EXPR_NODES parts (a quoted one at most
    sym_parse.MAX_EXPR_CHARS characters), checked before anything is built."""
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, int) and not isinstance(v, bool):
            return _int64(v, node)
        if isinstance(v, str):
            return _str_dim(v, node)
        raise FormError(
            f"expected a dimension (an integer or a symbolic expression such as \"n\"), got {_shown(repr(v))}", node
        )
    if isinstance(node, ast.Name):
        return sym.var(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        v = node.operand.value
        if isinstance(v, int) and not isinstance(v, bool):
            return _int64(-v, node)
    _check_dim_ast(node, node, None)
    return _build_dim(node, node, None)


def _build_dim(tree: ast.AST, where: ast.AST, text: str | None) -> Dim:
    shown = _shown(text) if text is not None else ""
    try:
        return sym_parse.normalize_checked(sym_parse.from_ast(tree, shown), tree, shown)
    except sym.SymbolicError as err:
        raise _dim_error(str(err), where, text, err.node if err.node is not None else tree) from None


def _str_dim(text: str, node: ast.AST) -> Dim:
    hit = _STR_DIMS.get(text)
    if hit is not None:
        return hit
    if len(text) > sym_parse.MAX_EXPR_CHARS:
        raise FormError(
            f"dimension expression is too long ({len(text)} characters; at most {sym_parse.MAX_EXPR_CHARS})", node
        )
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        inner = None
        if err.lineno == 1 and err.offset:
            lead = len(text) - len(text.lstrip())
            inner = (lead + err.offset - 1, lead + err.offset)
        raise FormError(f"'{_shown(text)}' is not a dimension: {_DIM_HINT}", node, inner) from None
    except (RecursionError, MemoryError):  # Python's parser giving up on deep nesting
        raise FormError(
            f"dimension expression nests too deeply (at most {sym_parse.MAX_EXPR_DEPTH} levels): '{_shown(text)}'", node
        ) from None
    except (ValueError, UnicodeError):  # a null byte or a lone surrogate in the string
        raise FormError(f"'{_shown(text)}' is not a dimension: {_DIM_HINT}", node) from None
    _check_dim_ast(tree.body, node, text)
    dim = _build_dim(tree.body, node, text)
    if len(_STR_DIMS) < 4096:
        _STR_DIMS[text] = dim
    return dim


def dims_from_ast(node: ast.AST, what: str = "shape") -> tuple[Dim, ...]:
    """A tuple or list literal of dims."""
    if not isinstance(node, (ast.Tuple, ast.List)):
        raise FormError(f"expected the {what} as a tuple or list of dimensions, e.g. (128, \"n\")", node)
    return tuple(dim_from_ast(e) for e in node.elts)


def dim_text(d: Dim, bare: bool) -> str:
    """``128``; a symbolic dim as ``"n * 2"`` (signatures) or ``n * 2`` (function bodies)."""
    if isinstance(d, int):
        return str(d)
    text = sym.to_str(d)
    return text if bare else f'"{text}"'


def shape_text(shape, bare: bool, brackets: str = "()") -> str:
    """``(128, "n")``; one-element tuples keep their comma."""
    inner = ", ".join([dim_text(d, bare) for d in shape])
    if brackets == "()" and len(shape) == 1:
        inner += ","
    return brackets[0] + inner + brackets[1]


# ---------------------------------------------------------------- numbers and strings

_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def int_from_ast(node: ast.AST, what: str = "an integer") -> int:
    """An int literal, possibly negative (never a bool), in the int64 range."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return _int64(node.value, node)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = node.operand
        if isinstance(inner, ast.Constant) and type(inner.value) is int:
            return _int64(-inner.value, node)
    raise FormError(f"expected {what}", node)


def float_from_ast(node: ast.AST, what: str = "a number") -> float:
    """A number literal, or ``float("inf")`` / ``float("-inf")`` / ``float("nan")`` (never evaluated)."""
    neg = False
    inner = node
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        neg = isinstance(node.op, ast.USub)
        inner = node.operand
    if isinstance(inner, ast.Constant) and type(inner.value) in (int, float):
        v = float(inner.value)
        return -v if neg else v
    if (
        isinstance(inner, ast.Call)
        and isinstance(inner.func, ast.Name)
        and inner.func.id == "float"
        and len(inner.args) == 1
        and not inner.keywords
        and isinstance(inner.args[0], ast.Constant)
        and inner.args[0].value in _NONFINITE
    ):
        v = _NONFINITE[inner.args[0].value]
        return -v if neg else v
    raise FormError(f"expected {what} (a literal, or float(\"inf\"), float(\"-inf\"), float(\"nan\"))", node)


def float_text(x: float) -> str:
    """``1.0``, ``1e-05``; non-finite values as ``float("inf")`` forms the parser accepts."""
    if math.isnan(x):
        return 'float("nan")'
    if math.isinf(x):
        return 'float("inf")' if x > 0 else 'float("-inf")'
    return repr(float(x))


def str_from_ast(node: ast.AST, what: str = "a string") -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    raise FormError(f"expected {what}", node)


def quote(s: str) -> str:
    """A double-quoted Python string literal that reads back as exactly ``s``.

    Printable characters stay as they are (the text is UTF-8); quotes, backslashes,
    control characters and lone surrogates are escaped the way Python's repr does.
    """
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return f'"{s}"'
    out = []
    for ch in s:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch.isprintable() and not 0xD800 <= ord(ch) <= 0xDFFF:
            out.append(ch)
        else:
            out.append(repr(ch)[1:-1])
    return '"' + "".join(out) + '"'


def dtype_from_ast(node: ast.AST) -> str:
    s = str_from_ast(node, 'a dtype string such as "float32"')
    if s not in DTYPES:
        import difflib

        close = difflib.get_close_matches(s, DTYPES, n=1)
        hint = f"; did you mean \"{close[0]}\"?" if close else f" (known: {', '.join(DTYPES)})"
        raise FormError(f"unknown dtype \"{s}\"{hint}", node)
    return s


# ---------------------------------------------------------------- meshes

_MESH_RE = re.compile(r"^\s*([A-Za-z_]\w*)\[\s*(\d+)\s*\]\s*$")


class MeshTable:
    """The module's meshes by ``"mesh[i]"`` reference, both ways."""

    def __init__(self, global_infos) -> None:
        self.infos = {k: tuple(v) for k, v in dict(global_infos).items()}
        self._by_id: dict[int, str] = {}
        for key, meshes in self.infos.items():
            for i, m in enumerate(meshes):
                self._by_id.setdefault(id(m), f"{key}[{i}]")

    def resolve(self, node: ast.AST) -> DeviceMesh:
        text = str_from_ast(node, 'a device mesh reference such as "mesh[0]"')
        m = _MESH_RE.match(text)
        if m is None:
            raise FormError(f"expected a device mesh reference such as \"mesh[0]\", got \"{text}\"", node)
        key, index = m.group(1), int(m.group(2))
        meshes = self.infos.get(key)
        if not meshes:
            if not self.infos:
                raise FormError(
                    f"\"{text}\" names a device mesh, but the module declares none: add "
                    f"I.module_global_infos({{\"{key}\": [R.device_mesh(...)]}})",
                    node,
                )
            raise FormError(f"the module has no global info \"{key}\" (it has {', '.join(self.infos)})", node)
        if index >= len(meshes):
            raise FormError(
                f"mesh index {index} is out of range: the module declares {len(meshes)} mesh"
                f"{'es' if len(meshes) != 1 else ''} ({key}[0]..{key}[{len(meshes) - 1}])",
                node,
            )
        return meshes[index]

    def ref(self, mesh: DeviceMesh) -> str:
        """``"mesh[i]"`` for a mesh equal to one of the module's; DistirError otherwise."""
        hit = self._by_id.get(id(mesh))
        if hit is not None:
            return hit
        for key, meshes in self.infos.items():
            for i, m in enumerate(meshes):
                if m == mesh:
                    self._by_id[id(mesh)] = f"{key}[{i}]"
                    return f"{key}[{i}]"
        raise DistirError(
            f"device mesh {mesh.shape_str()} is not among the module's global infos; "
            "add it to global_infos[\"mesh\"] before printing"
        )


# ---------------------------------------------------------------- op attributes


def _ints_from_ast(node: ast.AST, what: str) -> tuple[int, ...]:
    if not isinstance(node, (ast.List, ast.Tuple)):
        raise FormError(f"expected {what} as a list of integers, e.g. [1, 0]", node)
    return tuple(int_from_ast(e, "an integer") for e in node.elts)


def attr_from_ast(param: Param, node: ast.AST, meshes: MeshTable) -> Any:
    """The value of op attribute ``param`` written as ``node`` (see ATTR_KINDS in ir/op.py)."""
    kind = param.kind
    name = param.name
    if isinstance(node, ast.Constant) and node.value is None:
        if kind in ("optional_dtype", "axes") or (not param.required and param.default is None):
            return None
        raise FormError(f"attribute '{name}' cannot be None", node)
    if kind == "int":
        return int_from_ast(node, f"an integer for '{name}'")
    if kind == "bool":
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            return node.value
        raise FormError(f"expected True or False for '{name}'", node)
    if kind == "float":
        return float_from_ast(node, f"a number for '{name}'")
    if kind == "scalar":
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            raise FormError(f"expected a number for '{name}'", node)
        try:
            return int_from_ast(node)
        except FormError:
            return float_from_ast(node, f"a number for '{name}'")
    if kind == "str":
        return str_from_ast(node, f"a string for '{name}'")
    if kind in ("dtype", "optional_dtype"):
        return dtype_from_ast(node)
    if kind == "choice":
        s = str_from_ast(node, f"a string for '{name}'")
        if param.choices and s not in param.choices:
            raise FormError(
                f"'{name}' must be one of {', '.join(quote(c) for c in param.choices)}, got {quote(s)}", node
            )
        return s
    if kind == "axes":
        if isinstance(node, (ast.List, ast.Tuple)):
            return _ints_from_ast(node, f"'{name}'")
        return int_from_ast(node, f"None, an integer or a list of integers for '{name}'")
    if kind == "ints":
        return _ints_from_ast(node, f"'{name}'")
    if kind == "floats":
        if not isinstance(node, (ast.List, ast.Tuple)):
            raise FormError(f"expected '{name}' as a list of numbers, e.g. [0.0, 1.0]", node)
        return tuple(float_from_ast(e, f"a number in '{name}'") for e in node.elts)
    if kind == "dims":
        return dims_from_ast(node, f"'{name}'")
    if kind == "dim":
        return dim_from_ast(node)
    if kind == "int_or_dims":
        if isinstance(node, (ast.List, ast.Tuple)):
            return dims_from_ast(node, f"'{name}'")
        return int_from_ast(node, f"an integer or a list of dimensions for '{name}'")
    if kind == "mesh":
        return meshes.resolve(node)
    if kind == "placement":
        text = str_from_ast(node, 'a placement string such as "S[0], R"')
        try:
            return Placement.parse(text)
        except PlacementError as err:
            raise FormError(str(err), node) from None
    raise FormError(f"attribute '{name}' has kind '{kind}', which the text format does not know", node)


def _list_text(values, item: Callable[[Any], str]) -> str:
    return "[" + ", ".join([item(v) for v in values]) + "]"


def attr_text(param: Param, value: Any, meshes: MeshTable) -> str:
    """The text of op attribute ``param``; dims print bare (function bodies declare their vars)."""
    if value is None:
        return "None"
    kind = param.kind
    if kind == "bool" or kind == "int":
        return str(value) if kind == "bool" else str(int(value))
    if kind in ("float", "scalar"):
        if kind == "scalar" and isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return str(int(value))
        return float_text(float(value))
    if kind in ("str", "dtype", "optional_dtype", "choice"):
        return quote(str(value))
    if kind == "floats":
        return _list_text(value, lambda v: float_text(float(v)))
    if kind in ("axes", "ints"):
        if isinstance(value, (list, tuple)):
            return _list_text(value, lambda v: str(int(v)))
        return str(int(value))
    if kind == "dims" or (kind == "int_or_dims" and isinstance(value, (list, tuple))):
        return _list_text(value, lambda d: dim_text(d, True))
    if kind == "int_or_dims":
        return str(int(value))
    if kind == "dim":
        return dim_text(value, True)
    if kind == "mesh":
        return quote(meshes.ref(value))
    if kind == "placement":
        return quote(str(value))
    raise DistirError(f"cannot print attribute '{param.name}' of kind '{kind}'")


# ---------------------------------------------------------------- free-form attribute values


def generic_from_ast(node: ast.AST, type_from_ast: Callable[[ast.AST], Any]) -> Any:
    """A function or module attribute: str, int, float, bool, None, list, tuple, dict, or a Type."""
    if isinstance(node, ast.Constant):
        if node.value is None or isinstance(node.value, (str, int, float, bool)):
            return node.value
        raise FormError(f"unsupported attribute value {node.value!r}", node)
    if isinstance(node, ast.List):
        return [generic_from_ast(e, type_from_ast) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(generic_from_ast(e, type_from_ast) for e in node.elts)
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                raise FormError("'**' is not allowed in an attribute dict", v)
            if not (isinstance(k, ast.Constant) and isinstance(k.value, (str, int)) and not isinstance(k.value, bool)):
                raise FormError("attribute dict keys must be strings or integers", k)
            out[k.value] = generic_from_ast(v, type_from_ast)
        return out
    if isinstance(node, ast.UnaryOp):
        try:
            return int_from_ast(node)
        except FormError:
            return float_from_ast(node, "an attribute value")
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id == "float":
            return float_from_ast(node, "an attribute value")
        if dotted_name(node.func) in ("R.Tensor", "R.DTensor", "R.Tuple", "R.Shape", "R.Prim"):
            return type_from_ast(node)
    raise FormError(
        "expected an attribute value: a string, number, True/False, None, a list, tuple or dict of those, "
        "or a type such as R.Tensor(...)",
        node,
    )


def generic_text(value: Any, type_text: Callable[[Any], str]) -> str:
    """Text of a free-form attribute value; types are printed by ``type_text``."""
    if value is None or isinstance(value, bool):
        return str(value)
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return float_text(float(value))
    if isinstance(value, list):
        return "[" + ", ".join([generic_text(v, type_text) for v in value]) + "]"
    if isinstance(value, tuple):
        inner = ", ".join([generic_text(v, type_text) for v in value])
        return "(" + inner + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict) or hasattr(value, "items"):
        return "{" + ", ".join([f"{generic_text(k, type_text)}: {generic_text(v, type_text)}" for k, v in value.items()]) + "}"
    return type_text(value)
