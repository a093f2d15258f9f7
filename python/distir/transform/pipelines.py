"""Named pipelines: ``distribute_pipeline()`` and ``-p distribute`` on the command line.

The distribute pipeline honours the PassContext config key ``distribute.verify``: after lowering
it checks what it produced against the module it was given (docs/verify.md, "In the pass
pipeline"). The check lives in :mod:`distir.verification`, a layer above this one, so the
pipeline loads it by name (:data:`VERIFIER`), like the IR loads its printer.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import DistirError
from ..ir.expr import IRModule
from .pass_infra import Pass, PassContext, Sequential, get_pass, register_pipeline

__all__ = ["VERDICTS_ATTR", "VERIFY_DIMS_KEY", "VERIFY_INCOMPLETE_KEY", "VERIFY_KEY", "VERIFY_MODES", "VerifyOptions",
           "distribute_pipeline", "verify_options"]

_DISTRIBUTE = (
    "propagate-sharding",
    "legalize-redistribute",
    "canonicalize",
    "lower-global-view-to-local-view",
)

#: the PassContext config keys of the check after lowering, and what each may be
VERIFY_KEY = "distribute.verify"  # "off" (default), "sampled" (counts 1..8) or "every-count"
VERIFY_MODES = ("off", "sampled", "every-count")
VERIFY_INCOMPLETE_KEY = "distribute.verify_incomplete"  # less than asked: "error" (default) or "warn"
VERIFY_INCOMPLETE = ("error", "warn")
VERIFY_DIMS_KEY = "distribute.verify_dims"  # {name: size} of the other symbolic sizes the check runs at
#: the lowered module's attribute the check records its verdicts in: {function name: the verdict in words}
VERDICTS_ATTR = "distribute.verdicts"
_KEYS = (VERIFY_KEY, VERIFY_INCOMPLETE_KEY, VERIFY_DIMS_KEY)
#: the module that holds the check, imported by name when a check is asked for (it is above this layer)
VERIFIER = "distir.verification.in_pipeline"


@dataclass(frozen=True)
class VerifyOptions:
    """The ``distribute.*`` config keys, checked."""

    mode: str = "off"
    incomplete: str = "error"
    dims: Mapping[str, int] | None = None


def verify_options(ctx: PassContext) -> VerifyOptions:
    """The ``distribute.*`` keys of ``ctx.config``, each checked: a key or value misspelt is refused in
    one line, never ignored (a check asked for and silently not run would read as a pass)."""
    for key in ctx.config:
        if isinstance(key, str) and key.startswith("distribute.") and key not in _KEYS:
            close = difflib.get_close_matches(key, _KEYS, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise DistirError(f"unknown pass config key '{key}'; {hint}the distribute pipeline reads {', '.join(_KEYS)}")
    mode = _choice(ctx.config.get(VERIFY_KEY, "off"), VERIFY_KEY, VERIFY_MODES)
    incomplete = _choice(ctx.config.get(VERIFY_INCOMPLETE_KEY, "error"), VERIFY_INCOMPLETE_KEY, VERIFY_INCOMPLETE)
    dims = ctx.config.get(VERIFY_DIMS_KEY)
    if dims is not None:
        if not isinstance(dims, Mapping) or not all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 1 for k, v in dims.items()):
            raise DistirError(f"{VERIFY_DIMS_KEY} must map symbolic size names to integers of at least 1, got {dims!r}")
        dims = dict(dims)
    return VerifyOptions(mode, incomplete, dims)


def _choice(value, key: str, allowed: tuple[str, ...]) -> str:
    if value is None:
        return allowed[0]
    if value is False and key == VERIFY_KEY:
        return "off"
    if not isinstance(value, str) or value not in allowed:
        close = difflib.get_close_matches(value, allowed, n=1) if isinstance(value, str) else []
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise DistirError(f"{key} must be one of {', '.join(repr(a) for a in allowed)}, got {value!r}{hint}")
    return value


class Distribute(Sequential):
    """The distribute pipeline: its passes, then the check ``distribute.verify`` asks for.

    The check needs the module the pipeline was given as well as the one it produced, which no
    pass after it sees: so the pipeline itself runs it."""

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        options = verify_options(ctx)  # refused before any work, not after the lowering
        local = super().transform_module(mod, ctx)
        if options.mode == "off":
            return local
        check = importlib.import_module(VERIFIER).VerifyDistribute(mod, options)
        if not ctx.should_run(check):  # a check asked for and skipped would read as a pass
            raise DistirError(f"{VERIFY_KEY}={options.mode!r} asks for the check that disabled passes turn off "
                              f"('{check.name}'); enable it or set {VERIFY_KEY} to 'off'")
        return ctx.run_pass(check, local)


def distribute_pipeline() -> Pass:
    """Global view in, local view out, with ``num_workers`` still symbolic.

    Propagate shardings from hints and parameter layouts, legalize every redistribute,
    clean up, and lower to what each worker runs. Specialize afterwards, once per
    device count. With the config key ``distribute.verify`` set, check the result against
    the module given (docs/verify.md).
    """
    return Distribute([get_pass(n) for n in _DISTRIBUTE], name="distribute")


register_pipeline("distribute", distribute_pipeline)
