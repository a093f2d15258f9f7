"""Check distir's CUDA path on one GPU: every count's build, and one artifact for every count, run by W
worker threads on the one GPU.

The bundled mlp, attention and llama and a ``relax.frontend.nn`` model (``distir.examples.nn.llama``)
are distributed once, then for each W exported, built for the target and run on Disco with W
worker threads on the GPU (distir's host collectives stage device buffers through host memory;
at W = 1, NCCL where TVM has it), and compared with the one-device run (distir's interpreter;
the nn model also with TVM's own one-device build of it on the same target). With ``--build once``
(or ``both``, the default) each model is also built ONCE, its ``num_workers`` symbolic, written as an
artifact (``Driver.write_artifact``, what ``distir build`` writes) and run from that folder at every W
without ``tvm.compile`` (``Driver.from_artifact``). Every per-count export is also checked: no kernel
reads a host tensor, and every collective is one of Disco's own.

    source .gpu2/install.sh && python3 scripts/gpu_check.py
    python3 scripts/gpu_check.py --counts 1-4 --models llama,nn_llama
    python3 scripts/gpu_check.py --target llvm --counts 1-3        # the same on the CPU (a dry run)
    python3 scripts/gpu_check.py --build once                      # only the one artifact for every count

Needs TVM, numpy, scipy, ml_dtypes and rich, and distir's python/ on PYTHONPATH (this script
adds it when run from a checkout). Prints one row per (model, W): the collective library, ok,
largest difference (and against TVM's own build), bytes each worker sends (distir's steps, as the
simulator counts them; and what Disco's collectives moved), build and run seconds. Exit status 0 when every run matches.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import numpy as np  # noqa: E402


def parse_counts(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"counts like 1-8 or 1,2,4, got {text!r}")
    return out


def export_problems(exported) -> list[str]:
    """What a device would trip over in an export: a kernel reading a host tensor, a collective not Disco's."""
    from tvm import relax

    problems, host = [], set()
    for gv, func in exported.functions.items():
        if not isinstance(func, relax.Function):
            continue
        for block in func.body.blocks:
            for b in block.bindings:
                v = b.value
                if not isinstance(v, relax.Call):
                    continue
                op = getattr(v.op, "name", "")
                if op.startswith("relax.call_") and v.args and isinstance(v.args[0], relax.ExternFunc):
                    name = str(v.args[0].global_symbol)
                    if not name.startswith("runtime.disco."):
                        problems.append(f"@{gv.name_hint} calls {name}")
                    if op != "relax.call_dps_packed" and isinstance(b.var.ty, relax.TensorType):
                        host.add(str(b.var.name))
                    continue
                if op == "relax.shape_to_tensor":
                    host.add(str(b.var.name))
                    continue
                for a in v.args:
                    fields = a.fields if isinstance(a, relax.Tuple) else [a]
                    problems += [f"@{gv.name_hint}: {b.var.name} reads the host tensor {f.name}"
                                 for f in fields if isinstance(f, relax.Var) and str(f.name) in host]
    return problems


def models(names: list[str], seq: int):
    """name -> (driver, inputs, weights or None, TVM's own one-device run of the model or None)."""
    import distir
    from distir.driver import Driver, random_inputs

    out = {}
    for name in names:
        if name == "nn_llama":
            from distir.transform import ShardParams
            from distir.tvm import from_nn
            from distir.examples.nn import llama as L

            config = L.LlamaConfig()
            model = L.Llama(config)
            driver = Driver(ShardParams(L.TP_PLAN)(from_nn(model, L.spec(config))), func="forward")
            ids = (np.arange(seq) * 7 % config.vocab_size).astype("int32")
            out[name] = (driver, [ids, *L.rope_tables(seq, config.head_dim)], L.random_weights(model), (model, L.spec(config)))
        else:
            mod = distir.examples.load(name)
            out[name] = (Driver(mod), random_inputs(mod, seed=1, dims={"s": seq}), None, None)
    return out


def tvm_alone(model_spec, inputs, weights, target, device):
    """The nn model exported, built and run by TVM alone on one device of the target."""
    import tvm

    model, spec = model_spec
    exported, params = model.export_tvm(spec)
    vm = tvm.relax.VirtualMachine(tvm.compile(exported, target=target), device)
    args = [tvm.runtime.tensor(a, device=device) for a in [*inputs, *(weights[n] for n, _ in params)]]
    return vm["forward"](*args).numpy()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="cuda", help="TVM target to build for (default cuda)")
    parser.add_argument("--counts", type=parse_counts, default=list(range(1, 9)), help="worker counts (default 1-8)")
    parser.add_argument("--models", default="mlp,attention,llama,nn_llama", help="comma-separated (default: all four)")
    parser.add_argument("--session", choices=("threads", "processes"), default="threads", help="Disco session (default threads)")
    parser.add_argument("--build", choices=("count", "once", "both"), default="both",
                        help="a build per count, one artifact for every count, or both (default both)")
    parser.add_argument("--seq", type=int, default=16, help="sequence length of the models that take one (default 16)")
    parser.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (default 1e-4: GPU sums add in another order)")
    parser.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance, relative to the largest value (default 1e-4)")
    args = parser.parse_args(argv)

    import tvm

    from distir.errors import DistirError
    from distir.tvm.targets import has_nccl, run_device

    try:
        device = run_device(args.target)
    except DistirError as err:
        print(f"gpu_check: {err}", file=sys.stderr)
        return 2
    name = getattr(device, "device_name", None) if device.dlpack_device_type() != 1 else "CPU"
    print(f"TVM {tvm.__version__}; target {args.target} on {device} ({name}); NCCL in this TVM build: "
          f"{'yes' if has_nccl() else 'no (runtime.disco.nccl.init_ccl missing)'}; session: {args.session}")
    warnings.simplefilter("once")
    # the header says whether NCCL is there; the same line per run would bury the table
    warnings.filterwarnings("ignore", message="this TVM build has no NCCL")
    header = f"{'model':<10} {'build':<6} {'W':>2} {'ccl':<5} {'ok':<5} {'max diff':>9} {'vs TVM':>9} {'B/worker':>10} {'Disco B/w':>10} {'build s':>8} {'run s':>7}"
    print(header)
    print("-" * len(header))
    failures = 0
    import tempfile

    from distir.driver import Driver

    artifacts = tempfile.TemporaryDirectory(prefix="distir-gpu-check-")
    modes = ("count", "once") if args.build == "both" else (args.build,)
    for model_name, (driver, inputs, weights, nn) in models(args.models.split(","), args.seq).items():
        alone = None
        if nn is not None:
            try:
                alone = tvm_alone(nn, inputs, weights, args.target, device)
            except Exception as err:  # noqa: BLE001 - reported, the distributed runs still go on
                print(f"{model_name}: TVM's own one-device build failed: {str(err).strip().splitlines()[-1]}")
        for mode, w in [(m, w) for m in modes for w in args.counts]:
            t0 = time.perf_counter()
            try:
                if mode == "count":
                    exported_problems = export_problems(driver.export(w))
                    runner = driver
                else:  # one symbolic build, written as an artifact once, run from its folder at every count
                    exported_problems = []
                    folder = Path(artifacts.name) / model_name
                    if not folder.exists():
                        driver.write_artifact(folder, target=args.target)
                    runner = Driver.from_artifact(folder, session=args.session)
                r = runner.run(inputs, w, weights=weights, backend="tvm", target=args.target, session=args.session,
                               rtol=args.rtol, atol=args.atol, specialize=(mode == "count"))
            except DistirError as err:
                failures += 1
                print(f"{model_name:<10} {mode:<6} {w:>2} error: {err}")
                continue
            d = r.disco
            versus = "-"
            if alone is not None:
                from distir.driver import compare

                c = compare(r.outputs, alone, args.rtol, args.atol)
                versus = f"{c.max_diff:.1e}" + ("" if c.ok else "!")
                failures += not c.ok
            ok = r.ok and not exported_problems
            failures += not ok
            build = r.timings.get("build", 0.0) or (time.perf_counter() - t0 - r.timings["run"])
            print(f"{model_name:<10} {mode:<6} {w:>2} {d['ccl']:<5} {str(ok):<5} {r.max_diff:>9.1e} {versus:>9} "
                  f"{d['bytes_sent'] / d['num_workers']:>10.0f} {d['transport']['bytes_sent'] / d['num_workers']:>10.0f} {build:>8.2f} "
                  f"{r.timings['run']:>7.3f}")
            for p in exported_problems:
                print(f"    export: {p}")
            if not r.ok:
                print(f"    {r.comparison.mismatch}")
    artifacts.cleanup()
    print("all runs match" if not failures else f"{failures} run(s) do not match")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
