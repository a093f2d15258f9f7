#!/usr/bin/env python3
"""Benchmark: legalize and lower a module of many redistributes; symbolic-then-specialize vs static runs.

Builds a chain of N redistributes cycling through placements on a 2-D mesh (2, num_workers),
then compares
  A) one pipeline run with num_workers symbolic + Specialize to 1, 2, 4, ..., 128, with
  B) eight pipeline runs, each on a module whose mesh size is a constant.
Prints the times and the ratio A / B.
"""

from __future__ import annotations

import argparse
import time

from distir.ir import (
    Binding,
    Block,
    Call,
    DeviceMesh,
    DTensorType,
    Function,
    IRModule,
    Placement,
    Range,
    Var,
    get_op,
    sym,
)
from distir.transform import get_pass
from distir.transform.specialize import specialize

CYCLE = ["S[0], R", "R, S[1]", "P, S[0]", "S[1], S[0]", "R, R", "S[0], S[1]", "R, P", "S[1], R"]
COUNTS = [1, 2, 4, 8, 16, 32, 64, 128]


def build(n: int, workers) -> IRModule:
    mesh = DeviceMesh((2, workers), Range(0, sym.mul(2, workers)))
    x = Var("x", DTensorType((1024, 2048), "float32", mesh, Placement.parse(CYCLE[0])))
    op = get_op("dist.redistribute")
    bindings, cur = [], x
    for i in range(n):
        call = Call(op, (cur,), {"device_mesh": mesh, "placement": Placement.parse(CYCLE[(i + 1) % len(CYCLE)])})
        v = Var(f"lv{i}", call.type)
        bindings.append(Binding(v, call))
        cur = v
    f = Function("main", (x,), (Block(tuple(bindings), True, (cur,)),), cur)
    return IRModule({"main": f}, {"mesh": [mesh]})


def pipeline(mod: IRModule) -> IRModule:
    return get_pass("lower-global-view-to-local-view")(get_pass("legalize-redistribute")(mod))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--redistributes", type=int, default=5000, help="number of redistributes (default 5000)")
    args = ap.parse_args()
    n = args.redistributes

    t0 = time.perf_counter()
    mod = build(n, sym.var("num_workers"))
    t1 = time.perf_counter()
    lowered = pipeline(mod)
    t2 = time.perf_counter()
    for w in COUNTS:
        specialize(lowered, {"num_workers": w})
    t3 = time.perf_counter()
    print(f"{n} redistributes on mesh (2, num_workers): build {t1 - t0:.2f}s")
    print(f"A) symbolic legalize+lower {t2 - t1:.2f}s + specialize x{len(COUNTS)} {t3 - t2:.2f}s = {t3 - t1:.2f}s")

    static = 0.0
    for w in COUNTS:
        m = build(n, w)
        s0 = time.perf_counter()
        pipeline(m)
        static += time.perf_counter() - s0
    print(f"B) {len(COUNTS)} static legalize+lower runs: {static:.2f}s")
    print(f"ratio A / B = {(t3 - t1) / static:.2f}")


if __name__ == "__main__":
    main()
