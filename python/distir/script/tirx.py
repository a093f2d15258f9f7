"""``T``: symbolic-integer names (``from distir.script import tirx as T``); placeholders only."""

from __future__ import annotations

from ._inert import inert_getattr, placeholder

__all__ = ["int32", "int64", "max", "min"]

int64 = placeholder("T.int64")
int32 = placeholder("T.int32")
min = placeholder("T.min")
max = placeholder("T.max")

__getattr__ = inert_getattr("T")
