"""The parser: TVMScript-style text -> IRModule, by walking Python's ``ast``.

Only the grammar below is interpreted; nothing is evaluated, imported or looked up by
a name taken from the input (op names go through the op registry's dict). Every
error is a :class:`~distir.errors.ParseError` with the file, line, column and a caret.

    module    := import* (class | function+)
    class     := "@I.ir_module" "class" NAME ":" (module_attrs | global_infos | function)+
    function  := "@R.function" ["(" private=BOOL, pure=BOOL ")"] "def" NAME "(" (NAME ":" type)* ")" ["->" type] ":"
                 (NAME "=" "T.int64()" | "R.func_attr(" dict ")" | binding | dataflow)* "return" leaf
    dataflow  := "with R.dataflow():" binding* "R.output(" NAME* ")"
    binding   := NAME [":" type] "=" value
    value     := "R." op "(" args ")" | leaf | NAME "[" INT "]"
    leaf      := NAME | "(" leaf, ... ")" | "R.const(" ... ")" | "R.shape([" dims "])" | "R.prim_value(" dim ")"
"""

from __future__ import annotations

import ast
import difflib
import os
import re
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

import numpy as np

from ..collector import collector_paused
from ..errors import DistirError, ParseError, Span, TypeInferenceError
from ..ir.expr import (
    Binding,
    Block,
    Call,
    Constant,
    Expr,
    Function,
    IRModule,
    PrimValue,
    ShapeExpr,
    StringImm,
    Tuple,
    TupleGetItem,
    Var,
)
from ..ir.mesh import DeviceMesh, Range
from ..ir.op import OpDef, Param, all_ops, get_op, has_dtensor
from ..ir.placement import Placement, PlacementError
from ..ir.sharding import infer_unplaced
from ..ir.combine import check_partial
from ..ir.types import DTYPES, DTensorType, PrimType, ShapeType, TensorType, TupleType, Type
from .literals import (
    FormError,
    MeshTable,
    attr_from_ast,
    dim_from_ast,
    dims_from_ast,
    dotted_name,
    dtype_from_ast,
    float_from_ast,
    generic_from_ast,
    int_from_ast,
    str_from_ast,
)
from . import source
from .printer import DECORATOR_ATTRS

__all__ = ["parse", "parse_file", "parse_source"]

# import lines accepted (and ignored) in exactly these forms
_IMPORT_FROM = {
    "distir.script": {("ir", "I"), ("relax", "R"), ("tirx", "T")},
    "tvm.script": {("ir", "I"), ("relax", "R"), ("tirx", "T"), ("tir", "T")},
}
_IMPORT = {("tvm", None)}
_LITERAL_CALLS = frozenset({"R.const", "R.shape", "R.prim_value", "R.str"})
_TYPE_CALLS = frozenset({"R.Tensor", "R.DTensor", "R.Tuple", "R.Shape", "R.Prim"})
_PRIM_INT_DTYPES = frozenset({"int64", "int32", "int16", "int8", "uint8"})  # R.prim_value(T.int32(3))
_PRIM_DTYPES = frozenset(DTYPES) | _PRIM_INT_DTYPES | {"str"}  # "str" is the type of R.str(...)


# Python's own parser gives up (without a position) on expressions nested a few thousand
# levels deep; the error then points where the nesting first passes this many levels.
_MAX_NESTING = 1000


def parse(text: str, source_name: str | None = None, *, line_offset: int = 0, col_offset: int = 0) -> IRModule:
    """Parse IR text into an IRModule. Only text: a str is never taken for a file name.

    Use :func:`parse_file` to read a file. Every failure is a ParseError (a DistirError)."""
    if isinstance(text, os.PathLike):
        raise ParseError(
            f"distir.parse takes IR text, not a path ({type(text).__name__}); "
            "to read a file, call distir.parse_file(path)"
        )
    if not isinstance(text, str):
        raise ParseError(f"distir.parse takes IR text (a str), got {type(text).__name__}")
    try:
        return parse_source(text, source_name or "<string>", line_offset=line_offset, col_offset=col_offset)
    except ParseError as err:
        if "\n" in text.strip() or not text.strip():
            raise
        note = (
            "distir.parse reads its argument as IR text, never as a file name; "
            "to parse a file, call distir.parse_file(path)"
        )
        raise ParseError(err.message, err.span, [*err.notes, note]) from None


def parse_file(path: str | os.PathLike, source_name: str | None = None) -> IRModule:
    """Read the file at ``path`` (:func:`~distir.script.source.read_file`) and parse it.

    Errors name the file as given (or ``source_name``); a parse error shows the line of
    that file it is about."""
    if not isinstance(path, (str, os.PathLike)):
        raise ParseError(f"distir.parse_file takes a path (a str or os.PathLike), got {type(path).__name__}")
    name = source_name or source._path_name(path)
    return parse_source(source.read_file(path, name), name)


def parse_source(text: str, source_name: str = "<string>", *, line_offset: int = 0, col_offset: int = 0) -> IRModule:
    """Parse ``text``; positions are shifted by ``line_offset``/``col_offset`` (decorated Python source)."""
    if not isinstance(text, str):
        raise ParseError(f"expected IR text (a str), got {type(text).__name__}")
    if len(text) > source.MAX_INPUT_BYTES:
        raise source._too_large(source_name)
    p = _Parser(text, source_name, line_offset, col_offset)
    # Building the AST and the IR allocates many small acyclic objects; the cyclic
    # collector would rescan them over and over (a third of the parse time).
    with collector_paused():
        try:
            with warnings.catch_warnings():
                # Python's warnings about the text as Python code ("invalid escape
                # sequence") say nothing about IR, and under -W error would be exceptions
                warnings.simplefilter("ignore", SyntaxWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
                tree = ast.parse(text, filename=source_name)
        except SyntaxError as err:
            msg = err.msg if err.msg.startswith("invalid syntax") else f"invalid syntax: {err.msg}"
            p.fail_at(err.lineno or 1, err.offset or 1, msg)
        except UnicodeEncodeError:
            p.fail_at(
                *_surrogate_position(text),
                "a lone surrogate (U+D800..U+DFFF) is not a character of UTF-8 text",
            )
        except (RecursionError, MemoryError):  # Python's parser giving up on deep nesting
            p.fail_at(
                *_too_deep(text),
                f"this expression nests too deeply (more than {_MAX_NESTING} levels of operators, calls or brackets)",
            )
        except ValueError as err:  # a null byte, on Python versions that do not call it a SyntaxError
            p.fail_at(1, 1, f"invalid syntax: {err}")
        try:
            return p.module(tree)
        except RecursionError:
            msg = "this part of the program nests too deeply to be read"
            if p.at is None:
                raise ParseError(f"{source_name}: {msg}") from None
            p.fail(p.at, msg)


_NEWLINE = re.compile(r"\r\n?|\n")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _position(text: str, i: int) -> tuple[int, int]:
    """1-based line and column of character ``i``; lines end at \\n, \\r\\n or \\r, as in Python."""
    line = 1 + len(_NEWLINE.findall(text, 0, i))
    start = max(text.rfind("\n", 0, i), text.rfind("\r", 0, i)) + 1
    return line, i - start + 1


def _surrogate_position(text: str) -> tuple[int, int]:
    m = _SURROGATE.search(text)
    return _position(text, m.start() if m else 0)


# Just enough of Python's tokens to estimate how deeply an expression nests; strings,
# comments, numbers and line continuations are skipped so that they do not count.
_NEST_TOKENS = re.compile(
    r"(?P<skip>[rRbBuUfF]{0,2}(?:"
    r'"""(?:\\.|[^\\])*?"""'
    r"|'''(?:\\.|[^\\])*?'''"
    r'|"(?:\\.|[^"\\\n])*"'
    r"|'(?:\\.|[^'\\\n])*'"
    r")|\#[^\n]*|\d[\w.]*(?:[eE][-+]?\d+)?|\\\r?\n)"
    r"|(?P<open>[(\[{])|(?P<close>[)\]}])|(?P<sep>[,;:\n]|=(?!=))"
    r"|(?P<op>\*\*|//|[-+*/%@&|^~<>!.]|\b(?:not|await|if|else|lambda|and|or|in|is)\b)"
)


def _too_deep(text: str) -> tuple[int, int]:
    """Where an expression first nests deeper than _MAX_NESTING, else where it nests deepest:
    the place for the error when Python's parser gives up without saying where."""
    depth = base = 0
    stack: list[tuple[int, int]] = []
    best, best_at = -1, 0
    for m in _NEST_TOKENS.finditer(text):
        kind = m.lastgroup
        if kind == "skip":
            continue
        if kind == "op":
            depth += 1
        elif kind == "open":
            stack.append((depth, base))
            depth = base = depth + 1
        elif kind == "close":
            if stack:
                depth, base = stack.pop()
                depth += 1  # a call or index after a name nests like an operator: f()()()
        elif m.group() == "\n" and not stack:
            depth = base = 0
        else:
            depth = base
        if depth > best:
            best, best_at = depth, m.start()
            if best > _MAX_NESTING:
                break
    return _position(text, best_at)


class _Scope:
    """Names visible in a function body, and where every name is (eventually) defined."""

    __slots__ = ("defined_at", "local_to", "vars")

    def __init__(self) -> None:
        self.vars: dict[str, Var] = {}
        self.defined_at: dict[str, int] = {}  # every binding name of the function -> first line
        self.local_to: dict[str, int] = {}  # dataflow-local names that went out of scope -> block line


class _Parser:
    def __init__(self, text: str, source_name: str, line_offset: int, col_offset: int) -> None:
        self.pending: list[Binding] = []  # bindings for calls nested in the statement being read
        self.source_name = source_name
        self.line_offset = line_offset
        self.col_offset = col_offset
        pad = " " * col_offset
        # Python ends lines at \n, \r\n and \r only (str.splitlines also splits at \f, \x1c,
        # \u2028, ...), so error lines are numbered as Python numbers them
        lines = _NEWLINE.split(text)
        self.lines = [pad + s for s in lines] if col_offset else lines
        self.non_ascii = set() if text.isascii() else {i + 1 for i, s in enumerate(self.lines) if not s.isascii()}
        self.at: ast.AST | None = None  # the statement being read (for errors without a node)
        self.meshes = MeshTable({})
        self._type_cache: dict[str, Type] = {}
        self._ops: dict[str, OpDef | None] = {}

    # ------------------------------------------------------------ errors and spans

    def line_text(self, line: int) -> str | None:
        return self.lines[line - 1] if 0 < line <= len(self.lines) else None

    def _col(self, line: int, byte_col: int) -> int:
        """ast columns count UTF-8 bytes; carets count characters."""
        if line in self.non_ascii:
            src = self.lines[line - 1][self.col_offset :]
            return len(src.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))
        return byte_col

    def span(self, node: ast.AST) -> Span:
        line = node.lineno  # type: ignore[attr-defined]
        end_line = node.end_lineno  # type: ignore[attr-defined]
        col = node.col_offset  # type: ignore[attr-defined]
        end_col = node.end_col_offset  # type: ignore[attr-defined]
        if self.non_ascii:
            col = self._col(line, col)
            end_col = self._col(end_line, end_col)
        shift = 1 + self.col_offset
        lines = self.lines
        return Span(
            self.source_name,
            line + self.line_offset,
            col + shift,
            end_line + self.line_offset,
            end_col + shift,
            lines[line - 1] if line <= len(lines) else None,
        )

    def fail(self, node: ast.AST, message: str, notes: list[str] | None = None) -> NoReturn:
        raise ParseError(message, self.span(node), notes)

    def fail_at(self, line: int, col: int, message: str) -> NoReturn:
        text = self.line_text(line)
        if text is not None and not text.isascii():
            text = _SURROGATE.sub("\ufffd", text)  # printable on any stream
        span = Span(self.source_name, line + self.line_offset, col + self.col_offset, None, None, text)
        raise ParseError(message, span)

    def form(self, fn: Callable, *args) -> Any:
        """Run a literal conversion, turning its FormError into a ParseError at the node."""
        try:
            return fn(*args)
        except FormError as err:
            if err.inner is not None:
                self.fail_inside(err.node, err.inner, err.message)
            self.fail(err.node, err.message)

    def fail_inside(self, node: ast.AST, inner: tuple[int, int], message: str) -> None:
        """Fail at characters ``inner`` of the string literal ``node`` when the literal is
        written plainly on one line ("n // 0": the caret under the 0); else return."""
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.lineno == node.end_lineno):
            return
        line = node.lineno
        src = self.line_text(line)
        if src is None:
            return
        col = self._col(line, node.col_offset) + self.col_offset
        end = self._col(line, node.end_col_offset) + self.col_offset  # type: ignore[arg-type]
        literal = src[col:end]
        if len(literal) != len(node.value) + 2 or literal[0] not in "'\"" or literal[1:-1] != node.value:
            return
        span = self.span(node)
        start = span.column + 1 + inner[0]
        span = Span(span.source_name, span.line, start, span.line, start + max(inner[1] - inner[0], 1), span.source_line)
        raise ParseError(message, span)

    # ------------------------------------------------------------ module level

    def module(self, tree: ast.Module) -> IRModule:
        classes: list[ast.ClassDef] = []
        funcs: list[ast.FunctionDef] = []
        for stmt in tree.body:
            self.at = stmt
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self.check_import(stmt)
            elif isinstance(stmt, ast.ClassDef):
                classes.append(stmt)
            elif isinstance(stmt, ast.FunctionDef):
                funcs.append(stmt)
            else:
                self.fail(stmt, "expected an @I.ir_module class or an @R.function def at the top level")
        if classes and funcs:
            self.fail(funcs[0], "a file holds either one @I.ir_module class or @R.function defs, not both")
        if len(classes) > 1:
            self.fail(classes[1], "a file holds one @I.ir_module class; this is a second one")
        if classes:
            return self.ir_module(classes[0])
        if not funcs:
            raise ParseError(f"{self.source_name}: no @I.ir_module class or @R.function found")
        return self.build_module(funcs, {}, None)

    def check_import(self, stmt: ast.Import | ast.ImportFrom) -> None:
        if isinstance(stmt, ast.ImportFrom):
            allowed = _IMPORT_FROM.get(stmt.module or "") if stmt.level == 0 else None
            if allowed is not None and all((a.name, a.asname) in allowed for a in stmt.names):
                return
        elif all((a.name, a.asname) in _IMPORT for a in stmt.names):
            return
        self.fail(
            stmt,
            "unsupported import: only 'from distir.script import ir as I, relax as R, tirx as T' "
            "(or the same from tvm.script) and 'import tvm' are accepted",
        )

    def ir_module(self, cls: ast.ClassDef) -> IRModule:
        if [dotted_name(d) for d in cls.decorator_list] != ["I.ir_module"]:
            where = cls.decorator_list[0] if cls.decorator_list else cls
            self.fail(where, f"expected the class '{cls.name}' to be decorated with exactly @I.ir_module")
        if cls.bases or cls.keywords:
            self.fail(cls.bases[0] if cls.bases else cls.keywords[0], "an @I.ir_module class takes no base classes")
        attrs: dict[str, Any] = {}
        infos: dict[str, tuple[DeviceMesh, ...]] = {}
        funcs: list[ast.FunctionDef] = []
        seen: set[str] = set()
        for stmt in cls.body:
            self.at = stmt
            if isinstance(stmt, ast.FunctionDef):
                funcs.append(stmt)
                continue
            if isinstance(stmt, ast.Pass):
                continue
            call = stmt.value if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) else None
            name = dotted_name(call.func) if call is not None else None
            if name not in ("I.module_attrs", "I.module_global_infos"):
                self.fail(
                    stmt,
                    "expected I.module_attrs({...}), I.module_global_infos({...}) or an @R.function def in the module class",
                )
            if name in seen:
                self.fail(stmt, f"{name} is given twice")
            seen.add(name)
            if len(call.args) != 1 or call.keywords:
                self.fail(call, f"{name} takes one dict")
            if name == "I.module_attrs":
                attrs = self.attr_dict(call.args[0], name)
            else:
                infos = self.global_infos(call.args[0])
        self.meshes = MeshTable(infos)
        return self.build_module(funcs, attrs, infos)

    def build_module(self, funcs: list[ast.FunctionDef], attrs, infos) -> IRModule:
        out: dict[str, Function] = {}
        for node in funcs:
            self.at = _def_head(node)
            if node.name in out:
                self.fail(node, f"duplicate function name '{node.name}'")
            out[node.name] = self.function(node)
        return IRModule(out, infos or {}, attrs, source_name=self.source_name)

    def attr_dict(self, node: ast.AST, what: str) -> dict[str, Any]:
        if not isinstance(node, ast.Dict):
            self.fail(node, f"{what} expects a dict literal such as {{\"key\": 1}}")
        value = self.form(generic_from_ast, node, self.type_expr)
        for k in value:
            if not isinstance(k, str):
                self.fail(node, f"{what} keys must be strings")
        return value

    def global_infos(self, node: ast.AST) -> dict[str, tuple[DeviceMesh, ...]]:
        if not isinstance(node, ast.Dict):
            self.fail(node, 'I.module_global_infos expects a dict such as {"mesh": [R.device_mesh((2,), I.Range(0, 2))]}')
        out: dict[str, tuple[DeviceMesh, ...]] = {}
        for k, v in zip(node.keys, node.values):
            if k is None or not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                self.fail(k or v, 'global info names must be strings such as "mesh"')
            if not isinstance(v, (ast.List, ast.Tuple)):
                self.fail(v, f'global info "{k.value}" must be a list of R.device_mesh(...)')
            out[k.value] = tuple(self.device_mesh(e) for e in v.elts)
        return out

    def device_mesh(self, node: ast.AST) -> DeviceMesh:
        if not (isinstance(node, ast.Call) and dotted_name(node.func) == "R.device_mesh"):
            self.fail(node, "expected R.device_mesh(shape, I.Range(start, stop)) or R.device_mesh(shape, [ids])")
        args = self.bind_args(node, ("shape", "device_ids", "axis_names"), 2, "R.device_mesh")
        shape = self.form(dims_from_ast, args["shape"], "mesh shape")
        ids_node = args["device_ids"]
        ids: Range | tuple[int, ...]
        if isinstance(ids_node, ast.Call) and dotted_name(ids_node.func) == "I.Range":
            r = self.bind_args(ids_node, ("start", "stop"), 2, "I.Range")
            ids = Range(self.form(dim_from_ast, r["start"]), self.form(dim_from_ast, r["stop"]))
        elif isinstance(ids_node, (ast.List, ast.Tuple)):
            ids = tuple(self.form(int_from_ast, e, "a device id") for e in ids_node.elts)
        else:
            self.fail(ids_node, "expected the device ids as I.Range(start, stop) or a list of integers")
        names = None
        if "axis_names" in args:
            n = args["axis_names"]
            if not isinstance(n, (ast.List, ast.Tuple)):
                self.fail(n, "expected axis_names as a tuple of strings")
            names = tuple(self.form(str_from_ast, e, "an axis name") for e in n.elts)
        try:
            return DeviceMesh(shape, ids, names)
        except DistirError as err:
            self.fail(node, str(err))

    def bind_args(self, call: ast.Call, names: tuple[str, ...], required: int, what: str) -> dict[str, ast.AST]:
        """Map a call's positional and keyword arguments onto ``names`` (the first ``required`` needed)."""
        if len(call.args) > len(names):
            self.fail(call.args[len(names)], f"{what} takes at most {len(names)} arguments ({', '.join(names)})")
        out = dict(zip(names, call.args))
        for kw in call.keywords:
            if kw.arg is None:
                self.fail(kw.value, f"'**' is not allowed in {what}")
            if kw.arg not in names:
                self.fail(kw, f"{what} has no argument '{kw.arg}' (it takes {', '.join(names)})")
            if kw.arg in out:
                self.fail(kw, f"{what} got argument '{kw.arg}' twice")
            out[kw.arg] = kw.value
        for n in names[:required]:
            if n not in out:
                self.fail(call, f"{what} needs the argument '{n}'")
        return out

    # ------------------------------------------------------------ types

    def type_expr(self, node: ast.AST) -> Type:
        """A type annotation; identical annotation texts share one Type object (a parse cache)."""
        key = None
        if node.lineno == node.end_lineno:  # type: ignore[attr-defined]
            src = self.lines[node.lineno - 1] if node.lineno <= len(self.lines) else ""  # type: ignore[attr-defined]
            if src.isascii():
                key = src[node.col_offset + self.col_offset : node.end_col_offset + self.col_offset]  # type: ignore[attr-defined]
                hit = self._type_cache.get(key)
                if hit is not None:
                    return hit
        t = self._type_expr(node)
        if key is not None:
            self._type_cache[key] = t
        return t

    def _type_expr(self, node: ast.AST) -> Type:
        name = dotted_name(node.func) if isinstance(node, ast.Call) else None
        if name not in _TYPE_CALLS:
            self.fail(
                node,
                "expected a type: R.Tensor(shape, dtype), R.DTensor(shape, dtype, \"mesh[i]\", placement), "
                "R.Tuple(...), R.Shape([...]) or R.Prim(dtype)",
            )
        assert isinstance(node, ast.Call)
        if name == "R.Tensor":
            a = self.bind_args(node, ("shape", "dtype"), 0, name)
            if "shape" not in a:
                self.fail(node, "R.Tensor needs a shape, e.g. R.Tensor((128, \"n\"), dtype=\"float32\")")
            if "dtype" not in a:
                self.fail(node, "R.Tensor needs a dtype, e.g. R.Tensor((128, \"n\"), dtype=\"float32\")")
            shape = self.tensor_shape(a["shape"])
            return TensorType(shape, self.form(dtype_from_ast, a["dtype"]))
        if name == "R.DTensor":
            a = self.bind_args(node, ("shape", "dtype", "device_mesh", "placement"), 4, name)
            shape = self.tensor_shape(a["shape"])
            dtype = self.form(dtype_from_ast, a["dtype"])
            mesh = self.form(self.meshes.resolve, a["device_mesh"])
            placement = self.placement(a["placement"], mesh, len(shape), shape, dtype)
            return DTensorType(shape, dtype, mesh, placement)
        if name == "R.Tuple":
            if node.keywords:
                self.fail(node.keywords[0].value, "R.Tuple takes its field types as positional arguments")
            elts = node.args
            if len(elts) == 1 and isinstance(elts[0], (ast.List, ast.Tuple)):
                elts = elts[0].elts
            return TupleType(tuple(self.type_expr(e) for e in elts))
        if name == "R.Shape":
            a = self.bind_args(node, ("values", "ndim"), 0, name)
            if "values" in a:
                vals = self.form(dims_from_ast, a["values"], "shape values")
                if "ndim" in a and self.form(int_from_ast, a["ndim"]) != len(vals):
                    self.fail(a["ndim"], "ndim does not match the number of shape values")
                return ShapeType(len(vals), vals)
            if "ndim" not in a:
                self.fail(node, "R.Shape needs values (R.Shape([4, \"n\"])) or ndim (R.Shape(ndim=2))")
            return ShapeType(self.form(int_from_ast, a["ndim"], "an integer ndim"))
        a = self.bind_args(node, ("dtype",), 1, name)
        dt = self.form(str_from_ast, a["dtype"], "a dtype string")
        if dt not in _PRIM_DTYPES:
            self.fail(a["dtype"], f"unknown dtype \"{dt}\" (known: {', '.join(DTYPES)})")
        return PrimType(dt)

    def tensor_shape(self, node: ast.AST) -> tuple:
        """The shape of a tensor type; a static dimension must not be negative."""
        shape = self.form(dims_from_ast, node, "shape")
        for d, e in zip(shape, node.elts):  # type: ignore[attr-defined]
            if isinstance(d, int) and d < 0:
                self.fail(e, f"a tensor dimension cannot be negative, got {d}")
        return shape

    def placement(self, node: ast.AST, mesh: DeviceMesh, ndim: int | None, shape=None, dtype=None) -> Placement:
        text = self.form(str_from_ast, node, 'a placement string such as "S[0], R"')
        try:
            p = Placement.parse(text)
            p.validate(mesh.ndim, ndim, shape=shape)
            if dtype is not None:
                check_partial(p, dtype, "this DTensor")
        except PlacementError as err:
            self.fail(node, str(err))
        return p

    # ------------------------------------------------------------ functions

    def function(self, node: ast.FunctionDef) -> Function:
        fattrs: dict[str, Any] = self.function_decorator(node)
        scope = _Scope()
        params = self.params(node.args, scope)
        if node.returns is not None:
            self.at = node.returns
        ret_type = self.type_expr(node.returns) if node.returns is not None else None
        self.collect_names(node.body, scope)
        blocks, result = self.body(node, scope, fattrs)
        span = Span(
            self.source_name,
            node.lineno + self.line_offset,
            node.col_offset + 1 + self.col_offset,
            node.lineno + self.line_offset,
            node.col_offset + 1 + self.col_offset + len("def ") + len(node.name),
            self.line_text(node.lineno),
        )
        return Function(node.name, tuple(params), tuple(blocks), result, ret_type, fattrs, span)

    def params(self, args: ast.arguments, scope: _Scope) -> list[Var]:
        """The parameters: plain names, each with a type annotation."""
        for bad, what in (
            (args.posonlyargs, "positional-only parameters"),
            (args.kwonlyargs, "keyword-only parameters"),
            (args.defaults, "default values"),
        ):
            if bad:
                self.fail(bad[0], f"{what} are not allowed in an @R.function")
        if args.vararg or args.kwarg:
            self.fail(args.vararg or args.kwarg, "*args and **kwargs are not allowed in an @R.function")
        params = []
        for a in args.args:
            self.at = a
            if a.annotation is None:
                self.fail(a, f"parameter '{a.arg}' needs a type annotation, e.g. {a.arg}: R.Tensor((128,), dtype=\"float32\")")
            if a.arg in scope.vars:
                self.fail(a, f"duplicate parameter '{a.arg}'")
            v = Var(a.arg, self.type_expr(a.annotation), self.span(a))
            scope.vars[a.arg] = v
            params.append(v)
        return params

    def body(self, node: ast.FunctionDef, scope: _Scope, fattrs: dict[str, Any]) -> tuple[list[Block], Expr]:
        """The blocks of bindings and the returned value; ``R.func_attr`` lines go into ``fattrs``."""
        blocks: list[Block] = []
        current: list[Binding] = []
        seen_binding = False
        body = node.body
        for i, stmt in enumerate(body):
            self.at = stmt
            if isinstance(stmt, ast.Return):
                if i != len(body) - 1:
                    self.fail(body[i + 1], "statements after 'return' are not allowed")
                if stmt.value is None:
                    self.fail(stmt, "the function must return a value")
                self.pending = []
                result = self.leaf(stmt.value, scope, "the returned value")
                current.extend(self.pending)  # calls in the returned value, bound first
                if current:
                    blocks.append(Block(current, is_dataflow=False))
                return blocks, result
            if self.is_symvar_decl(stmt):
                continue
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and dotted_name(stmt.value.func) == "R.func_attr":
                if seen_binding:
                    self.fail(stmt, "R.func_attr must come before the first binding")
                self.func_attrs(stmt.value, fattrs)
                continue
            seen_binding = True
            if isinstance(stmt, ast.With):
                if current:
                    blocks.append(Block(current, is_dataflow=False))
                    current = []
                blocks.append(self.dataflow(stmt, scope))
                continue
            current.extend(self.binding(stmt, scope))
        self.fail(_def_head(node), f"function '{node.name}' has no return statement: end it with 'return <value>'")

    def func_attrs(self, call: ast.Call, fattrs: dict[str, Any]) -> None:
        if len(call.args) != 1 or call.keywords:
            self.fail(call, "R.func_attr takes one dict")
        for k, v in self.attr_dict(call.args[0], "R.func_attr").items():
            if k in fattrs:
                self.fail(call, f"function attribute '{k}' is given twice")
            fattrs[k] = v

    def function_decorator(self, node: ast.FunctionDef) -> dict[str, Any]:
        decos = node.decorator_list
        if len(decos) != 1:
            where = decos[1] if decos else _def_head(node)
            self.fail(where, f"expected exactly one decorator, @R.function, on 'def {node.name}'")
        d = decos[0]
        if dotted_name(d) == "R.function":
            return {}
        if isinstance(d, ast.Call) and dotted_name(d.func) == "R.function":
            if d.args:
                self.fail(d.args[0], "R.function takes only the keywords private= and pure=")
            out = {}
            for kw in d.keywords:
                if kw.arg not in DECORATOR_ATTRS:
                    self.fail(kw, "R.function takes only the keywords private= and pure=")
                if not (isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, bool)):
                    self.fail(kw.value, f"expected True or False for '{kw.arg}'")
                out[kw.arg] = kw.value.value
            return out
        self.fail(d, f"expected @R.function on 'def {node.name}'")

    def collect_names(self, body: list[ast.stmt], scope: _Scope) -> None:
        """Where each binding name is defined, for 'used before it is defined' messages."""
        for stmt in body:
            if isinstance(stmt, ast.With):
                self.collect_names(stmt.body, scope)
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                scope.defined_at.setdefault(stmt.target.id, stmt.lineno)
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                scope.defined_at.setdefault(stmt.targets[0].id, stmt.lineno)

    def is_symvar_decl(self, stmt: ast.stmt) -> bool:
        """``n = T.int64()``: symbolic variables are interned by name, so the line only declares."""
        if not (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)):
            return False
        name = dotted_name(stmt.value.func)
        if name is None or not name.startswith("T."):
            return False
        if name not in ("T.int64", "T.int32"):
            self.fail(stmt.value, f"expected T.int64() to declare a symbolic variable, got {name}(...)")
        if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            self.fail(stmt, "a symbolic variable is declared as 'n = T.int64()'")
        if stmt.value.args or stmt.value.keywords:
            self.fail(stmt.value, f"{name}() takes no arguments when it declares a symbolic variable")
        return True

    def dataflow(self, stmt: ast.With, scope: _Scope) -> Block:
        if (
            len(stmt.items) != 1
            or stmt.items[0].optional_vars is not None
            or not isinstance(stmt.items[0].context_expr, ast.Call)
            or dotted_name(stmt.items[0].context_expr.func) != "R.dataflow"
            or stmt.items[0].context_expr.args
            or stmt.items[0].context_expr.keywords
        ):
            self.fail(stmt.items[0].context_expr, "expected 'with R.dataflow():'")
        bindings: list[Binding] = []
        outputs: list[Var] | None = None
        names_here: list[str] = []
        body = stmt.body
        for i, s in enumerate(body):
            self.at = s
            if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and dotted_name(s.value.func) == "R.output":
                if i != len(body) - 1:
                    self.fail(body[i + 1], "R.output(...) must be the last statement of a dataflow block")
                outputs = self.outputs(s.value, scope, set(names_here))
                break
            if self.is_symvar_decl(s):
                continue
            if isinstance(s, ast.With):
                self.fail(s, "dataflow blocks cannot be nested")
            if isinstance(s, ast.Return):
                self.fail(s, "'return' inside a dataflow block: end the block with R.output(...) and return after it")
            for b in self.binding(s, scope):
                bindings.append(b)
                names_here.append(b.var.name)
        kept = {id(v) for v in outputs or ()}
        for b in bindings:
            if id(b.var) not in kept and scope.vars.get(b.var.name) is b.var:
                del scope.vars[b.var.name]
                scope.local_to[b.var.name] = stmt.lineno
        return Block(bindings, is_dataflow=True, outputs=tuple(outputs or ()))

    def outputs(self, call: ast.Call, scope: _Scope, defined_here: set[str]) -> list[Var]:
        if call.keywords:
            self.fail(call.keywords[0].value, "R.output takes variable names only")
        out = []
        for a in call.args:
            if not isinstance(a, ast.Name):
                self.fail(a, "R.output takes the names of variables defined in the dataflow block")
            if a.id not in defined_here:
                msg = f"R.output lists '{a.id}', which is not defined in this dataflow block"
                if a.id in scope.vars:
                    self.fail(a, msg + " (it is defined before the block; list only the block's own variables)")
                self.fail(a, msg + self.suggest(a.id, defined_here))
            out.append(scope.vars[a.id])
        return out

    # ------------------------------------------------------------ bindings

    def binding(self, stmt: ast.stmt, scope: _Scope) -> list[Binding]:
        """The binding a statement writes, after one binding per call nested in its value
        (``y = R.nn.relu(R.matmul(x, w))`` binds the matmul first, as TVMScript does)."""
        self.pending = []
        if isinstance(stmt, ast.AnnAssign):
            target, ann, value = stmt.target, stmt.annotation, stmt.value
            if value is None:
                self.fail(stmt, "a binding needs a value: name: type = value")
        elif isinstance(stmt, ast.Assign):
            if len(stmt.targets) != 1:
                self.fail(stmt.targets[1], "chained assignment is not allowed: bind one name at a time")
            target, ann, value = stmt.targets[0], None, stmt.value
        else:
            self.fail(stmt, self.statement_hint(stmt))
        if not isinstance(target, ast.Name):
            self.fail(target, "expected a variable name on the left of '=' (tuple unpacking is not supported; use t[0])")
        expr = self.value(value, scope)
        ty = self.type_expr(ann) if ann is not None else self.inferred_type(expr, value)
        name = target.id
        var = Var(name, ty, self.span(target))
        scope.vars[name] = var
        scope.local_to.pop(name, None)
        return [*self.pending, Binding(var, expr, self.span(stmt))]

    def inferred_type(self, expr: Expr, node: ast.AST) -> Type:
        try:
            return expr.type
        except TypeInferenceError as err:
            ty = self.unplaced_type(expr)
            if ty is None:
                self.fail(node, str(err))
            return ty
        except DistirError as err:
            self.fail(node, f"cannot infer the type: {err}")

    def nested_call(self, node: ast.Call, name: str, scope: _Scope) -> Var:
        """A call written inside another expression: bound to a fresh variable before the statement."""
        call = self.op_call(node, name[2:], scope)
        var = Var(self.fresh_name(scope), self.inferred_type(call, node), self.span(node))
        scope.vars[var.name] = var
        self.pending.append(Binding(var, call, self.span(node)))
        return var

    @staticmethod
    def fresh_name(scope: _Scope) -> str:
        """``lv``, ``lv1``, ... (TVMScript's names for normalized calls), skipping every name in use."""
        k = 0
        while True:
            name = "lv" if k == 0 else f"lv{k}"
            if name not in scope.vars and name not in scope.defined_at and name not in scope.local_to:
                return name
            k += 1

    @staticmethod
    def unplaced_type(expr: Expr) -> Type | None:
        """The layout-free type of a compute op on DTensors whose placements do not fit its rule
        (propagate-sharding decides the layout), or None if the op fails on plain types too."""
        if not (isinstance(expr, Call) and not expr.op.dist_aware and any(has_dtensor(a.type) for a in expr.args)):
            return None
        try:
            return infer_unplaced(expr.op, [a.type for a in expr.args], expr.attrs)
        except DistirError:
            return None

    def statement_hint(self, stmt: ast.stmt) -> str:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            name = dotted_name(stmt.value.func)
            if name == "R.output":
                return "R.output(...) is only allowed at the end of a 'with R.dataflow():' block"
            if name == "R.func_attr":
                return "R.func_attr must come before the first binding"
        return "expected a binding 'name: type = value', 'with R.dataflow():' or 'return value'"

    def value(self, node: ast.AST, scope: _Scope) -> Expr:
        if isinstance(node, ast.Call):
            name = dotted_name(node.func)
            if name is not None and name.startswith("R.") and name not in _LITERAL_CALLS:
                return self.op_call(node, name[2:], scope)
        if isinstance(node, ast.Subscript):
            return self.tuple_get_item(node, scope)
        return self.leaf(node, scope, "a value")

    def tuple_get_item(self, node: ast.Subscript, scope: _Scope) -> TupleGetItem:
        base = self.leaf(node.value, scope, "a tuple")
        index = self.form(int_from_ast, node.slice, "an integer index such as t[0]")
        t = base.type
        if not isinstance(t, TupleType):
            self.fail(node.value, f"cannot index a value of type {t}: only tuples can be indexed")
        if not -len(t.fields) <= index < len(t.fields):
            self.fail(node.slice, f"index {index} is out of range for a tuple of {len(t.fields)} fields")
        return TupleGetItem(base, index, self.span(node))

    def leaf(self, node: ast.AST, scope: _Scope, what: str) -> Expr:
        if isinstance(node, ast.Name):
            return self.var(node, scope)
        if isinstance(node, ast.Tuple):
            return Tuple(tuple(self.leaf(e, scope, "a tuple field") for e in node.elts), self.span(node))
        if isinstance(node, ast.Subscript):
            return self.tuple_get_item(node, scope)
        if isinstance(node, ast.Call):
            name = dotted_name(node.func)
            if name == "R.const":
                return self.constant(node)
            if name == "R.shape":
                a = self.bind_args(node, ("values",), 1, name)
                return ShapeExpr(self.form(dims_from_ast, a["values"], "shape"), self.span(node))
            if name == "R.prim_value":
                return self.prim_value(node)
            if name == "R.str":
                a = self.bind_args(node, ("value",), 1, name)
                return StringImm(self.form(str_from_ast, a["value"]), self.span(node))
            if name is not None and name.startswith("R.") and name not in _TYPE_CALLS and name not in _LITERAL_CALLS:
                return self.nested_call(node, name, scope)
        self.fail(
            node,
            f"expected {what}: a variable, a tuple (a, b), R.const(...), R.shape([...]) or R.prim_value(...)",
        )

    def var(self, node: ast.Name, scope: _Scope) -> Var:
        v = scope.vars.get(node.id)
        if v is not None:
            return v
        name = node.id
        if name in scope.local_to:
            self.fail(
                node,
                f"'{name}' is local to the dataflow block at line {scope.local_to[name] + self.line_offset}; "
                f"list it in that block's R.output(...) to use it after the block",
            )
        line = scope.defined_at.get(name)
        if line is not None and line >= node.lineno:
            self.fail(node, f"'{name}' is used before it is defined (at line {line + self.line_offset})")
        self.fail(node, f"undefined name '{name}'" + self.suggest(name, scope.vars))

    @staticmethod
    def suggest(name: str, candidates) -> str:
        close = difflib.get_close_matches(name, list(candidates), n=1)
        return f"; did you mean '{close[0]}'?" if close else ""

    def constant(self, node: ast.Call) -> Constant:
        a = self.bind_args(node, ("value", "dtype"), 1, "R.const")
        value = self.form(_const_value, a["value"])
        if "dtype" in a:
            dtype = self.form(dtype_from_ast, a["dtype"])
        else:
            dtype = _default_const_dtype(value)
        from ..ir.types import np_dtype

        try:
            with np.errstate(all="ignore"):
                data = np.array(value, dtype=np_dtype(dtype))
        except (ValueError, TypeError, OverflowError) as err:
            self.fail(a["value"], f"R.const value does not fit dtype \"{dtype}\" or is ragged: {err}")
        if data.dtype == object:
            self.fail(a["value"], "R.const value must be a number or a rectangular nested list of numbers")
        return Constant(data, self.span(node))

    def prim_value(self, node: ast.Call) -> PrimValue:
        a = self.bind_args(node, ("value",), 1, "R.prim_value")
        v = a["value"]
        dtype = "int64"
        if isinstance(v, ast.Call):
            name = dotted_name(v.func)
            if name is not None and name.startswith("T.") and name[2:] in _PRIM_INT_DTYPES:
                if len(v.args) != 1 or v.keywords:
                    self.fail(v, f"{name} takes one value")
                dtype, v = name[2:], v.args[0]
        return PrimValue(self.form(dim_from_ast, v), dtype, self.span(node))

    # ------------------------------------------------------------ op calls

    def op(self, name: str, node: ast.AST) -> OpDef:
        try:
            op = self._ops[name]
        except KeyError:
            op = self._ops[name] = get_op(name)
        if op is None:
            names = list(all_ops()) + ["const", "shape", "prim_value", "str"]
            close = difflib.get_close_matches(name, names, n=3)
            hint = f"; did you mean {', '.join('R.' + c for c in close)}?" if close else ""
            self.fail(node, f"unknown op 'R.{name}'{hint}")
        return op

    def op_call(self, node: ast.Call, name: str, scope: _Scope) -> Call:
        op = self.op(name, node.func)
        params = op.params
        if len(node.args) > len(params):
            self.fail(
                node.args[len(params)],
                f"R.{name} takes {len(params)} argument{'s' if len(params) != 1 else ''} "
                f"({', '.join(p.name for p in params)}) but {len(node.args)} were given",
            )
        given: dict[str, ast.AST] = {}
        for p, a in zip(params, node.args):
            given[p.name] = a
        for kw in node.keywords:
            if kw.arg is None:
                self.fail(kw.value, f"'**' is not allowed in a call to R.{name}")
            p = op.param(kw.arg)
            if p is None:
                self.fail(
                    kw,
                    f"R.{name} has no parameter '{kw.arg}' (its parameters are {', '.join(q.name for q in params)})"
                    + self.suggest(kw.arg, [q.name for q in params]),
                )
            if kw.arg in given:
                self.fail(kw, f"R.{name} got parameter '{kw.arg}' twice")
            given[kw.arg] = kw.value
        args: list[Expr] = []
        attrs: dict[str, Any] = {}
        missing_arg: Param | None = None
        for p in params:
            a = given.get(p.name)
            if a is None:
                if p.required:
                    self.fail(node, f"R.{name} needs the {'argument' if p.is_arg else 'attribute'} '{p.name}'")
                if p.is_arg:
                    missing_arg = p
                else:
                    attrs[p.name] = p.default
                continue
            if p.is_arg:
                if missing_arg is not None:
                    self.fail(a, f"R.{name}: '{p.name}' is given but the earlier argument '{missing_arg.name}' is not")
                args.append(self.arg(p, a, scope, name))
            else:
                attrs[p.name] = self.form(attr_from_ast, p, a, self.meshes)
        return Call(op, tuple(args), attrs, self.span(node))

    def arg(self, p: Param, node: ast.AST, scope: _Scope, opname: str) -> Expr:
        if isinstance(node, ast.Name):
            return self.var(node, scope)
        kind = p.kind
        if isinstance(node, ast.Call):
            name = dotted_name(node.func)
            if name is not None and name.startswith("R.") and name not in _LITERAL_CALLS:
                return self.nested_call(node, name, scope)
        if kind == "shape" and isinstance(node, (ast.Tuple, ast.List)):
            return ShapeExpr(self.form(dims_from_ast, node, "shape"), self.span(node))
        if kind == "prim" and not isinstance(node, (ast.Call, ast.Tuple, ast.Subscript)):
            return PrimValue(self.form(dim_from_ast, node), "int64", self.span(node))
        return self.leaf(node, scope, f"argument '{p.name}' of R.{opname}")


def _def_head(node: ast.FunctionDef) -> ast.AST:
    """A node spanning 'def name' (for messages about the whole function)."""
    head = ast.Pass()
    head.lineno = head.end_lineno = node.lineno
    head.col_offset = node.col_offset
    head.end_col_offset = node.col_offset + len("def ") + len(node.name)
    return head


def _const_value(node: ast.AST) -> Any:
    """Nested lists/tuples of number, bool and float("inf") literals (numpy checks the range)."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_const_value(e) for e in node.elts]
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) is int
    ):
        return -node.operand.value
    return float_from_ast(node, "a number, True/False, or a nested list of them")


def _default_const_dtype(value: Any) -> str:
    while isinstance(value, list) and value:
        value = value[0]
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    return "float32"
