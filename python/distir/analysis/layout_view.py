"""Pictures of how a tensor lies over a device mesh, like JAX's ``visualize_array_sharding``.

:func:`layout_grid` cuts a DTensor into the blocks its placement makes, at concrete mesh
sizes, and says which devices hold each block: one device (``3``), replicas (``0-3``),
or partial values whose reduction is the block (``sum(0-1)``; with replicas of partial
values, ``sum(0,2), sum(1,3)``). A 2-D tensor is drawn rows by columns, a 1-D tensor as a
row; for more dims the (at most two) sharded dims are drawn and the others are whole in
every block. The grid renders as plain text (:meth:`LayoutGrid.text`, stable for golden
tests), as a rich renderable with a colour per holder (:meth:`LayoutGrid.rich`), or as a
PNG (:func:`write_png`).

A block layout (``B[...]``, docs/blocks.md) is drawn chunk by chunk, each chunk labelled with
the device it is dealt to: a 1-D or 2-D tensor as one grid, a 3-D tensor as a row of 2-D
slices (one per chunk along dim 0; rows: dim 1, columns: dim 2).

The work is bounded: a mesh of more than :data:`MAX_DEVICES` devices is summarized (the
title: how many blocks of which shape) rather than drawn, and a grid of more than
:data:`MAX_ROWS` rows or :data:`MAX_COLS` columns of blocks shows its first and last
ones with ``...`` between.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import DistirError
from ..ir import sym
from ..ir.layout import block_index, block_of, concrete_block, concrete_mesh_shape, mesh_coords
from ..ir.placement import Placement, Replicate
from ..ir.sym import Dim
from ..ir.types import DTensorType, TensorType, shape_str
from .errors import AnalysisError

__all__ = ["MAX_COLS", "MAX_DEVICES", "MAX_ROWS", "MAX_SLICES", "LayoutGrid", "layout_grid", "write_png"]

MAX_DEVICES = 4096  # larger meshes are summarized, not drawn (the picture costs a step per device)
MAX_ROWS = 32  # rows of blocks drawn; more are elided in the middle
MAX_COLS = 16  # columns of blocks drawn
MAX_LABEL = 40  # characters of a cell's label drawn
MAX_SLICES = 12  # 2-D slices of a 3-D block layout drawn
PNG_COLUMNS = 4  # panels per row of the PNG
PANEL_INCHES = (4.2, 2.9)  # one panel; at PNG_DPI four across are 1680 pixels
PNG_DPI = 100
TITLE_CHARS = 52  # a panel's title is wrapped at this width (9 pt: readable at 100%)
ELIDED = "..."
EMPTY = "(empty)"  # appended to the holders of a block with no elements (a count above the size)


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
    cells: tuple[tuple[str, ...], ...]  # () when the mesh is too large to draw (see ``summarized``)
    block_shape: tuple[Dim, ...]
    values: Mapping[str, int]
    grid_shape: tuple[int, int] = (0, 0)  # rows and columns of blocks (also when not drawn)
    row_extents: tuple[int, ...] = ()  # elements in each row of blocks (along the row dim)
    col_extents: tuple[int, ...] = ()  # elements in each column of blocks
    extents: tuple[Dim, ...] = ()  # the tensor's shape at ``values`` (symbolic only where whole in every block)
    slices: tuple[str, ...] = ()  # a 3-D block layout: the heading of each 2-D slice (cells: the slices side by side)
    slice_extents: tuple[int, ...] = ()  # elements of dim 0 in each slice

    @property
    def rows(self) -> int:
        return self.grid_shape[0] if self.grid_shape != (0, 0) else len(self.cells)

    @property
    def cols(self) -> int:
        return self.grid_shape[1] if self.grid_shape != (0, 0) else (len(self.cells[0]) if self.cells else 0)

    @property
    def summarized(self) -> bool:
        """True when the mesh had more than MAX_DEVICES devices: only the title says what the blocks are."""
        return not self.cells

    @property
    def num_devices(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n

    def shown(self) -> list[list[str]]:
        """The labels drawn: at most MAX_ROWS x MAX_COLS cells, ``...`` where rows or columns are left out."""
        rows, cols = _visible(self.rows, MAX_ROWS), _visible(self.cols, MAX_COLS)
        out = []
        for r in rows:
            if r is None:
                out.append([ELIDED] * len(cols))
            else:
                out.append([ELIDED if c is None else _clip(self.cells[r][c]) for c in cols])
        return out

    @property
    def is_block(self) -> bool:
        return self.tensor.placement.is_block

    def slice_cols(self) -> int:
        """Columns of chunks in each 2-D slice of a 3-D block layout."""
        return self.cols // max(1, len(self.slices))

    def title(self) -> str:
        t = self.tensor
        if self.is_block:
            return self._block_title()
        binding = ", ".join(f"{k}={v}" for k, v in self.values.items())
        mesh = "(" + ", ".join(str(s) for s in self.sizes) + ("," if len(self.sizes) == 1 else "") + ")"
        n_blocks = self.rows * self.cols
        blocks = "1 block" if n_blocks == 1 else f"{n_blocks} blocks"
        of = "of up to" if self.uneven_dims() else "of"
        return (
            f'{self.name}: {shape_str(t.shape)} {t.dtype}, "{t.placement}" on {self.mesh_name} {mesh}'
            f"{' (' + binding + ')' if binding else ''}: {blocks} {of} {shape_str(self.block_shape)}"
        )

    def _block_title(self) -> str:
        t = self.tensor
        binding = ", ".join(f"{k}={v}" for k, v in self.values.items())
        mesh = "(" + ", ".join(str(s) for s in self.sizes) + ("," if len(self.sizes) == 1 else "") + ")"
        chunks = 1
        for n, b in zip(self.extents, self.block_shape):
            chunks *= -(-n // b)
        most = -(-chunks // self.num_devices)
        return (
            f'{self.name}: {shape_str(t.shape)} {t.dtype}, "{t.placement}" on {self.mesh_name} {mesh}'
            f"{' (' + binding + ')' if binding else ''}: {chunks} chunk{'s' if chunks != 1 else ''} of "
            f"{shape_str(self.block_shape)}, at most {most} per device"
        )

    def uneven_dims(self) -> list[int]:
        """The tensor dims whose blocks do not all hold the same number of elements."""
        if self.is_block:
            return [d for d, (n, b) in enumerate(zip(self.extents, self.block_shape)) if n % b]
        counts = _block_counts(self.tensor, self.sizes)
        return [d for d, n in enumerate(self.extents) if counts[d] > 1 and self.block_shape[d] * counts[d] != n]

    def _block_sizes(self) -> list[str]:
        """Per uneven drawn dim: how its elements fall into the blocks (``3 x3, 1``)."""
        out, uneven = [], self.uneven_dims()
        for g, d in enumerate(self.grid_dims):
            if d not in uneven:
                continue
            sizes = self.row_extents if len(self.grid_dims) == 2 and g == 0 else self.col_extents
            runs: list[list[int]] = []
            for v in sizes:
                if runs and runs[-1][0] == v:
                    runs[-1][1] += 1
                else:
                    runs.append([v, 1])
            text = ", ".join(str(v) if k == 1 else f"{v} x{k}" for v, k in runs)
            empty = sum(1 for v in sizes if v == 0)
            tail = f" ({empty} empty: {self.extents[d]} elements for {len(sizes)} blocks)" if empty else ""
            out.append(f"dim {d} ({self.extents[d]}) in blocks of {text}{tail}")
        return out

    def _block_notes(self) -> list[str]:
        out = [f"chunk j (row-major) is held by mesh position j % {self.num_devices}; each cell names its device"]
        for d in self.uneven_dims():
            n, b = self.extents[d], self.block_shape[d]
            out.append(f"dim {d} ({n}) in chunks of {b} x{n // b}, {n % b}: the last chunk is partial")
        if self.slices:
            out.append("slices along dim 0 (left to right); rows: dim 1, columns: dim 2")
        for n, limit, what in ((self.rows, MAX_ROWS, "rows"), (self.slice_cols(), MAX_COLS, "columns")):
            if n > limit:
                out.append(f"showing the first {limit - 3} and the last 2 of {n} {what} of chunks")
        if len(self.slices) > MAX_SLICES:
            out.append(f"showing the first {MAX_SLICES - 3} and the last 2 of {len(self.slices)} slices")
        return out

    def notes(self) -> list[str]:
        if self.is_block and not self.summarized:
            return self._block_notes()
        if self.summarized:
            return [f"not drawn: the mesh has {self.num_devices} devices, more than the {MAX_DEVICES} a picture shows"]
        out = self._block_sizes()
        for n, limit, what in ((self.rows, MAX_ROWS, "rows"), (self.cols, MAX_COLS, "columns")):
            if n > limit:
                out.append(f"showing the first {limit - 3} and the last 2 of {n} {what} of blocks")
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

    def shown_slices(self) -> list[tuple[str, list[list[str]]]]:
        """A 3-D block layout's drawn slices: (heading, cells), ``...`` where slices, rows or columns are left out."""
        k = self.slice_cols()
        rows, cols = _visible(self.rows, MAX_ROWS), _visible(k, MAX_COLS)
        out = []
        for i in _visible(len(self.slices), MAX_SLICES):
            if i is None:
                out.append((ELIDED, [[ELIDED] for _ in rows]))
                continue
            cells = [[ELIDED] * len(cols) if r is None else [ELIDED if c is None else self.cells[r][i * k + c] for c in cols]
                     for r in rows]
            out.append((self.slices[i], cells))
        return out

    def text(self) -> str:
        """The grid in plain ASCII (stable: golden tests compare it)."""
        if self.summarized:
            return "\n".join([self.title(), *(f"  {n}" for n in self.notes())])
        if self.slices:
            panels = [_grid_lines(cells, heading) for heading, cells in self.shown_slices()]
            height = max(len(p) for p in panels)
            lines = [self.title()]
            for i in range(height):
                lines.append("  ".join((p[i] if i < len(p) else "").ljust(len(p[0])) for p in panels).rstrip())
            lines.extend(f"  {n}" for n in self.notes())
            return "\n".join(lines)
        cells = self.shown()
        width = max(9, max(len(c) for row in cells for c in row) + 4)
        height = 3 if len(cells) <= 4 else 1
        border = "+" + "+".join("-" * width for _ in range(len(cells[0]))) + "+"
        lines = [self.title(), border]
        for row in cells:
            for k in range(height):
                mid = k == height // 2
                lines.append("|" + "|".join((c if mid else "").center(width) for c in row) + "|")
            lines.append(border)
        lines.extend(f"  {n}" for n in self.notes())
        return "\n".join(lines)

    def rich(self, color_system: str | None = "truecolor"):
        """A rich renderable: the grid as a table, one background colour per holder. On a
        terminal of 8 or 16 colours (``color_system`` "standard") the holders take the ANSI
        colours, which stay distinct there, instead of the pastel palette."""
        from rich import box
        from rich.align import Align
        from rich.console import Group
        from rich.padding import Padding
        from rich.table import Table
        from rich.text import Text

        notes = [Text("  " + n, style="dim") for n in self.notes()]
        if self.summarized:
            return Group(Text(self.title(), style="bold"), *notes)
        cells = self.shown()
        colours = _colour_map(cells, _ANSI_PALETTE if color_system in ("standard", "windows") else _PALETTE)
        pad = (1, 2) if len(cells) <= 4 else (0, 2)
        table = Table(show_header=False, show_lines=True, box=box.SQUARE, padding=0, pad_edge=False)
        for _ in range(len(cells[0])):
            table.add_column(justify="center", min_width=9)
        for row in cells:
            table.add_row(*(
                Padding(Align(Text(c, style="bold"), "center"), pad, style=f"black on {colours[c]}", expand=True)
                if c != ELIDED else Align(Text(c, style="dim"), "center")
                for c in row
            ))
        return Group(Text(self.title(), style="bold"), table, *notes)


_PALETTE = ("#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5",
            "#bc80bd", "#ccebc5", "#ffed6f")  # device d: _PALETTE[d % 11], the same in every panel
REPLICATED = "#d9d9d9"  # a block several devices hold whole: grey, in no device's colour
PARTIAL = "#ffffff"  # a block held as partial values: white, hatched in the PNG
_ANSI_REPLICATED, _ANSI_PARTIAL = "bright_black", "bright_white"


_ANSI_PALETTE = ("cyan", "yellow", "magenta", "green", "white", "bright_cyan", "bright_yellow", "bright_magenta",
                 "bright_green", "bright_white")  # no red or blue: black text on them is hard to read


def _grid_lines(cells: list[list[str]], heading: str) -> list[str]:
    """One 2-D slice of a block layout as ASCII lines under its heading."""
    width = max(5, max(len(c) for row in cells for c in row) + 2)
    border = "+" + "+".join("-" * width for _ in range(len(cells[0]))) + "+"
    lines = [heading.center(len(border)), border]
    for row in cells:
        lines.append("|" + "|".join(c.center(width) for c in row) + "|")
        lines.append(border)
    return lines


def _block_counts(t: DTensorType, sizes) -> list[int]:
    """Blocks along each dim of ``t`` at concrete mesh ``sizes``: the product of the mesh axes that shard it."""
    counts = [1] * t.ndim
    for d in range(t.ndim):
        for axis in t.placement.mesh_axes_of(d):
            counts[d] *= sizes[axis]
    return counts


def _visible(n: int, limit: int) -> list[int | None]:
    """Indices of the rows (or columns) drawn: all of them, or the first and last ones with None between."""
    if n <= limit:
        return list(range(n))
    return [*range(limit - 3), None, n - 2, n - 1]


def _clip(label: str) -> str:
    """At most MAX_LABEL characters of a label, cut between device ids (or between groups)."""
    if len(label) <= MAX_LABEL:
        return label
    head = label[: MAX_LABEL - 5]
    sep = ", " if ", " in head else ","
    return (head.rsplit(sep, 1)[0] if sep in head else head) + sep + ELIDED


def holder_kind(label: str) -> str:
    """"device" (one device holds the block), "replicated" (several hold it whole) or
    "partial" (it is the sum of their partial values)."""
    label = label.removesuffix(EMPTY).strip()
    if label.isdigit():
        return "device"
    return "partial" if "(" in label else "replicated"


def _colour_map(cells, palette=_PALETTE) -> dict[str, str]:
    """A colour per label: a device keeps its colour across tensors (device d: palette[d]);
    replicated and partial blocks get colours of their own, so replicas never look like device 0."""
    ansi = palette is _ANSI_PALETTE
    out: dict[str, str] = {}
    for row in cells:
        for c in row:
            if c in out or c == ELIDED:
                continue
            kind = holder_kind(c)
            if kind == "device":
                out[c] = palette[int(c.removesuffix(EMPTY).strip()) % len(palette)]
            elif kind == "replicated":
                out[c] = _ANSI_REPLICATED if ansi else REPLICATED
            else:
                out[c] = _ANSI_PARTIAL if ansi else PARTIAL
    return out


_HATCH = {"partial": "\\\\", "replicated": None, "device": None}


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
    except sym.SymbolicError as err:
        raise AnalysisError(f"'{name}': the mesh {t.mesh.shape_str()} is symbolic ({err}); give --num-workers") from None
    placement = t.placement
    if placement.is_strided:
        raise AnalysisError(
            f"'{name}' is laid out \"{placement}\", a strided shard, which is not drawn (docs/strided.md); "
            f"draw a tensor in R, S[d], P or a block layout"
        )
    if placement.is_block:
        return _block_grid(name, t, sizes, values, mesh_name or f"mesh {t.mesh.shape_str()}")
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
    counts = _block_counts(t, sizes)
    concrete = []
    for d in range(t.ndim):
        extent = sym.normalize(sym.substitute(t.shape[d], dict(values)))
        if not isinstance(extent, int) and counts[d] == 1:  # whole in every block: drawn as it is
            concrete.append(extent)
            continue
        if not isinstance(extent, int):
            names = ", ".join(sorted(sym.free_vars(extent)))
            raise AnalysisError(f"'{name}': dim {d} has the symbolic size {sym.to_str(extent)} and is sharded; "
                                f"give {names} with --bind")
        if extent < 0:
            raise AnalysisError(f"'{name}': dim {d} has the negative size {extent}")
        concrete.append(extent)
    shape = [counts[d] for d in grid_dims] + [1] * (2 - len(grid_dims))
    if len(grid_dims) == 1:
        shape = [1, counts[grid_dims[0]]]  # one row of blocks
    block = tuple(
        block_of(concrete[d], placement, d, [0] * len(sizes), sizes)[2] if counts[d] > 1 else concrete[d]
        for d in range(t.ndim)
    )
    if not mesh_name:
        mesh_name = f"mesh {t.mesh.shape_str()}"
    n_devices = 1
    for size in sizes:
        n_devices *= size
    if n_devices > MAX_DEVICES:  # summarize: the title says how many blocks of which shape
        return LayoutGrid(name, t, mesh_name, sizes, grid_dims, (), block, dict(values), (shape[0], shape[1]),
                          extents=tuple(concrete))
    try:
        devices = t.mesh.device_list(dict(values))
    except sym.SymbolicError as err:
        raise AnalysisError(f"'{name}': the mesh {t.mesh.shape_str()} is symbolic ({err}); give --num-workers") from None
    partial_axes = placement.partial_axes()
    replica_axes = [a for a, s in enumerate(placement.specs) if isinstance(s, Replicate)]
    holders: dict[tuple[int, ...], dict[tuple[int, ...], list[int]]] = {}
    extents = [[0] * counts[d] for d in grid_dims]  # the valid length of each block along each drawn dim
    for pos, dev in enumerate(devices):
        coords = mesh_coords(pos, sizes)
        index = [block_index(placement, d, coords, sizes)[0] for d in range(t.ndim)]
        cell = tuple(index[d] for d in grid_dims)
        for g, d in enumerate(grid_dims):
            extents[g][index[d]] = block_of(concrete[d], placement, d, coords, sizes)[1] if isinstance(concrete[d], int) else 1
        replica = tuple(coords[a] for a in replica_axes)
        holders.setdefault(cell, {}).setdefault(replica, []).append(dev)
    op = placement[partial_axes[0]].op if partial_axes else None
    row_extents = tuple(extents[0]) if len(grid_dims) == 2 else (1,)  # one row when one dim is drawn
    col_extents = tuple(extents[-1]) if grid_dims else (1,)
    cells = []
    for r in range(shape[0]):
        row = []
        for c in range(shape[1]):
            key = (c,) if len(grid_dims) == 1 else (r, c) if len(grid_dims) == 2 else ()
            label = _label(holders.get(key, {}), op)
            empty = (len(grid_dims) == 2 and row_extents[r] == 0) or (grid_dims and col_extents[c] == 0)
            row.append(f"{label} {EMPTY}" if empty else label)
        cells.append(tuple(row))
    return LayoutGrid(name, t, mesh_name, sizes, grid_dims, tuple(cells), block, dict(values), (shape[0], shape[1]),
                      row_extents, col_extents, tuple(concrete))


def _block_grid(name: str, t: DTensorType, sizes: tuple[int, ...], values, mesh_name: str) -> LayoutGrid:
    """The chunks of a block layout, each labelled with the device it is dealt to (see the module docstring)."""
    if not 1 <= t.ndim <= 3:
        raise AnalysisError(f"'{name}' is a rank-{t.ndim} block layout; a picture shows ranks 1 to 3")
    extents = []
    for d, n in enumerate(t.shape):
        n = sym.normalize(sym.substitute(n, dict(values)))
        if not isinstance(n, int):
            raise AnalysisError(f"'{name}': dim {d} has the symbolic size {sym.to_str(n)}; give "
                                f"{', '.join(sorted(sym.free_vars(n)))} with --bind")
        extents.append(n)
    try:
        block = concrete_block(t.placement, values)
        devices = t.mesh.device_list(dict(values))
    except (sym.SymbolicError, DistirError) as err:
        raise AnalysisError(f"'{name}': {err}; give the sizes with --bind") from None
    grid = [-(-n // b) for n, b in zip(extents, block)]
    D = len(devices)
    if D > MAX_DEVICES:
        return LayoutGrid(name, t, mesh_name, sizes, (), (), block, dict(values), (1, 1), extents=tuple(extents))

    def edges(d: int) -> tuple[int, ...]:
        return tuple(min(block[d], extents[d] - i * block[d]) for i in range(grid[d]))

    def label(j: int) -> str:
        return str(devices[j % D])

    if t.ndim == 1:
        cells = (tuple(label(j) for j in range(grid[0])),)
        return LayoutGrid(name, t, mesh_name, sizes, (0,), cells, block, dict(values), (1, grid[0]), (1,), edges(0),
                          tuple(extents))
    if t.ndim == 2:
        cells = tuple(tuple(label(r * grid[1] + c) for c in range(grid[1])) for r in range(grid[0]))
        return LayoutGrid(name, t, mesh_name, sizes, (0, 1), cells, block, dict(values), (grid[0], grid[1]), edges(0),
                          edges(1), tuple(extents))
    g0, g1, g2 = grid
    cells = tuple(tuple(label((i * g1 + r) * g2 + c) for i in range(g0) for c in range(g2)) for r in range(g1))
    starts = [i * block[0] for i in range(g0)]
    headings = tuple(f"dim 0: {a}" if e == 1 else f"dim 0: {a}-{a + e - 1}" for a, e in zip(starts, edges(0)))
    return LayoutGrid(name, t, mesh_name, sizes, (1, 2), cells, block, dict(values), (g1, g0 * g2), edges(1),
                      edges(2) * g0, tuple(extents), headings, edges(0))


def _tuple_str(sizes) -> str:
    return "(" + ", ".join(str(s) for s in sizes) + ("," if len(sizes) == 1 else "") + ")"


def _label(replicas: dict[tuple[int, ...], list[int]], op: str | None) -> str:
    groups = [sorted(v) for _, v in sorted(replicas.items())]
    if op is None:
        return _ranges(sorted(d for g in groups for d in g))
    return ", ".join(f"{op}({_ranges(g)})" for g in groups)


def _spans(extents: tuple[int, ...], n: int, limit: int) -> list[tuple[float, float]]:
    """(start, width) in [0, 1] of each drawn row or column of blocks, wide as its elements
    (so uneven blocks look uneven); an empty block gets a sliver, an elided run an average one."""
    shown = _visible(n, limit)
    if len(extents) != n or not any(extents):
        sizes = [1.0] * len(shown)
    else:
        mean = sum(extents) / len(extents)
        sizes = [mean if i is None else max(float(extents[i]), 0.15 * mean) for i in shown]
    total = sum(sizes)
    out, at = [], 0.0
    for size in sizes:
        out.append((at / total, size / total))
        at += size
    return out


def _draw_slices(ax, g: LayoutGrid, Rectangle) -> None:
    """A 3-D block layout: its 2-D slices side by side, a gap between them, each headed by its dim-0 range."""
    slices = g.shown_slices()
    colours = _colour_map([row for _, cells in slices for row in cells])
    gap = 0.04
    width = (1.0 - gap * (len(slices) - 1)) / len(slices)
    ys = _spans(g.row_extents, g.rows, MAX_ROWS)
    k = g.slice_cols()
    for i, (heading, cells) in enumerate(slices):
        x0 = i * (width + gap)
        xs = _spans(g.col_extents[:k], k, MAX_COLS) if heading != ELIDED else [(0.0, 1.0)]
        heading_size = min(7.0, width * PANEL_INCHES[0] * 72 / (0.62 * max(1, len(heading))))  # fits its slice
        if heading_size >= 4:
            ax.text(x0 + width / 2, 1.02, heading, ha="center", va="bottom", fontsize=heading_size)
        for r, row in enumerate(cells):
            y0, h = ys[r] if r < len(ys) else (0.0, 1.0)
            for c, label in enumerate(row):
                x, w = xs[c] if c < len(xs) else (0.0, 1.0)
                ax.add_patch(Rectangle((x0 + x * width, 1.0 - y0 - h), w * width, h,
                                       facecolor=colours.get(label, "white"), edgecolor="black", linewidth=1.0))
                size = max(5, min(12, int(60 / max(len(row) * len(slices), len(cells)))))
                ax.text(x0 + (x + w / 2) * width, 1.0 - y0 - h / 2, label, ha="center", va="center", fontsize=size)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.08)
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_title(textwrap.fill(g.title(), TITLE_CHARS), fontsize=9)
    ax.set_xlabel("\n".join(textwrap.fill(n, TITLE_CHARS + 20) for n in g.notes()), fontsize=7)


def _box(g: LayoutGrid) -> tuple[float, float]:
    """Width and height of the tensor's box in its panel (fractions): its shape's aspect, rows
    by columns, kept between 1:4 and 4:1 so that a long tensor stays legible."""
    height, width = sum(g.row_extents) or 1, sum(g.col_extents) or 1
    if g.summarized or len(g.grid_dims) < 2:
        height = width / 4 if len(g.grid_dims) == 1 else width
    aspect = min(4.0, max(0.25, height / width))  # the box's height / width, on paper
    box_width = min(PANEL_INCHES[0], PANEL_INCHES[1] / aspect)  # inches: as large as the panel allows
    return box_width / PANEL_INCHES[0], box_width * aspect / PANEL_INCHES[1]


def write_png(grids: list[LayoutGrid], path: str) -> None:
    """Draw each grid as coloured blocks labelled with their holders, one panel per tensor, the
    panels in a grid of PNG_COLUMNS columns (a screen's width at 100%). Each box takes its
    tensor's aspect; a device has one colour in every panel; replicas are grey, partial values
    white and hatched."""
    from ..errors import DistirError

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError:
        raise DistirError("--png needs matplotlib (pip install matplotlib)") from None
    n = len(grids)
    cols = min(PNG_COLUMNS, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(PANEL_INCHES[0] * cols, PANEL_INCHES[1] * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    for ax, g in zip(axes.flat, grids):
        if g.slices and not g.summarized:
            _draw_slices(ax, g, Rectangle)
            continue
        cells = g.shown() if not g.summarized else [[f"{g.rows * g.cols} blocks, not drawn"]]
        colours = _colour_map(cells)
        rows_, cols_ = len(cells), len(cells[0])
        bw, bh = (0.94 * v for v in _box(g))  # a margin, so the outer lines are not cut
        x_off, y_off = (1.0 - bw) / 2, (1.0 - bh) / 2
        xs = _spans(g.col_extents, g.cols, MAX_COLS) if not g.summarized else [(0.0, 1.0)]
        ys = _spans(g.row_extents, g.rows, MAX_ROWS) if not g.summarized else [(0.0, 1.0)]
        for r, row in enumerate(cells):
            y0, h = ys[r]
            y = 1.0 - y0 - h
            for c, label in enumerate(row):
                x, w = xs[c]
                hatch = "//" if label.endswith(EMPTY) else _HATCH[holder_kind(label)]
                ax.add_patch(Rectangle((x_off + x * bw, y_off + y * bh), w * bw, h * bh, facecolor=colours.get(label, "white"),
                                       edgecolor="black", linewidth=1.0, hatch=hatch))
                points = (w * bw * PANEL_INCHES[0] * 72, h * bh * PANEL_INCHES[1] * 0.8 * 72)  # the cell, in points
                size = max(5, min(12, int(points[0] / (0.65 * max(1, len(label)))), int(points[1] * 0.6)))
                ax.text(x_off + (x + w / 2) * bw, y_off + (1.0 - y0 - h / 2) * bh, label, ha="center", va="center",
                        fontsize=size, bbox={"facecolor": "white", "alpha": 0.95, "linewidth": 0, "pad": 2}
                        if hatch else None)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_box_aspect(PANEL_INCHES[1] / PANEL_INCHES[0])  # so a box of the tensor's aspect looks it
        for spine in ax.spines.values():
            spine.set_visible(False)
        ax.set_title(textwrap.fill(g.title(), TITLE_CHARS), fontsize=9)
        notes = g.notes()
        if notes:
            ax.set_xlabel(textwrap.fill("; ".join(notes), TITLE_CHARS + 10), fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=PNG_DPI)
    except (OSError, ValueError) as err:  # ValueError: a format matplotlib cannot write
        raise DistirError(f"cannot write '{path}': {err}") from None
    finally:
        plt.close(fig)
