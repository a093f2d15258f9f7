"""One op = one declaration: its Relax form and its docs come from its OpDef.

docs/ops.md's tables are generated from the declarations and must be up to date; every
declared Relax form must name a Relax op TVM has, with keywords it takes; the export's
list of supported ops is derived from the declarations.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from distir.errors import DistirError
from distir.ir import Binding, Block, Call, Function, IRModule, OpDef, Param, TensorType, Var, all_ops
from distir.ir.op import RelaxAttr, RelaxForm, ShardingDoc
from distir.ops.docgen import REGENERATE, doc_tables, ops_doc_path, partials_text, update_ops_doc
from distir.testing import temporary_op


def test_docs_ops_md_is_up_to_date():
    text = ops_doc_path().read_text()
    if update_ops_doc(text) != text:
        pytest.fail(f"docs/ops.md is out of date with the op declarations; regenerate it with: {REGENERATE}")


def test_every_op_has_a_one_line_doc_and_a_row():
    tables = "".join(doc_tables().values())
    for name, op in all_ops().items():
        assert op.doc and "\n" not in op.doc, f"R.{name} needs a one-line doc"
        assert f"| `{name}` |" in tables, f"R.{name} has no row in the generated tables"


def test_a_stale_or_unmarked_table_is_found():
    text = ops_doc_path().read_text()
    start = text.index("<!-- ops-table: elementwise -->\n") + len("<!-- ops-table: elementwise -->\n")
    end = text.index("<!-- /ops-table -->", start)
    stale = text[:start] + "| old table |\n" + text[end:]
    assert update_ops_doc(stale) == update_ops_doc(text)
    unmarked = text[: start - len("<!-- ops-table: elementwise -->\n")] + text[end + len("<!-- /ops-table -->") :]
    with pytest.raises(DistirError, match="no table for the ops of 'elementwise'"):
        update_ops_doc(unmarked)
    with pytest.raises(DistirError, match="no op has the category 'nonsense'"):
        update_ops_doc(text + "\n<!-- ops-table: nonsense -->\n<!-- /ops-table -->\n")


def test_partials_text_reads_the_rule_tables():
    assert partials_text({}) == "none"
    assert partials_text({"sum": "one", "avg": "one", "max": "one", "min": "one"}) == "layout"
    assert partials_text({"min": "one", "sum": "all", "max": "one", "avg": "all"}, "x1", "why") == (
        "sum, avg: `all`; max, min: `one`, x1 only (why)"
    )


def test_every_declared_relax_form_resolves_with_keywords_tvm_takes():
    from distir.tvm.relax.ops import _emitter, relax_function

    forms = {name: op for name, op in all_ops().items() if op.relax is not None}
    assert len(forms) > 50
    for name, op in forms.items():
        form = op.relax
        if form.emit is not None:
            assert callable(_emitter(form.emit)), name
        if form.op is None:
            continue
        params = inspect.signature(relax_function(form.op)).parameters
        positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        assert len(op.arg_params) <= len(positional), f"R.{name}: {form.op} takes fewer arguments"
        for a in form.attrs:
            assert a.keyword in params, f"R.{name}: {form.op} has no keyword '{a.keyword}'"
        assert not {a.keyword for a in form.attrs} & {p.name for p in positional[: len(op.arg_params)]}, name


def test_supported_ops_are_the_declared_forms_and_the_collectives():
    from distir.tvm.relax.collectives import collective_ops
    from distir.tvm.relax.ops import SUPPORTED_OPS, supported_ops

    declared = {name for name, op in all_ops().items() if op.relax is not None}
    assert supported_ops() == SUPPORTED_OPS == declared | collective_ops()
    assert not any(name.startswith("dist.") for name in supported_ops())


def test_a_relax_form_is_checked_where_it_is_declared():
    with pytest.raises(DistirError, match="names a Relax op"):
        RelaxForm()
    with pytest.raises(DistirError, match="dotted name under tvm"):
        RelaxForm("tvm_relax_add")
    with pytest.raises(DistirError, match="must be 'module:function'"):
        RelaxForm(emit="distir.tvm.relax.ops.emit_take", doc="x")
    with pytest.raises(DistirError, match="needs a doc"):
        RelaxForm(emit="distir.tvm.relax.ops:emit_take")
    assert RelaxForm("relax.op.sum", ("axis",)).attrs == (RelaxAttr("axis", "axis"),)
    op = OpDef(
        name="toy.bad_attr",
        params=(Param("x", "tensor"), Param("axis", "int", 0)),
        infer=lambda types, attrs: types[0],
        relax=RelaxForm("relax.op.nn.softmax", ("axes",)),
    )
    with pytest.raises(DistirError, match="passes 'axes', which is not one of its attributes"), temporary_op(op):
        pass
    assert "toy.bad_attr" not in all_ops()


def _one_call_module(op: OpDef) -> IRModule:
    x = Var("x", TensorType((4,), "float32"))
    y = Var("y", TensorType((4,), "float32"))
    return IRModule({"main": Function("main", (x,), (Block((Binding(y, Call(op, (x,))),)),), y)})


def test_a_relax_op_tvm_lacks_is_an_export_error_naming_the_declaration():
    from distir.tvm import TvmExportError, to_relax

    op = OpDef(
        name="toy.missing",
        params=(Param("x", "tensor"),),
        infer=lambda types, attrs: types[0],
        relax=RelaxForm("relax.op.no_such_op"),
    )
    missing = r"has no Relax op 'relax.op.no_such_op' \(declared by R.toy.missing\)"
    with temporary_op(op), pytest.raises(TvmExportError, match=missing):
        to_relax(_one_call_module(op))
    emitter = OpDef(
        name="toy.missing_emitter",
        params=(Param("x", "tensor"),),
        infer=lambda types, attrs: types[0],
        relax=RelaxForm(emit="distir.tvm.relax.ops:emit_nothing", doc="nothing"),
    )
    with temporary_op(emitter), pytest.raises(TvmExportError, match="emitter 'distir.tvm.relax.ops:emit_nothing' does not"):
        to_relax(_one_call_module(emitter))


def test_a_toy_op_gets_a_row_from_its_declaration_alone():
    op = OpDef(
        name="toy.floor",
        params=(Param("x", "tensor"),),
        infer=lambda types, attrs: types[0],
        numpy=lambda xs, attrs, ctx: np.floor(xs[0]),
        doc="Elementwise floor.",
        relax=RelaxForm.same_name("floor"),
        category="elementwise",
        sharding_doc=ShardingDoc(passes="all", partials=partials_text({"max": "one", "min": "one"})),
    )
    with temporary_op(op):
        row = doc_tables()["elementwise"].splitlines()[-1]
    assert row == "| `toy.floor` | `x` | – | Elementwise floor. | all | – | max, min: `one` | `relax.op.floor` |"
    assert "toy.floor" not in doc_tables()["elementwise"]
