"""The op tables of docs/ops.md, rendered from the op declarations.

Each table holds the ops of one ``category`` (``OpDef.category``; ``dist.*`` and
``ccl.*`` ops go by their prefix): name, arguments, attributes with defaults, the
one-line ``doc``, how the op shards (``OpDef.sharding_doc``) and its TVM form
(``OpDef.relax``, or the Disco form of a collective's step kind). In docs/ops.md a table
sits between ``<!-- ops-table: <category> -->`` and ``<!-- /ops-table -->``; the prose
around the markers is written by hand. Regenerate with ``python scripts/gen_ops_doc.py``;
a test fails when the file is out of date.

Nothing here imports TVM: Relax forms and emitters are shown by the names they declare.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import DistirError
from ..ir.op import REQUIRED, OpDef, Param, ShardingDoc, all_ops

__all__ = [
    "REGENERATE",
    "category_of",
    "doc_tables",
    "ops_doc_path",
    "partials_text",
    "render_table",
    "update_ops_doc",
]

#: the command that rewrites docs/ops.md (from the repository root)
REGENERATE = "PYTHONPATH=python python scripts/gen_ops_doc.py"

_BEGIN = re.compile(r"<!-- ops-table: ([a-z_]+) -->\n")
_END = "<!-- /ops-table -->"
_KINDS = ("sum", "avg", "max", "min")
_LAYOUT = {k: "one" for k in _KINDS}


def ops_doc_path() -> Path:
    """docs/ops.md of the source tree this package lives in."""
    return Path(__file__).resolve().parents[3] / "docs" / "ops.md"


# ---------------------------------------------------------------- helpers for declarations


def partials_text(partial: Mapping[str, str], only: str = "", note: str = "") -> str:
    """Words for a ShardingRule's ``partial`` table (the column "partials through").

    ``{"sum": "one", "avg": "one"}`` reads ``sum, avg: `one```; every reduction with
    ``one`` reads ``layout``; ``only`` names the inputs a lone partial may be (the rule's
    ``partial_inputs``), ``note`` adds a reason in parentheses.
    """
    if not partial:
        text = "none"
    elif dict(partial) == _LAYOUT:
        text = "layout"
        if only:
            text += f", {only} only"
    else:
        by_mode: dict[str, list[str]] = {}
        for kind in sorted(partial, key=lambda k: _KINDS.index(k) if k in _KINDS else len(_KINDS)):
            by_mode.setdefault(partial[kind], []).append(kind)
        parts = []
        for mode, kinds in by_mode.items():
            part = f"{', '.join(kinds)}: `{mode}`"
            if mode == "one" and only:
                part += f", {only} only"
            parts.append(part)
        text = "; ".join(parts)
    return f"{text} ({note})" if note else text


# ---------------------------------------------------------------- rendering


def category_of(op: OpDef) -> str:
    if op.category:
        return op.category
    if op.name.startswith("dist."):
        return "distribution"
    if op.name.startswith("ccl."):
        return "collectives"
    return ""


def _value(v: Any) -> str:
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, float):
        return re.sub(r"e([-+])0*(\d)", r"e\1\2", repr(v)).replace("e+", "e")
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def _args(op: OpDef) -> str:
    return ", ".join(f"`{p.name}`" + ("" if p.kind == "tensor" else f" ({p.kind})") for p in op.arg_params) or "–"


def _attr(p: Param) -> str:
    text = f"`{p.name}`" if p.default is REQUIRED else f"`{p.name}={_value(p.default)}`"
    if p.choices:
        text += " (" + ", ".join(p.choices) + ")"
    return text


def _attrs(op: OpDef) -> str:
    return ", ".join(_attr(p) for p in op.attr_params) or "–"


def _relax_call(op: OpDef) -> str:
    form = op.relax
    attrs = []
    converted = False
    for a in form.attrs:
        attrs.append(a.name if a.keyword == a.name and a.convert is None else f"{a.keyword}={a.name}")
        converted = converted or a.convert is not None
    call = f"`{form.op}({', '.join(attrs)})`" if attrs else f"`{form.op}`"
    return call + (" (values converted)" if converted else "")


def relax_text(op: OpDef) -> str:
    """The TVM form of an op, in words."""
    form = op.relax
    if form is not None:
        parts = [_relax_call(op)] if form.op is not None else []
        if form.emit is not None:
            parts.append(f"via `{form.emit.rpartition(':')[2]}`: {form.doc}")
        return ", ".join(parts)
    step = op.step
    if step is not None and op is step.local_op and step.tvm is not None:
        ref = step.tvm if isinstance(step.tvm, str) else getattr(step.tvm, "__qualname__", str(step.tvm))
        return f"Disco, via `{ref.rpartition(':')[2]}`"
    if op.name.startswith("dist."):
        return "– (global view)"
    return "none"


def _cell(text: str) -> str:
    return (text or "–").replace("|", "\\|").replace("\n", " ")


def render_table(category: str) -> str:
    """The markdown table of one category's ops, in declaration order."""
    ops = [op for op in all_ops().values() if category_of(op) == category]
    if not ops:
        raise DistirError(f"no op has the category '{category}'")
    sharded = any(op.sharding_doc is not None for op in ops)
    gives = any(op.sharding_doc is not None and op.sharding_doc.gives_partial for op in ops)
    head = ["op", "arguments", "attributes", "what it does"]
    if sharded:
        head += ["passes", "blocked"] + (["gives partial"] if gives else []) + ["partials through"]
    head.append("Relax form" if sharded else "TVM form")
    rows = []
    for op in ops:
        row = [f"`{op.name}`", _args(op), _attrs(op), op.doc]
        if sharded:
            sd = op.sharding_doc or ShardingDoc(passes="", partials="")  # doc_tables insists on one
            row += [sd.passes, sd.blocked] + ([sd.gives_partial] if gives else []) + [sd.partials]
        row.append(relax_text(op))
        rows.append(row)
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def doc_tables() -> dict[str, str]:
    """Every category's table, by category, in the order the categories are first declared."""
    cats: list[str] = []
    for op in all_ops().values():
        c = category_of(op)
        if not c:
            raise DistirError(f"R.{op.name} has no category: declare OpDef.category so that docs/ops.md lists it")
        if op.sharding_doc is None and c not in ("distribution", "collectives"):
            raise DistirError(f"R.{op.name} has no sharding_doc: declare how it shards for docs/ops.md")
        if not op.doc or "\n" in op.doc:
            raise DistirError(f"R.{op.name} needs a one-line doc")
        if c not in cats:
            cats.append(c)
    return {c: render_table(c) for c in cats}


def update_ops_doc(text: str) -> str:
    """``text`` (docs/ops.md) with every marked table rendered anew.

    Raises if a marker names a category no op has, a marker is not closed, or a category
    has no marker (its ops would be missing from the docs).
    """
    tables = doc_tables()
    out: list[str] = []
    seen: set[str] = set()
    pos = 0
    for m in _BEGIN.finditer(text):
        if m.start() < pos:
            continue
        category = m.group(1)
        end = text.find(_END, m.end())
        if end < 0:
            raise DistirError(f"docs/ops.md: the table '{category}' has no closing {_END}")
        if category not in tables:
            raise DistirError(f"docs/ops.md: no op has the category '{category}' (known: {', '.join(tables)})")
        out.append(text[pos : m.end()])
        out.append(tables[category])
        seen.add(category)
        pos = end
    out.append(text[pos:])
    missing = [c for c in tables if c not in seen]
    if missing:
        raise DistirError(
            f"docs/ops.md has no table for the ops of {', '.join(repr(c) for c in missing)}: "
            f"add <!-- ops-table: {missing[0]} -->{_END} where it belongs"
        )
    return "".join(out)
