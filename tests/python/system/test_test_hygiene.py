"""Rules the tests themselves keep, read from their sources with ``ast``.

A ``pytest.raises`` that checks only the exception's class passes on any error of that class,
including the wrong one (a typo, a different refusal): each says what the error must be about,
by ``match=`` or by reading the caught exception after the block.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]  # tests/python


def _is_pytest_raises(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "raises"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "pytest"
    )


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _read_after(with_node: ast.With, name: str, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether ``name`` is read after the ``with`` block, in the function (or module) holding it."""
    scope: ast.AST = with_node
    while not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        scope = parents[scope]
    return any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) and n.lineno > with_node.end_lineno
        for n in ast.walk(scope)
    )


def unchecked_raises(source: str, filename: str = "<test>") -> list[int]:
    """Lines of the ``pytest.raises`` calls in ``source`` with neither ``match=`` nor a
    ``with ... as name:`` whose name is read after the block."""
    tree = ast.parse(source, filename)
    parents = _parents(tree)
    bad = []
    for node in ast.walk(tree):
        if not _is_pytest_raises(node) or any(k.arg == "match" for k in node.keywords):
            continue
        item = parents.get(node)
        if isinstance(item, ast.withitem) and isinstance(item.optional_vars, ast.Name):
            if _read_after(parents[item], item.optional_vars.id, parents):
                continue
        bad.append(node.lineno)
    return sorted(bad)


def test_the_rule_tells_checked_from_unchecked_raises():
    source = '''
import pytest

def test_a():
    with pytest.raises(ValueError, match="bad size"):
        f()
    with pytest.raises(ValueError) as err:
        f()
    assert "bad size" in str(err.value)
    with pytest.raises(ValueError):
        f()
    with pytest.raises(KeyError) as unused:
        f()
    with open("x") as fh, pytest.raises(OSError):
        f()
    pytest.raises(TypeError, f)

def test_b():
    with pytest.raises(ValueError) as err:
        assert err is not None
'''
    assert unchecked_raises(source) == [10, 12, 14, 16, 19]


def test_every_pytest_raises_checks_the_message():
    bad = [
        f"{path.relative_to(TESTS)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        for line in unchecked_raises(path.read_text(), str(path))
    ]
    assert not bad, (
        "pytest.raises without match= (or a check of the caught exception after the block): "
        + ", ".join(bad)
    )
