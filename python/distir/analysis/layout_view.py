"""Pictures of how a tensor lies over a device mesh, like JAX's ``visualize_array_sharding``.

:func:`layout_grid` cuts a DTensor into the blocks its placement makes, at concrete mesh
sizes, and says which devices hold each block: one device (``3``), replicas (``0-3``),
or partial values whose reduction is the block (``sum(0-1)``; with replicas of partial
values, ``sum(0,2), sum(1,3)``). A 2-D tensor is drawn rows by columns, a 1-D tensor as a
row; for more dims the (at most two) sharded dims are drawn and the others are whole in
every block. The grid renders as plain text (:meth:`LayoutGrid.text`, stable for golden
tests), as a rich renderable with a colour per holder (:meth:`LayoutGrid.rich`), or as a
PNG (:func:`write_png`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..ir import sym
from ..ir.layout import block_index, concrete_mesh_shape, mesh_coords
from ..ir.placement import Placement, Replicate
from ..ir.sym import Dim
from ..ir.types import DTensorType, TensorType, shape_str
from .common import AnalysisError

__all__ = ["LayoutGrid", "layout_grid", "write_png"]


def _ranges(ids: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    out: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if j == i else f"{ids[i]}{',' if j == i + 1 else '-'}{ids[j]}")
        i = j + 1
    return ",".join(out)


@dataclass(frozen=True)
class LayoutGrid:
    """The blocks of one tensor: ``cells[r][c]`` is the label of who holds block (r, c)."""

    name: str
    tensor: DTensorType
    mesh_name: str
    sizes: tuple[int, ...]  # concrete mesh sizes
    grid_dims: tuple[int, ...]  # tensor dims drawn as rows (and columns); () for a scalar
    cells: tuple[tuple[str, ...], ...]
    block_shape: tuple[Dim, ...]
    values: Mapping[str, int]

    @property
    def rows(self) -> int:
        return len(self.cells)

    @property
    def cols(self) -> int:
        return len(self.cells[0]) if self.cells else 0

    def title(self) -> str:
        t = self.tensor
        binding = ", ".join(f"{k}={v}" for k, v in self.values.items())
        mesh = "(" + ", ".join(str(s) for s in self.sizes) + ("," if len(self.sizes) == 1 else "") + ")"
        n_blocks = self.rows * self.cols
        blocks = "1 block" if n_blocks == 1 else f"{n_blocks} blocks"
        return (
            f'{self.name}: {shape_str(t.shape)} {t.dtype}, "{t.placement}" on {self.mesh_name} {mesh}'
            f"{' (' + binding + ')' if binding else ''}: {blocks} of {shape_str(self.block_shape)}"
        )

    def notes(self) -> list[str]:
        out = []
        if len(self.grid_dims) == 2 and self.tensor.ndim > 2:
            out.append(f"rows: dim {self.grid_dims[0]}, columns: dim {self.grid_dims[1]}")
        elif len(self.grid_dims) == 1 and self.tensor.ndim > 1:
            out.append(f"blocks along dim {self.grid_dims[0]}")
        whole = [d for d in range(self.tensor.ndim) if d not in self.grid_dims]
        if whole and self.tensor.ndim > 1:
            out.append(f"dim{'s' if len(whole) > 1 else ''} {', '.join(map(str, whole))} whole in every block")
        p = self.tensor.placement
        if p.has_partial:
            op = p[p.partial_axes()[0]].op
            out.append(f"{op}(a,b): devices a and b each hold a partial value; the block is their {op}")
        return out

    def text(self) -> str:
        """The grid in plain ASCII (stable: golden tests compare it)."""
        width = max(9, max(len(c) for row in self.cells for c in row) + 4)
        height = 3 if self.rows <= 4 else 1
        border = "+" + "+".join("-" * width for _ in range(self.cols)) + "+"
        lines = [self.title(), border]
        for row in self.cells:
            for k in range(height):
                mid = k == height // 2
                lines.append("|" + "|".join((c if mid else "").center(width) for c in row) + "|")
            lines.append(border)
        lines.extend(f"  {n}" for n in self.notes())
        return "\n".join(lines)

    def rich(self):
        """A rich renderable: the grid as a table, one background colour per holder."""
        from rich import box
        from rich.align import Align
        from rich.console import Group
        from rich.padding import Padding
        from rich.table import Table
        from rich.text import Text

        colours = _colour_map(self.cells)
        pad = (1, 2) if self.rows <= 4 else (0, 2)
        table = Table(show_header=False, show_lines=True, box=box.SQUARE, padding=0, pad_edge=False)
        for _ in range(self.cols):
            table.add_column(justify="center", min_width=9)
        for row in self.cells:
            table.add_row(*(
                Padding(Align(Text(c, style="bold"), "center"), pad, style=f"black on {colours[c]}", expand=True)
                for c in row
            ))
        notes = [Text("  " + n, style="dim") for n in self.notes()]
        return Group(Text(self.title(), style="bold"), table, *notes)


_PALETTE = ("#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5",
            "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f")


def _colour_map(cells) -> dict[str, str]:
    out: dict[str, str] = {}
    for row in cells:
        for c in row:
            if c not in out:
                out[c] = _PALETTE[len(out) % len(_PALETTE)]
    return out


def _as_dtensor(t, mesh, what: str) -> DTensorType:
    if isinstance(t, DTensorType):
        return t
    if isinstance(t, TensorType):
        if mesh is None:
            raise AnalysisError(f"{what} is not distributed and the module has no device mesh to draw it on")
        return DTensorType(t.shape, t.dtype, mesh, Placement((Replicate(),) * mesh.ndim))
    raise AnalysisError(f"{what} is a {t}, not a tensor; name a tensor")


def layout_grid(name: str, t, values: Mapping[str, int], *, mesh_name: str = "", default_mesh=None) -> LayoutGrid:
    """The blocks of tensor ``name`` of type ``t`` at sizes ``values``; see the module docstring.

    A plain tensor is drawn replicated on ``default_mesh`` (every worker holds all of it).
    """
    t = _as_dtensor(t, default_mesh, f"'{name}'")
    try:
        sizes = concrete_mesh_shape(t.mesh, values)
        devices = t.mesh.device_list(dict(values))
    except sym.SymbolicError as err:
        raise AnalysisError(f"'{name}': the mesh {t.mesh.shape_str()} is symbolic ({err}); give --num-workers") from None
    placement = t.placement
    sharded = [d for d in range(t.ndim) if placement.mesh_axes_of(d)]
    if len(sharded) > 2:
        raise AnalysisError(f"'{name}' is sharded on {len(sharded)} dims ({placement}); a picture shows two at most")
    if t.ndim <= 2:
        grid_dims = tuple(range(t.ndim))
    elif len(sharded) == 2:
        grid_dims = tuple(sharded)
    elif len(sharded) == 1:
        grid_dims = (sharded[0],)
    else:
        grid_dims = (t.ndim - 2, t.ndim - 1)
    counts = [1] * t.ndim
    partial_axes = placement.partial_axes()
    replica_axes = [a for a, s in enumerate(placement.specs) if isinstance(s, Replicate)]
    holders: dict[tuple[int, ...], dict[tuple[int, ...], list[int]]] = {}
    for pos, dev in enumerate(devices):
        coords = mesh_coords(pos, sizes)
        index = []
        for d in range(t.ndim):
            b, c = block_index(placement, d, coords, sizes)
            counts[d] = c
            index.append(b)
        cell = tuple(index[d] for d in grid_dims)
        replica = tuple(coords[a] for a in replica_axes)
        holders.setdefault(cell, {}).setdefault(replica, []).append(dev)
    shape = [counts[d] for d in grid_dims] + [1] * (2 - len(grid_dims))
    if len(grid_dims) == 1:
        shape = [1, counts[grid_dims[0]]]  # one row of blocks
    op = placement[partial_axes[0]].op if partial_axes else None
    cells = []
    for r in range(shape[0]):
        row = []
        for c in range(shape[1]):
            key = (c,) if len(grid_dims) == 1 else (r, c) if len(grid_dims) == 2 else ()
            row.append(_label(holders.get(key, {}), op))
        cells.append(tuple(row))
    block = tuple(
        sym.substitute(sym.floordiv(d, counts[i]), dict(values)) if counts[i] > 1 else sym.substitute(d, dict(values))
        for i, d in enumerate(t.shape)
    )
    if not mesh_name:
        mesh_name = f"mesh {t.mesh.shape_str()}"
    return LayoutGrid(name, t, mesh_name, sizes, grid_dims, tuple(cells), block, dict(values))


def _label(replicas: dict[tuple[int, ...], list[int]], op: str | None) -> str:
    groups = [sorted(v) for _, v in sorted(replicas.items())]
    if op is None:
        return _ranges(sorted(d for g in groups for d in g))
    return ", ".join(f"{op}({_ranges(g)})" for g in groups)


def write_png(grids: list[LayoutGrid], path: str) -> None:
    """Draw each grid as coloured blocks labelled with their holders, one panel per tensor."""
    from ..errors import DistirError

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError:
        raise DistirError("--png needs matplotlib (pip install matplotlib)") from None
    n = len(grids)
    fig, axes = plt.subplots(n, 1, figsize=(6.4, 3.2 * n), squeeze=False)
    for ax, g in zip(axes[:, 0], grids):
        colours = _colour_map(g.cells)
        w, h = 1.0 / g.cols, 1.0 / g.rows
        for r, row in enumerate(g.cells):
            for c, label in enumerate(row):
                y = 1.0 - (r + 1) * h
                ax.add_patch(Rectangle((c * w, y), w, h, facecolor=colours[label], edgecolor="black", linewidth=1.2))
                size = max(6, min(14, int(70 / max(g.cols, g.rows) / max(1, len(label) / 6))))
                ax.text(c * w + w / 2, y + h / 2, label, ha="center", va="center", fontsize=size)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_aspect("auto")
        ax.set_title(g.title(), fontsize=9)
        notes = g.notes()
        if notes:
            ax.set_xlabel("; ".join(notes), fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as err:
        raise DistirError(f"cannot write '{path}': {err}") from None
    finally:
        plt.close(fig)
