"""The program model: meshes, placements, bindings and the IR text they print."""


from __future__ import annotations

from dataclasses import dataclass, replace

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
