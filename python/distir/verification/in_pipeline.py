"""The check the distribute pipeline runs when ``distribute.verify`` asks for it.

:class:`distir.transform.pipelines.Distribute` loads this module by name (it is a layer below)
and runs :class:`VerifyDistribute` on what it produced, with the module it was given: each
function is checked as ``distir.verify(global_mod, local_mod)`` checks it. A counterexample is
an error; a check that did less than was asked (NOT CHECKED, or a sampled check where every
count was asked) is an error or a warning, as ``distribute.verify_incomplete`` says; the verdicts
are recorded in the lowered module's attributes (``distribute.verdicts``). docs/verify.md, "In
the pass pipeline".
"""

from __future__ import annotations

import warnings

from ..errors import DistirError
from ..ir.expr import IRModule
from ..transform.lower_to_local import GLOBAL_PARAMS
from ..transform.pass_infra import ModulePass, PassContext
from ..transform.pipelines import VERDICTS_ATTR, VERIFY_DIMS_KEY, VERIFY_INCOMPLETE_KEY, VERIFY_KEY, VerifyOptions
from .check import DEFAULT_MAX_COUNT, _mesh_symbols, _param_symbols, verify
from .verdict import COUNTEREXAMPLE, EVERY_COUNT, NOT_CHECKED, Verdict

__all__ = ["VERDICTS_ATTR", "IncompleteVerificationWarning", "VerifyDistribute"]


class IncompleteVerificationWarning(UserWarning):
    """The check did less than ``distribute.verify`` asked, and ``distribute.verify_incomplete`` is "warn"."""


class VerifyDistribute(ModulePass):
    """Check a lowered module against the global-view module it came from, function by function."""

    name = "verify-distribute"

    def __init__(self, global_mod: IRModule, options: VerifyOptions) -> None:
        self.global_mod = global_mod
        self.options = options
        self.verdicts: dict[str, Verdict] = {}  # the last run's, by function

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        opts = self.options
        funcs = [f for f, fn in self.global_mod.functions.items() if GLOBAL_PARAMS not in fn.attrs and f in mod.functions]
        dims = dict(opts.dims or {})
        mesh_syms = _mesh_symbols(self.global_mod)
        known = mesh_syms.union(*(_param_symbols(self.global_mod, f) for f in funcs))
        unknown = sorted(dims.keys() - known)
        if unknown:
            raise DistirError(f"{VERIFY_DIMS_KEY}: no symbolic size {', '.join(unknown)} in the module "
                              f"(its sizes: {', '.join(sorted(known)) or 'none'})")
        free = sorted(mesh_syms - dims.keys())
        symbol = free[0] if len(free) == 1 else "num_workers"
        # the check runs specialize and the simulator: not under this context's instruments, nor
        # with distribute.verify on (nothing in it distributes again, but it must not be able to)
        quiet = PassContext(config={k: v for k, v in ctx.config.items() if not str(k).startswith("distribute.")})
        self.verdicts = {}
        with quiet:
            for f in funcs:
                mine = {k: v for k, v in dims.items() if k in mesh_syms | _param_symbols(self.global_mod, f)}
                try:
                    if opts.mode == "sampled":
                        v = verify(self.global_mod, mod, func=f, dims=mine, symbol=symbol, max_count=DEFAULT_MAX_COUNT)
                    else:
                        v = verify(self.global_mod, mod, func=f, dims=mine, symbol=symbol)
                except DistirError as err:
                    raise DistirError(f"{VERIFY_KEY}: @{f}: {_one_line(str(err))}") from None
                self.verdicts[f] = v
                _judge(f, v, opts)
        recorded = {**dict(mod.attrs.get(VERDICTS_ATTR, {}) or {}), **{f: _one_line(str(v)) for f, v in self.verdicts.items()}}
        return mod.replace(attrs={**mod.attrs, VERDICTS_ATTR: recorded})


def _judge(func: str, v: Verdict, opts: VerifyOptions) -> None:
    """Raise on a counterexample; on less than was asked, raise or warn as the options say."""
    if v.status == COUNTEREXAMPLE:
        raise DistirError(f"{VERIFY_KEY}: @{func}: the lowered module is wrong: {_one_line(str(v))}")
    short = ""
    if v.status == NOT_CHECKED:
        short = _one_line(str(v))
    elif opts.mode == "every-count" and v.status != EVERY_COUNT and v.counts != (0,):
        short = (f"checked for counts {', '.join(map(str, v.counts))} only, not at every count: "
                 f"{_one_line(v.not_proved) or 'the every-count argument did not apply'}")
    if not short:
        return
    message = f"{VERIFY_KEY}={opts.mode}: @{func}: {short}"
    if opts.incomplete == "warn":
        warnings.warn(message, IncompleteVerificationWarning, stacklevel=2)
    else:
        raise DistirError(f"{message} (set {VERIFY_INCOMPLETE_KEY}='warn' to go on)")


def _one_line(text: str) -> str:
    return "; ".join(part.strip() for part in text.splitlines() if part.strip())
