#!/usr/bin/env python3
"""Differential fuzzer for distir: random distributed programs, distributed once, run on
simulated workers (and optionally on TVM's Disco), compared with the single-device run.

Each case is a random global-view program in distir's IR text: random meshes (1-D, 2-D,
3-D; static sizes or a symbolic ``num_workers`` axis; device ranges that start anywhere;
explicit device lists, out of order too; one or two meshes), random tensors (static sizes
including 1, primes and sizes below the device count; symbolic sizes like ``s`` bound only
at run time), random placements (R, S[d], P, P[max], P[min], P[avg]), chains of
``R.dist.redistribute`` (also between meshes) and ops (elementwise, matmul, reductions,
reshape, permute_dims, softmax, rms_norm, concat, split, strided_slice ...) with
``R.dist.annotate_sharding`` hints so that sharding propagation has work to do.

With --strided, placements may also be strided shards ``S[d/k]`` (k divides the dim; parameters,
hints, redistribute targets, on 1-D and 2-D meshes), meshes of 6 and 7 devices join the static
ones, and fused-QKV chains appear: ``x @ w`` with ``w`` declared or hinted ``S[1/k]`` (or free,
the heads hinted), reshaped to ``(..., k, heads, head_dim)`` and maybe merged back (head counts
that do not divide the device count included). With --axis-costs, a case whose meshes all have
two or more axes is sometimes distributed with random per-mesh-axis time costs
(``legalize-redistribute.axis_costs``: propagation and legalize plan by time, replans record the
costs); numbers must still equal one device and the analysis' bytes the simulator's. Without
these options a seed gives the cases it gave before them.

With --blocks, programs also lay values out in block layouts ``B[...]`` (parameters, hints,
redistributes; shard sizes from 1 to one past the dim, run-time dims whole; tensors up to
160 x 160), run elementwise ops and reductions on the chunks and convert to other block shapes
and to R / S / P. With --cross, every program has two meshes (the same devices in another grid,
ranges that overlap, or the next stage: ``(num_workers, 2)`` and ``(2, num_workers, 3)``) and
moves values between them, run-time dims included. With --time-limit S, a case still running
after S seconds of CPU time (the load of a shared machine does not count) is stopped and counted
SLOW.

The distribute pipeline runs ONCE with num_workers symbolic; then, for a few device counts,
the module is specialized, simulated (``distir.runtime.run_spmd``) and compared with the
single-device interpreter (``distir.runtime.run``) on the same random inputs. The bytes the
simulator moved are compared with the cost model (``distir.analysis.comm_volume``, both the
symbolic formula and the specialized module). With --tvm the module is also exported to
TVM Relax, built and run on Disco (in a child process: an error inside Disco aborts it).

Every case gets one class (the worst over its device counts):

  WRONG-NUMBER     results differ and nothing complained (or the simulator found replicas
                   that disagree): the worst outcome
  CRASH            an exception that is not a distir.errors.DistirError (or a timeout, or
                   the Disco process died): a bug
  SLOW             with --time-limit: the case used more CPU time than the limit (a few hundred
                   bytes of program should never keep a CPU busy); named after the stage it was in
  COST-MISMATCH    numbers fine, but the simulator's bytes differ from the cost model's
  SUSPECT-REFUSAL  a DistirError: distir computes every layout at every device count, so a
                   refusal may be a bug (listed, not fatal)
  CLEAN-REFUSAL    a DistirError that is a documented limitation (KNOWN_LIMITATIONS)
  OK               the numbers are equal
  INVALID          the generator wrote a program the parser or the single-device
                   interpreter rejects (the generator's fault; should stay near zero)

Failures (all but OK, CLEAN-REFUSAL and INVALID) are shrunk to a small reproducer (fewer
bindings and outputs, smaller shapes and device counts, fewer mesh axes, simpler layouts)
and written to --out as IR text, with a header giving the class, the message and the
command lines that reproduce it. The exit status is 1 when a WRONG-NUMBER, a CRASH or a SLOW
case was found, else 0.

examples:
  python scripts/fuzz.py --cases 500 --seed 1            500 cases, then a summary
  python scripts/fuzz.py --minutes 10 --jobs 2           ten minutes on two processes
  python scripts/fuzz.py --cases 50 --tvm                also build with TVM, run on Disco
  python scripts/fuzz.py --minutes 10 --strided --axis-costs   strided shards, plans by time
  python scripts/fuzz.py --minutes 10 --blocks --cross --time-limit 10   block layouts, two meshes, SLOW cases
  python scripts/fuzz.py --seed 1 --only 37              re-run case 37 of seed 1, verbosely
  python scripts/fuzz.py --replay fuzz-out/wrong-1.ir    re-run a written reproducer
  python scripts/fuzz.py --seed 1 --only 37 --print      print the program of a case

Run from the repository root with the package importable (pip install -e . or
PYTHONPATH=python).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import re
import signal
import sys
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import ClassVar

NW = "num_workers"

# ----------------------------------------------------------------------------- program model


@dataclass(frozen=True)
class Lin:
    """``a + b * num_workers`` (device-id bounds of a mesh)."""

    a: int
    b: int = 0

    def at(self, w: int) -> int:
        return self.a + self.b * w

    def __add__(self, other: Lin) -> Lin:
        return Lin(self.a + other.a, self.b + other.b)

    def text(self) -> str:
        if self.b == 0:
            return str(self.a)
        s = NW if self.b == 1 else f"{self.b} * {NW}"
        if self.a:
            s += f" + {self.a}"
        return f'"{s}"'


@dataclass(frozen=True)
class Mesh:
    """A device mesh: axis sizes (ints, or NW for the one symbolic axis), and its devices:
    a range from ``start`` or an explicit list ``ids`` (static meshes only)."""

    shape: tuple
    start: Lin = Lin(0)
    ids: tuple | None = None

    @property
    def symbolic(self) -> bool:
        return NW in self.shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def sizes(self, w: int) -> tuple[int, ...]:
        return tuple(w if d == NW else d for d in self.shape)

    def static_product(self) -> int:
        n = 1
        for d in self.shape:
            if d != NW:
                n *= d
        return n

    def size(self) -> Lin:
        c = self.static_product()
        return Lin(0, c) if self.symbolic else Lin(c)

    def devices(self, w: int) -> list[int]:
        if self.ids is not None:
            return list(self.ids)
        start, n = self.start.at(w), self.size().at(w)
        return list(range(start, start + n))

    def render(self) -> str:
        dims = ", ".join(f'"{d}"' if d == NW else str(d) for d in self.shape)
        shape = f"({dims},)" if len(self.shape) == 1 else f"({dims})"
        if self.ids is not None:
            return f"R.device_mesh({shape}, [{', '.join(map(str, self.ids))}])"
        return f"R.device_mesh({shape}, I.Range({self.start.text()}, {(self.start + self.size()).text()}))"

    def describe(self) -> str:
        kind = "symbolic" if self.symbolic else "static"
        if self.ids is not None:
            order = "in order" if list(self.ids) == sorted(self.ids) else "out of order"
            return f"{kind} {len(self.shape)}-D list {order}"
        return f"{kind} {len(self.shape)}-D range" + (" not from 0" if self.start != Lin(0) else "")


# A dim is an int or (k, name): k * name, a size bound at run time.


def dim_text(d, quoted: bool) -> str:
    if isinstance(d, int):
        return str(d)
    k, name = d
    s = name if k == 1 else f"{name} * {k}"
    return f'"{s}"' if quoted else s


def dim_value(d, dims: dict) -> int:
    return d if isinstance(d, int) else d[0] * dims[d[1]]


def shape_text(shape, quoted=True) -> str:
    inner = ", ".join(dim_text(d, quoted) for d in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Tup:
    names: tuple


@dataclass(frozen=True)
class Raw:
    text: str


@dataclass(frozen=True)
class MeshRef:
    index: int


@dataclass(frozen=True)
class Pl:
    specs: tuple

    def text(self) -> str:
        return ", ".join(self.specs)


@dataclass(frozen=True)
class ShapeLit:
    dims: tuple


def _attr_text(v) -> str:
    if isinstance(v, MeshRef):
        return f'"mesh[{v.index}]"'
    if isinstance(v, Pl):
        return f'"{v.text()}"'
    if isinstance(v, ShapeLit):
        return "R.shape([" + ", ".join(dim_text(d, False) for d in v.dims) + "])"
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_attr_text(x) for x in v) + "]"
    return repr(v)


@dataclass(frozen=True)
class Param:
    name: str
    shape: tuple
    dtype: str
    mesh: int | None = None
    placement: Pl | None = None

    def render(self) -> str:
        if self.placement is None:
            return f'{self.name}: R.Tensor({shape_text(self.shape)}, "{self.dtype}")'
        return f'{self.name}: R.DTensor({shape_text(self.shape)}, "{self.dtype}", "mesh[{self.mesh}]", "{self.placement.text()}")'


@dataclass(frozen=True)
class Bind:
    """``var = op(args..., key=value...)``; op "item" is ``var = t[index]``."""

    var: str
    op: str
    args: tuple
    kwargs: tuple = ()

    def refs(self) -> list[str]:
        out = []
        for a in self.args:
            if isinstance(a, Ref):
                out.append(a.name)
            elif isinstance(a, Tup):
                out.extend(a.names)
        return out

    def kw(self, key, default=None):
        for k, v in self.kwargs:
            if k == key:
                return v
        return default

    def render(self) -> str:
        if self.op == "item":
            return f"{self.var} = {self.args[0].name}[{self.kw('index')}]"
        parts = []
        for a in self.args:
            if isinstance(a, Ref):
                parts.append(a.name)
            elif isinstance(a, Tup):
                parts.append("(" + ", ".join(a.names) + ("," if len(a.names) == 1 else "") + ")")
            else:
                parts.append(_attr_text(a))
        parts += [f"{k}={_attr_text(v)}" for k, v in self.kwargs]
        return f"{self.var} = {self.op}({', '.join(parts)})"

    def rename(self, mapping: dict) -> Bind:
        def r(a):
            if isinstance(a, Ref):
                return Ref(mapping.get(a.name, a.name))
            if isinstance(a, Tup):
                return Tup(tuple(mapping.get(n, n) for n in a.names))
            return a

        return replace(self, args=tuple(r(a) for a in self.args))


@dataclass(frozen=True)
class Program:
    meshes: tuple
    params: tuple
    binds: tuple
    outputs: tuple
    dims: tuple = ()  # (("s", 7), ...): sizes bound at run time
    costs: str = ""  # per-mesh-axis time costs the pipeline plans with ("0=5us:25GB/s,1=..."); "" plans by bytes
    values: str = ""  # "extreme": inputs reach each dtype's range (--dtypes); "": distir.driver.random_inputs

    @property
    def dim_values(self) -> dict:
        return dict(self.dims)

    def render(self) -> str:
        meshes = ", ".join(m.render() for m in self.meshes)
        params = ", ".join(p.render() for p in self.params)
        lines = [
            "@I.ir_module",
            "class Module:",
            f'    I.module_global_infos({{"mesh": [{meshes}]}})',
            "",
            "    @R.function",
            f"    def main({params}):",
        ]
        bound = {b.var for b in self.binds}
        if self.binds:
            lines.append("        with R.dataflow():")
            lines += [f"            {b.render()}" for b in self.binds]
            outs = [o for o in dict.fromkeys(self.outputs) if o in bound]
            lines.append(f"            R.output({', '.join(outs)})")
        ret = self.outputs[0] if len(self.outputs) == 1 else "(" + ", ".join(self.outputs) + ")"
        lines.append(f"        return {ret}")
        return "\n".join(lines) + "\n"

    def uses_workers(self) -> bool:
        return any(m.symbolic for m in self.meshes)


@dataclass(frozen=True)
class Case:
    program: Program
    workers: tuple  # num_workers values to specialize to
    seed: int  # seed of the random inputs and of the partial splits
    origin: str = ""  # how to regenerate it: "--seed S --only I [generator options]"

    @property
    def text(self) -> str:
        return self.program.render()


# ----------------------------------------------------------------------------- generator

SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24]
SIZE_WEIGHTS = [3, 5, 4, 7, 2, 5, 2, 8, 5, 5, 3]
DYN_VALUES = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16]
DYN_WEIGHTS = [1, 3, 2, 4, 1, 3, 2, 4, 3, 2]
SYM_MESHES = [(NW,)] * 4 + [(2, NW), (NW, 2), (3, NW), (2, NW, 2), (NW, 2, 1), (1, NW, 2)]
STATIC_MESHES = [(1,), (2,), (2,), (3,), (4,), (4,), (5,), (8,), (2, 2), (2, 3), (3, 2), (1, 4), (4, 1), (2, 4),
                 (2, 2, 2), (1, 2, 2), (2, 1, 3)]
UNARY_FLOAT = ["R.tanh", "R.exp", "R.sigmoid", "R.nn.relu", "R.negative", "R.abs", "R.square", "R.nn.gelu", "R.nn.silu"]
UNARY_INT = ["R.negative", "R.abs", "R.square", "R.nn.relu"]
BINARY = ["R.add", "R.add", "R.subtract", "R.multiply", "R.maximum", "R.minimum"]
PARTIALS = ["P", "P[max]", "P[min]", "P[avg]"]
# with --strided (the lists above stay as they were, so a seed without it gives the cases it gave)
MORE_STATIC_MESHES = [(6,), (7,), (3,), (5,), (2, 3), (3, 3), (1, 6), (6, 1)]
LATENCIES = ["0.1us", "1us", "5us", "20us", "100us", "1ms"]
BANDWIDTHS = ["1GB/s", "10GB/s", "25GB/s", "100GB/s", "300GB/s", "2TB/s"]
# with --blocks: block layouts B[...] (docs/blocks.md) on tensors up to the sizes whose pricing once
# took seconds (issue 22: (80, 80) and (160, 160) "B[1, 1]" -> "B[2, 3]")
BLOCK_DIMS = [1, 2, 3, 5, 7, 8, 12, 16, 33, 64, 100, 160]
BLOCK_DIM_WEIGHTS = [2, 4, 4, 3, 3, 4, 3, 3, 2, 2, 1, 1]
# with --cross: pairs of meshes a value moves between (pipeline stages, or the same devices in
# another grid), e.g. issue 22's (num_workers, 2) -> (2, num_workers, 3) over shared devices
CROSS_MESHES = [((NW, 2), (2, NW, 3)), ((NW,), (NW,)), ((2, NW), (NW, 2)), ((3, NW), (NW,)), ((NW, 2), (2, 2)),
                ((NW,), (2, NW)), ((2, NW, 2), (NW, 4)), ((2, 3), (3, 2)), ((4,), (2, 2, 1)), ((NW, 3), (3, NW))]


def _strided_dims(shape) -> list[tuple[int, int]]:
    """(dim, parts) pairs a strided shard S[dim/parts] may take: parts divides the dim (a static
    size, or the coefficient of a run-time size) and leaves more than one element per part."""
    out = []
    for d, n in enumerate(shape):
        if isinstance(n, int):
            out += [(d, k) for k in _divisors(n)]
        else:
            out += [(d, k) for k in [*_divisors(n[0]), n[0]] if k >= 2 and n[0] % k == 0]
    return out


@dataclass
class Val:
    name: str
    shape: tuple
    dtype: str
    mesh: int
    dtensor: bool = False  # known to be typed as a DTensor


def _static(shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def _divisors(n: int) -> list[int]:
    return [k for k in range(2, n) if n % k == 0]


@dataclass(frozen=True)
class GenConfig:
    """What cases look like. The defaults are the test suite's slice."""

    workers: tuple = tuple(range(1, 9))  # num_workers values to draw from
    counts: int = 3  # device counts per case
    max_ops: int = 8
    max_devices: int = 16  # most simulated devices (1 + the largest device id)
    even_only: bool = False  # only counts at which every stated layout divides evenly
    lists: str = "any"  # explicit device lists: any (out of order, gaps), ordered (ascending), none
    strided: bool = False  # strided shards S[d/k] (parameters, hints, redistributes, fused-QKV chains)
    costs: bool = False  # sometimes plan by time with random per-mesh-axis costs (meshes of 2 or more axes)
    blocks: bool = False  # block layouts B[...]: parameters, hints, redistributes, ops that keep the chunks
    cross: bool = False  # two meshes in every program (often sharing devices), values moved between them
    dtypes: bool = False  # dtype-directed programs and inputs (DtypeGenerator)

    def flags(self) -> str:
        """The command-line options that give this configuration (the defaults omitted)."""
        d = GenConfig()
        out = []
        if self.workers != d.workers:
            out.append("--workers " + ",".join(map(str, self.workers)))
        for name, flag in (("counts", "--counts-per-case"), ("max_ops", "--max-ops"), ("max_devices", "--max-devices")):
            if getattr(self, name) != getattr(d, name):
                out.append(f"{flag} {getattr(self, name)}")
        if self.even_only:
            out.append("--even-only")
        if self.lists != d.lists:
            out.append(f"--device-lists {self.lists}")
        out += [flag for name, flag in (("blocks", "--blocks"), ("cross", "--cross")) if getattr(self, name)]
        if self.strided:
            out.append("--strided")
        if self.costs:
            out.append("--axis-costs")
        if self.dtypes:
            out.append("--dtypes")
        return " ".join(out)


class Generator:
    """One random program per call of :meth:`program` (deterministic given the rng)."""

    def __init__(self, rng: random.Random, cfg: GenConfig | None = None):
        self.rng = rng
        self.cfg = cfg or GenConfig()
        self.max_ops = self.cfg.max_ops

    # -- meshes

    def _mesh_list(self, n: int, start: int) -> tuple:
        r = self.rng
        if r.random() < 0.6:
            ids = list(range(start, start + n))
        else:
            ids = r.sample(range(n + 3), n)
            ids.sort()
        if n > 1 and r.random() < 0.7 and self.cfg.lists == "any":
            while ids == sorted(ids):
                r.shuffle(ids)
        return tuple(ids)

    def _static_mesh(self, start: int) -> Mesh:
        r = self.rng
        shape = r.choice(STATIC_MESHES + (MORE_STATIC_MESHES if self.cfg.strided else []))
        n = 1
        for d in shape:
            n *= d
        if r.random() < 0.3 and self.cfg.lists != "none":
            return Mesh(shape, ids=self._mesh_list(n, start))
        return Mesh(shape, Lin(start))

    def meshes(self) -> tuple:
        r = self.rng
        if r.random() < 0.6:
            m0 = Mesh(r.choice(SYM_MESHES), Lin(r.choice([0, 0, 0, 0, 1, 2])))
        else:
            m0 = self._static_mesh(r.choice([0, 0, 0, 1, 2, 3]))
        if r.random() < 0.7:
            return (m0,)
        choice = r.random()
        end = m0.start + m0.size() if m0.ids is None else Lin(max(m0.ids) + 1)
        if m0.symbolic and choice < 0.4:
            m1 = Mesh(m0.shape, end)  # the next pipeline stage, same shape
        elif m0.symbolic and choice < 0.6:
            m1 = Mesh(r.choice(SYM_MESHES), end)
        elif m0.symbolic and choice < 0.7 and m0.ndim == 2 and m0.ids is None:
            m1 = Mesh(tuple(reversed(m0.shape)), m0.start)  # the same devices, another grid
        elif choice < 0.85:
            m1 = self._static_mesh(r.choice([0, 1, 2]))  # may share devices
        else:
            m1 = self._static_mesh(end.a if end.b == 0 else 0)
            if end.b:
                m1 = Mesh(m1.shape, end, None) if m1.ids is None else m1
        return (m0, m1) if r.random() < 0.5 else (m1, m0)

    # -- tensors

    def size(self) -> int:
        return self.rng.choices(SIZES, SIZE_WEIGHTS)[0]

    def shape(self, rank: int | None = None) -> tuple:
        r = self.rng
        if rank is None:
            rank = r.choices([1, 2, 3], [2, 5, 2])[0]
        out = []
        for _ in range(rank):
            if self.dyn_names and r.random() < 0.2:
                out.append((1, r.choice(self.dyn_names)))
            else:
                out.append(self.size())
        return tuple(out)

    def placement(self, mesh: int, shape, partial: bool, dtype: str) -> Pl:
        r = self.rng
        specs = []
        rank = len(shape)
        reduction = r.choice([p for p in PARTIALS if not (p == "P[avg]" and dtype == "int32")])  # one per value
        for _ in range(self.prog_meshes[mesh].ndim):
            x = r.random()
            if x < 0.3 or rank == 0:
                specs.append("R")
            elif partial and x > 0.8:
                specs.append(reduction)
            else:
                dims = [d for d in range(rank) if shape[d] != 1] or list(range(rank))
                if r.random() < 0.1:
                    dims = list(range(rank))
                specs.append(f"S[{r.choice(dims)}]")
        if self.cfg.strided and specs and r.random() < 0.4:
            specs = self._strided(specs, shape)
        return Pl(tuple(specs))

    def _strided(self, specs: list, shape) -> list:
        """One mesh axis's entry becomes S[d/k]; no other axis cuts dim d (a strided dim is cut by
        one mesh axis only)."""
        r = self.rng
        opts = _strided_dims(shape)
        if not opts:
            return specs
        d, k = r.choice(opts)
        ax = r.randrange(len(specs))
        return [f"S[{d}/{k}]" if i == ax else ("R" if s == f"S[{d}]" else s) for i, s in enumerate(specs)]

    def new_param(self, shape, dtype: str, mesh: int, plain_ok: bool = True, placement: Pl | None = None) -> Val:
        name = f"p{len(self.params)}"
        if placement is None and plain_ok and len(self.prog_meshes) == 1 and self.params and self.rng.random() < 0.35:
            p = Param(name, tuple(shape), dtype)
            dt = False
        else:
            p = Param(name, tuple(shape), dtype, mesh, placement or self.placement(mesh, shape, True, dtype))
            self.layouts.append((tuple(shape), mesh, p.placement))
            dt = True
        self.params.append(p)
        v = Val(name, tuple(shape), dtype, mesh, dt)
        self.vals.append(v)
        return v

    # -- helpers

    def fresh(self, prefix="v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def pick(self, pred=lambda v: True) -> Val | None:
        cands = [v for v in self.vals if pred(v)]
        if not cands:
            return None
        weights = [1.6 ** i for i in range(len(cands))]
        return self.rng.choices(cands, weights)[0]

    def emit(self, op, args, kwargs=(), shape=None, dtype=None, mesh=0, dtensor=False, var=None) -> Val:
        var = var or self.fresh()
        self.binds.append(Bind(var, op, tuple(args), tuple(kwargs)))
        v = Val(var, tuple(shape), dtype, mesh, dtensor)
        self.vals.append(v)
        self.produced.append(v)
        return v

    def dtensor_names(self) -> set:
        """Names whose parsed type is a DTensor (parses the program so far)."""
        import distir
        from distir.ir.types import DTensorType

        if not self.binds:
            return {v.name for v in self.vals if v.dtensor}
        prog = Program(tuple(self.prog_meshes), tuple(self.params), tuple(self.binds), (self.binds[-1].var,))
        try:
            f = distir.parse(prog.render())["main"]
        except Exception:  # noqa: BLE001  (the generator's own check: fall back to what it knows)
            return {v.name for v in self.vals if v.dtensor}
        names = {p.name for p in f.params if isinstance(p.type, DTensorType)}
        names |= {b.var.name for b in f.bindings() if isinstance(b.var.type, DTensorType)}
        return names

    # -- ops

    def op_unary(self, a: Val):
        ops = UNARY_INT if a.dtype == "int32" else UNARY_FLOAT
        return self.emit(self.rng.choice(ops), [Ref(a.name)], shape=a.shape, dtype=a.dtype, mesh=a.mesh)

    def op_binary(self, a: Val):
        r = self.rng
        op = r.choice(BINARY)
        if r.random() < 0.12:
            c = "R.const(2, \"int32\")" if a.dtype == "int32" else f'R.const({r.choice([0.5, -1.5, 2.0])}, "{a.dtype}")'
            return self.emit(op, [Ref(a.name), Raw(c)], shape=a.shape, dtype=a.dtype, mesh=a.mesh)
        same = [v for v in self.vals if v.shape == a.shape and v.dtype == a.dtype and v.mesh == a.mesh]
        if same and r.random() < 0.5:
            b = r.choice(same)
        else:
            shape = list(a.shape)
            x = r.random()
            if x < 0.25 and shape:
                for i in range(len(shape)):
                    if r.random() < 0.5:
                        shape[i] = 1
            elif x < 0.45 and len(shape) > 1:
                shape = shape[r.randint(1, len(shape) - 1):]
            b = self.new_param(tuple(shape), a.dtype, a.mesh)
        args = [Ref(a.name), Ref(b.name)]
        if r.random() < 0.3:
            args.reverse()
        return self.emit(op, args, shape=a.shape, dtype=a.dtype, mesh=a.mesh)

    def op_matmul(self, a: Val):
        r = self.rng
        if a.dtype == "int32" or len(a.shape) < 2:
            return None
        k = a.shape[-1]
        fits = [v for v in self.vals if len(v.shape) == 2 and v.shape[0] == k and v.mesh == a.mesh and v.dtype == a.dtype]
        if fits and r.random() < 0.4:
            b = r.choice(fits)
        elif len(a.shape) == 3 and r.random() < 0.3:
            b = self.new_param((a.shape[0], k, self.size()), a.dtype, a.mesh)
        else:
            b = self.new_param((k, self.size()), a.dtype, a.mesh)
        shape = a.shape[:-1] + (b.shape[-1],)
        return self.emit("R.matmul", [Ref(a.name), Ref(b.name)], [("out_dtype", None)], shape=shape, dtype=a.dtype, mesh=a.mesh)

    def op_reduce(self, a: Val):
        r = self.rng
        ops = ["R.sum", "R.sum", "R.max", "R.min"] + ([] if a.dtype == "int32" else ["R.mean"])
        op = r.choice(ops)
        rank = len(a.shape)
        if rank == 0:
            return None
        keep = r.random() < 0.4
        if r.random() < 0.12:
            axes = None
            shape = tuple(1 for _ in a.shape) if keep else ()
        else:
            axes = sorted(r.sample(range(rank), r.choice([1, 1, 1, 2]) if rank > 1 else 1))
            if r.random() < 0.2:
                axes = [x - rank for x in axes]  # negative axes
            pos = {x % rank for x in axes}
            shape = tuple(1 if i in pos else d for i, d in enumerate(a.shape) if keep or i not in pos)
        return self.emit(op, [Ref(a.name)], [("axis", axes), ("keepdims", keep)], shape=shape, dtype=a.dtype, mesh=a.mesh)

    def op_reshape(self, a: Val):
        r = self.rng
        s = list(a.shape)
        opts = []
        for i in range(len(s) - 1):
            x, y = s[i], s[i + 1]
            if isinstance(x, int) and isinstance(y, int):
                opts.append(s[:i] + [x * y] + s[i + 2:])
            elif isinstance(x, int) != isinstance(y, int):
                k, name = x if not isinstance(x, int) else y
                m = y if isinstance(y, int) else x
                opts.append(s[:i] + [(k * m, name)] + s[i + 2:])
        for i, x in enumerate(s):
            if isinstance(x, int):
                for f in _divisors(x):
                    opts.append(s[:i] + [f, x // f] + s[i + 1:])
                if x > 1 and r.random() < 0.2:
                    opts.append(s[:i] + [1, x] + s[i + 1:])
        if _static(s) and len(s) > 1:
            n = 1
            for x in s:
                n *= x
            opts.append([n])
            if _divisors(n):
                f = r.choice(_divisors(n))
                opts.append([f, n // f])
        if not opts:
            return None
        shape = tuple(r.choice(opts))
        return self.emit("R.reshape", [Ref(a.name), ShapeLit(shape)], shape=shape, dtype=a.dtype, mesh=a.mesh)

    def op_permute(self, a: Val):
        rank = len(a.shape)
        if rank < 2:
            return None
        perm = list(range(rank))
        while perm == sorted(perm):
            self.rng.shuffle(perm)
        shape = tuple(a.shape[i] for i in perm)
        return self.emit("R.permute_dims", [Ref(a.name)], [("axes", perm)], shape=shape, dtype=a.dtype, mesh=a.mesh)

    def op_softmax(self, a: Val):
        if a.dtype == "int32" or not a.shape:
            return None
        rank = len(a.shape)
        axis = -1 if self.rng.random() < 0.6 else self.rng.randrange(-rank, rank)
        op = "R.nn.softmax" if self.rng.random() < 0.8 else "R.nn.log_softmax"
        return self.emit(op, [Ref(a.name)], [("axis", axis)], shape=a.shape, dtype=a.dtype, mesh=a.mesh)

    def op_rms_norm(self, a: Val):
        if a.dtype == "int32" or not a.shape:
            return None
        w = self.new_param((a.shape[-1],), a.dtype, a.mesh)
        return self.emit("R.nn.rms_norm", [Ref(a.name), Ref(w.name)], [("axes", [-1]), ("epsilon", 1e-5)],
                         shape=a.shape, dtype=a.dtype, mesh=a.mesh)

    def op_concat(self, a: Val):
        r = self.rng
        rank = len(a.shape)
        if rank == 0:
            return None
        k = r.randrange(rank)
        d = a.shape[k]
        if r.random() < 0.4 or not isinstance(d, int):
            b = a
            new = 2 * d if isinstance(d, int) else (2 * d[0], d[1])
        else:
            other = self.size()
            shape = a.shape[:k] + (other,) + a.shape[k + 1:]
            b = self.new_param(shape, a.dtype, a.mesh)
            new = d + other
        names = (a.name, b.name) if r.random() < 0.7 else (b.name, a.name)
        shape = a.shape[:k] + (new,) + a.shape[k + 1:]
        return self.emit("R.concat", [Tup(names)], [("axis", k)], shape=shape, dtype=a.dtype, mesh=a.mesh)

    def op_split(self, a: Val):
        r = self.rng
        axes = [i for i, d in enumerate(a.shape) if isinstance(d, int) and d >= 2]
        if not axes:
            return None
        k = r.choice(axes)
        d = a.shape[k]
        secs = [n for n in (2, 3) if d % n == 0]
        if secs and r.random() < 0.6:
            n = r.choice(secs)
            sizes = [d // n] * n
            arg = n
        else:
            cuts = sorted(r.sample(range(1, d), min(d - 1, r.choice([1, 1, 2]))))
            sizes = [b - a_ for a_, b in zip([0] + cuts, cuts + [d])]
            arg = cuts
        t = self.fresh("t")
        self.binds.append(Bind(t, "R.split", (Ref(a.name),), (("indices_or_sections", arg), ("axis", k))))
        picks = r.sample(range(len(sizes)), min(len(sizes), r.choice([1, 2])))
        items = []
        for j in picks:
            shape = a.shape[:k] + (sizes[j],) + a.shape[k + 1:]
            items.append(self.emit("item", [Ref(t)], [("index", j)], shape=shape, dtype=a.dtype, mesh=a.mesh))
        if len(items) == 2 and r.random() < 0.6:
            new = sizes[picks[0]] + sizes[picks[1]]
            shape = a.shape[:k] + (new,) + a.shape[k + 1:]
            return self.emit("R.concat", [Tup((items[0].name, items[1].name))], [("axis", k)], shape=shape,
                             dtype=a.dtype, mesh=a.mesh)
        return items[-1]

    def op_expand_squeeze(self, a: Val):
        r = self.rng
        ones = [i for i, d in enumerate(a.shape) if d == 1]
        if ones and r.random() < 0.5:
            i = r.choice(ones)
            shape = a.shape[:i] + a.shape[i + 1:]
            return self.emit("R.squeeze", [Ref(a.name)], [("axis", [i])], shape=shape, dtype=a.dtype, mesh=a.mesh)
        i = r.randint(0, len(a.shape))
        shape = a.shape[:i] + (1,) + a.shape[i:]
        return self.emit("R.expand_dims", [Ref(a.name)], [("axis", i)], shape=shape, dtype=a.dtype, mesh=a.mesh)

    def op_slice(self, a: Val):
        r = self.rng
        axes = [i for i, d in enumerate(a.shape) if isinstance(d, int) and d >= 2]
        if not axes:
            return None
        k = r.choice(axes)
        d = a.shape[k]
        b = r.randrange(0, d)
        e = r.randint(b + 1, d)
        if r.random() < 0.3:
            b, e = 0, d  # a slice covering the dim
        st = r.choice([None, None, None, [2]])
        step = st[0] if st else 1
        n = len(range(b, e, step))
        shape = a.shape[:k] + (n,) + a.shape[k + 1:]
        kw = [("axes", [k]), ("begin", [b]), ("end", [e]), ("strides", st), ("assume_inbound", False)]
        return self.emit("R.strided_slice", [Ref(a.name)], kw, shape=shape, dtype=a.dtype, mesh=a.mesh)

    def op_astype(self, a: Val):
        if a.dtype == "int32":
            return None
        to = "float64" if a.dtype == "float32" else "float32"
        return self.emit("R.astype", [Ref(a.name)], [("dtype", to)], shape=a.shape, dtype=to, mesh=a.mesh)

    def op_layer_norm(self, a: Val):
        if a.dtype == "int32" or not a.shape:
            return None
        g = self.new_param((a.shape[-1],), a.dtype, a.mesh)
        b = self.new_param((a.shape[-1],), a.dtype, a.mesh)
        kw = [("axes", [-1]), ("epsilon", 1e-5), ("center", True), ("scale", True)]
        return self.emit("R.nn.layer_norm", [Ref(a.name), Ref(g.name), Ref(b.name)], kw, shape=a.shape, dtype=a.dtype,
                         mesh=a.mesh)

    def op_constant(self, a: Val):
        """A tensor made from constants (the same on every worker), maybe masked, combined with ``a``."""
        r = self.rng
        if not a.shape or not _static(a.shape) or a.dtype == "int32":
            return None
        fill = Raw(f'R.const({r.choice([1.0, -0.5, 2.0])}, "{a.dtype}")')
        c = self.emit("R.full", [ShapeLit(a.shape), fill], [("dtype", a.dtype)], shape=a.shape, dtype=a.dtype, mesh=a.mesh)
        self.produced.remove(c)
        self.vals.remove(c)  # only combined with a tensor laid out somewhere (a hint on it is an error)
        if len(a.shape) >= 2 and r.random() < 0.6:
            c = self.emit(r.choice(["R.triu", "R.tril"]), [Ref(c.name)], [("k", r.choice([0, 1, -1]))], shape=a.shape,
                          dtype=a.dtype, mesh=a.mesh)
            self.produced.remove(c)
            self.vals.remove(c)
        args = [Ref(a.name), Ref(c.name)]
        if r.random() < 0.3:
            args.reverse()
        return self.emit(r.choice(["R.add", "R.multiply"]), args, shape=a.shape, dtype=a.dtype, mesh=a.mesh)

    def op_hint(self, a: Val):
        pl = self.placement(a.mesh, a.shape, False, a.dtype)
        self.layouts.append((a.shape, a.mesh, pl))
        return self.emit("R.dist.annotate_sharding", [Ref(a.name)], [("device_mesh", MeshRef(a.mesh)), ("placement", pl)],
                         shape=a.shape, dtype=a.dtype, mesh=a.mesh)

    def op_redistribute(self, a: Val, cross: bool = False):
        r = self.rng
        names = {v.name for v in self.vals if v.dtensor}
        if r.random() < 0.6:
            names = self.dtensor_names()
            for v in self.vals:
                v.dtensor = v.dtensor or v.name in names
        if a.name not in names:
            a = self.pick(lambda v: v.name in names)
            if a is None:
                return None
        v = a
        for _ in range(r.choice([1, 1, 2, 3])):
            mesh = v.mesh
            if cross and len(self.prog_meshes) > 1:
                mesh = r.choice([i for i in range(len(self.prog_meshes)) if i != v.mesh])
                cross = False
            pl = self.placement(mesh, v.shape, r.random() < 0.5, v.dtype)
            self.layouts.append((v.shape, mesh, pl))
            v = self.emit("R.dist.redistribute", [Ref(v.name)], [("device_mesh", MeshRef(mesh)), ("placement", pl)],
                          shape=v.shape, dtype=v.dtype, mesh=mesh, dtensor=True)
        return v

    def op_qkv(self, a: Val):
        """The fused-QKV chain strided shards are for (docs/strided.md): ``a @ w`` with ``w`` of
        ``parts * heads * head_dim`` columns, declared or hinted ``S[1/parts]`` (or free, the heads
        hinted), reshaped to ``(..., parts, heads, head_dim)``, maybe an elementwise op, maybe
        merged back; the sizes include 1 and sizes below or not dividing the device count."""
        r = self.rng
        if a.dtype == "int32" or len(a.shape) < 2:
            return None
        m = self.prog_meshes[a.mesh]
        parts = r.choice([2, 3, 3, 4])
        heads = r.choice([1, 2, 3, 4, 5, 6, 7, 8])
        hd = r.choice([1, 2, 3, 4, 8])
        cols = parts * heads * hd
        how = r.random()
        wshape = (a.shape[-1], cols)
        if how < 0.45 and heads * hd > 1:
            specs = ["R"] * m.ndim
            specs[r.randrange(m.ndim)] = f"S[1/{parts}]"
            if m.ndim > 1 and r.random() < 0.5:
                i = r.choice([i for i, s in enumerate(specs) if s == "R"])
                specs[i] = r.choice(["S[0]", "P", "R"])
            w = self.new_param(wshape, a.dtype, a.mesh, placement=Pl(tuple(specs)))
        else:
            w = self.new_param(wshape, a.dtype, a.mesh)
            if how < 0.7 and heads * hd > 1:
                specs = ["R"] * m.ndim
                specs[r.randrange(m.ndim)] = f"S[1/{parts}]"
                pl = Pl(tuple(specs))
                self.layouts.append((wshape, a.mesh, pl))
                w = self.emit("R.dist.annotate_sharding", [Ref(w.name)], [("device_mesh", MeshRef(a.mesh)),
                              ("placement", pl)], shape=wshape, dtype=a.dtype, mesh=a.mesh)
        y = self.emit("R.matmul", [Ref(a.name), Ref(w.name)], [("out_dtype", None)], shape=a.shape[:-1] + (cols,),
                      dtype=a.dtype, mesh=a.mesh)
        if r.random() < 0.5:
            y = self.op_unary(y) if r.random() < 0.5 else self.op_binary(y)
        lead = y.shape[:-1]
        split = lead + (parts, heads, hd) if r.random() < 0.7 else lead + (parts, heads * hd)
        z = self.emit("R.reshape", [Ref(y.name), ShapeLit(split)], shape=split, dtype=a.dtype, mesh=a.mesh)
        if r.random() < 0.5:
            specs = ["R"] * m.ndim
            specs[r.randrange(m.ndim)] = f"S[{len(lead) + 1}]"
            pl = Pl(tuple(specs))
            self.layouts.append((split, a.mesh, pl))
            z = self.emit("R.dist.annotate_sharding", [Ref(z.name)], [("device_mesh", MeshRef(a.mesh)),
                          ("placement", pl)], shape=split, dtype=a.dtype, mesh=a.mesh)
        if r.random() < 0.5:
            z = self.op_unary(z)
        if r.random() < 0.5:
            z = self.emit("R.reshape", [Ref(z.name), ShapeLit(y.shape)], shape=y.shape, dtype=a.dtype, mesh=a.mesh)
        return z

    # -- block layouts and moves between meshes (--blocks, --cross)

    def cross_meshes(self) -> tuple:
        """Two meshes a value moves between: the same devices in another grid, overlapping ranges, or
        the next pipeline stage; a static pair may list its devices."""
        r = self.rng
        a, b = r.choice(CROSS_MESHES)
        if r.random() < 0.5:
            a, b = b, a
        m0 = Mesh(a, Lin(r.choice([0, 0, 1])))
        how = r.random()
        if how < 0.45:
            m1 = Mesh(b, m0.start)  # shares devices from the first
        elif how < 0.7:
            m1 = Mesh(b, m0.start + Lin(r.choice([1, 2]), 0))  # shares all but a few
        else:
            m1 = Mesh(b, m0.start + m0.size())  # the next stage
        if NW not in a + b and self.cfg.lists != "none" and r.random() < 0.3:
            m1 = Mesh(b, ids=self._mesh_list(m1.static_product(), m1.start.a))
        return (m0, m1)

    def block_placement(self, shape) -> Pl:
        """``B[...]``: per dim a shard size from 1 to one past the dim; a run-time dim whole or in small chunks."""
        r = self.rng
        sizes = []
        for d in shape:
            if isinstance(d, int):
                sizes.append(str(r.choice(sorted({1, 2, 3, max(1, d // 2), d, d + 1}))))
            else:
                sizes.append(d[1] if d[0] == 1 and r.random() < 0.4 else str(r.choice([1, 2, 3, 4])))
        return Pl((f"B[{', '.join(sizes)}]",))

    def block_shape(self) -> tuple:
        r = self.rng
        rank = r.choices([1, 2, 3], [2, 5, 2])[0]
        return tuple((1, r.choice(self.dyn_names)) if self.dyn_names and r.random() < 0.3
                     else r.choices(BLOCK_DIMS, BLOCK_DIM_WEIGHTS)[0] for _ in range(rank))

    def op_block(self, a: Val):
        """A block layout on a value (a new parameter laid out so, or a redistribute or hint to one),
        then maybe ops that keep the chunks (elementwise, reductions) and a conversion to another
        block shape or to R / S / P on the same mesh (a block layout does not move between meshes)."""
        r = self.rng
        if r.random() < 0.35 or not a.shape:
            shape = self.block_shape()
            v = self.new_param(shape, a.dtype, a.mesh, placement=self.block_placement(shape))
        else:
            names = self.dtensor_names()
            for x in self.vals:
                x.dtensor = x.dtensor or x.name in names
            v = self._lay_out(a, self.block_placement(a.shape))
        for _ in range(r.choice([0, 1, 1, 2])):
            x = r.random()
            if x < 0.4:
                v = self.op_unary(v)
            elif x < 0.7:
                ops = ["R.maximum", "R.minimum"] if v.dtype == "bool" else BINARY  # numpy subtracts no bools
                v = self.emit(r.choice(ops), [Ref(v.name), Ref(v.name)], shape=v.shape, dtype=v.dtype, mesh=v.mesh)
            else:
                v = self.op_reduce(v) or v
        if v.shape and r.random() < 0.6:
            names = self.dtensor_names()
            v.dtensor = v.dtensor or v.name in names
            pl = self.block_placement(v.shape) if r.random() < 0.4 else self.placement(v.mesh, v.shape, True, v.dtype)
            v = self._lay_out(v, pl)
        return v

    def _lay_out(self, a: Val, pl: Pl) -> Val:
        """``a`` redistributed to ``pl`` on its mesh (a hint when ``a`` is not known to be a DTensor)."""
        self.layouts.append((a.shape, a.mesh, pl))
        op = "R.dist.redistribute" if a.dtensor else "R.dist.annotate_sharding"
        return self.emit(op, [Ref(a.name)], [("device_mesh", MeshRef(a.mesh)), ("placement", pl)], shape=a.shape,
                         dtype=a.dtype, mesh=a.mesh, dtensor=a.dtensor)

    def _more_ops(self, ops: dict) -> dict:
        """The op weights with --blocks (block layouts) and --cross (more moves between the meshes)."""
        if self.cfg.blocks:
            ops = dict(ops, block=14)
        if self.cfg.cross:
            ops = dict(ops, cross=24)
        return ops

    OPS: ClassVar[dict] = {
        "redistribute": 16, "cross": 8, "hint": 10, "unary": 8, "binary": 12, "matmul": 9, "reduce": 8,
        "reshape": 6, "permute": 5, "softmax": 4, "rms_norm": 2, "concat": 4, "split": 4, "expand": 2, "slice": 3,
        "astype": 2, "layer_norm": 1, "constant": 3,
    }

    def program(self) -> Program:
        r = self.rng
        self.counter = 0
        self.params, self.binds, self.vals, self.produced, self.layouts = [], [], [], [], []
        self.prog_meshes = list(self.cross_meshes() if self.cfg.cross else self.meshes())
        nmesh = len(self.prog_meshes)
        self.dyn_names = []
        dims = []
        if r.random() < (0.8 if self.cfg.blocks or self.cfg.cross else 0.4):
            self.dyn_names.append("s")
            if r.random() < 0.2:
                self.dyn_names.append("t")
        for name in self.dyn_names:
            dims.append((name, r.choices(DYN_VALUES, DYN_WEIGHTS)[0]))
        dtype = self.program_dtype()
        for i in range(r.choice([1, 1, 2, 2, 3])):
            self.new_param(self.shape(), dtype, r.randrange(nmesh), plain_ok=(i > 0))
        ops = dict(self.OPS, qkv=8) if self.cfg.strided else self.OPS
        ops = self._more_ops(ops)
        kinds = list(ops)
        weights = [ops[k] if (k != "cross" or nmesh > 1) else 0 for k in kinds]
        n_ops = r.randint(1, self.max_ops)
        tries = 0
        while len(self.produced) < n_ops and tries < 4 * n_ops:
            tries += 1
            kind = r.choices(kinds, weights)[0]
            a = self.pick()
            fn = {
                "redistribute": self.op_redistribute, "cross": lambda v: self.op_redistribute(v, cross=True),
                "hint": self.op_hint, "unary": self.op_unary, "binary": self.op_binary, "matmul": self.op_matmul,
                "reduce": self.op_reduce, "reshape": self.op_reshape, "permute": self.op_permute,
                "softmax": self.op_softmax, "rms_norm": self.op_rms_norm, "concat": self.op_concat,
                "split": self.op_split, "expand": self.op_expand_squeeze, "slice": self.op_slice,
                "astype": self.op_astype, "layer_norm": self.op_layer_norm, "constant": self.op_constant,
                "qkv": self.op_qkv, "block": self.op_block,
            }[kind]
            fn(a)
        if not self.produced:
            self.op_unary(self.vals[0]) if self.vals[0].dtype != "int32" else self.op_reduce(self.vals[0])
        last = self.produced[-1]
        others = [v.name for v in self.produced[:-1] if v.name != last.name]
        outs = r.sample(others, min(len(others), r.choice([0, 0, 1, 2]))) + [last.name]
        costs = ""
        if self.cfg.costs and min(m.ndim for m in self.prog_meshes) >= 2 and r.random() < 0.6:
            costs = ",".join(f"{ax}={r.choice(LATENCIES)}:{r.choice(BANDWIDTHS)}" for ax in range(2))
        return Program(tuple(self.prog_meshes), tuple(self.params), tuple(self.binds), tuple(outs), tuple(dims), costs)

    def program_dtype(self) -> str:
        return self.rng.choices(["float32", "float64", "int32"], [8, 1, 1])[0]

    def divides(self, prog: Program, w: int) -> bool:
        """Whether every layout the generator stated cuts its dims evenly at num_workers=w."""
        dims = prog.dim_values
        for shape, m, pl in self.layouts:
            sizes = prog.meshes[m].sizes(w)
            for d, dim in enumerate(shape):
                n, parts = 1, 1
                for ax, spec in enumerate(pl.specs):
                    if spec == f"S[{d}]":
                        n *= sizes[ax]
                    elif spec.startswith(f"S[{d}/"):
                        n, parts = n * sizes[ax], int(spec[len(f"S[{d}/"):-1])
                if (dim_value(dim, dims) // parts) % n:
                    return False
        return True


def max_device(program: Program, w: int) -> int:
    return max(max(m.devices(w)) for m in program.meshes) + 1


def generate_case(seed: int, index: int, cfg: GenConfig | None = None) -> Case:
    """Case ``index`` of run ``seed``: the same program on every machine and run.

    Device counts are drawn alike whether or not the stated layouts divide (distir computes
    uneven blocks too); with even_only, only counts at which every stated layout divides.
    """
    cfg = cfg or GenConfig()
    workers = list(cfg.workers)
    rng = random.Random(f"distir-fuzz:{seed}:{index}")
    gen = (DtypeGenerator if cfg.dtypes else Generator)(rng, cfg)
    for attempt in range(50):
        prog = gen.program()
        fits = [w for w in workers if max_device(prog, w) <= cfg.max_devices]
        if not fits:
            continue
        if not cfg.even_only or any(gen.divides(prog, w) for w in fits):
            break
    if not fits:
        fits = [min(workers)]
    if cfg.even_only:
        fits = [w for w in fits if gen.divides(prog, w)] or fits
    if not prog.uses_workers():
        ws = (fits[0],)
    else:
        k = min(cfg.counts, len(fits))
        ws = tuple(sorted(rng.sample(fits, k)))
    flags = cfg.flags()
    return Case(prog, ws, rng.randrange(1000), origin=f"--seed {seed} --only {index}" + (f" {flags}" if flags else ""))


# ----------------------------------------------------------------------------- dtype-directed cases (--dtypes)

# what bools combine by (numpy's bool results: or, and; subtract, divide and power are type errors)
BOOL_BINARY = ["R.maximum", "R.minimum", "R.add", "R.multiply"]
DIRECTED_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "bool", "float16", "bfloat16", "float32", "float64"]
DIRECTED_WEIGHTS = [3, 2, 2, 3, 3, 3, 2, 2, 1, 1]  # mostly the dtypes the default generator never draws
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
COMPARE = ["R.less", "R.greater_equal", "R.equal", "R.not_equal"]


class DtypeGenerator(Generator):
    """Programs on every dtype (--dtypes): integers of every width, unsigned, bool and half floats,
    partial placements of every kind the dtype holds (distir.ir.combine), integer means and
    products, comparisons that make bools, casts between any two dtypes; the inputs reach each
    dtype's range (:func:`extreme_inputs`) and integer and bool results are compared exactly.
    Ops that need floats are not drawn for other dtypes."""

    def program_dtype(self) -> str:
        return self.rng.choices(DIRECTED_DTYPES, DIRECTED_WEIGHTS)[0]

    def program(self) -> Program:
        return replace(super().program(), values="extreme")

    def placement(self, mesh: int, shape, partial: bool, dtype: str) -> Pl:
        from distir.ir.combine import partial_refusal

        pl = super().placement(mesh, shape, partial, dtype)
        held = [p for p in PARTIALS if partial_refusal(p[2:-1] if "[" in p else "sum", dtype) is None]
        swap = {p: p if p in held else self.rng.choice(held) for p in PARTIALS}  # one kind per value stays one
        return Pl(tuple(swap.get(s, s) for s in pl.specs))

    def _float(self, a: Val) -> bool:
        return a.dtype in FLOAT_DTYPES

    def op_unary(self, a: Val):
        if a.dtype == "bool":
            return self.op_astype(a)
        return self.emit(self.rng.choice(UNARY_FLOAT if self._float(a) else UNARY_INT), [Ref(a.name)], shape=a.shape,
                         dtype=a.dtype, mesh=a.mesh)

    def op_binary(self, a: Val):
        r = self.rng
        if r.random() < 0.25 and (not self._float(a) or self._exact_float(a)):
            # a comparison: a bool from numbers or bools (of floats, only of exact ones: see op_astype)
            same = [v for v in self.vals if v.shape == a.shape and v.dtype == a.dtype and v.mesh == a.mesh
                    and (not self._float(v) or self._exact_float(v))]
            b = r.choice(same)
            return self.emit(r.choice(COMPARE), [Ref(a.name), Ref(b.name)], shape=a.shape, dtype="bool", mesh=a.mesh)
        ops = BOOL_BINARY if a.dtype == "bool" else BINARY
        if r.random() < 0.12 and a.dtype != "bool":
            c = f'R.const({r.choice([0.5, -1.5, 2.0])}, "{a.dtype}")' if self._float(a) else \
                f'R.const({r.choice([1, 2, 3, 100])}, "{a.dtype}")'
            return self.emit(r.choice(ops), [Ref(a.name), Raw(c)], shape=a.shape, dtype=a.dtype, mesh=a.mesh)
        same = [v for v in self.vals if v.shape == a.shape and v.dtype == a.dtype and v.mesh == a.mesh]
        b = r.choice(same) if same and r.random() < 0.5 else self.new_param(a.shape, a.dtype, a.mesh)
        args = [Ref(a.name), Ref(b.name)]
        if r.random() < 0.3:
            args.reverse()
        return self.emit(r.choice(ops), args, shape=a.shape, dtype=a.dtype, mesh=a.mesh)

    def op_matmul(self, a: Val):
        if a.dtype == "bool" or len(a.shape) < 2:
            return None
        k = a.shape[-1]
        b = self.new_param((k, self.size()), a.dtype, a.mesh)
        return self.emit("R.matmul", [Ref(a.name), Ref(b.name)], [("out_dtype", None)], shape=a.shape[:-1] + b.shape[-1:],
                         dtype=a.dtype, mesh=a.mesh)

    def op_reduce(self, a: Val):
        r = self.rng
        rank = len(a.shape)
        if rank == 0:
            return None
        op = r.choice(["R.sum", "R.max", "R.min", "R.mean", "R.mean", "R.prod"])
        keep = r.random() < 0.4
        axes = sorted(r.sample(range(rank), r.choice([1, 1, 2]) if rank > 1 else 1)) if r.random() > 0.15 else None
        pos = set(range(rank)) if axes is None else set(axes)
        shape = tuple(1 if i in pos else d for i, d in enumerate(a.shape) if keep or i not in pos)
        return self.emit(op, [Ref(a.name)], [("axis", axes), ("keepdims", keep)], shape=shape, dtype=a.dtype, mesh=a.mesh)

    def op_astype(self, a: Val):
        targets = [d for d in DIRECTED_DTYPES if d != a.dtype]
        if self._float(a) and not self._exact_float(a):
            # a float computed by a sum (or from partial parts) is exact only within rounding, and the order
            # of its additions is the layout's: cast to an integer, 19.999 and 20.001 differ by one
            targets = [d for d in targets if d in FLOAT_DTYPES]
        to = self.rng.choice(targets)
        return self.emit("R.astype", [Ref(a.name)], [("dtype", to)], shape=a.shape, dtype=to, mesh=a.mesh)

    def _exact_float(self, a: Val) -> bool:
        """Whether float value ``a`` is the same bits under any layout: a parameter not given in parts."""
        p = next((p for p in self.params if p.name == a.name), None)
        return p is not None and not any(s.startswith("P") for s in (p.placement.specs if p.placement else ()))

    def op_softmax(self, a: Val):
        return super().op_softmax(a) if self._float(a) else None

    def op_rms_norm(self, a: Val):
        return super().op_rms_norm(a) if self._float(a) else None

    def op_layer_norm(self, a: Val):
        return super().op_layer_norm(a) if self._float(a) else None

    def op_constant(self, a: Val):
        return super().op_constant(a) if self._float(a) else None

    def op_qkv(self, a: Val):
        return super().op_qkv(a) if self._float(a) else None


def extreme_inputs(mod, dims: dict, seed: int) -> list:
    """Inputs for --dtypes: integers anywhere in their range, each dtype's ends (smallest, largest,
    0, 1, -1) in every tensor; fair bools; floats of moderate size (a float's partial sums are held
    in its dtype, so values near its largest would overflow where one device's float64 sum does
    not: a difference of float arithmetic, not of distribution) with exact zeros, ones and halves."""
    import numpy as np

    from distir.driver import random_inputs
    from distir.ir.types import np_dtype

    rng = np.random.default_rng(seed)
    out = []
    for x in random_inputs(mod, "main", dims, seed=seed):  # the shapes and dtypes of the signature
        dtype = str(x.dtype)
        if dtype == "bool":
            out.append(rng.random(x.shape) < 0.5)
            continue
        t = np_dtype(dtype)
        if dtype in FLOAT_DTYPES:
            v = (rng.standard_normal(x.shape) * rng.choice([0.5, 2.0, 8.0])).astype(t)
            ends = [0.0, 1.0, -1.0, 0.5, -0.0]
        else:
            info = np.iinfo(t)
            v = rng.integers(info.min, info.max, x.shape, endpoint=True, dtype=t)
            ends = [info.min, info.max, 0, 1, info.max - 1] + ([-1] if info.min < 0 else [])
        flat = v.reshape(-1)
        for i, e in enumerate(ends[: flat.size]):
            flat[rng.integers(flat.size) if i else 0] = np.array(e).astype(t)
        out.append(flat.reshape(x.shape))
    return out


def case_inputs(mod, prog, dims: dict, seed: int) -> list:
    """The inputs of a case: at each dtype's ends for --dtypes cases, else distir's random inputs."""
    from distir.driver import random_inputs

    if getattr(prog, "values", "") == "extreme":
        return extreme_inputs(mod, dims, seed)
    return random_inputs(mod, "main", dims, seed=seed)


HALF_EPS = 2.0 ** -10  # float16's; bfloat16's is 2^-7


def compare_case(prog, got, expected, inputs, rtol: float, atol: float) -> tuple[bool, float]:
    """:func:`_compare`; for --dtypes cases, integers and bools exactly and half floats within their
    rounding (a few units of their last place, relative to the inputs' and the result's scale)."""
    import ml_dtypes
    import numpy as np

    if getattr(prog, "values", "") != "extreme":
        return _compare(got, expected, inputs, rtol, atol)
    g, e = _flat(got), _flat(expected)
    if len(g) != len(e):
        return False, float("inf")
    ok, worst = True, 0.0
    scale = max([float(np.max(np.abs(np.asarray(a, np.float64)))) for a in inputs if np.asarray(a).size
                 and str(np.asarray(a).dtype) in FLOAT_DTYPES] or [1.0])
    for a, b in zip(g, e):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return False, float("inf")
        if str(b.dtype) not in FLOAT_DTYPES:
            wrong = a != b
            ok &= not bool(np.any(wrong))
            worst = max(worst, float(np.count_nonzero(wrong)))
            continue
        # the precision of the coarsest float the program computes in (a float16 sum cast to float64
        # holds float16's rounding)
        eps = max([float(ml_dtypes.finfo(b.dtype).eps)] + [float(ml_dtypes.finfo(np.asarray(x).dtype).eps)
                                                            for x in inputs if str(np.asarray(x).dtype) in FLOAT_DTYPES])
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        # at the edge of the range: one run overflows where the other, rounded another way, stays
        # within a factor 2 of the largest finite value (exp amplifies a last-place difference)
        edge = float(ml_dtypes.finfo(b.dtype).max) / 2
        with np.errstate(invalid="ignore"):
            tipped = ((np.isinf(b64) & (np.abs(a64) >= edge)) | (np.isinf(a64) & (np.abs(b64) >= edge))) \
                & (np.sign(a64) == np.sign(b64))
        # past the range: where one device's result overflowed, the order of a distributed sum
        # decides between inf and nan (inf * a + inf * b with a, b of opposite signs); both are
        # an overflow, not a number distribution got wrong
        tipped |= ~np.isfinite(b64) & ~np.isfinite(a64) & ~(np.isinf(a64) & np.isinf(b64) & (a64 != b64))
        if eps >= HALF_EPS and not np.all(np.isfinite(b64)):
            # a half float program that overflows on one device too: partial sums held in the dtype
            # overflow in another order (+inf on one worker, -inf on another: nan where one
            # device's wider sum stays finite), as in any all-reduce of that dtype
            tipped |= ~np.isfinite(a64) & np.isfinite(b64)
        a64 = np.where(tipped, b64, a64)
        top = max(scale, float(np.max(np.abs(np.nan_to_num(b64, posinf=0, neginf=0)), initial=0.0)))
        with np.errstate(invalid="ignore"):
            diff = np.abs(a64 - b64)
            worst = max(worst, float(np.nanmax(diff, initial=0.0)))
            close = np.isclose(a64, b64, rtol=max(rtol, 16 * eps), atol=max(atol, 16 * eps) * top, equal_nan=True)
            if eps >= HALF_EPS:
                # exp(x) turns x's last-place rounding (1/4 at x = 59 in bfloat16) into a relative
                # difference of x times it: compare the exponents of large values at that precision
                big = (np.abs(b64) > 1) & (np.abs(a64) > 1) & (np.sign(a64) == np.sign(b64))
                la, lb = np.log(np.abs(np.where(big, a64, 1.0))), np.log(np.abs(np.where(big, b64, 1.0)))
                close |= big & (np.abs(la - lb) <= 16 * eps * np.maximum(la, lb))
            ok &= bool(np.all(close))
    return ok, worst


# ----------------------------------------------------------------------------- running a case

CLASSES = ["WRONG-NUMBER", "CRASH", "SLOW", "COST-MISMATCH", "SUSPECT-REFUSAL", "CLEAN-REFUSAL", "OK", "INVALID"]
SEVERITY = {c: i for i, c in enumerate(CLASSES)}
FATAL = ("WRONG-NUMBER", "CRASH", "SLOW")
FAILURES = ("WRONG-NUMBER", "CRASH", "SLOW", "COST-MISMATCH", "SUSPECT-REFUSAL")


@dataclass
class Outcome:
    cls: str
    stage: str  # parse, reference, <pass name>, specialize, simulate, compare, cost, tvm-...
    workers: int | None = None
    message: str = ""
    key: str = ""  # what a shrunk case must keep reproducing
    detail: str = ""
    valid: bool | None = None  # every stated layout divides evenly at this count (None: not known); a
    # feature of the case that tells failures apart, not a licence to refuse

    def line(self) -> str:
        w = f" num_workers={self.workers}" if self.workers is not None else ""
        msg = self.message.strip().splitlines()[0] if self.message.strip() else ""
        return f"{self.cls} at {self.stage}{w}: {msg[:300]}"


@dataclass
class CaseResult:
    case: Case
    outcomes: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def cls(self) -> str:
        return min((o.cls for o in self.outcomes), key=SEVERITY.__getitem__, default="OK")

    def worst(self) -> Outcome | None:
        return min(self.outcomes, key=lambda o: SEVERITY[o.cls], default=None)


# DistirError messages of documented limitations: a refusal with one of these is clean; any
# other refusal is a suspect. (distir computes every layout at every count; the one limitation is
# docs/strided.md's: a strided layout does not move between meshes.)
KNOWN_LIMITATIONS: list[str] = [
    r"a strided layout \(.*\) moves between meshes only after it is redistributed to a plain one",
    # docs/blocks.md: a block layout is exchanged to R / S before it moves to another mesh
    r"between two meshes: the block layout .* is not handled here",
]


class CaseTimeout(BaseException):
    """Raised by the alarm (BaseException: no library `except Exception` swallows it)."""


def _on_alarm(signum, frame):
    raise CaseTimeout(*_stopped_in(frame))


# distir's plumbing: a slow case is named after the first frame below these
_PLUMBING = ("transform/pass_infra.py", "transform/rewrite.py", "transform/__init__.py", "errors.py")


def _stopped_in(frame) -> tuple[str, str]:
    """Where the alarm stopped a case: the outermost frame of distir past its plumbing (the stage:
    a pass, specialize, the simulator) and the innermost one (file:function)."""
    names = []
    while frame is not None:
        path = frame.f_code.co_filename.replace("\\", "/")
        if "/distir/" in path:
            names.append((path.split("/distir/")[-1], frame.f_code.co_name))
        frame = frame.f_back
    if not names:
        return "outside distir", "outside distir"
    stage = next((f for f, _ in reversed(names) if f not in _PLUMBING), names[-1][0])
    return stage, f"{names[0][0]}:{names[0][1]}"


def _stopped_outcome(stop: CaseTimeout, opts: Options) -> Outcome:
    """A case stopped at the time limit: SLOW (a failure class of its own) with --time-limit, else
    the old CRASH at "timeout"."""
    if not opts.slow:
        return Outcome("CRASH", "timeout", None, f"the case took more than {opts.timeout:g} s", key="CRASH|timeout")
    stage, inner = stop.args if len(stop.args) == 2 else ("outside distir", "outside distir")
    return Outcome("SLOW", stage, None, f"the case took more than {opts.timeout:g} s of CPU time: stopped in {inner}",
                   key=f"SLOW|{stage}")


def _words(message: str, n: int = 14) -> str:
    """A message's gist, stable under shrinking: its first line, names, numbers and types dropped."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    first = re.sub(r"^error:\s*", "", first)
    first = re.sub(r"'[^']*'|\"[^\"]*\"", " ", first)
    first = re.sub(r"\([^()]*\)", " ", first)
    words = [w for w in re.findall(r"[A-Za-z_][A-Za-z_\-]+", first) if len(w) > 2 and not re.search(r"\d", w)]
    return " ".join(words[:n])


def _crash_site(exc: BaseException) -> str:
    """The innermost frame of distir in the traceback (file:function:line)."""
    site = ""
    for fr in traceback.extract_tb(exc.__traceback__):
        if "/distir/" in fr.filename.replace("\\", "/"):
            site = f"{fr.filename.split('/distir/')[-1]}:{fr.name}:{fr.lineno}"
    return site or "outside distir"


def _exc_outcome(exc: BaseException, stage: str, w, valid: bool | None) -> Outcome:
    """The outcome of an exception at ``stage``; ``valid``: whether every stated layout divides
    (None: not known or not relevant)."""
    o = _exc_outcome_(exc, stage, w, valid)
    o.valid = valid
    return o


def _exc_outcome_(exc: BaseException, stage: str, w, valid: bool | None) -> Outcome:
    from distir.errors import DistirError

    msg = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, CaseTimeout):
        return Outcome("CRASH", stage, w, f"timeout during {stage}", key=f"CRASH|timeout|{stage}")
    if isinstance(exc, DistirError):
        if stage == "simulate" and "replicas disagree" in str(exc):
            return Outcome("WRONG-NUMBER", stage, w, msg, key="WRONG-NUMBER|simulate|replicas disagree")
        known = any(re.search(p, str(exc)) for p in KNOWN_LIMITATIONS)
        cls = "CLEAN-REFUSAL" if known else "SUSPECT-REFUSAL"
        return Outcome(cls, stage, w, msg, key=f"{cls}|{stage}|{type(exc).__name__}|{_words(str(exc))}")
    site = _crash_site(exc)
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, chain=False)[-7:])
    return Outcome("CRASH", stage, w, f"{msg} [at {site}]", key=f"CRASH|{stage}|{type(exc).__name__}|{site}",
                   detail=tb)


def user_layouts(mod) -> list:
    """(what, shape, mesh, placement) of every layout the program states: DTensor parameters,
    hints and redistribute targets."""
    from distir.ir.types import DTensorType

    f = mod["main"]
    out = [(f"parameter '{p.name}'", p.type.shape, p.type.mesh, p.type.placement)
           for p in f.params if isinstance(p.type, DTensorType)]
    for b in f.bindings():
        v = b.value
        name = getattr(getattr(v, "op", None), "name", "")
        if name == "dist.annotate_sharding":
            out.append((f"hint '{b.var.name}'", v.args[0].type.shape, v.attrs["device_mesh"], v.attrs["placement"]))
        elif name == "dist.redistribute" and isinstance(b.var.type, DTensorType):
            out.append((f"redistribute '{b.var.name}'", b.var.type.shape, b.var.type.mesh, b.var.type.placement))
    return out


def layouts_divide(layouts, w: int, dims: dict) -> str | None:
    """None when every stated layout cuts its dims evenly at num_workers=w, else why not."""
    from distir.ir import sym
    from distir.ir.placement import Shard, StridedShard

    env = dict(dims)
    env[NW] = w
    for what, shape, mesh, placement in layouts:
        if placement.is_block:
            continue  # chunks at the edges are partial by design (docs/blocks.md)
        try:
            sizes = [sym.evaluate(d, env) for d in mesh.shape]
        except Exception:  # noqa: BLE001
            return f"{what}: mesh size unknown"
        for d, dim in enumerate(shape):
            n, parts = 1, 1
            for ax, spec in enumerate(placement.specs):
                if isinstance(spec, (Shard, StridedShard)) and spec.dim == d:
                    n *= sizes[ax]
                if isinstance(spec, StridedShard) and spec.dim == d:
                    parts = spec.split
            try:
                v = sym.evaluate(dim, env) // parts  # a strided shard cuts each of its parts
            except Exception:  # noqa: BLE001  (a size nothing binds: not checkable)
                v = 0
            if v % n:
                return f"{what} dim {d} of size {v} is cut over {n} devices"
    return None


@dataclass
class Options:
    rtol: float = 1e-4
    atol: float = 1e-4
    timeout: float = 30.0
    check_cost: bool = True
    slow: bool = False  # a case stopped at the time limit is SLOW, not a CRASH (--time-limit)


def execute(case: Case, opts: Options | None = None, verbose: bool = False) -> CaseResult:
    """Run one case: parse, reference, pipeline once, then per device count specialize,
    simulate, compare and check the bytes. Never raises (except KeyboardInterrupt)."""
    opts = opts or Options()
    t0 = time.perf_counter()
    res = CaseResult(case)
    use_alarm = opts.timeout and hasattr(signal, "SIGALRM") and _main_thread()
    # --time-limit counts the process's CPU time (a shared machine's load does not make a case SLOW)
    timer, sig = (signal.ITIMER_PROF, signal.SIGPROF) if opts.slow else (signal.ITIMER_REAL, signal.SIGALRM)
    if use_alarm:
        old = signal.signal(sig, _on_alarm)
        signal.setitimer(timer, opts.timeout)
    try:
        _execute(case, opts, res, verbose)
    except CaseTimeout as stop:
        res.outcomes.append(_stopped_outcome(stop, opts))
    finally:
        if use_alarm:
            signal.setitimer(timer, 0)
            signal.signal(sig, old)
    res.seconds = time.perf_counter() - t0
    return res


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _execute(case: Case, opts: Options, res: CaseResult, verbose: bool) -> None:
    import numpy as np

    import distir
    from distir.analysis import comm_volume
    from distir.errors import DistirError
    from distir.runtime import run
    from distir.runtime.spmd import SpmdStats, run_spmd
    from distir.transform import PassContext, get_pass
    from distir.transform.legalize_redistribute import AXIS_COSTS_KEY
    from distir.transform.pipelines import _DISTRIBUTE
    from distir.transform.specialize import specialize

    out = res.outcomes
    prog = case.program
    dims = prog.dim_values
    text = prog.render()
    say = print if verbose else (lambda *a, **k: None)

    # 1. the program and its single-device result (a refusal here is the generator's fault)
    try:
        mod = distir.parse(text)
        inputs = case_inputs(mod, prog, dims, case.seed)
    except DistirError as e:
        out.append(Outcome("INVALID", "parse", None, f"{type(e).__name__}: {e}", key="INVALID|parse"))
        say(out[-1].line())
        return
    except CaseTimeout:
        raise
    except Exception as e:  # noqa: BLE001
        out.append(_exc_outcome(e, "parse", None, None))
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = run(mod, *inputs)
    except DistirError as e:
        out.append(Outcome("INVALID", "reference", None, f"{type(e).__name__}: {e}", key="INVALID|reference"))
        say(out[-1].line())
        return
    except CaseTimeout:
        raise
    except Exception as e:  # noqa: BLE001
        out.append(_exc_outcome(e, "reference", None, None))
        return
    layouts = user_layouts(mod)
    why_not = {w: layouts_divide(layouts, w, dims) for w in case.workers}
    valid_any = any(v is None for v in why_not.values())
    say(f"stated layouts: {len(layouts)}; " + "; ".join(f"num_workers={w}: {why or 'all divide'}" for w, why in why_not.items()))

    # 2. the distribute pipeline, once, num_workers symbolic; pass by pass to name the stage;
    # with axis costs, propagation and legalize plan by time (specialize reads the replans' costs)
    lowered = mod
    config = {AXIS_COSTS_KEY: prog.costs} if getattr(prog, "costs", "") else {}
    if config:
        say(f"axis costs: {prog.costs}")
    for name in _DISTRIBUTE:
        try:
            with warnings.catch_warnings(), PassContext(config=config):
                warnings.simplefilter("ignore")
                lowered = get_pass(name)(lowered)
        except CaseTimeout:
            raise
        except Exception as e:  # noqa: BLE001
            out.append(_exc_outcome(e, name, None, valid_any))
            say(out[-1].line())
            return
    if verbose:
        print("--- after the distribute pipeline:")
        print(lowered.script())
    formula = None
    if opts.check_cost:
        try:
            formula = comm_volume(lowered)
        except DistirError:
            formula = None  # e.g. transfers between meshes that share devices: exact only when specialized
        except CaseTimeout:
            raise
        except Exception as e:  # noqa: BLE001
            out.append(_exc_outcome(e, "cost-formula", None, None))

    # 3. per device count
    for w in case.workers:
        valid = why_not[w] is None
        try:
            local = specialize(lowered, {NW: w})
        except CaseTimeout:
            raise
        except Exception as e:  # noqa: BLE001
            out.append(_exc_outcome(e, "specialize", w, valid))
            say(out[-1].line())
            continue
        stats = SpmdStats()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = run_spmd(local, *inputs, stats=stats, seed=case.seed)
        except CaseTimeout:
            raise
        except Exception as e:  # noqa: BLE001
            out.append(_exc_outcome(e, "simulate", w, valid))
            say(out[-1].line())
            continue
        try:
            ok, worst = compare_case(prog, got, expected, inputs, opts.rtol, opts.atol)
        except Exception as e:  # noqa: BLE001
            out.append(_exc_outcome(e, "compare", w, None))
            continue
        if not ok:
            detail = _differences(got, expected, np)
            note = "" if valid else f" (uneven: {why_not[w]})"
            out.append(Outcome("WRONG-NUMBER", "simulate", w,
                               f"simulated result differs from the single-device run, largest difference {worst:.3g}{note}",
                               key="WRONG-NUMBER|simulate", detail=detail, valid=valid))
            say(out[-1].line())
            say(detail)
            continue
        o = Outcome("OK", "simulate", w, f"matches (largest difference {worst:.3g}); {stats.summary()}", valid=valid)
        if opts.check_cost:
            problem = _cost_problem(local, formula, stats, w, dims, comm_volume, DistirError)
            if problem and not valid:
                problem += f" (uneven: {why_not[w]})"
            if problem:
                o = Outcome("COST-MISMATCH", "cost", w, problem, key="COST-MISMATCH|" + _words(problem, 6), valid=valid)
        out.append(o)
        say(o.line())


def _compare(got, expected, inputs, rtol: float, atol: float) -> tuple[bool, float]:
    """compare_outputs, with the absolute tolerance scaled by the inputs' magnitude as well as the
    result's: ``x - mean(x, x, x)`` is 0 in exact arithmetic but about 1e-8 in float32, and a result
    of zeros gives the result's scale no room at all."""
    import numpy as np

    from distir.driver import compare_outputs

    ok, worst = compare_outputs(got, expected, rtol, atol)
    if ok:
        return ok, worst
    scale = max([float(np.max(np.abs(np.asarray(a, np.float64)))) for a in inputs if np.asarray(a).size] or [0.0])
    floats = all(np.issubdtype(np.asarray(e).dtype, np.floating) for e in _flat(expected))
    if floats and scale > 0 and worst <= atol * scale:
        g, e = _flat(got), _flat(expected)
        ok = len(g) == len(e) and all(
            np.asarray(a).shape == np.asarray(b).shape
            and np.allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol * scale)
            for a, b in zip(g, e)
        )
    return ok, worst


def _flat(x) -> tuple:
    return tuple(a for f in x for a in _flat(f)) if isinstance(x, tuple) else (x,)


def _differences(got, expected, np) -> str:
    from distir.driver import flat_outputs

    got, expected = flat_outputs(got), flat_outputs(expected)
    lines = []
    for i, (g, e) in enumerate(zip(got, expected)):
        g, e = np.asarray(g), np.asarray(e)
        if g.shape != e.shape:
            lines.append(f"output {i}: shape {g.shape}, expected {e.shape}")
            continue
        bad = ~np.isclose(g.astype(np.float64), e.astype(np.float64), rtol=1e-4,
                          atol=1e-4 * max(float(np.max(np.abs(e))) if e.size else 0.0, 1e-30), equal_nan=True)
        if bad.any():
            idx = np.argwhere(bad)
            lines.append(f"output {i} {e.shape}: {int(bad.sum())} of {e.size} elements differ, first at "
                         f"{tuple(int(x) for x in idx[0])}: got {g[tuple(idx[0])]!r}, expected {e[tuple(idx[0])]!r}")
    if len(got) != len(expected):
        lines.append(f"{len(got)} outputs, expected {len(expected)}")
    return "\n".join(lines)


def _cost_problem(local, formula, stats, w, dims, comm_volume, DistirError) -> str | None:
    env = dict(dims)
    env[NW] = w
    try:
        nums = comm_volume(local).evaluate(env)
    except DistirError as e:
        if dims and "concrete sizes" in str(e):
            return None  # a transfer between meshes sharing devices, of a tensor with run-time sizes
        return f"comm_volume of the specialized module fails: {e}"
    measured = stats.total_bytes
    if nums.total_bytes != measured or nums.counts != stats.counts:
        return (f"cost model (specialized module): {nums.total_bytes} bytes {nums.counts}, "
                f"simulator: {measured} bytes {stats.counts}")
    if formula is not None:
        try:
            f_nums = formula.evaluate(env)
        except Exception as e:  # noqa: BLE001
            return f"the symbolic cost formula cannot be evaluated at num_workers={w}: {e}"
        if f_nums.total_bytes != measured or f_nums.counts != stats.counts:
            return (f"symbolic cost formula at num_workers={w}: {f_nums.total_bytes} bytes {f_nums.counts}, "
                    f"simulator: {measured} bytes {stats.counts}")
    return None


# ----------------------------------------------------------------------------- TVM (a child process)


def _tvm_child(conn, stderr_path):
    """Runs cases on TVM/Disco; a Disco error aborts this process, not the fuzzer."""
    fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    warnings.simplefilter("ignore")
    while True:
        try:
            req = conn.recv()
        except EOFError:
            return
        if req is None:
            return
        conn.send(_tvm_case(*req))


def _tvm_case(text, dims, seed, workers, rtol, atol, per_count, costs="", values=""):
    import numpy as np

    import distir
    from distir.errors import DistirError
    from distir.runtime import run
    from distir.transform import PassContext
    from distir.transform.legalize_redistribute import AXIS_COSTS_KEY
    from distir.transform.pipelines import distribute_pipeline
    from distir.transform.specialize import specialize

    res = []
    try:
        mod = distir.parse(text)
        prog = _TextProgram(text, dims, mod, costs, values)
        inputs = case_inputs(mod, prog, dims, seed)
        expected = run(mod, *inputs)
        with PassContext(config={AXIS_COSTS_KEY: costs} if costs else {}):
            lowered = distribute_pipeline()(mod)
        layouts = user_layouts(mod)
        valid = {w: layouts_divide(layouts, w, dims) is None for w in workers}
        valid_any = any(valid.values())
    except Exception as e:  # noqa: BLE001  (the simulator run reports these)
        return [("OK", "tvm", None, f"not run on TVM: {type(e).__name__}", "", "")]
    try:
        import tvm

        from distir.driver import run_disco
        from distir.tvm import specialize_and_build, to_relax

        exported = to_relax(lowered)
    except Exception as e:  # noqa: BLE001
        return [dataclasses.astuple(_exc_outcome(e, "tvm-export", None, valid_any))]
    try:
        built = None if per_count else tvm.compile(exported, target="llvm")
    except Exception as e:  # noqa: BLE001
        return [dataclasses.astuple(_exc_outcome(e, "tvm-build", None, valid_any))]
    for w in workers:
        try:
            specialize(lowered, {NW: w})  # a count the specializer refuses is not run
        except DistirError:
            continue
        try:
            b = specialize_and_build(exported, {NW: w}) if per_count else built
            got = run_disco(b, lowered, *inputs, num_workers=w, seed=seed)
        except Exception as e:  # noqa: BLE001
            res.append(dataclasses.astuple(_exc_outcome(e, "tvm-run", w, valid[w])))
            continue
        ok, worst = compare_case(prog, got, expected, inputs, rtol, atol)
        if ok:
            res.append(("OK", "tvm-run", w, f"TVM matches (largest difference {worst:.3g})", "", "", valid[w]))
        else:
            note = "" if valid[w] else " (uneven)"
            res.append(("WRONG-NUMBER", "tvm-run", w, f"TVM/Disco result differs, largest difference {worst:.3g}{note}",
                        "WRONG-NUMBER|tvm-run", _differences(got, expected, np), valid[w]))
    return res


class TvmRunner:
    def __init__(self, timeout: float = 300.0, per_count: bool = False):
        import multiprocessing as mp
        import tempfile

        self.ctx = mp.get_context("spawn")
        self.timeout = timeout
        self.per_count = per_count
        self.stderr_path = os.path.join(tempfile.mkdtemp(prefix="distir-fuzz-tvm-"), "stderr.txt")
        self.proc = None

    def _start(self):
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_tvm_child, args=(child, self.stderr_path), daemon=True)
        self.proc.start()

    def run(self, case: Case, opts: Options) -> list[Outcome]:
        if self.proc is None or not self.proc.is_alive():
            self._start()
        req = (case.text, case.program.dim_values, case.seed, case.workers, opts.rtol, opts.atol, self.per_count,
               getattr(case.program, "costs", ""), getattr(case.program, "values", ""))
        self.conn.send(req)
        if not self.conn.poll(self.timeout):
            self.proc.kill()
            self.proc = None
            return [Outcome("CRASH", "tvm", None, f"TVM run took more than {self.timeout:g} s", key="CRASH|tvm|timeout")]
        try:
            rows = self.conn.recv()
        except (EOFError, ConnectionError):
            self.proc.join(5)
            code = self.proc.exitcode
            self.proc = None
            tail = ""
            try:
                with open(self.stderr_path, errors="replace") as f:
                    tail = " | ".join(ln.strip() for ln in f.read().strip().splitlines()[-3:])
            except OSError:
                pass
            return [Outcome("CRASH", "tvm", None, f"the TVM/Disco process died (exit code {code}): {tail[:400]}",
                            key="CRASH|tvm|died|" + _words(tail, 6))]
        return [Outcome(*row) for row in rows]

    def close(self):
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(None)
                self.proc.join(5)
            except (OSError, ValueError):
                pass
            if self.proc.is_alive():
                self.proc.kill()


# ----------------------------------------------------------------------------- shrinking


def _live(prog: Program) -> Program:
    """Drop bindings the outputs do not need, then unused parameters."""
    need = set(prog.outputs)
    keep = []
    for b in reversed(prog.binds):
        if b.var in need:
            keep.append(b)
            need.update(b.refs())
    keep.reverse()
    params = tuple(p for p in prog.params if p.name in need)
    return replace(prog, binds=tuple(keep), params=params)


def _sub_dims(shape, old, new):
    return tuple(new if d == old else d for d in shape)


def _map_attrs(b: Bind, fn) -> Bind:
    return replace(b, kwargs=tuple((k, fn(k, v)) for k, v in b.kwargs))


def _placement_of(b: Bind):
    return b.kw("placement"), b.kw("device_mesh")


def _drop_axis(prog: Program, m: int, ax: int) -> Program:
    mesh = prog.meshes[m]
    shape = mesh.shape[:ax] + mesh.shape[ax + 1:]
    n = 1
    for d in shape:
        if d != NW:
            n *= d
    ids = None if mesh.ids is None else tuple(sorted(mesh.ids)[:n])
    new_mesh = Mesh(shape, mesh.start, ids)
    meshes = prog.meshes[:m] + (new_mesh,) + prog.meshes[m + 1:]

    def fix_pl(pl: Pl) -> Pl:
        return Pl(pl.specs[:ax] + pl.specs[ax + 1:])

    params = tuple(replace(p, placement=fix_pl(p.placement)) if p.mesh == m and p.placement else p for p in prog.params)
    binds = []
    for b in prog.binds:
        pl, mr = _placement_of(b)
        if pl is not None and mr == MeshRef(m):
            b = _map_attrs(b, lambda k, v: fix_pl(v) if k == "placement" else v)
        binds.append(b)
    return replace(prog, meshes=meshes, params=params, binds=tuple(binds))


def _drop_mesh(prog: Program, m: int) -> Program | None:
    if any(p.mesh == m for p in prog.params) or any(b.kw("device_mesh") == MeshRef(m) for b in prog.binds):
        return None

    def ren(i):
        return i - 1 if i > m else i

    params = tuple(replace(p, mesh=ren(p.mesh)) if p.mesh is not None else p for p in prog.params)
    binds = tuple(_map_attrs(b, lambda k, v: MeshRef(ren(v.index)) if isinstance(v, MeshRef) else v) for b in prog.binds)
    return replace(prog, meshes=prog.meshes[:m] + prog.meshes[m + 1:], params=params, binds=binds)


def _candidates(case: Case):
    """Smaller variants of a case, roughly biggest cuts first."""
    prog = case.program
    w = case.workers[0] if case.workers else 1
    if _live(prog) != prog:
        yield replace(case, program=_live(prog))
    if len(case.workers) > 1:
        for w1 in case.workers:
            yield replace(case, workers=(w1,))
    if prog.uses_workers():
        for w2 in range(1, w):
            yield replace(case, workers=(w2,))
    else:
        if w != 1:
            yield replace(case, workers=(1,))
    # fewer outputs: each binding alone, earliest first
    tensors = [b.var for b in prog.binds if b.op != "R.split"]
    if len(prog.outputs) > 1 or len(prog.binds) > 1:
        for v in tensors:
            if (v,) != prog.outputs:
                yield replace(case, program=_live(replace(prog, outputs=(v,))))
    if len(prog.outputs) > 1:
        for i in range(len(prog.outputs)):
            yield replace(case, program=_live(replace(prog, outputs=prog.outputs[:i] + prog.outputs[i + 1:])))
    # bypass a binding: its users read one of its arguments instead
    for i in reversed(range(len(prog.binds))):
        b = prog.binds[i]
        for a in b.args:
            if isinstance(a, Ref) and b.op != "item":
                binds = [x.rename({b.var: a.name}) for j, x in enumerate(prog.binds) if j != i]
                outs = tuple(a.name if o == b.var else o for o in prog.outputs)
                if all(o in {x.var for x in binds} for o in outs):
                    yield replace(case, program=_live(replace(prog, binds=tuple(binds), outputs=outs)))
    # drop unused meshes, mesh axes, smaller meshes, plainer device lists
    for m in reversed(range(len(prog.meshes))):
        p2 = _drop_mesh(prog, m)
        if p2 is not None:
            yield replace(case, program=p2)
    for m, mesh in enumerate(prog.meshes):
        for ax in range(mesh.ndim):
            if mesh.ndim > 1:
                yield replace(case, program=_drop_axis(prog, m, ax))
        for ax, d in enumerate(mesh.shape):
            if d == NW:
                sh = mesh.shape[:ax] + (w,) + mesh.shape[ax + 1:]
                start = Lin(mesh.start.at(w))
                meshes = prog.meshes[:m] + (Mesh(sh, start),) + prog.meshes[m + 1:]
                yield replace(case, program=replace(prog, meshes=meshes))
            elif isinstance(d, int) and d > 1 and mesh.ids is None:
                for d2 in sorted({1, 2, d - 1}):
                    if d2 < d:
                        sh = mesh.shape[:ax] + (d2,) + mesh.shape[ax + 1:]
                        meshes = prog.meshes[:m] + (Mesh(sh, mesh.start),) + prog.meshes[m + 1:]
                        yield replace(case, program=replace(prog, meshes=meshes))
        if mesh.ids is not None:
            meshes = prog.meshes[:m] + (Mesh(mesh.shape, Lin(min(mesh.ids))),) + prog.meshes[m + 1:]
            yield replace(case, program=replace(prog, meshes=meshes))
            lo = Mesh(mesh.shape, ids=tuple(i - min(mesh.ids) for i in mesh.ids))
            if lo != mesh:
                yield replace(case, program=replace(prog, meshes=prog.meshes[:m] + (lo,) + prog.meshes[m + 1:]))
        elif mesh.start != Lin(0):
            meshes = prog.meshes[:m] + (Mesh(mesh.shape, Lin(0)),) + prog.meshes[m + 1:]
            yield replace(case, program=replace(prog, meshes=meshes))
    # simpler layouts: one mesh-axis entry at a time to R; parameters plain
    for i, p in enumerate(prog.params):
        if p.placement is None:
            continue
        for ax, s in enumerate(p.placement.specs):
            if s != "R":
                pl = Pl(p.placement.specs[:ax] + ("R",) + p.placement.specs[ax + 1:])
                params = prog.params[:i] + (replace(p, placement=pl),) + prog.params[i + 1:]
                yield replace(case, program=replace(prog, params=params))
    for i, b in enumerate(prog.binds):
        pl = b.kw("placement")
        if pl is None:
            continue
        for ax, s in enumerate(pl.specs):
            if s != "R":
                new = Pl(pl.specs[:ax] + ("R",) + pl.specs[ax + 1:])
                b2 = _map_attrs(b, lambda k, v, new=new: new if k == "placement" else v)
                yield replace(case, program=replace(prog, binds=prog.binds[:i] + (b2,) + prog.binds[i + 1:]))
    # symbolic sizes: static, or smaller at run time
    for name, value in prog.dims:
        yield replace(case, program=_subst_dim(prog, name, value))
        for v2 in sorted({1, 2, 3, value // 2, value - 1}):
            if 1 <= v2 < value:
                dims = tuple((n, v2 if n == name else v) for n, v in prog.dims)
                yield replace(case, program=replace(prog, dims=dims))
    # smaller static sizes, everywhere at once, then one parameter dim at a time
    values = sorted({d for p in prog.params for d in p.shape if isinstance(d, int) and d > 1}, reverse=True)
    for v in values:
        for v2 in sorted({1, 2, 3, v // 2, v - 1}):
            if 1 <= v2 < v:
                yield replace(case, program=_subst_size(prog, v, v2))
    for i, p in enumerate(prog.params):
        for j, d in enumerate(p.shape):
            if isinstance(d, int) and d > 1:
                for v2 in sorted({1, 2, d // 2, d - 1}):
                    if 1 <= v2 < d:
                        shape = p.shape[:j] + (v2,) + p.shape[j + 1:]
                        params = prog.params[:i] + (replace(p, shape=shape),) + prog.params[i + 1:]
                        yield replace(case, program=replace(prog, params=params))
    # float32 everywhere; input seed 0
    if any(p.dtype != "float32" for p in prog.params):
        params = tuple(replace(p, dtype="float32") for p in prog.params)
        binds = tuple(replace(b, args=tuple(Raw(re.sub(r'"(int32|float64)"', '"float32"', a.text).replace(
            "R.const(2, ", "R.const(2.0, ")) if isinstance(a, Raw) else a for a in b.args)) for b in prog.binds)
        yield replace(case, program=replace(prog, params=params, binds=binds))
    if case.seed != 0:
        yield replace(case, seed=0)


def _subst_dim(prog: Program, name: str, value: int) -> Program:
    def f(d):
        return d[0] * value if isinstance(d, tuple) and d[1] == name else d

    params = tuple(replace(p, shape=tuple(f(d) for d in p.shape)) for p in prog.params)
    binds = tuple(_map_attrs(b, lambda k, v: ShapeLit(tuple(f(d) for d in v.dims)) if isinstance(v, ShapeLit) else v)
                  for b in prog.binds)
    dims = tuple((n, v) for n, v in prog.dims if n != name)
    return replace(prog, params=params, binds=binds, dims=dims)


def _subst_size(prog: Program, old: int, new: int) -> Program:
    params = tuple(replace(p, shape=_sub_dims(p.shape, old, new)) for p in prog.params)

    def fix(k, v):
        if isinstance(v, ShapeLit):
            return ShapeLit(_sub_dims(v.dims, old, new))
        if k in ("end",) and isinstance(v, list):
            return [new if x == old else x for x in v]
        return v

    binds = tuple(_map_attrs(b, fix) for b in prog.binds)
    return replace(prog, params=params, binds=binds)


def _size(case: Case) -> tuple:
    p = case.program
    shapes = sum(d if isinstance(d, int) else d[0] * 8 for q in p.params for d in q.shape)
    mesh = sum(m.ndim * 4 + (0 if m.ids is None else 2) + (0 if m.start == Lin(0) else 1) for m in p.meshes)
    pls = sum(1 for q in p.params for s in (q.placement.specs if q.placement else ()) if s != "R")
    return (len(p.binds), len(p.outputs), len(p.params), mesh, len(case.workers), max(case.workers, default=0),
            shapes, pls, len(p.dims), case.seed)


def shrink(case: Case, target: Outcome, opts: Options, budget: float = 60.0, max_runs: int = 400,
           tvm: TvmRunner | None = None, log=None) -> tuple[Case, Outcome, int]:
    """Greedy shrinking: take the first smaller variant that fails the same way, repeat."""
    deadline = time.perf_counter() + budget
    # a failure before specialization happens at every count; one of a dead TVM process at an unknown one
    if target.workers is not None:
        ws = (target.workers,)
    elif target.stage == "tvm":
        ws = case.workers
    else:
        ws = case.workers[:1]
    best = replace(case, workers=ws)
    best_outcome = target
    runs = 0

    def same(c: Case) -> Outcome | None:
        nonlocal runs
        runs += 1
        if target.stage.startswith("tvm"):
            if tvm is None:
                return None
            outs = tvm.run(c, opts)
        else:
            outs = execute(c, opts).outcomes
        for o in outs:
            # the same failure, and no drifting from layouts that divide to layouts that do not
            if o.key == target.key and (target.valid is not True or o.valid is True):
                return o
        return None

    first = same(best)
    if first is None:  # flaky or depends on another count: keep the case as found
        return replace(case), target, runs
    best_outcome = first
    progress = True
    while progress and time.perf_counter() < deadline and runs < max_runs:
        progress = False
        for cand in _candidates(best):
            if time.perf_counter() > deadline or runs >= max_runs:
                break
            if _size(cand) >= _size(best):
                continue
            o = same(cand)
            if o is not None:
                best, best_outcome, progress = cand, o, True
                if log:
                    log(f"    shrunk to {len(best.program.binds)} bindings, {len(best.program.params)} params")
                break
    return best, best_outcome, runs


# ----------------------------------------------------------------------------- reproducers

HEADER_RE = re.compile(r"^# fuzz: (.*)$", re.MULTILINE)


def repro_text(case: Case, outcome: Outcome, note: str = "", path: str = "REPRO.ir") -> str:
    w = case.workers[0] if case.workers else 1
    dims = " ".join(f"--bind {n}={v}" for n, v in case.program.dims)
    backend = " --backend tvm" if outcome.stage.startswith("tvm") else ""
    costs = getattr(case.program, "costs", "")
    meta = f"workers={','.join(map(str, case.workers))} seed={case.seed}" + "".join(
        f" {n}={v}" for n, v in case.program.dims) + (f" axis_costs={costs}" if costs else "") + (
        f" values={case.program.values}" if getattr(case.program, "values", "") else "")
    msg = "\n".join("#   " + ln for ln in (outcome.message.strip().splitlines() or [""])[:12])
    det = "\n".join("#   " + ln for ln in outcome.detail.strip().splitlines()[:12]) if outcome.detail else ""
    lines = [
        f"# distir fuzz reproducer: {outcome.cls} at {outcome.stage}"
        + (f", num_workers={outcome.workers}" if outcome.workers is not None else ""),
        f"# found by: python scripts/fuzz.py {case.origin}{note}",
        "# message:",
        msg,
    ]
    if det:
        lines += ["# detail:", det]
    lines += [
        "# reproduce:",
        f"#   PYTHONPATH=python python scripts/fuzz.py --replay {path}" + (" --tvm" if backend else ""),
        # a module on static meshes only has no count to set: `distir run` refuses -n there
        f"#   distir run {path}{f' -n {w}' if case.program.uses_workers() else ''} --seed {case.seed}"
        f"{(' ' + dims) if dims else ''}{backend}" if not costs else
        f"#   distir-opt {path} -p distribute" + "".join(f" --axis-cost {c}" for c in costs.split(",")),
        f"# fuzz: {meta}",
        "",
    ]
    return "\n".join(lines) + case.text


def read_repro(path: str) -> tuple[str, dict]:
    with open(path) as f:
        text = f.read()
    meta = {}
    m = HEADER_RE.search(text)
    if m:
        for item in m.group(1).split():
            k, _, v = item.partition("=")
            meta[k] = v
    return text, meta


# a reproducer header's keys that are not run-time sizes; expect=refusal marks a finding fixed by
# making it a clean one-line refusal (a documented limitation) rather than computing it
META_KEYS = ("workers", "seed", "axis_costs", "expect", "values")


def repro_case(path: str, workers=None, seed: int | None = None, binds=()) -> Case:
    """The case a reproducer file states (its header: counts, input seed, run-time sizes, axis costs)."""
    import distir

    text, meta = read_repro(path)
    workers = workers or [int(x) for x in meta.get("workers", "1").split(",")]
    seed = int(meta.get("seed", 0)) if seed is None else seed
    dims = {k: int(v) for k, v in meta.items() if k not in META_KEYS}
    for b in binds:
        k, _, v = b.partition("=")
        dims[k] = int(v)
    prog = _TextProgram(text, dims, distir.parse(text), meta.get("axis_costs", ""), meta.get("values", ""))
    return Case(prog, tuple(workers), seed, origin=path)


def replay(path: str, args, opts: Options) -> int:
    """Re-run a written reproducer (its header says the counts, seed and run-time sizes)."""
    case = repro_case(path, _parse_workers(args.workers) if args.workers_given else None, args.input_seed, args.bind)
    workers, seed, dims, costs = list(case.workers), case.seed, case.program.dim_values, case.program.costs
    print(f"replaying {path}: num_workers {workers}, seed {seed}" + (f", {dims}" if dims else "")
          + (f", axis costs {costs}" if costs else ""))
    res = execute(case, opts, verbose=args.verbose)
    outs = list(res.outcomes)
    if args.tvm:
        runner = TvmRunner(per_count=args.tvm_per_count)
        try:
            outs += runner.run(case, opts)
        finally:
            runner.close()
    for i, o in enumerate(outs):
        if not args.verbose or i >= len(res.outcomes):  # verbose: the simulator's lines are printed already
            print(o.line())
        if o.detail and o.cls in FAILURES:
            print("  " + o.detail.strip().replace("\n", "\n  "))
    cls = min((o.cls for o in outs), key=SEVERITY.__getitem__, default="OK")
    print(f"class: {cls}")
    return 1 if cls in FATAL else 0


@dataclass(frozen=True)
class _TextProgram:
    """A program given as text (a replayed file): enough of Program for execute()."""

    text: str
    dims: dict
    mod: object
    costs: str = ""
    values: str = ""

    def render(self) -> str:
        return self.text

    @property
    def dim_values(self) -> dict:
        return dict(self.dims)

    def uses_workers(self) -> bool:
        return NW in self.text


# ----------------------------------------------------------------------------- the driver


def _parse_workers(text: str) -> list[int]:
    out = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            out.update(range(int(a), int(b) + 1))
        else:
            out.add(int(part))
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"expected worker counts like 1-8 or 1,2,4,8, got '{text}'")
    return sorted(out)


_WORKER_STATE: dict = {}


def _pool_init(state):
    _WORKER_STATE.update(state)
    warnings.simplefilter("ignore")


def _pool_run(index):
    s = _WORKER_STATE
    case = generate_case(s["seed"], index, s["cfg"])
    return index, execute(case, s["opts"])


class Stats:
    def __init__(self):
        self.cases = Counter()
        self.runs = Counter()
        self.refusals = Counter()
        self.suspects = Counter()
        self.invalid = Counter()
        self.n = 0
        self.case_seconds = 0.0

    def add(self, res: CaseResult):
        self.n += 1
        self.case_seconds += res.seconds
        self.cases[res.cls] += 1
        for o in res.outcomes:
            self.runs[o.cls] += 1
            if o.cls == "CLEAN-REFUSAL":
                self.refusals[f"{o.stage}: {_words(o.message, 20)}"] += 1
            elif o.cls == "SUSPECT-REFUSAL":
                self.suspects[f"{o.stage}: {_words(o.message, 20)}"] += 1
            elif o.cls == "INVALID":
                self.invalid[f"{o.stage}: {_words(o.message, 20)}"] += 1

    def counts_line(self) -> str:
        return "  ".join(f"{c} {self.cases[c]}" for c in CLASSES if self.cases[c])


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="scripts/fuzz.py", description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_argument_group("how much")
    g.add_argument("--cases", type=int, help="number of cases (default 200 unless --minutes is given)")
    g.add_argument("--minutes", type=float, help="fuzz for this long (shrinking included); with --cases, whichever ends first")
    g.add_argument("--seed", type=int, default=0, help="run seed: case I of seed S is the same program everywhere (default 0)")
    g.add_argument("--start", type=int, default=0, help="first case index (default 0)")
    g.add_argument("--only", type=int, action="append", metavar="I",
                   help="run only case I of --seed, verbosely (repeatable)")
    g.add_argument("--jobs", "-j", type=int, default=1, help="processes running cases in parallel (default 1)")
    g = ap.add_argument_group("what")
    g.add_argument("--workers", default="1-8", help="num_workers values to specialize to, e.g. 1-8 or 1,2,3,4,8 (default 1-8)")
    g.add_argument("--counts-per-case", type=int, default=3, metavar="K",
                   help="device counts tried per case, drawn from --workers (default 3)")
    g.add_argument("--max-ops", type=int, default=8, help="most ops per program (default 8)")
    g.add_argument("--max-devices", type=int, default=16, help="most simulated devices (default 16)")
    g.add_argument("--even-only", action="store_true",
                   help="only device counts at which every stated layout divides evenly (tells uneven-layout "
                        "bugs from others)")
    g.add_argument("--device-lists", choices=("any", "ordered", "none"), default="any",
                   help="explicit device lists of static meshes: any (out of order, with gaps; default), "
                        "ordered (ascending), none (ranges only)")
    g.add_argument("--strided", action="store_true",
                   help="also strided shards S[d/k]: parameters, hints and redistributes, fused-QKV chains (matmul, "
                        "reshapes that split and merge the strided dim), meshes of 6 and 7 devices")
    g.add_argument("--axis-costs", action="store_true",
                   help="sometimes plan by time: random per-mesh-axis costs when every mesh has two or more axes")
    g.add_argument("--dtypes", action="store_true",
                   help="dtype-directed cases: int8/int16/int32/int64/uint8/bool/float16/bfloat16/float32/float64 "
                   "programs, partials of every kind the dtype holds, inputs at the ends of each dtype's range, "
                   "integer and bool results compared exactly")
    g = ap.add_argument_group("block layouts, two meshes, time (issue 22)")
    g.add_argument("--blocks", action="store_true",
                   help="also block layouts B[...]: parameters, hints and redistributes to and from them (tensors up to "
                        "160 x 160, run-time dims), elementwise ops and reductions on the chunks")
    g.add_argument("--cross", action="store_true",
                   help="two meshes in every program (the same devices in another grid, overlapping ranges, or the next "
                        "stage; e.g. (num_workers, 2) and (2, num_workers, 3)) and more values moved between them")
    g.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help="a case still running after this much CPU time is stopped and counted SLOW, a failure class of "
                        "its own (named after the stage it was in); replaces --timeout")
    g = ap.add_argument_group("backends and checks")
    g.add_argument("--tvm", action="store_true", help="also export to TVM, build and run on Disco (slow: ~1-2 s per case)")
    g.add_argument("--tvm-per-count", action="store_true",
                   help="with --tvm: BindSymbolicVars + tvm.compile per count instead of one symbolic build")
    g.add_argument("--no-cost", action="store_true", help="do not compare the simulator's bytes with the cost model")
    g.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (default 1e-4)")
    g.add_argument("--atol", type=float, default=1e-4,
                   help="absolute tolerance, relative to the largest expected magnitude (default 1e-4)")
    g.add_argument("--timeout", type=float, default=30.0, help="seconds per case before it counts as a CRASH (default 30)")
    g = ap.add_argument_group("output")
    g.add_argument("--out", default="fuzz-out", help="folder for reproducers and summary.json (default fuzz-out)")
    g.add_argument("--no-shrink", action="store_true", help="write failures as found, without shrinking")
    g.add_argument("--shrink-seconds", type=float, default=60.0, help="time to shrink one failure (default 60)")
    g.add_argument("--max-shrinks", type=int, default=3,
                   help="failures shrunk per kind of failure (same stage and message gist), default 3")
    g.add_argument("--suspects", action="store_true", help="also shrink and write SUSPECT-REFUSAL and COST-MISMATCH cases")
    g.add_argument("--print", action="store_true", dest="print_only", help="with --only: print the program and stop")
    g.add_argument("--replay", metavar="FILE", help="re-run a reproducer written by the fuzzer (or any IR file)")
    g.add_argument("--bind", action="append", default=[], metavar="NAME=INT", help="with --replay: a run-time size")
    g.add_argument("--input-seed", type=int, help="with --replay: seed of the inputs (default: the file's)")
    g.add_argument("-v", "--verbose", action="store_true", help="print every case's outcome")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    args = ap.parse_args(argv)
    args.workers_given = any(a == "--workers" or a.startswith("--workers=") for a in (argv or sys.argv[1:]))
    workers = _parse_workers(args.workers)
    opts = Options(rtol=args.rtol, atol=args.atol, timeout=args.timeout, check_cost=not args.no_cost)
    cfg = GenConfig(tuple(workers), args.counts_per_case, args.max_ops, args.max_devices, args.even_only, args.device_lists,
                    args.strided, args.axis_costs, dtypes=args.dtypes)
    cfg, opts = _issue22_options(args, cfg, opts)
    warnings.simplefilter("ignore")

    if args.replay:
        return replay(args.replay, args, opts)

    if args.only:
        worst = "OK"
        tvm = TvmRunner(per_count=args.tvm_per_count) if args.tvm else None
        for i in args.only:
            case = generate_case(args.seed, i, cfg)
            print(f"# {case.origin}: num_workers {list(case.workers)}, input seed {case.seed}, "
                  f"run-time sizes {case.program.dim_values or 'none'}")
            print(case.text)
            if args.print_only:
                continue
            res = execute(case, opts, verbose=True)
            outs = list(res.outcomes) + (tvm.run(case, opts) if tvm else [])
            for o in outs:
                if o.cls in FAILURES and o.detail:
                    print("  " + o.detail.strip().replace("\n", "\n  "))
            cls = min((o.cls for o in outs), key=SEVERITY.__getitem__, default="OK")
            print(f"class: {cls}  ({res.seconds * 1e3:.0f} ms)")
            worst = min(worst, cls, key=SEVERITY.__getitem__)
        if tvm:
            tvm.close()
        return 1 if worst in FATAL else 0

    return fuzz(args, cfg, opts)


def _issue22_options(args, cfg: GenConfig, opts: Options) -> tuple[GenConfig, Options]:
    """--blocks and --cross (what the generator writes) and --time-limit (SLOW cases)."""
    cfg = replace(cfg, blocks=args.blocks, cross=args.cross)
    if args.time_limit:
        opts = replace(opts, timeout=args.time_limit, slow=True)
    return cfg, opts


def fuzz(args, cfg: GenConfig, opts) -> int:
    n_cases = args.cases if args.cases is not None else (None if args.minutes else 200)
    t_start = time.perf_counter()
    deadline = t_start + args.minutes * 60 if args.minutes else None
    os.makedirs(args.out, exist_ok=True)
    stats = Stats()
    tvm = TvmRunner(per_count=args.tvm_per_count) if args.tvm else None
    shrink_tasks: dict[str, int] = Counter()
    found: list[dict] = []
    shrink_seconds = 0.0
    last_print = t_start
    tty = sys.stderr.isatty() and not args.verbose

    def log(msg):
        if not args.quiet:
            if tty:
                sys.stderr.write("\r\033[K")
            print(msg, file=sys.stderr, flush=True)

    def progress(force=False):
        nonlocal last_print
        now = time.perf_counter()
        if args.quiet or (not force and now - last_print < (0.5 if tty else 10)):
            return
        last_print = now
        el = now - t_start
        rate = stats.n / max(el - shrink_seconds, 1e-9)
        line = f"[{el:6.0f}s] {stats.n} cases, {rate:.1f} cases/s  {stats.counts_line()}"
        if tty:
            sys.stderr.write("\r\033[K" + line[:200])
            sys.stderr.flush()
        else:
            print(line, file=sys.stderr, flush=True)

    def indices():
        i = args.start
        while n_cases is None or i < args.start + n_cases:
            yield i
            i += 1

    def results():
        if args.jobs <= 1:
            for i in indices():
                if deadline and time.perf_counter() > deadline:
                    return
                case = generate_case(args.seed, i, cfg)
                yield i, execute(case, opts)
            return
        import concurrent.futures as cf
        import multiprocessing as mp

        state = {"seed": args.seed, "cfg": cfg, "opts": opts}
        with cf.ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("fork"), initializer=_pool_init,
                                    initargs=(state,)) as ex:
            it = indices()
            pending = []
            for i in it:
                pending.append(ex.submit(_pool_run, i))
                if len(pending) >= 4 * args.jobs:
                    break
            while pending:
                fut = pending.pop(0)
                yield fut.result()
                if deadline and time.perf_counter() > deadline:
                    for f in pending:
                        f.cancel()
                    return
                nxt = next(it, None)
                if nxt is not None:
                    pending.append(ex.submit(_pool_run, nxt))

    try:
        for i, res in results():
            if tvm is not None and not any(o.cls == "INVALID" or o.stage in ("parse", "reference") for o in res.outcomes):
                res.outcomes += tvm.run(res.case, opts)
            stats.add(res)
            if args.verbose:
                log(f"case {i}: {res.cls}" + "".join(f"\n    {o.line()}" for o in res.outcomes if o.cls != "OK"))
            wanted = FATAL + (("COST-MISMATCH", "SUSPECT-REFUSAL") if args.suspects else ())
            keys_here = set()
            for o in res.outcomes:
                if o.cls not in FAILURES or o.key in keys_here:
                    continue  # one record per kind of failure and case (not one per device count)
                keys_here.add(o.key)
                key = o.key
                bucket = _bucket(res.case, o)
                rec = {"case": i, "cls": o.cls, "stage": o.stage, "workers": o.workers, "key": key,
                       "message": o.message[:2000], "origin": res.case.origin}
                found.append(rec)
                if o.cls not in wanted or shrink_tasks[bucket] >= args.max_shrinks:
                    continue
                shrink_tasks[bucket] += 1
                log(f"case {i}: {o.line()}")
                t0 = time.perf_counter()
                if args.no_shrink:
                    small, so, runs = replace(res.case, workers=(o.workers,) if o.workers else res.case.workers), o, 0
                else:
                    budget = args.shrink_seconds
                    if deadline:
                        budget = max(1.0, min(budget, deadline - time.perf_counter()))
                    small, so, runs = shrink(res.case, o, opts, budget=budget, tvm=tvm)
                shrink_seconds += time.perf_counter() - t0
                n = sum(1 for r in found if r.get("file")) + 1
                name = f"{o.cls.lower()}-{n:03d}-{_slug(o.stage + '-' + _words(o.message, 5))}"
                path = os.path.join(args.out, name + ".ir")
                note = (f", shrunk from {len(res.case.program.binds)} to {len(small.program.binds)} bindings in "
                        f"{runs} runs") if not args.no_shrink else ""
                with open(path, "w") as f:
                    f.write(repro_text(small, so, note, path))
                with open(os.path.join(args.out, name + ".orig.ir"), "w") as f:
                    f.write(repro_text(replace(res.case, workers=(o.workers,) if o.workers else res.case.workers),
                                       o, " (as found)", os.path.join(args.out, name + ".orig.ir")))
                rec.update(file=path, shrunk_message=so.message[:2000], signature=_signature(small, so))
                log(f"    -> {path} ({len(small.program.binds)} bindings, {runs} runs)")
            progress()
    except KeyboardInterrupt:
        log("interrupted")
    finally:
        if tvm is not None:
            tvm.close()
    progress(force=True)
    if tty and not args.quiet:
        sys.stderr.write("\n")
    elapsed = time.perf_counter() - t_start
    return _summary(args, stats, found, elapsed, shrink_seconds)


def _mesh_features(p) -> list[str]:
    out = []
    for m in p.meshes:
        if m.ids is not None and list(m.ids) != list(range(min(m.ids), min(m.ids) + len(m.ids))):
            out.append("device list out of order or with gaps")
            break
    if len(p.meshes) > 1:
        out.append("two meshes")
    return out


def _bucket(case: Case, o: Outcome) -> str:
    """A failure's kind for deciding whether to shrink another one: its key plus the case's
    features that often make a different bug (device lists, uneven layouts, two meshes)."""
    feats = _mesh_features(case.program)
    if o.valid is False:
        feats.append("uneven")
    return o.key + "|" + ",".join(feats)


def _signature(case: Case, o: Outcome) -> str:
    """What a minimized failure looks like, to group failures that are likely one bug."""
    p = case.program
    ops = sorted({b.op.replace("R.", "") for b in p.binds} - {"item"})
    meshes = "; ".join(m.describe() for m in p.meshes)
    if o.cls == "WRONG-NUMBER":
        valid = "stated layouts divide" if o.valid is not False else "stated layouts do not divide"
        dyn = "run-time sizes" if p.dims else "static sizes"
        return f"{o.cls}|{o.stage}|{','.join(ops)}|{meshes}|{valid}|{dyn}"
    return o.key + "|" + ",".join(_mesh_features(p))


def _summary(args, stats: Stats, found: list, elapsed: float, shrink_seconds: float) -> int:
    fuzz_s = max(elapsed - shrink_seconds, 1e-9)
    print()
    print(f"distir fuzz: seed {args.seed}, {stats.n} cases in {elapsed:.1f} s "
          f"({stats.n / fuzz_s:.1f} cases/s fuzzing, {shrink_seconds:.1f} s shrinking; "
          f"{stats.case_seconds / max(stats.n, 1) * 1e3:.0f} ms per case)")
    print("cases by class (a case's class is its worst over its device counts):")
    for c in CLASSES:
        if stats.cases[c]:
            print(f"  {c:16} {stats.cases[c]:6}   (runs: {stats.runs[c]})")
    for title, counter in (("clean refusals", stats.refusals), ("suspect refusals", stats.suspects),
                           ("invalid programs (generator)", stats.invalid)):
        if counter:
            print(f"{title}, most common messages:")
            for msg, n in counter.most_common(8):
                print(f"  {n:5}  {msg[:150]}")
    written = [r for r in found if r.get("file")]
    if found:
        groups = Counter(r["key"] for r in found)
        print(f"failures: {len(found)} ({len(groups)} kinds by stage and message gist)")
        for k, n in groups.most_common(20):
            print(f"  {n:5}  {k[:160]}")
    if written:
        print("reproducers (shrunk):")
        seen = {}
        for r in written:
            seen.setdefault(r["signature"], r)
        for r in seen.values():
            print(f"  {r['file']}: {r['cls']} at {r['stage']}, {r['origin']}")
            print(f"      {(r.get('shrunk_message') or r['message']).strip().splitlines()[0][:200]}")
    summary = {"seed": args.seed, "cases": stats.n, "seconds": elapsed, "shrink_seconds": shrink_seconds,
               "cases_per_second": stats.n / fuzz_s, "classes": dict(stats.cases), "runs": dict(stats.runs),
               "refusals": dict(stats.refusals.most_common(50)), "suspects": dict(stats.suspects.most_common(50)),
               "invalid": dict(stats.invalid.most_common(50)), "failures": found}
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    fatal = sum(stats.cases[c] for c in FATAL)
    print(f"summary written to {os.path.join(args.out, 'summary.json')}; "
          + (f"{' or '.join(FATAL)} found: exit 1" if fatal else f"no {' or '.join(FATAL)}"))
    return 1 if fatal else 0


if __name__ == "__main__":
    sys.exit(main())
