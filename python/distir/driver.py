"""The driver: distribute a module once, then specialize, run and compare it per device count.

Every "does the distributed program compute what the single-device one does?" in distir
goes through here (``distir demo``, ``distir run``, ``distir sweep --build``,
:func:`distir.testing.assert_sharded_equivalent`), so the steps and their order are
written once::

    from distir import examples
    from distir.driver import Driver, random_inputs

    mod = examples.load("llama")
    d = Driver(mod)                              # nothing runs yet
    inputs = random_inputs(mod, dims={"s": 32})
    for w in (1, 2, 4, 8):
        r = d.run(inputs, w)                     # pipeline once, specialize, simulate, compare
        print(w, r.ok, r.max_diff, r.stats.summary(), r.timings)
    r = d.run(inputs, 2, backend="tvm")          # built once (num_workers symbolic), run on Disco threads
    r = d.run(inputs, 2, backend="tvm", session="processes", target="llvm")

- ``Driver(mod, func=, symbol=, pipeline=, bind=, time_passes=)``: ``symbol`` is the
  mesh size a count sets (``num_workers``); ``bind`` fixes other sizes right after the
  pipeline (a second mesh axis), since the backends take one symbolic size.
- ``d.local`` (or ``d.distribute()``): the local-view module, distributed once with
  ``symbol`` symbolic (``d.pipeline_seconds``; ``d.pass_seconds`` per pass with
  ``time_passes=True``).
- ``d.values(count)``: the sizes a count binds; ``d.specialize(count)``: the module at
  that count (cached, timed; SpecializeError when a sharded size does not divide). A
  count is an int (the value of ``symbol``) or a mapping of sizes.
- ``d.for_function(name)``: a driver of another function of the module, sharing the
  distribution, the specializations and the TVM builds (each covers the whole module).
- ``d.reference(inputs)``: the single-device run, the interpreter on ``mod`` (cached for
  the same inputs).
- ``d.run(inputs, count, backend="sim" | "tvm", seed=, rtol=, atol=, absolute_atol=, weights=,
  target=, session=)``: a :class:`CountResult` (outputs, simulator stats or Disco counts, the
  comparison, timings); ``d.run_counts(inputs, counts)``: one per count. With ``weights=`` (a
  model imported by ``distir.tvm.from_nn``: a name -> array dict or a list in order, or the
  directory of a pre-sharded set that Disco's workers load themselves), ``inputs`` are the
  model's inputs and :meth:`Driver.arguments` appends the weights. ``d.export()`` /
  ``d.build(target=)``: the TVM export of the symbolic module and its build, which runs at every
  count (cached; one build per export and target in the process); ``specialize=True`` (on the
  driver, a run, or ``d.build(count, specialize=True)``) builds per count instead.
  ``d.write_artifact(directory)`` writes the build and what a run needs;
  ``Driver.from_artifact(directory)`` (or ``d.run(..., artifact=)``) runs it without ``tvm.compile``.
  The TVM backend (:mod:`distir.tvm`) is imported only when asked for.
- :func:`compare` / :func:`compare_outputs`: the one comparison of outputs (of
  :func:`flat_outputs`); :func:`random_inputs`: inputs for a module's global signature;
  :func:`tvm_builder`: the per-count TVM build of ``distir sweep --build``;
  :func:`run_disco`: a TVM build run on Disco (threads or processes) from and to global
  arrays (the simulator's cutting and reassembly around :mod:`distir.tvm`'s run of the pieces).
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import numpy as np

from .errors import DistirError
from .ir import sym
from .ir.expr import IRModule
from .runtime import run as run_single
from .runtime.interpreter import bind_params
from .runtime.spmd import SpmdStats, run_spmd
from .transform.specialize import specialize

__all__ = [
    "Comparison",
    "CountResult",
    "Driver",
    "compare",
    "compare_outputs",
    "flat_outputs",
    "one_device_module",
    "random_inputs",
    "run_disco",
    "tvm_builder",
]

BACKENDS = ("sim", "tvm")

#: Whether the TVM backend builds the module specialized to each count by default (``Driver(specialize=)``,
#: ``distir run --build-once`` / ``--specialize``). A build specialized to the count runs the plan made for
#: that count; the one symbolic build for every count dispatches on the count at run time (docs/tvm.md).
SPECIALIZE_DEFAULT = True


# ---------------------------------------------------------------- inputs and comparison


def random_inputs(
    mod: IRModule,
    func: str = "main",
    dims: Mapping[str, int] | None = None,
    *,
    seed: int = 0,
    default_dim: int = 16,
    int_high: int = 4,
) -> list[np.ndarray]:
    """Random global inputs for ``func``'s parameters (its global signature when lowered).

    Symbolic dims take their value from ``dims``, else ``default_dim``. Floats are standard
    normal scaled by 0.5 (keeps softmax and silu in range); integers are uniform in
    ``[0, int_high)`` (valid indices into any table with at least that many rows); bools are
    fair coins.
    """
    from .ir.types import DTensorType, TensorType, np_dtype
    from .transform.lower_to_local import GLOBAL_PARAMS

    if func not in mod.functions:
        raise DistirError(f"no function '{func}' in the module (it has: {', '.join(mod.functions)})")
    f = mod[func]
    types = list(f.attrs.get(GLOBAL_PARAMS, [p.type for p in f.params]))
    rng = np.random.default_rng(seed)
    values = dict(dims or {})
    out = []
    for p, t in zip(f.params, types):
        if not isinstance(t, (TensorType, DTensorType)):
            raise DistirError(f"parameter '{p.name}' of '{func}' is {t}; random inputs exist for tensors only")
        env = {name: values.get(name, default_dim) for d in t.shape for name in sym.free_vars(d)}
        shape = tuple(sym.evaluate(d, env) for d in t.shape)
        dtype = np_dtype(t.dtype)
        if t.dtype == "bool":
            out.append(rng.random(shape) < 0.5)
        elif np.issubdtype(np.dtype(dtype), np.integer):
            out.append(rng.integers(0, int_high, shape).astype(dtype))
        else:
            out.append((rng.standard_normal(shape) * 0.5).astype(dtype))
    return out


def extreme_inputs(inputs: Sequence[np.ndarray], *, seed: int = 0) -> list[np.ndarray] | None:
    """``inputs`` with every integer tensor redrawn over its dtype's whole range, its ends
    (smallest, largest, 0, 1, -1, largest - 1, smallest + 1) placed in it: values at which a sum,
    a product or a partial's parts overflow the dtype, which inputs in ``[0, 4)`` never reach.
    Floats and bools are kept. None when no input is an integer tensor (nothing to redraw)."""
    rng = np.random.default_rng([seed, 0x5EED])
    out, changed = [], False
    for x in inputs:
        x = np.asarray(x)
        if x.dtype == np.bool_ or not np.issubdtype(x.dtype, np.integer) or x.size == 0:
            out.append(x)
            continue
        info = np.iinfo(x.dtype)
        v = rng.integers(info.min, info.max, x.shape, endpoint=True, dtype=x.dtype).reshape(-1)
        ends = [info.min, info.max, 0, 1, info.max - 1] + ([-1, info.min + 1] if info.min < 0 else [])
        for where, e in zip(rng.permutation(v.size), ends):  # distinct places: no end overwrites another
            v[where] = e
        out.append(v.reshape(x.shape))
        changed = True
    return out if changed else None


@dataclass(frozen=True)
class Comparison:
    """Outputs against the single-device ones: all match, the largest difference, the first mismatch."""

    ok: bool
    max_diff: float
    mismatch: str | None = None  # "output 1 differs ...", in words
    #: the largest difference from each reference compared with, by name, where there were several
    #: (a TVM run: the interpreter and TVM's own one-device build)
    references: Mapping[str, float] = field(default_factory=dict)

    def __and__(self, other: Comparison) -> Comparison:
        """Both comparisons: a match when both match; the first mismatch; each reference's difference."""
        refs = {**self.references, **other.references}
        return Comparison(self.ok and other.ok, max(self.max_diff, other.max_diff),
                          self.mismatch if self.mismatch is not None else other.mismatch, refs)

    def differences(self) -> str:
        """``largest difference 3.06`` or, with several references, each one's (``... from the interpreter, ...``)."""
        if len(self.references) < 2:
            return f"largest difference {self.max_diff:.3g}"
        return "largest difference " + ", ".join(f"{d:.3g} from {name}" for name, d in self.references.items())


#: (rtol, atol) a comparison uses by default, by the expected output's dtype: half precision
#: rounds at about 1e-3 per operation, so a sum cut over workers differs from one device's by more
#: than float32's tolerance; integers and bools must be equal. Other dtypes: ``FLOAT_TOLERANCE``.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-2, 2e-2),
    "bfloat16": (1e-2, 2e-2),
    **{t: (0.0, 0.0) for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool")},
}
FLOAT_TOLERANCE = (1e-5, 1e-5)  # float32 and float64


def default_tolerance(dtype) -> tuple[float, float]:
    """The (rtol, atol) of :data:`DEFAULT_TOLERANCES` for ``dtype`` (float32 and float64: 1e-5, 1e-5)."""
    return DEFAULT_TOLERANCES.get(str(np.dtype(dtype)) if not isinstance(dtype, str) else dtype, FLOAT_TOLERANCE)


def compare(got, expected, rtol: float | None = None, atol: float | None = None, *,
            absolute_atol: bool = False, reduction_length: float = 0.0,
            reference: str = "the single-device result") -> Comparison:
    """Compare outputs (nested tuples flattened in order) with ``np.allclose`` (NaNs equal).

    ``atol`` is relative to the largest expected magnitude of each output (sharded sums add
    in another order, so float results differ by rounding relative to their scale),
    unless ``absolute_atol``. Booleans must be equal; their difference counts elements.
    ``rtol``/``atol`` left None take each output's dtype's :func:`default_tolerance` (integers
    exact, float16 and bfloat16 looser than float32), and ``atol`` at least what rounding allows a
    program whose reductions add ``reduction_length`` terms in all
    (:func:`distir.analysis.rounding.rounding_bound`: the dtype's unit roundoff times the square
    root of the length). ``reference`` names what ``expected`` is, in the mismatch's words.
    """
    from .analysis.rounding import rounding_bound

    got, expected = flat_outputs(got), flat_outputs(expected)
    ok, worst = len(got) == len(expected), 0.0
    first = None if ok else f"{len(got)} outputs, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        g, e = np.asarray(g), np.asarray(e)
        if g.shape != e.shape:
            return Comparison(False, float("inf"), first or f"output {i} has shape {g.shape}, expected {e.shape}")
        if e.dtype == bool or g.dtype == bool:
            diff, scale, tol, r = float(np.count_nonzero(g != e)), 1.0, 0.0, 0.0
            good = diff == 0
        else:
            d_rtol, d_atol = default_tolerance(e.dtype)
            if atol is None and d_atol > 0 and not absolute_atol:  # the bound is relative to the scale
                d_atol = max(d_atol, rounding_bound(str(e.dtype), reduction_length))
            r = d_rtol if rtol is None else rtol
            a = d_atol if atol is None else atol
            g64, e64 = g.astype(np.float64), e.astype(np.float64)
            scale = float(np.max(np.abs(e64))) if e64.size else 0.0
            diff = float(np.max(np.abs(g64 - e64))) if e64.size else 0.0
            tol = a if absolute_atol else a * max(scale, 1e-30)
            good = bool(np.allclose(g64, e64, rtol=r, atol=tol, equal_nan=True))
        if not good and first is None:
            first = (
                f"output {i} differs from {reference} (max abs difference {diff:g}, "
                f"largest |value| {scale:g}, allowed {tol:g} + {r:g} x |value|)"
            )
        ok &= good
        worst = max(worst, diff)
    return Comparison(ok, worst, first, {reference: worst})


def compare_outputs(got, expected, rtol: float | None = None, atol: float | None = None) -> tuple[bool, float]:
    """(every output matches, largest absolute difference); ``atol`` scales with the largest expected value."""
    c = compare(got, expected, rtol, atol)
    return c.ok, c.max_diff


def flat_outputs(x) -> tuple:
    """The arrays of an output (what :func:`compare` compares), nested tuples flattened in order."""
    if isinstance(x, tuple):
        return tuple(a for f in x for a in flat_outputs(f))
    return (x,)


# ---------------------------------------------------------------- the TVM backend, imported when asked


def _import_tvm(missing: str):
    """:mod:`distir.tvm`, imported now; ``missing`` is the DistirError's message when it cannot be."""
    import importlib

    try:
        return importlib.import_module("distir.tvm")
    except ModuleNotFoundError as err:
        if err.name not in ("distir.tvm", "tvm"):
            raise
        raise DistirError(missing) from None


def tvm_builder(target: Any = "llvm", *, specialize: bool | None = None) -> Callable[[IRModule, Mapping[str, int]], Any]:
    """``build(local, values)``: the TVM build of a symbolic local-view module that runs at one count.

    Exports ``local`` once with ``distir.tvm.to_relax`` (``num_workers`` stays a symbolic
    shape variable). With ``specialize`` (None: :data:`SPECIALIZE_DEFAULT`), per count it binds the
    sizes and compiles (``BindSymbolicVars`` then ``tvm.compile``); without, it compiles the export
    once for ``target`` (:mod:`distir.tvm.build_cache`): that build runs at every count, so the first
    count pays for it and the others find it built. An unknown target is one line here, before any
    work; so is a clear error while ``distir.tvm`` is missing.
    """
    dtvm = _import_tvm(
        "--build needs distir.tvm (the export of local-view modules to TVM), which this version of "
        "distir does not have yet; run the sweep without --build"
    )
    try:
        to_relax = dtvm.to_relax
    except AttributeError as err:
        raise DistirError(f"--build: this version of distir.tvm lacks what the sweep needs ({err})") from None
    from .tvm import build_cache
    from .tvm.targets import parse_target

    parse_target(target)
    specialize = SPECIALIZE_DEFAULT if specialize is None else specialize
    exported: dict[int, tuple[IRModule, Any]] = {}

    def build(local: IRModule, values: Mapping[str, int]):
        hit = exported.get(id(local))
        if hit is None or hit[0] is not local:
            hit = exported[id(local)] = (local, to_relax(local, dispatch=True))
        return build_cache.build(hit[1], target, dict(values) if specialize else None)[0]

    return build


def run_disco(
    built,
    local_mod: IRModule,
    *global_arrays: np.ndarray,
    num_workers: int,
    func: str = "main",
    symbol: str = "num_workers",
    seed: int = 0,
    stats: dict | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    session: str = "threads",
    target: Any = "llvm",
    weights: Any = None,
    verify_weights: bool = True,
    dispatch: bool = False,
):
    """Run a TVM build on Disco from and to global arrays, as the simulator takes them.

    ``built`` is what ``tvm.compile`` made of ``distir.tvm.to_relax(local_mod, dispatch=dispatch)``
    for ``target`` (bound to ``num_workers`` or not; ``dispatch`` says which plans it runs, and so
    which steps ``stats`` counts); ``local_mod`` is the local-view module that was exported
    (symbolic or specialized), whose recorded global signature says how to cut the inputs: as
    :func:`distir.runtime.run_spmd` cuts them (a worker outside an input's mesh gets zeros, since
    every Disco worker runs the program), and the outputs are reassembled as it reassembles
    them. ``num_workers`` is the value of ``symbol``; ``session`` ``"threads"``,
    ``"processes"`` or ``"socket"`` / ``"socket:NODES@HOST:PORT"`` (several machines, docs/tvm.md). ``weights``: a pre-sharded set (a directory written by
    ``distir.tvm.shard_weights``) that every worker loads its pieces of for the parameters after
    the inputs; ``global_arrays`` are then the inputs only. The set is checked before any worker
    starts (:mod:`distir.tvm.weights_check`); ``verify_weights=False`` skips only its checksums. Pass a dict as ``stats`` to get
    Disco's session, the distributed program's collectives and bytes (``calls``, ``bytes_sent``:
    distir's steps, as the simulator and the analysis count them) and what Disco's collectives
    moved (``transport``). Errors are DiscoRunError, raised before any worker starts where they can be.
    """
    from .runtime.spmd import SpmdError, assemble_output
    from .transform.lower_to_local import GLOBAL_PARAMS, GLOBAL_RESULT

    dtvm = _import_tvm("run_disco needs distir.tvm and Apache TVM, which cannot be imported here")
    from .tvm.disco import Presharded, check_dtypes, run_pieces

    if not isinstance(local_mod, IRModule):
        raise dtvm.DiscoRunError(
            f"run_disco(built, local_mod, *arrays): local_mod must be the exported local-view IRModule, "
            f"got {type(local_mod).__name__}"
        )
    if func not in local_mod.functions:
        raise dtvm.DiscoRunError(f"the module has no function '{func}' (it has: {', '.join(local_mod.functions)})")
    # a module with count variants: the one build calls, by the count, the variant laid out for it, whose
    # signature cuts the inputs and assembles the outputs (a specialized module has kept that one already)
    from .transform.count_variants import choose_variants
    from .tvm.relax.export import dispatch_callee

    try:
        callee = dispatch_callee(local_mod, func, {symbol: int(num_workers)})
        local_mod = choose_variants(local_mod, {symbol: int(num_workers)})
    except DistirError as err:
        raise dtvm.DiscoRunError(str(err)) from None
    f = local_mod.functions[func]
    gparams = list(f.attrs.get(GLOBAL_PARAMS, [p.type for p in f.params]))
    gresult = f.attrs.get(GLOBAL_RESULT, f.result.type)
    arrays = [np.asarray(a) for a in global_arrays]
    from .tvm.checkpoint import BoundSet, open_weights

    wset = None
    if weights is not None:  # a pre-sharded set, or a global set each worker reads its byte ranges of
        wset = open_weights(weights, local_mod, func, verify=verify_weights)  # checked before anything reads it
    first = wset.num_input if wset is not None else len(gparams)
    params = SimpleNamespace(name=f.name, params=f.params[:first])
    check_dtypes(gparams[:first], arrays, [p.name for p in params.params])
    try:
        arrays, values = bind_params(params, arrays, {symbol: int(num_workers)}, types=gparams[:first])
    except DistirError as err:  # a wrong rank or size
        raise dtvm.DiscoRunError(str(err)) from None

    def pieces(total: int):
        if isinstance(wset, BoundSet):
            if total != presharded.workers:
                raise dtvm.DiscoRunError(f"the build runs {total} workers; its meshes at {values} have {presharded.workers}")
        elif wset is not None:
            from .tvm.weights import check_set

            check_set(wset, local_mod, func, values, total)
        cut = _disco_pieces(params, gparams, arrays, values, total, seed)
        return cut + [None] * (len(gparams) - first)

    if isinstance(wset, BoundSet):
        from .tvm.weights import session_workers

        presharded = wset.ranged(values, session_workers(local_mod.meshes(), values))
    else:  # workers may run elsewhere: the set's absolute path
        presharded = None if wset is None else Presharded(str(wset.json_path.resolve()), wset.text, first)
    info: dict = {}
    outputs = run_pieces(built, func, len(f.params), values, pieces, info, session=session, target=target,
                         presharded=presharded, signature=callee)
    if stats is not None:
        stats.update(info, **_step_accounting(local_mod, func, values, dispatch))
    try:
        return assemble_output(gresult.substitute(values), outputs, values, f"the result of @{func}", rtol, atol)
    except SpmdError as err:
        raise dtvm.DiscoRunError(str(err)) from None


def _step_accounting(local_mod: IRModule, func: str, values: Mapping[str, int], dispatch: bool) -> dict:
    """The steps the exported program runs at ``values``, named and counted as the simulator names and
    counts them (the step kinds' own bytes: distir's cost model, which the analysis evaluates): those
    of :func:`distir.tvm.relax.export.program_at`, the plan the export runs at the count."""
    from .analysis.comm import comm_volume
    from .tvm.relax.export import program_at

    numbers = comm_volume(program_at(local_mod, dict(values), dispatch=dispatch), func).evaluate(values)
    return {"calls": dict(numbers.counts), "bytes_sent": int(numbers.total_bytes), "devices": int(numbers.num_workers)}


def _disco_pieces(f, gparams, arrays, values, total: int, seed: int) -> list[dict[int, np.ndarray]]:
    """Each input cut into every worker's piece by the global signature (zeros outside its mesh)."""
    from .ir.layout import local_shape
    from .ir.types import DTensorType
    from .runtime.spmd import shard_input
    from .tvm.errors import DiscoRunError

    rng = np.random.default_rng(seed)
    pieces: list[dict[int, np.ndarray]] = []
    for p, t, a in zip(f.params, gparams, arrays):
        if isinstance(t, DTensorType):
            want = tuple(sym.evaluate(d, values) for d in local_shape(t.shape, t.mesh, t.placement))
            per = shard_input(t, a, values, rng)
            for w in range(total):  # a worker outside the mesh still runs the program: give it zeros
                per.setdefault(w, np.zeros(want, dtype=a.dtype))
        else:
            per = {w: a for w in range(total)}
            want = a.shape
        if any(per[w].shape != want for w in range(total)):
            raise DiscoRunError(f"input '{p.name}': pieces do not have the local shape {want}")
        pieces.append(per)
    return pieces


def _load_artifact(artifact):
    """A loaded artifact as is; a folder loaded and checked (:func:`distir.tvm.load_artifact`)."""
    if isinstance(artifact, (str, os.PathLike)):
        return _import_tvm("artifacts need distir.tvm and Apache TVM, which cannot be imported here").load_artifact(artifact)
    return artifact


def _is_weight_set(weights: Any) -> bool:
    """Weights given as the directory of a pre-sharded set (a path), not as arrays."""
    return isinstance(weights, (str, os.PathLike))


#: the references a run is compared with, as a mismatch names them
INTERPRETER = "the single-device result (distir's interpreter)"
TVM_ONE_DEVICE = "TVM's own one-device build"


def _half_precision(outputs) -> bool:
    """Whether an output is float16 or bfloat16."""
    return any(str(np.asarray(o).dtype) in ("float16", "bfloat16") for o in flat_outputs(outputs))


def one_device_module(mod: IRModule) -> IRModule:
    """``mod`` as one device runs it: no mesh, no layout, no hint, no redistribute (each reads its
    input). What TVM builds of it is TVM's own single-device program, the reference a Disco run is
    held to (TVM's half-precision kernels round otherwise than distir's interpreter)."""
    from .ir.expr import Call
    from .transform.layout_choice.auto_shard import strip_layouts
    from .transform.rewrite import map_bindings

    def moves(b, env):
        v = b.value
        if isinstance(v, Call) and v.op.name in ("dist.redistribute", "dist.replicate"):
            env[b.var] = v.args[0]
            return []
        return None

    funcs = {name: map_bindings(f, moves) for name, f in mod.functions.items()}
    return strip_layouts(mod.replace(functions=funcs)).replace(global_infos={})


# ---------------------------------------------------------------- one count's result


@dataclass
class CountResult:
    """One run at one device count, compared with the single-device run."""

    values: dict[str, int]  # the sizes the module was specialized to ({} when its meshes are static)
    backend: str  # "sim" or "tvm"
    outputs: Any  # the global outputs, reassembled (a tuple for tuple results)
    comparison: Comparison
    stats: SpmdStats | None = None  # the simulator's collectives and bytes (backend "sim")
    disco: dict | None = None  # Disco's session and collective calls (backend "tvm", see run_disco)
    timings: dict[str, float] = field(default_factory=dict)  # seconds: specialize, run; export, build for tvm

    @property
    def ok(self) -> bool:
        return self.comparison.ok

    @property
    def max_diff(self) -> float:
        return self.comparison.max_diff

    def summary(self) -> str:
        """What the steps moved, in one line that is the same for both backends at the same count
        (``4 workers: all_reduce x2; 61440 bytes sent per worker (245760 in all)``): the steps as
        the simulator names and counts them, bytes as docs/analysis.md defines them."""
        if self.stats is not None:
            return self.stats.summary()
        from .runtime.spmd import steps_summary

        return steps_summary(self.disco["devices"], self.disco["calls"], self.disco["bytes_sent"])

    @property
    def workers(self) -> int:
        """The devices that ran: those simulated, or Disco's session."""
        if self.stats is not None:
            return self.stats.simulated
        return int(self.disco["num_workers"]) if self.disco else 0


# ---------------------------------------------------------------- the driver


class Driver:
    """One module, distributed once, run per device count; see the module docstring."""

    def __init__(
        self,
        mod: IRModule,
        *,
        func: str = "main",
        symbol: str = "num_workers",
        pipeline=None,
        bind: Mapping[str, int] | None = None,
        time_passes: bool = False,
        target: Any = "llvm",
        session: str = "threads",
        specialize: bool | None = None,
        counts: Sequence[int] | None = None,
        verify: str | None = None,
    ):
        """``counts``: the device counts the module is for (``propagate-sharding.counts``,
        docs/propagation.md): layouts are planned per class of them, and the distributed module
        carries a variant per class whose layout differs. None: the pass config's, else the default
        counts, 1 to 8.

        ``verify``: the distribute pipeline's check of its own lowering (``distribute.verify``:
        "off", "sampled" or "every-count", docs/verify.md), the other sizes at ``bind``'s values.
        None: the pass config's, else off."""
        if func not in mod.functions:
            raise DistirError(f"the module has no function '{func}' (it has: {', '.join(mod.functions)})")
        self.mod = mod
        self.func = func
        self.symbol = symbol
        self.bind = dict(bind or {})
        self.counts = None if counts is None else list(counts)
        self.verify = verify
        self._pipeline = pipeline
        self._time_passes = time_passes
        self._local: IRModule | None = None
        self.pipeline_seconds: float | None = None
        self.pass_seconds: list[tuple[str, float]] = []
        self._specialized: dict[tuple, tuple[IRModule, float]] = {}
        self._reference: tuple | None = None  # (ids of the inputs, outputs, the inputs kept alive)
        self.target = target  # what the TVM backend builds for (run(..., target=) overrides it)
        self.session = session  # the TVM backend's Disco session: "threads", "processes" or "socket[:N@HOST:PORT]"
        # the TVM backend builds per count (specialized) or once for every count (None: SPECIALIZE_DEFAULT)
        self.specialize_builds = SPECIALIZE_DEFAULT if specialize is None else bool(specialize)
        self._artifact = None  # a loaded artifact the TVM backend runs (Driver.from_artifact)
        self._exports: dict[tuple | None, tuple[Any, float]] = {}  # sizes (None: symbolic) -> (export, seconds)
        self._builds: dict[tuple, tuple[Any, float]] = {}  # (sizes or None, target) -> (tvm.compile's result, seconds)
        self._weight_sets: dict[str, tuple[Any, list]] = {}  # a pre-sharded set's directory -> (its stamp, weights)
        self._one_device: Driver | None = None  # the module as one device runs it, for TVM's own build
        self._tvm_reference: dict[tuple, tuple] = {}  # (function, target) -> (ids of the inputs, outputs, the inputs)
        self._reduction_length: dict[str, Any] = {}  # function -> the formula of the terms its reductions add

    # -- distribute once

    @property
    def mesh_symbols(self) -> set[str]:
        """The symbolic sizes of the module's meshes."""
        return set().union(*(sym.free_vars(d) for m in self.mod.meshes() for d in m.shape))

    @property
    def local(self) -> IRModule:
        """The local-view module: the pipeline run once, ``symbol`` symbolic, ``bind`` applied."""
        return self.distribute()

    def distribute(self) -> IRModule:
        """Run the pipeline (the first time only); the local-view module."""
        if self._local is None:
            self._local = self._distribute()
        return self._local

    def _distribute(self) -> IRModule:
        from .transform.pipelines import distribute_pipeline

        pipeline = self._pipeline or distribute_pipeline()
        t0 = time.perf_counter()
        if self._time_passes or self.counts is not None or self.verify is not None:
            from .transform import PassContext
            from .transform.instruments import PassTimingInstrument
            from .transform.pipelines import VERDICTS_ATTR, VERIFY_DIMS_KEY, VERIFY_KEY, verify_options

            outer = PassContext.current()
            timing = PassTimingInstrument()
            config = dict(outer.config)
            if self.counts is not None:
                config["propagate-sharding.counts"] = self.counts
            if self.verify is not None:
                config[VERIFY_KEY] = self.verify
                if self.bind and VERIFY_DIMS_KEY not in config:  # the sizes this driver runs at
                    config[VERIFY_DIMS_KEY] = {k: v for k, v in self.bind.items() if k != self.symbol}
            instruments = [timing] if self._time_passes else list(outer.instruments)
            ctx = PassContext(outer.opt_level, outer.required_passes, outer.disabled_passes, instruments, config)
            asked = verify_options(ctx).mode != "off"  # checked here too: a pipeline of one's own may not read it
            with ctx:
                local = pipeline(self.mod)
            if asked and VERDICTS_ATTR not in local.attrs:
                raise DistirError(f"Driver(verify={self.verify!r}): the pipeline given ran no distribute pipeline, "
                                  "so nothing was checked (call distir.verify on its output instead)")
            outer_name = getattr(pipeline, "name", None)  # the pipeline itself, should it be timed
            if self._time_passes:
                self.pass_seconds = [(t.name, t.seconds) for t in timing.timings if t.name != outer_name]
        else:
            local = pipeline(self.mod)
        self.pipeline_seconds = time.perf_counter() - t0
        return specialize(local, self.bind) if self.bind else local

    def for_function(self, func: str) -> Driver:
        """A driver of another function of the same module. The pipeline, specialize, the TVM export
        and build each treat the whole module, so the two share what either has done (a model's
        ``prefill`` and ``decode`` are distributed, exported and built once per count)."""
        if func not in self.mod.functions:
            raise DistirError(f"the module has no function '{func}' (it has: {', '.join(self.mod.functions)})")
        other = copy.copy(self)
        other.func, other._reference = func, None
        other._local = self.local  # distributed now, once for both
        return other

    # -- per count

    def values(self, count: int | Mapping[str, int]) -> dict[str, int]:
        """The sizes ``count`` binds: ``{symbol: count}`` (nothing when the meshes do not use it), or a mapping as is."""
        if isinstance(count, Mapping):
            return {k: int(v) for k, v in count.items()}
        return {self.symbol: int(count)} if self.symbol in self.mesh_symbols else {}

    def specialize(self, count: int | Mapping[str, int]) -> IRModule:
        """The local-view module at ``count`` (cached), which checks that every sharded size divides."""
        return self._specialize(self.values(count))[0]

    def _specialize(self, values: dict[str, int]) -> tuple[IRModule, float]:
        key = tuple(sorted(values.items()))
        hit = self._specialized.get(key)
        if hit is None:
            local = self.local
            t0 = time.perf_counter()
            hit = self._specialized[key] = (specialize(local, values), time.perf_counter() - t0)
        return hit

    def specialize_seconds(self, count: int | Mapping[str, int]) -> float:
        """How long specializing to ``count`` took."""
        return self._specialize(self.values(count))[1]

    def arguments(self, inputs: Sequence[Any], weights: Sequence[Any] | Mapping[str, Any] | None = None) -> list:
        """Every argument of the function: ``inputs`` as they are when ``weights`` is None, else
        ``inputs`` followed by the weights (a model's: ``num_input`` convention, weights by name
        or in order; see :func:`distir.transform.weights.weight_arguments`; a pre-sharded set's
        directory gives its weights put back together, for the single-device run)."""
        if weights is None:
            return list(inputs)
        if _is_weight_set(weights):
            return list(inputs) + self._set_weights(weights)
        from .transform.weights import weight_arguments

        return weight_arguments(self.mod[self.func], inputs, weights)

    def _set_weights(self, directory, verify: bool = True) -> list:
        """The global weights of a pre-sharded set, in order (cached while its manifest is unchanged; a
        data file changed since is caught by the checksums when a run reads the set again)."""
        from .tvm.weights import CACHE_JSON, assemble, check_set, read_set

        key = os.path.abspath(os.fspath(directory))
        try:
            stamp = os.stat(os.path.join(key, CACHE_JSON)).st_mtime_ns
        except OSError:
            stamp = None
        hit = self._weight_sets.get(key)
        if hit is None or hit[0] != stamp:
            from .tvm.checkpoint import is_global_set, read_global

            if is_global_set(directory):
                arrays = read_global(directory, verify=verify).bind(self.local, self.func).arrays()
            else:
                from .transform.count_variants import choose_variants

                s = read_set(directory, verify=verify)
                # a module with count variants: the set holds the pieces of the variant its count runs
                check_set(s, choose_variants(self.local, dict(s.meta.get("sizes", {}))), self.func)
                arrays = list(assemble(s).values())
            hit = self._weight_sets[key] = (stamp, arrays)
        return hit[1]

    def reference(self, inputs: Sequence[Any], weights: Sequence[Any] | Mapping[str, Any] | None = None) -> Any:
        """The single-device outputs on ``inputs``: the interpreter on the global-view module."""
        inputs = self.arguments(inputs, weights)
        key = tuple(map(id, inputs))
        if self._reference is None or self._reference[0] != key:
            self._reference = (key, run_single(self.mod, *inputs, func=self.func), list(inputs))
        return self._reference[1]

    def tvm_reference(self, inputs: Sequence[Any], target: Any = None) -> Any:
        """The outputs of TVM's own build of the module on one device (:func:`one_device_module`: no
        mesh, no collective), for ``target``, on every argument (``inputs`` and weights, as
        :meth:`reference` takes them); built once, cached for the same inputs."""
        target = self.target if target is None else target
        if self._one_device is None:
            self._one_device = Driver(one_device_module(self.mod), func=self.func, target=target)
        one = self._one_device
        key = tuple(map(id, inputs))
        hit = self._tvm_reference.get((self.func, str(target)))
        if hit is None or hit[0] != key:
            built = one.build({}, target)
            out = run_disco(built, one.local, *inputs, num_workers=1, func=self.func, target=target)
            hit = self._tvm_reference[self.func, str(target)] = (key, out, list(inputs))
        return hit[1]

    def rounding_length(self, inputs: Sequence[Any]) -> float:
        """The number of terms the function's reductions add on ``inputs`` (its sizes bound by them),
        for the rounding a comparison allows (:mod:`distir.analysis.rounding`); 0 where a size is
        not known from the inputs."""
        from .analysis.rounding import reduction_length

        if self.func not in self._reduction_length:
            self._reduction_length[self.func] = reduction_length(self.mod, self.func)
        f = self.mod[self.func]
        try:
            values = bind_params(f, list(inputs))[1]
            return float(sym.evaluate(self._reduction_length[self.func], values))
        except (DistirError, KeyError, TypeError, ValueError):
            return 0.0

    def run(
        self,
        inputs: Sequence[Any],
        count: int | Mapping[str, int],
        *,
        backend: str = "sim",
        seed: int = 0,
        rtol: float | None = None,
        atol: float | None = None,
        absolute_atol: bool = False,
        weights: Sequence[Any] | Mapping[str, Any] | str | os.PathLike | None = None,
        target: Any = None,
        session: str | None = None,
        verify_weights: bool = True,
        specialize: bool | None = None,
        artifact: Any = None,
        tvm_reference: bool | None = None,
    ) -> CountResult:
        """Specialize to ``count``, run on ``backend``, compare with :meth:`reference`.

        ``seed`` draws the random split of partial inputs; ``rtol``/``atol`` as :func:`compare` (None: by dtype).
        With ``weights`` (a model's global weights, by name or in order), ``inputs`` are the
        function's inputs only (see :meth:`arguments`); each worker is given its block of each.
        ``weights`` may also be a directory written by ``distir.tvm.shard_weights`` (backend
        "tvm"): each Disco worker loads its own pieces with TVM's ShardLoader, and the
        single-device run compared with takes the set's pieces put back together. The set is
        checked first (paths, sizes, shapes, dtypes, checksums: docs/tvm.md, "Trusting a set");
        ``verify_weights=False`` skips only the checksums, and then a damaged data file is not
        noticed: the comparison is with the same damaged pieces.
        ``target`` (default: the driver's, "llvm") and ``session`` ("threads", "processes" or
        "socket[:NODES@HOST:PORT]"; default: the driver's) choose the TVM backend's build and Disco session. ``specialize``
        (default: the driver's, :data:`SPECIALIZE_DEFAULT`) builds the module specialized to each
        count; ``specialize=False`` builds the symbolic export once per target and runs that build at
        every count, choosing each count's plan at run time. ``artifact`` (a folder written by
        :meth:`write_artifact` / ``distir build``, or :func:`distir.tvm.load_artifact`'s result) runs
        that library, without ``tvm.compile``; it must be the build of this driver's module.

        The outputs are compared with the interpreter's, within the dtype's tolerance widened by
        what rounding allows the function's reductions (:func:`compare`'s ``reduction_length``).
        A TVM run is also compared with TVM's own one-device build (:meth:`tvm_reference`; a
        mismatch names the reference that differs): always with ``tvm_reference=True``, by default
        (None) where an output is float16 or bfloat16, whose TVM kernels round otherwise than the
        interpreter (float32 and wider agree to 1e-5, and the second build would double the time).
        """
        if backend not in BACKENDS:
            raise DistirError(f"unknown backend '{backend}' (known: {', '.join(BACKENDS)})")
        if artifact is not None and backend != "tvm":
            raise DistirError("an artifact is a TVM build: run it with backend='tvm'")
        weight_set = weights if _is_weight_set(weights) else None
        if weight_set is not None and backend != "tvm":
            raise DistirError("pre-sharded weights (a directory) are loaded by Disco's workers: run with backend='tvm'")
        given = list(inputs)
        if weight_set is not None:  # a set for another count is one line before anything is built
            from .transform.count_variants import choose_variants
            from .tvm.checkpoint import is_global_set, read_global
            from .tvm.weights import check_set, read_set, session_workers

            local = self._specialize(self.values(count))[0]
            runs = choose_variants(self.local, self.values(count))  # symbolic, the count's variant chosen
            if is_global_set(weight_set):  # one checkpoint for every count: checked against the function
                read_global(weight_set, verify=False).bind(runs, self.func, self.values(count))
            else:
                check_set(read_set(weight_set, verify=False), runs, self.func, self.values(count),
                          session_workers(local.meshes(), {}))  # the checksums: below, before anything reads the files
            inputs = list(inputs) + self._set_weights(weight_set, verify_weights)
        else:
            inputs = self.arguments(inputs, weights)
        expected = self.reference(inputs)
        values = self.values(count)
        local, seconds = self._specialize(values)  # also checks that every sharded size divides, for either backend
        result = CountResult(values, backend, None, Comparison(False, float("inf")), timings={"specialize": seconds})
        if backend == "sim":
            result.stats = SpmdStats()
            t0 = time.perf_counter()
            result.outputs = run_spmd(local, *inputs, func=self.func, stats=result.stats, seed=seed)
            result.timings["run"] = time.perf_counter() - t0
        else:
            n = values.get(self.symbol, 0) if isinstance(count, Mapping) else int(count)
            run_inputs = given if weight_set is not None else inputs
            result.outputs = self._run_disco(run_inputs, values, n, seed, result, target, session, weight_set,
                                             verify_weights, specialize, artifact)
        length = self.rounding_length(inputs)
        result.comparison = compare(result.outputs, expected, rtol, atol, absolute_atol=absolute_atol,
                                    reduction_length=length, reference=INTERPRETER)
        if backend == "tvm" and (tvm_reference or (tvm_reference is None and _half_precision(expected))):
            own = self.tvm_reference(inputs, target)
            against_own = compare(result.outputs, own, rtol, atol, absolute_atol=absolute_atol,
                                  reduction_length=length, reference=TVM_ONE_DEVICE)
            first = result.comparison
            result.comparison = first & against_own
            if not first.ok and against_own.ok:  # a wrong number all the same, but not the distribution's
                result.comparison = replace(result.comparison, mismatch=(
                    f"{first.mismatch}; {TVM_ONE_DEVICE} gives these numbers too: the difference is in TVM's "
                    "kernels for this dtype, not in the distribution"))
        return result

    def export(self, count: int | Mapping[str, int] | None = None):
        """The TVM Relax export (cached) of the symbolic module (``count`` None), which runs at every
        count, or of the module specialized to ``count``. Exporting the specialized module drops what
        moves nothing at this count (a re-blocking where the count divides) and fixes the block
        exchanges' sizes; the symbolic one runs such a re-blocking at every count."""
        dtvm = _import_tvm("the tvm backend needs distir.tvm and Apache TVM, which cannot be imported here")
        key = None if count is None else tuple(sorted(self.values(count).items()))
        hit = self._exports.get(key)
        if hit is None:
            local = self.local if key is None else self._specialize(dict(key))[0]
            t0 = time.perf_counter()
            hit = self._exports[key] = (dtvm.to_relax(local, dispatch=True), time.perf_counter() - t0)
        return hit[0]

    def build(self, count: int | Mapping[str, int] | None = None, target: Any = None, *,
              specialize: bool | None = None):
        """The TVM build for ``target`` (default: the driver's) with the shared library Disco's workers
        load: with ``specialize`` (default: the driver's) of :meth:`export` ``(count)`` bound to
        ``count``; without, of the symbolic export, one build that runs at every count. Cached
        here and across the process (:mod:`distir.tvm.build_cache`: the same export and target are
        compiled once)."""
        return self._build(count, target, specialize)[0]

    def _build(self, count, target, specialize) -> tuple[Any, float, tuple | None]:
        """(the build, seconds this call compiled (0 when cached), the sizes bound or None)."""
        _import_tvm("the tvm backend needs distir.tvm and Apache TVM, which cannot be imported here")
        from .tvm import build_cache
        from .tvm.disco import shared_library

        specialize = self.specialize_builds if specialize is None else specialize
        if specialize and count is None:
            raise DistirError("a specialized build needs the count it is for")
        sizes = tuple(sorted(self.values(count).items())) if specialize else None
        target = self.target if target is None else target
        key = (sizes, str(target))
        hit = self._builds.get(key)
        if hit is not None:
            return hit[0], 0.0, sizes
        exported = self.export(None if sizes is None else dict(sizes))
        compiled, seconds, cached = build_cache.build(exported, target, None if sizes is None else dict(sizes))
        shared_library(compiled)  # the library every worker loads, written once
        self._builds[key] = (compiled, seconds)
        return compiled, 0.0 if cached else seconds, sizes

    @classmethod
    def from_artifact(cls, artifact, *, session: str = "threads") -> Driver:
        """A driver of an artifact (:func:`distir.tvm.load_artifact`'s result, or its folder): the
        global-view module it records, distributed as it was built (its local-view module, not the
        pipeline again), whose TVM backend runs the artifact's library at every count."""
        artifact = _load_artifact(artifact)
        d = cls(artifact.source, func=artifact.func, symbol=artifact.symbol, target=artifact.target, session=session)
        d.bind = dict(artifact.bind)
        d._local, d.pipeline_seconds = artifact.local, 0.0
        d._artifact = artifact
        return d

    def write_artifact(self, directory: str | os.PathLike, target: Any = None):
        """Build the symbolic export once for ``target`` (default: the driver's) and write it with its
        manifest into ``directory`` (:func:`distir.tvm.write_artifact`); the folder's path."""
        built = self.build(None, target, specialize=False)
        from .tvm.artifact import write_artifact

        return write_artifact(built, directory, local=self.local, source=self.mod, func=self.func,
                              symbol=self.symbol, bind=self.bind, target=self.target if target is None else target)

    def _run_disco(self, inputs, values: dict[str, int], n: int, seed: int, result: CountResult, target, session,
                   weight_set, verify_weights: bool = True, specialize: bool | None = None, artifact=None):
        """Build the symbolic export once (or the one specialized to this count; both cached), or take
        the artifact's library, and run it on Disco."""
        session = self.session if session is None else session
        artifact = self._artifact if artifact is None else _load_artifact(artifact)
        if artifact is not None:
            if specialize:
                raise DistirError("an artifact is one build for every count: run it without specialize=True")
            self._check_artifact(artifact)
            built, kind = artifact.library, "artifact"
            target = self._artifact_target(artifact, target)
            result.timings["export"] = result.timings["build"] = 0.0
        else:
            target = self.target if target is None else target
            built, seconds, sizes = self._build(values, target, specialize)
            kind = "symbolic" if sizes is None else "specialized"
            result.timings["export"] = self._exports[sizes][1]
            result.timings["build"] = seconds
        result.disco = {"build": kind}
        # the steps counted are those of the program that runs: specialized to the count, or the one build's
        # choice at the count (the plan made for the count at 1 to 8 workers, else the plan made for every count)
        ran = self._specialize(values)[0] if kind == "specialized" else self.local
        t0 = time.perf_counter()
        out = run_disco(built, ran, *inputs, num_workers=n, func=self.func, symbol=self.symbol,
                        seed=seed, stats=result.disco, session=session, target=target, weights=weight_set,
                        verify_weights=verify_weights, dispatch=True)
        result.timings["run"] = time.perf_counter() - t0
        return out

    def _artifact_target(self, artifact, target):
        """The artifact's target; a different one asked for is one line (an artifact runs where it was built for)."""
        if target is None:
            return artifact.target
        from .tvm.targets import describe, parse_target

        if str(parse_target(target)) != str(artifact.target):
            raise DistirError(f"the artifact was built for target {artifact.target}, not '{describe(target)}': "
                              "build another with distir build --target")
        return artifact.target

    def _check_artifact(self, artifact) -> None:
        """The artifact must be the build of this driver's module as distributed (its text, exactly)."""
        if artifact is self._artifact:
            return
        from .tvm.errors import ArtifactError

        if artifact.symbol != self.symbol or self.local.script() != artifact.local_text:
            raise ArtifactError(f"artifact '{artifact.directory}' was built from another module than this "
                                f"driver's (its local-view text differs): build it from this one")

    def run_counts(self, inputs: Sequence[Any], counts: Sequence[int], **kwargs) -> dict[int, CountResult]:
        """:meth:`run` at each count, in order."""
        return {n: self.run(inputs, n, **kwargs) for n in counts}
