"""The generator: random distributed programs (meshes, layouts, op chains, hints) from a seed."""


from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar

from .model import NW, Bind, Lin, Mesh, MeshRef, Param, Pl, Program, Raw, Ref, ShapeLit, Tup, dim_value

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


