#!/usr/bin/env python3
"""Benchmark: one symbolic TVM export specialized per device count, vs. distir from scratch per count.

For a Llama-like model (``--layers`` decoder layers) and each device count W in 1, 2, 4, 8:
  A) late binding: the distribute pipeline and ``distir.tvm.to_relax`` ran ONCE with
     num_workers symbolic (timed once, shown apart); per count only
     ``relax.transform.BindSymbolicVars`` + ``tvm.compile`` + export of the shared library;
  B) from scratch per count: distribute pipeline + distir ``specialize`` + ``to_relax`` +
     ``tvm.compile`` + export of the shared library.
Prints per count the times of A and B, the ratio B / A, and the same ratio for the part
before the build (what late binding saves), whose share of B shows how much the choice matters.
Also C: the symbolic export built once, without binding, which runs at every count
(num_workers is passed at run time), for comparison.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import tvm
from tvm import relax

import distir
from distir.examples._stack import llama_stack
from distir.transform.pipelines import distribute_pipeline
from distir.transform.specialize import specialize
from distir.tvm import to_relax

COUNTS = (1, 2, 4, 8)


def build(mod: tvm.IRModule, tmp: str) -> None:
    """tvm.compile, then the shared library a Disco worker loads (LLVM emits object code here)."""
    tvm.compile(mod, target="llvm").export_library(os.path.join(tmp, "m.so"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4, help="decoder layers of the model (default 4)")
    parser.add_argument("--repeat", type=int, default=1, help="repetitions; the fastest is kept (default 1)")
    args = parser.parse_args()
    made = llama_stack(args.layers)
    glob = distir.parse(made) if isinstance(made, str) else made  # IR text on older commits (bench_compare)
    n_bindings = sum(1 for _ in glob["main"].bindings())

    t0 = time.perf_counter()
    local = distribute_pipeline()(glob)
    t1 = time.perf_counter()
    exported = to_relax(local)
    t2 = time.perf_counter()
    print(f"Llama-like model, {args.layers} layers, {n_bindings} bindings")
    print(f"once (A): distribute pipeline {t1 - t0:.3f} s, to_relax {t2 - t1:.3f} s (num_workers symbolic)\n")
    print(f"{'W':>3} | {'A bind':>8} {'A build':>8} {'A total':>8} | {'B distir':>9} {'B export':>9} {'B build':>8} "
          f"{'B total':>8} | {'B/A':>5} {'B/A before build':>17}")
    tot_a = tot_b = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for w in COUNTS:
            best = None
            for _ in range(args.repeat):
                s0 = time.perf_counter()
                bound = relax.transform.BindSymbolicVars({"num_workers": w})(exported)
                s1 = time.perf_counter()
                build(bound, tmp)
                s2 = time.perf_counter()
                r0 = time.perf_counter()
                spec = specialize(distribute_pipeline()(glob), {"num_workers": w})
                r1 = time.perf_counter()
                mod = to_relax(spec)
                r2 = time.perf_counter()
                build(mod, tmp)
                r3 = time.perf_counter()
                row = (s1 - s0, s2 - s1, r1 - r0, r2 - r1, r3 - r2)
                best = row if best is None or sum(row) < sum(best) else best
            a_bind, a_build, b_distir, b_export, b_build = best
            a, b = a_bind + a_build, b_distir + b_export + b_build
            tot_a, tot_b = tot_a + a, tot_b + b
            print(f"{w:>3} | {a_bind:8.3f} {a_build:8.3f} {a:8.3f} | {b_distir:9.3f} {b_export:9.3f} {b_build:8.3f} "
                  f"{b:8.3f} | {b / a:5.2f} {(b_distir + b_export) / a_bind:17.1f}")
        c0 = time.perf_counter()
        build(exported, tmp)
        c_build = time.perf_counter() - c0
    once = t2 - t0
    print(f"\nall counts: A {tot_a:.3f} s + {once:.3f} s once = {tot_a + once:.3f} s; B {tot_b:.3f} s; "
          f"ratio B / A = {tot_b / (tot_a + once):.2f}")
    print(f"C (one symbolic build for every count): {once + c_build:.3f} s; ratio B / C = {tot_b / (once + c_build):.2f}")


if __name__ == "__main__":
    main()
