#!/usr/bin/env python3
"""distir's memory estimate per worker against what TVM's memory planning allocates, model x count.

    PYTHONPATH=python python scripts/bench_memory.py [--counts 1 2 4] [--models llama,nn_llama,gpt2,decode] [--seq 256]
                                                     [--cuda]

What is compared, per worker, on the module specialized to the count (distir's ``specialize``,
then ``distir.tvm.to_relax``, then ``BindSymbolicVars`` for the sizes left, as
``distir.tvm.specialize_and_build`` does):

- distir: the parameter bytes plus :func:`distir.analysis.planning.planned_memory` (TVM's static
  planner replayed on distir's liveness walk: the storage tokens of the intermediates, and the
  results, which TVM allocates unplanned);
- TVM: the same parameter bytes (the Relax function's tensor parameters) plus the sizes of every
  ``R.memory.alloc_storage`` and constant-size ``R.builtin.alloc_tensor`` left in the function by
  ``tvm.compile``'s CPU pipeline up to and including ``StaticPlanBlockMemory`` (what
  ``relax.analysis.estimate_memory_usage`` calls "with memory planning");
- ratio: distir / TVM.

Also printed: distir's liveness peak of intermediates (the formula ``distir sweep`` prints) and the
liveness peak of TVM's own allocations in its planned function (views share their buffer), which
should be equal; TVM's figure for the symbolic export bound to the count (the path that builds
once for every count), which computes padding masks and regroups as real work; and with ``--cuda``
TVM's planned bytes under the CUDA pipeline, which fuses operators (lowered here, no GPU needed).
"""

from __future__ import annotations

import argparse
import warnings

import tvm
from tvm import relax

from distir import examples
from distir.analysis import memory_footprint
from distir.analysis.planning import planned_memory
from distir.transform.pipelines import distribute_pipeline
from distir.transform.specialize import specialize
from distir.tvm.disco.run import symbolic_var_names
from distir.tvm.relax.export import to_relax

# model -> (function, sizes bound before the count); the sequence length is --seq
MODELS = {"llama": (None, "s"), "nn_llama": (None, "s"), "gpt2": (None, "s"), "decode": ("decode", "n")}

_ALLOC_STORAGE = "relax.memory.alloc_storage"
_BUILTIN_ALLOC = "relax.builtin.alloc_tensor"
_MEMORY_ALLOC = "relax.memory.alloc_tensor"


def planning_passes(target: str = "llvm") -> tvm.transform.Pass:
    """What ``tvm.compile`` runs for ``target`` through ``StaticPlanBlockMemory``: for a CPU,
    ``tvm.relax.pipeline.default_build_pipeline`` (no fusion); for CUDA, the CUDA backend's default
    pipeline (library dispatch, legalization and fusion, DLight scheduling), which lowers without a
    GPU. The result is the module whose storage sizes TVM's VM allocates."""
    t = relax.transform
    if target == "cuda":
        from tvm.relax.backend.cuda import pipeline as cuda

        tgt = tvm.target.Target("cuda")
        return tvm.transform.Sequential(cuda.library_dispatch_passes(tgt) + cuda.legalize_passes(tgt)
                                        + cuda.dataflow_lower_passes(tgt) + [t.StaticPlanBlockMemory()])
    return tvm.transform.Sequential([
        relax.backend.DispatchSampling(), relax.backend.DispatchSortScan(), t.LegalizeOps(), t.RewriteDataflowReshape(),
        t.ToNonDataflow(), t.RemovePurityChecking(), t.CallTIRRewrite(), t.StaticPlanBlockMemory(),
    ])


def _nbytes(shape, dtype) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    dt = tvm.DataType(str(dtype))
    return n * ((dt.bits + 7) // 8) * dt.lanes


def _vars_in(e) -> list:
    out: list = []

    @relax.expr_functor.visitor
    class _V(relax.PyExprVisitor):
        def visit_var_(self, v):
            out.append(v)

    _V().visit_expr(e)
    return out


def tvm_memory(tvm_mod: tvm.IRModule, values: dict[str, int], func: str, target: str = "llvm") -> dict[str, int]:
    """Bind ``values``, plan for ``target``, and read TVM's numbers for ``func``: parameter bytes,
    planned storage, unplanned (builtin) allocations, and the liveness peak of its allocations."""
    present = symbolic_var_names(tvm_mod)
    bound = relax.transform.BindSymbolicVars({k: v for k, v in values.items() if k in present})(tvm_mod)
    with tvm.target.Target(target):
        planned = planning_passes(target)(bound)
    f = planned[func]
    ops = {name: tvm.ir.Op.get(name) for name in (_ALLOC_STORAGE, _BUILTIN_ALLOC, _MEMORY_ALLOC)}
    reshape = tvm.ir.Op.get("relax.reshape")
    params = sum(_nbytes(p.ty.shape.values, p.ty.dtype) for p in f.params
                 if isinstance(p.ty, relax.TensorType) and p.ty.shape is not None)
    storage = unplanned = 0
    bindings = [b for block in f.body.blocks for b in block.bindings]
    buf: dict = {}
    size: list[int] = []
    born: list[int] = []
    last: list[int] = []
    for i, b in enumerate(bindings):
        v = b.value
        for u in _vars_in(v):
            if u in buf:
                last[buf[u]] = max(last[buf[u]], i)
        if isinstance(v, relax.Call) and v.op.same_as(ops[_ALLOC_STORAGE]):
            storage += int(v.args[0].values[0])
        elif isinstance(v, relax.Call) and (v.op.same_as(ops[_BUILTIN_ALLOC]) or v.op.same_as(ops[_MEMORY_ALLOC])):
            shape, dtype = (v.args[0], v.args[1]) if v.op.same_as(ops[_BUILTIN_ALLOC]) else (v.args[2], v.args[3])
            n = _nbytes(shape.values, dtype.value)
            if v.op.same_as(ops[_BUILTIN_ALLOC]):
                unplanned += n
            buf[b.var] = len(size)
            size.append(n)
            born.append(i)
            last.append(i)
        elif isinstance(v, relax.Var) and v in buf:
            buf[b.var] = buf[v]
        elif isinstance(v, relax.Call) and v.op.same_as(reshape) and isinstance(v.args[0], relax.Var) and v.args[0] in buf:
            buf[b.var] = buf[v.args[0]]  # a view
    for u in _vars_in(f.body.body):
        if u in buf:
            last[buf[u]] = len(bindings)
    events: dict[int, int] = {}
    for s, (a, z) in enumerate(zip(born, last)):
        events[a] = events.get(a, 0) + size[s]
        events[z + 1] = events.get(z + 1, 0) - size[s]
    live = peak = 0
    for i in sorted(events):
        live += events[i]
        peak = max(peak, live)
    return {"params": params, "storage": storage, "unplanned": unplanned, "live_peak": peak}


def measure(name: str, counts: list[int], seq: int, cuda: bool = False) -> list[dict]:
    """One row per count: distir's numbers and TVM's (see the module docstring)."""
    func, size = MODELS[name]
    local = specialize(distribute_pipeline()(examples.load(name)), {size: seq})
    fname = func or ("main" if "main" in local.functions else next(iter(local.functions)))
    symbolic_tvm = to_relax(local)
    rows = []
    for n in counts:
        spec = specialize(local, {"num_workers": n})
        params = memory_footprint(spec, fname).evaluate().param_bytes
        live = memory_footprint(spec, fname).evaluate().peak_bytes
        plan = planned_memory(spec, fname)
        ours = tvm_memory(to_relax(spec), {"num_workers": n}, fname)
        bound = tvm_memory(symbolic_tvm, {"num_workers": n}, fname)
        theirs = ours["storage"] + ours["unplanned"]
        fused = tvm_memory(to_relax(spec), {"num_workers": n}, fname, "cuda") if cuda else None
        rows.append({
            "model": name, "num_workers": n, "params": params, "live_peak": live, "planned": plan.total_bytes,
            "tvm_params": ours["params"], "tvm_planned": theirs, "tvm_live_peak": ours["live_peak"],
            "tvm_symbolic_planned": bound["storage"] + bound["unplanned"],
            "tvm_cuda_planned": None if fused is None else fused["storage"] + fused["unplanned"],
            "ratio": (params + plan.total_bytes) / (ours["params"] + theirs),
            "live_ratio": (params + live) / (ours["params"] + theirs),
        })
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--models", default="llama,nn_llama,gpt2,decode")
    ap.add_argument("--seq", type=int, default=256, help="sequence length (decode: cached positions)")
    ap.add_argument("--cuda", action="store_true", help="also plan with the CUDA pipeline (fused; no GPU needed)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    print(f"bytes per worker, sequence {args.seq}; total = parameters + intermediates and results allocated")
    print(f"{'model':9} {'W':>2} {'params':>9} {'live':>9} {'tvm live':>9} {'planned':>9} {'tvm plan':>9} "
          f"{'distir':>10} {'tvm':>10} {'ratio':>6} {'live/tvm':>8} {'tvm sym.':>9}" + ("  tvm cuda" if args.cuda else ""))
    for name in args.models.split(","):
        for r in measure(name.strip(), args.counts, args.seq, args.cuda):
            assert r["params"] == r["tvm_params"], r
            print(f"{r['model']:9} {r['num_workers']:>2} {r['params']:>9} {r['live_peak']:>9} {r['tvm_live_peak']:>9} "
                  f"{r['planned']:>9} {r['tvm_planned']:>9} {r['params'] + r['planned']:>10} "
                  f"{r['tvm_params'] + r['tvm_planned']:>10} {r['ratio']:>6.3f} {r['live_ratio']:>8.3f} "
                  f"{r['tvm_symbolic_planned']:>9}" + (f" {r['tvm_cuda_planned']:>9}" if args.cuda else ""))
    print("live: distir's liveness peak of intermediates; tvm live: the same of TVM's planned allocations; planned /"
          " tvm plan: intermediates and results as planned (distir's replay / TVM's storage); distir, tvm: parameters"
          " + planned; ratio: distir / tvm; live/tvm: (parameters + live) / tvm; tvm sym.: TVM's planned bytes for the"
          " symbolic export bound to the count" + ("; tvm cuda: TVM's planned bytes with the CUDA pipeline (fused)"
                                                    if args.cuda else ""))


if __name__ == "__main__":
    main()
