"""Pass infrastructure, modelled on TVM's: Pass, ModulePass, FunctionPass, Sequential, PassContext.

A pass is a plain Python class (a frozen dataclass when it has options) with a kebab-case
``name`` (used by ``distir-opt -p`` and :func:`get_pass`) and a PascalCase class name (used
from Python). Calling a pass runs it under :meth:`PassContext.current`, which decides whether
it runs at all (opt level, required and disabled passes) and calls the context's instruments
around it (timing, printing IR, verifying). Named pipelines (``-p distribute``) are factories
registered with :func:`register_pipeline`; :func:`get_pass` finds both.
"""

from __future__ import annotations

import difflib
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from ..collector import collector_paused
from ..errors import PassError
from ..ir.expr import Function, IRModule

__all__ = [
    "FunctionPass",
    "ModulePass",
    "Pass",
    "PassContext",
    "Sequential",
    "get_pass",
    "list_passes",
    "list_pipelines",
    "pass_doc",
    "register_pass",
    "register_pipeline",
]

_KEBAB = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


class PassContext:
    """Settings for running passes; use as ``with PassContext(...):``.

    ``opt_level``: passes with a higher ``opt_level`` are skipped unless named in
    ``required_passes``. ``disabled_passes``: names never run. ``instruments``:
    :class:`~distir.transform.instruments.PassInstrument` objects called around each pass.
    ``config``: free-form options passes may read (``ctx.config.get("...")``).
    """

    _local = threading.local()

    def __init__(
        self,
        opt_level: int = 2,
        required_passes: Iterable[str] = (),
        disabled_passes: Iterable[str] = (),
        instruments: Iterable[Any] = (),
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.opt_level = int(opt_level)
        self.required_passes = tuple(required_passes)
        self.disabled_passes = tuple(disabled_passes)
        self.instruments = tuple(instruments)
        self.config: dict[str, Any] = dict(config or {})
        # One set per active Sequential: names of the passes that have run inside it.
        self._ran_frames: list[set[str]] = []

    # -- the context stack -------------------------------------------------------------
    @classmethod
    def _stack(cls) -> list[PassContext]:
        stack = getattr(cls._local, "stack", None)
        if stack is None:
            stack = cls._local.stack = []
        return stack

    @classmethod
    def current(cls) -> PassContext:
        """The innermost active context, or this thread's default one (opt level 2, no instruments)."""
        stack = cls._stack()
        if stack:
            return stack[-1]
        default = getattr(cls._local, "default", None)
        if default is None:
            default = cls._local.default = PassContext()
        return default

    def __enter__(self) -> PassContext:  # noqa: PYI034 (typing.Self needs Python 3.11)
        for inst in self.instruments:
            inst.enter_pass_ctx()
        self._stack().append(self)
        return self

    def __exit__(self, *exc) -> None:
        stack = self._stack()
        if stack and stack[-1] is self:
            stack.pop()
        for inst in self.instruments:
            inst.exit_pass_ctx()

    # -- running one pass --------------------------------------------------------------
    def should_run(self, p: Pass) -> bool:
        """Whether ``p`` runs here: not disabled, and within the opt level unless required."""
        if p.name and p.name in self.disabled_passes:
            return False
        return p.opt_level <= self.opt_level or p.name in self.required_passes

    def run_pass(self, p: Pass, mod: IRModule) -> IRModule:
        """Run ``p`` on ``mod`` with this context's checks and instruments."""
        if not isinstance(mod, IRModule):
            raise PassError(f"pass '{p.name or type(p).__name__}' expects an IRModule, got {type(mod).__name__}")
        if not self.should_run(p):
            return mod
        if isinstance(p, Sequential):  # instruments see the passes inside, not the container
            return p.transform_module(mod, self)
        if not all(inst.should_run(mod, p) for inst in self.instruments):
            return mod
        for inst in self.instruments:
            inst.run_before_pass(mod, p)
        with collector_paused():
            new = p.transform_module(mod, self)
        if not isinstance(new, IRModule):
            raise PassError(
                f"pass '{p.name or type(p).__name__}' returned {type(new).__name__}, not an IRModule"
            )
        for frame in self._ran_frames:
            frame.add(p.name)
        if self.instruments:
            changed = module_changed(mod, new)
            for inst in self.instruments:
                inst.run_after_pass(new, p, changed)
        return new


def module_changed(before: IRModule, after: IRModule) -> bool:
    """True unless ``after`` is ``before`` or structurally equal to it (names may differ)."""
    if before is after:
        return False
    from ..ir.structural import structural_equal

    return not structural_equal(before, after)


class Pass:
    """A transformation of an IRModule. Subclasses set ``name`` and override ``transform_module``.

    ``required`` lists passes that must have run earlier in the enclosing :class:`Sequential`.
    """

    name: ClassVar[str] = ""
    opt_level: ClassVar[int] = 0
    required: ClassVar[tuple[str, ...]] = ()

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        raise NotImplementedError(f"{type(self).__name__} does not implement transform_module")

    def __call__(self, mod: IRModule) -> IRModule:
        return PassContext.current().run_pass(self, mod)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class ModulePass(Pass):
    """A pass over the whole module; override ``transform_module``."""


class FunctionPass(Pass):
    """A pass applied to every function; override ``transform_function``.

    The module is returned unchanged (the same object) when every function is.
    """

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        raise NotImplementedError(f"{type(self).__name__} does not implement transform_function")

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        funcs: dict[str, Function] = {}
        changed = False
        for fname, func in mod.functions.items():
            new = self.transform_function(func, mod, ctx)
            changed |= new is not func
            funcs[fname] = new
        return mod.replace(functions=funcs) if changed else mod


class Sequential(Pass):
    """Run passes in order. Each goes through the context (instruments, opt level, disabled)."""

    name: ClassVar[str] = "sequential"

    def __init__(self, passes: Sequence[Pass], name: str = "sequential") -> None:
        self.passes = tuple(passes)
        for p in self.passes:
            if not isinstance(p, Pass):
                raise PassError(f"Sequential expects Pass objects, got {p!r}")
        self.name = name  # type: ignore[misc]  # an instance name for pipelines

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        frame: set[str] = set()
        ctx._ran_frames.append(frame)
        try:
            for p in self.passes:
                if ctx.should_run(p):
                    seen = ctx._ran_frames[0]
                    missing = [r for r in p.required if r not in seen]
                    if missing:
                        raise PassError(
                            f"pass '{p.name}' requires {', '.join(repr(m) for m in missing)} to run before it "
                            f"in this sequence ({self.describe()}); add it earlier or check disabled passes"
                        )
                mod = ctx.run_pass(p, mod)
        finally:
            ctx._ran_frames.pop()
        return mod

    def describe(self) -> str:
        return ",".join(p.name or type(p).__name__ for p in self.passes)

    def __repr__(self) -> str:
        return f"Sequential({list(self.passes)!r}, name={self.name!r})"


# -- registry --------------------------------------------------------------------------
_PASSES: dict[str, type[Pass]] = {}
_PIPELINES: dict[str, Callable[..., Pass]] = {}


def register_pass(cls: type[Pass]) -> type[Pass]:
    """Class decorator: register ``cls`` under ``cls.name`` (kebab-case) for :func:`get_pass`."""
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not _KEBAB.match(name):
        raise PassError(f"pass class {cls.__name__} needs a kebab-case name (like 'legalize-redistribute'), got {name!r}")
    other = _PASSES.get(name) or _PIPELINES.get(name)
    if other is not None and other is not cls and _qualname(other) != _qualname(cls):
        raise PassError(f"pass name '{name}' is already taken by {_qualname(other)}")
    _PASSES[name] = cls
    return cls


def register_pipeline(name: str, factory: Callable[..., Pass]) -> Callable[..., Pass]:
    """Register a named pipeline: ``factory(**options)`` returns a Pass (usually a Sequential)."""
    if not _KEBAB.match(name):
        raise PassError(f"pipeline name must be kebab-case, got {name!r}")
    other = _PASSES.get(name)
    if other is not None:
        raise PassError(f"pipeline name '{name}' is already taken by pass {_qualname(other)}")
    _PIPELINES[name] = factory
    return factory


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


_LOADERS: list[Callable[[], None]] = []


def add_pass_loader(load: Callable[[], None]) -> None:
    """``load()`` runs before the registry is read (the package registers one that imports its pass modules)."""
    _LOADERS.append(load)


def _ensure_loaded() -> None:
    for load in _LOADERS:
        load()


def list_passes() -> dict[str, type[Pass]]:
    """Registered passes by kebab name."""
    _ensure_loaded()
    return dict(sorted(_PASSES.items()))


def list_pipelines() -> dict[str, Callable[..., Pass]]:
    """Registered named pipelines by kebab name."""
    _ensure_loaded()
    return dict(sorted(_PIPELINES.items()))


def get_pass(name: str, **options: Any) -> Pass:
    """The pass (or named pipeline) called ``name``, built with ``options``."""
    _ensure_loaded()
    factory: Callable[..., Pass] | None = _PASSES.get(name) or _PIPELINES.get(name)
    if factory is None:
        known = sorted(_PASSES) + sorted(_PIPELINES)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        listing = ", ".join(sorted(_PASSES)) or "(none)"
        pipes = ", ".join(sorted(_PIPELINES))
        raise PassError(
            f"unknown pass '{name}'; {hint}known passes: {listing}" + (f"; pipelines: {pipes}" if pipes else "")
        )
    try:
        return factory(**options)
    except TypeError as err:
        raise PassError(f"pass '{name}': bad options {options!r}: {err}") from None


def pass_doc(obj: Any) -> str:
    """First line of a pass's (or pipeline factory's) docstring, for listings."""
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""
