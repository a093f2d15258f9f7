"""distir show: layout pictures of tensors over 1-D and 2-D meshes (golden plain text), checked
against where the SPMD runtime actually puts each piece; rich and PNG output; CLI errors."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import distir
from distir import examples
from distir.analysis.layout_view import layout_grid
from distir.cli import main as distir_main
from distir.errors import DistirError
from distir.ir import DeviceMesh, DTensorType, Placement, Range, sym
from distir.ir.placement import Partial, Replicate, Shard
from distir.runtime.spmd import shard_input
from distir.transform.pipelines import distribute_pipeline

W = sym.var("num_workers")

MESH_2D = '''\
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((2, "num_workers"), I.Range(0, "2 * num_workers"))]})

    @R.function
    def main(
        a: R.DTensor((8, 8), "float32", "mesh[0]", "S[0], S[1]"),
        b: R.DTensor((8, 8), "float32", "mesh[0]", "S[1], S[0]"),
        c: R.DTensor((8, 8), "float32", "mesh[0]", "P, R"),
        d: R.DTensor((8, 8), "float32", "mesh[0]", "S[0], P[max]"),
        e: R.DTensor((8, 8, 4), "float32", "mesh[0]", "R, S[2]"),
        f: R.DTensor((8,), "float32", "mesh[0]", "S[0], S[0]"),
    ):
        return a
'''

EXPECTED_2D = {
    "a": '''\
a: (8, 8) float32, "S[0], S[1]" on mesh[0] (2, 2) (num_workers=2): 4 blocks of (4, 4)
+---------+---------+
|         |         |
|    0    |    1    |
|         |         |
+---------+---------+
|         |         |
|    2    |    3    |
|         |         |
+---------+---------+''',
    "b": '''\
b: (8, 8) float32, "S[1], S[0]" on mesh[0] (2, 2) (num_workers=2): 4 blocks of (4, 4)
+---------+---------+
|         |         |
|    0    |    2    |
|         |         |
+---------+---------+
|         |         |
|    1    |    3    |
|         |         |
+---------+---------+''',
    "c": '''\
c: (8, 8) float32, "P, R" on mesh[0] (2, 2) (num_workers=2): 1 block of (8, 8)
+----------------------+
|                      |
|  sum(0,2), sum(1,3)  |
|                      |
+----------------------+
  sum(a,b): devices a and b each hold a partial value; the block is their sum''',
    "d": '''\
d: (8, 8) float32, "S[0], P[max]" on mesh[0] (2, 2) (num_workers=2): 2 blocks of (4, 8)
+------------+
|            |
|  max(0,1)  |
|            |
+------------+
|            |
|  max(2,3)  |
|            |
+------------+
  max(a,b): devices a and b each hold a partial value; the block is their max''',
    "e": '''\
e: (8, 8, 4) float32, "R, S[2]" on mesh[0] (2, 2) (num_workers=2): 2 blocks of (8, 8, 2)
+---------+---------+
|         |         |
|   0,2   |   1,3   |
|         |         |
+---------+---------+
  blocks along dim 2
  dims 0, 1 whole in every block''',
    "f": '''\
f: (8,) float32, "S[0], S[0]" on mesh[0] (2, 2) (num_workers=2): 4 blocks of (2,)
+---------+---------+---------+---------+
|         |         |         |         |
|    0    |    1    |    2    |    3    |
|         |         |         |         |
+---------+---------+---------+---------+''',
}


@pytest.mark.parametrize("name", sorted(EXPECTED_2D))
def test_two_d_mesh_pictures(name):
    mod = distir.parse(MESH_2D)
    p = next(p for p in mod["main"].params if p.name == name)
    assert layout_grid(name, p.type, {"num_workers": 2}, mesh_name="mesh[0]").text() == EXPECTED_2D[name]


def test_one_d_mesh_pictures_of_the_mlp_through_the_cli(tmp_path, capsys):
    code = distir_main.main(["show", str(examples.path("mlp")), "--num-workers", "2", "--plain"])
    out = capsys.readouterr().out
    assert code == 0
    assert out == '''\
x: (128, 256) float32, "R" on mesh[0] (2,) (num_workers=2): 1 block of (128, 256)
+---------+
|         |
|   0,1   |
|         |
+---------+

w1: (256, 512) float32, "S[1]" on mesh[0] (2,) (num_workers=2): 2 blocks of (256, 256)
+---------+---------+
|         |         |
|    0    |    1    |
|         |         |
+---------+---------+

w2: (512, 256) float32, "S[0]" on mesh[0] (2,) (num_workers=2): 2 blocks of (256, 256)
+---------+
|         |
|    0    |
|         |
+---------+
|         |
|    1    |
|         |
+---------+

y_r: (128, 256) float32, "R" on mesh[0] (2,) (num_workers=2): 1 block of (128, 256)
+---------+
|         |
|   0,1   |
|         |
+---------+
'''


def test_bindings_get_their_propagated_layouts_and_many_rows_are_compact(capsys):
    code = distir_main.main(["show", str(examples.path("mlp")), "--tensor", "y", "--tensor", "w2", "--num-workers", "8"])
    out = capsys.readouterr().out
    assert code == 0
    assert 'y: (128, 256) float32, "P" on mesh[0] (8,) (num_workers=8): 1 block of (128, 256)' in out
    assert "|  sum(0-7)  |" in out
    # eight rows of w2: one text line each
    assert out.count("|    7    |") == 1 and "|    3    |\n+---" in out


def test_symbolic_block_shapes_and_sizes_bound_with_bind(capsys):
    path = str(examples.path("llama"))
    assert distir_main.main(["show", path, "--tensor", "q_h"]) == 0
    assert "4 blocks of (s, 2, 16)" in capsys.readouterr().out
    assert distir_main.main(["show", path, "--tensor", "scores", "--bind", "s=16"]) == 0
    out = capsys.readouterr().out
    assert "(s=16, num_workers=4): 4 blocks of (2, 16, 16)" in out and "dims 1, 2 whole in every block" in out


def test_a_local_view_module_shows_its_global_signature(tmp_path, capsys):
    lowered = distribute_pipeline()(examples.load("mlp"))
    p = tmp_path / "local.py"
    p.write_text(lowered.script())
    assert distir_main.main(["show", str(p), "--tensor", "w1", "--num-workers", "2"]) == 0
    assert '"S[1]" on mesh[0] (2,)' in capsys.readouterr().out


def test_rich_rendering_colours_each_holder():
    from rich.console import Console

    mod = distir.parse(MESH_2D)
    grid = layout_grid("c", mod["main"].params[2].type, {"num_workers": 2}, mesh_name="mesh[0]")
    console = Console(file=io.StringIO(), force_terminal=True, color_system="truecolor", width=100)
    console.print(grid.rich())
    out = console.file.getvalue()
    assert "sum(0,2), sum(1,3)" in out and "\x1b[" in out and "┌" in out
    assert "48;2;255;255;255" in out  # partial values: white (PARTIAL), in no device's colour


def test_png(tmp_path, capsys):
    png = tmp_path / "layout.png"
    code = distir_main.main(["show", str(examples.path("mlp")), "--tensor", "w1", "--tensor", "y", "--png", str(png)])
    assert code == 0 and f"wrote {png}" in capsys.readouterr().out
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000


def test_errors(capsys):
    code = distir_main.main(["show", str(examples.path("mlp")), "--tensor", "w_1"])
    err = capsys.readouterr().err
    assert code == 1 and "no tensor 'w_1' with a layout; did you mean 'w1'?" in err
    with pytest.raises(SystemExit) as info:  # a usage error, found while parsing the arguments
        distir_main.main(["show", str(examples.path("mlp")), "--num-workers", "0"])
    assert info.value.code == 2
    assert "argument -n/--num-workers: expected a positive number of workers, got 0" in capsys.readouterr().err
    t = DTensorType((8, 8, 8), "float32", DeviceMesh((2, 2, 2), Range(0, 8)), Placement.parse("S[0], S[1], S[2]"))
    with pytest.raises(DistirError, match="sharded on 3 dims"):
        layout_grid("t", t, {})


# ---------------------------------------------------------------- against the runtime's own sharding


def parse_label(label: str) -> list[list[int]]:
    """``"sum(0,2), sum(1,3)"`` -> [[0, 2], [1, 3]]; ``"0-3"`` -> [[0], [1], [2], [3]] (replicas)."""

    def ids(text):
        out = []
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            out.extend(range(int(lo), int(hi or lo) + 1))
        return out

    groups = re.findall(r"[a-z]+\(([^)]*)\)", label)
    if groups:
        return [ids(g) for g in groups]
    return [[d] for d in ids(label)]


@st.composite
def layouts(draw):
    mesh_shape = draw(st.sampled_from([(W,), (2, W), (W, 2)]))
    workers = draw(st.integers(1, 7))
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.sampled_from([1, 2, 3, 5, 7, 8, 10, 24])) for _ in range(ndim))
    op = draw(st.sampled_from(["sum", "max"]))
    specs = [draw(st.one_of(st.just(Replicate()), st.builds(Shard, st.integers(0, ndim - 1)), st.just(Partial(op))))
             for _ in mesh_shape]
    return mesh_shape, workers, shape, Placement(tuple(specs))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts())
def test_every_block_is_what_its_labelled_devices_hold_in_the_runtime(case):
    mesh_shape, workers, shape, placement = case  # sizes that divide, do not, and fall below the count
    ndim = len(shape)
    sizes = [sym.evaluate(d, {"num_workers": workers}) for d in mesh_shape]
    mesh = DeviceMesh(tuple(mesh_shape), Range(0, sym.product(mesh_shape)))
    t = DTensorType(shape, "float64", mesh, placement)
    values = {"num_workers": workers}
    grid = layout_grid("t", t, values)
    x = np.random.default_rng(0).standard_normal(shape)
    pieces = shard_input(t, x, values, rng=np.random.default_rng(1))  # the runtime's own sharding
    seen = set()
    along = [grid.row_extents, grid.col_extents] if len(grid.grid_dims) == 2 else [grid.col_extents]
    assert [sum(e) for e in along] == [shape[d] for d in grid.grid_dims] or not any(
        placement.mesh_axes_of(d) for d in grid.grid_dims)
    for r, row in enumerate(grid.cells):
        for c, label in enumerate(row):
            index = [slice(None)] * ndim
            mine = [slice(None)] * ndim  # the valid part of a (padded) local block
            cell = (r, c)[-len(grid.grid_dims):] if len(grid.grid_dims) == 2 else (c,)
            for d, b, extents in zip(grid.grid_dims, cell, along):
                if placement.mesh_axes_of(d):
                    start = sum(extents[:b])
                    index[d] = slice(start, start + extents[b])
                    mine[d] = slice(0, extents[b])
            block = x[tuple(index)]
            assert label.endswith("(empty)") == (block.size == 0 and x.size > 0)
            for group in parse_label(label.removesuffix(" (empty)")):
                seen.update(group)
                parts = [pieces[dev][tuple(mine)] for dev in group]
                if len(parts) == 1 and not placement.has_partial:
                    np.testing.assert_array_equal(parts[0], block)
                else:
                    combine = np.add if placement[placement.partial_axes()[0]].op == "sum" else np.maximum
                    total = parts[0]
                    for p in parts[1:]:
                        total = combine(total, p)
                    np.testing.assert_allclose(total, block, rtol=1e-12, atol=1e-12)
    assert seen == set(range(int(np.prod(sizes))))  # every device appears, once per block it holds


def test_show_is_registered_with_the_cli(capsys):
    with pytest.raises(SystemExit) as info:
        distir_main.main(["show", "--help"])
    assert info.value.code == 0  # help, not a usage error
    assert "visualize_array_sharding" in capsys.readouterr().out


def test_examples_exist():
    assert Path(examples.path("llama")).exists()


def test_png_of_a_whole_module_is_a_grid_that_fits_a_screen(tmp_path, capsys):
    from PIL import Image

    png = tmp_path / "llama.png"
    assert distir_main.main(["show", str(examples.path("llama")), "--png", str(png)]) == 0
    width, height = Image.open(png).size
    assert width <= 1920 and height <= 1200, (width, height)  # was a 704 x 4576 strip
    assert width > 1.2 * height  # panels side by side


def test_a_box_takes_its_tensors_shape_and_uneven_blocks_are_drawn_to_scale():
    from distir.analysis.layout_view import PANEL_INCHES, _box, _spans

    mesh = DeviceMesh((3,), Range(0, 3))

    def box(shape, placement):
        w, h = _box(layout_grid("x", DTensorType(shape, "float32", mesh, Placement.parse(placement)), {}))
        return w * PANEL_INCHES[0], h * PANEL_INCHES[1]  # inches

    wide, tall, square = box((64, 256), "S[1]"), box((256, 64), "S[0]"), box((128, 128), "S[0]")
    assert wide[0] / wide[1] == pytest.approx(4) and tall[1] / tall[0] == pytest.approx(4)
    assert square[0] == pytest.approx(square[1])
    assert box((8, 1000), "S[1]")[0] / box((8, 1000), "S[1]")[1] == pytest.approx(4)  # kept at 4:1
    g = layout_grid("x", DTensorType((4, 10), "float32", mesh, Placement.parse("S[1]")), {})
    widths = [w for _, w in _spans(g.col_extents, g.cols, 16)]
    assert g.col_extents == (4, 4, 2) and widths == pytest.approx([0.4, 0.4, 0.2])  # 4, 4 and 2 columns


def test_replicas_and_partials_get_colours_of_their_own_and_devices_keep_theirs():
    from distir.analysis.layout_view import PARTIAL, REPLICATED, _colour_map, holder_kind

    colours = _colour_map([["0-3", "1", "0", "sum(0,2), sum(1,3)", "0,2", "2 (empty)"]])
    assert colours["0-3"] == colours["0,2"] == REPLICATED != colours["0"]
    assert colours["sum(0,2), sum(1,3)"] == PARTIAL not in (colours["0"], REPLICATED)
    assert colours["0"] == _colour_map([["3", "0"]])["0"]  # device 0 has one colour in every panel
    assert len({colours["0"], colours["1"], colours["2 (empty)"]}) == 3
    assert [holder_kind(x) for x in ("5", "0-3", "max(0,1)")] == ["device", "replicated", "partial"]


def test_an_eight_colour_terminal_gets_distinct_ansi_colours_per_holder():
    from rich.console import Console

    t = DTensorType((8,), "float32", DeviceMesh((4,), Range(0, 4)), Placement.parse("S[0]"))
    grid = layout_grid("x", t, {})
    console = Console(file=io.StringIO(), force_terminal=True, color_system="standard", width=100)
    console.print(grid.rich(console.color_system))
    out = console.file.getvalue()
    backgrounds = re.findall(r"\x1b\[[0-9;]*?(4[0-7]|10[0-7])m", out)
    # devices 0-3 hold one block each: four different background colours (the pastel palette
    # rounded to 8 colours gave devices 0 and 2 the same one)
    assert len(set(backgrounds)) == 4, backgrounds


def test_drawing_every_tensor_names_the_ones_a_picture_cannot_show(capsys):
    code = distir_main.main(["show", str(examples.path("blocks")), "--plain"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.count('float32, "B[') == 3  # a, b and c are drawn
    assert "x: not drawn: 'x' is a rank-4 block layout; a picture shows ranks 1 to 3" in out
    code = distir_main.main(["show", str(examples.path("blocks")), "--tensor", "x"])  # asked for by name: an error
    assert code == 1 and "rank-4 block layout" in capsys.readouterr().err
