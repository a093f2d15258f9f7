"""Pass infrastructure: registry, PassContext (opt level, required/disabled), Sequential, instruments."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import ClassVar

import pytest

from distir.errors import PassError, VerifyError
from distir.ir import Binding, Block, Call, Function, IRModule, TensorType, Var, get_op
from distir.transform import (
    Canonicalize,
    FunctionPass,
    ModulePass,
    Pass,
    PassContext,
    PassInstrument,
    PassTimingInstrument,
    PassVerifyError,
    PrintIRInstrument,
    Sequential,
    VerifyInstrument,
    get_pass,
    list_passes,
    list_pipelines,
    pass_infra,
    register_pass,
    register_pipeline,
)


@pytest.fixture(autouse=True)
def clean_registry():
    """Passes registered by a test do not leak into others."""
    list_passes()  # load the built-in passes first, so that the snapshot holds them
    passes, pipelines = dict(pass_infra._PASSES), dict(pass_infra._PIPELINES)
    yield
    pass_infra._PASSES.clear()
    pass_infra._PASSES.update(passes)
    pass_infra._PIPELINES.clear()
    pass_infra._PIPELINES.update(pipelines)


def T(*shape) -> TensorType:
    return TensorType(shape, "float32")


def small_module() -> IRModule:
    """main(x) = relu(x) with a dead binding, so canonicalize changes it."""
    x = Var("x", T(4, 4))
    y, dead = Var("y", T(4, 4)), Var("dead", T(4, 4))
    block = Block((Binding(y, Call(get_op("nn.relu"), (x,))), Binding(dead, Call(get_op("add"), (x, x)))), True, (y,))
    return IRModule({"main": Function("main", (x,), (block,), y, T(4, 4))})


class Record(ModulePass):
    """Appends its tag to a shared log; returns the module unchanged."""

    name: ClassVar[str] = "record"

    def __init__(self, log: list[str], tag: str, opt_level: int = 0, required: tuple[str, ...] = ()) -> None:
        self.log, self.tag = log, tag
        self.name = tag  # type: ignore[misc]
        self.opt_level = opt_level  # type: ignore[misc]
        self.required = required  # type: ignore[misc]

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        self.log.append(self.tag)
        return mod


class BreakTypes(FunctionPass):
    """Records a wrong type on the first binding: the kind of bug VerifyInstrument must catch."""

    name: ClassVar[str] = "break-types"

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        block = func.blocks[0]
        b = block.bindings[0]
        wrong = Var(b.var.name, T(1))
        bindings = (Binding(wrong, b.value),) + block.bindings[1:]
        return func.replace(blocks=(Block(bindings, block.is_dataflow, block.outputs),) + func.blocks[1:])


# -- registry ------------------------------------------------------------------------------


def test_builtin_passes_are_registered_by_kebab_name():
    passes = list_passes()
    assert passes["canonicalize"] is Canonicalize
    assert isinstance(get_pass("canonicalize"), Canonicalize)
    for name, cls in passes.items():
        assert name == name.lower() and " " not in name and "_" not in name
        assert cls.__name__[0].isupper()


def test_passes_of_a_subpackage_are_registered_and_reachable_by_name():
    import distir.transform

    auto_shard = list_passes()["auto-shard"]  # declared in distir.transform.layout_choice.auto_shard
    assert auto_shard.__module__ == "distir.transform.layout_choice.auto_shard"
    assert distir.transform.AutoShard is auto_shard
    assert list_passes()["propagate-sharding"] is distir.transform.PropagateSharding
    assert "layout_choice.shard_params" in distir.transform._submodules()


def test_unknown_pass_name_suggests_the_closest():
    with pytest.raises(PassError) as info:
        get_pass("canonicalise")
    msg = str(info.value)
    assert "unknown pass 'canonicalise'" in msg and "did you mean 'canonicalize'" in msg
    assert "known passes:" in msg and "canonicalize" in msg


def test_bad_pass_options_are_a_pass_error():
    assert get_pass("canonicalize", remove_dead_code=False).remove_dead_code is False
    with pytest.raises(PassError, match="bad options"):
        get_pass("canonicalize", no_such_option=1)


def test_register_pass_wants_a_kebab_case_name():
    with pytest.raises(PassError, match="kebab-case"):

        @register_pass
        class Bad(ModulePass):
            name: ClassVar[str] = "Bad_Name"

    with pytest.raises(PassError, match="already taken"):

        @register_pass
        class Clash(ModulePass):
            name: ClassVar[str] = "canonicalize"


def test_register_pass_as_frozen_dataclass_with_options():
    @register_pass
    @dataclass(frozen=True)
    class ScaleNothing(FunctionPass):
        """Does nothing, with an option."""

        name: ClassVar[str] = "scale-nothing"
        factor: int = 1

        def transform_function(self, func, mod, ctx):
            return func

    p = get_pass("scale-nothing", factor=3)
    assert isinstance(p, ScaleNothing) and p.factor == 3
    mod = small_module()
    assert p(mod) is mod  # unchanged functions -> the same module object


def test_named_pipelines():
    log: list[str] = []

    def factory(**options):
        """Two recorders."""
        return Sequential([Record(log, "a"), Record(log, "b")], name="ab")

    register_pipeline("ab-pipeline", factory)
    assert "ab-pipeline" in list_pipelines()
    pipe = get_pass("ab-pipeline")
    pipe(small_module())
    assert log == ["a", "b"]
    with pytest.raises(PassError, match="already taken"):
        register_pipeline("canonicalize", factory)
    with pytest.raises(PassError) as info:
        get_pass("ab-pipelin")
    assert "did you mean 'ab-pipeline'" in str(info.value)


# -- PassContext ---------------------------------------------------------------------------


def test_pass_context_current_is_the_innermost():
    outer, inner = PassContext(opt_level=1), PassContext(opt_level=3)
    default = PassContext.current()
    assert default.opt_level == 2 and PassContext.current() is default
    with outer:
        assert PassContext.current() is outer
        with inner:
            assert PassContext.current() is inner
        assert PassContext.current() is outer
    assert PassContext.current() is default


def test_opt_level_skips_passes_unless_required():
    log: list[str] = []
    heavy = Record(log, "heavy", opt_level=3)
    mod = small_module()
    assert heavy(mod) is mod and log == []  # default opt level 2
    with PassContext(opt_level=3):
        heavy(mod)
    assert log == ["heavy"]
    with PassContext(opt_level=0, required_passes=["heavy"]):
        heavy(mod)
    assert log == ["heavy", "heavy"]


def test_disabled_passes_do_not_run():
    log: list[str] = []
    seq = Sequential([Record(log, "a"), Record(log, "b"), Record(log, "c")])
    with PassContext(disabled_passes=["b"]):
        seq(small_module())
    assert log == ["a", "c"]
    mod = small_module()
    with PassContext(disabled_passes=["canonicalize"]):
        assert Canonicalize()(mod) is mod


def test_sequential_runs_in_order_and_nests():
    log: list[str] = []
    seq = Sequential([Record(log, "a"), Sequential([Record(log, "b"), Record(log, "c")]), Record(log, "d")])
    seq(small_module())
    assert log == ["a", "b", "c", "d"]


def test_required_passes_must_run_earlier_in_the_sequence():
    log: list[str] = []
    needs_a = Record(log, "needs-a", required=("a",))
    with pytest.raises(PassError) as info:
        Sequential([Record(log, "x"), needs_a])(small_module())
    assert "'needs-a' requires 'a'" in str(info.value)
    log.clear()
    Sequential([Record(log, "a"), Sequential([needs_a])])(small_module())
    assert log == ["a", "needs-a"]
    log.clear()
    with PassContext(disabled_passes=["a"]), pytest.raises(PassError, match="pass 'needs-a' requires 'a' to run"):
        Sequential([Record(log, "a"), needs_a])(small_module())


def test_pass_returning_a_non_module_is_an_error():
    class Bad(ModulePass):
        name: ClassVar[str] = "bad"

        def transform_module(self, mod, ctx):
            return None

    with pytest.raises(PassError, match="not an IRModule"):
        Bad()(small_module())


# -- instruments ---------------------------------------------------------------------------


def test_instrument_hooks_are_called_in_order():
    events: list[str] = []

    class Spy(PassInstrument):
        def enter_pass_ctx(self):
            events.append("enter")

        def exit_pass_ctx(self):
            events.append("exit")

        def run_before_pass(self, mod, p):
            events.append(f"before {p.name}")

        def run_after_pass(self, mod, p, changed):
            events.append(f"after {p.name} {changed}")

    log: list[str] = []
    with PassContext(instruments=[Spy()]):
        Sequential([Record(log, "a"), Canonicalize()])(small_module())
    assert events == ["enter", "before a", "after a False", "before canonicalize", "after canonicalize True", "exit"]


def test_should_run_false_skips_the_pass():
    class SkipA(PassInstrument):
        def should_run(self, mod, p):
            return p.name != "a"

    log: list[str] = []
    with PassContext(instruments=[SkipA()]):
        Sequential([Record(log, "a"), Record(log, "b")])(small_module())
    assert log == ["b"]


def test_timing_instrument_renders_a_table():
    timing = PassTimingInstrument()
    log: list[str] = []
    with PassContext(instruments=[timing]):
        Sequential([Record(log, "a"), Canonicalize()])(small_module())
    assert [t.name for t in timing.timings] == ["a", "canonicalize"]
    assert all(t.seconds >= 0 for t in timing.timings)
    table = timing.render()
    lines = table.splitlines()
    assert lines[0] == "Pass timing:" and "pass" in lines[1] and "time" in lines[1]
    assert any(line.startswith("a ") for line in lines) and any(line.startswith("canonicalize") for line in lines)
    assert lines[-1].startswith("total")


def test_print_ir_after_change_prints_only_the_changed_pass():
    out = io.StringIO()
    log: list[str] = []
    with PassContext(instruments=[PrintIRInstrument(after_change=True, stream=out)]):
        Sequential([Record(log, "noop"), Canonicalize()])(small_module())
    text = out.getvalue()
    assert "IR after pass 'canonicalize'" in text and "'noop'" not in text
    assert "R.nn.relu" in text and "R.add" not in text  # the printed module is canonicalize's result


def test_print_ir_after_all_prints_every_pass():
    out = io.StringIO()
    log: list[str] = []
    with PassContext(instruments=[PrintIRInstrument(after_all=True, stream=out)]):
        Sequential([Record(log, "noop"), Canonicalize()])(small_module())
    text = out.getvalue()
    assert "IR after pass 'noop' (unchanged)" in text and "IR after pass 'canonicalize'" in text


def test_verify_instrument_names_the_pass_that_broke_the_module():
    log: list[str] = []
    seq = Sequential([Record(log, "fine"), BreakTypes(), Record(log, "after")])
    with PassContext(instruments=[VerifyInstrument()]), pytest.raises(PassVerifyError) as info:
        seq(small_module())
    err = info.value
    assert err.pass_name == "break-types" and isinstance(err, VerifyError)
    assert "after pass 'break-types'" in str(err) and "'y'" in str(err)
    assert log == ["fine"]  # stopped right there
    # Without the instrument the broken module goes through silently.
    assert isinstance(BreakTypes()(small_module()), IRModule)


def test_pass_base_class_requires_transform():
    class Empty(Pass):
        name: ClassVar[str] = "empty"

    with pytest.raises(NotImplementedError, match="Empty does not implement transform_module"):
        Empty()(small_module())
