"""auto-shard plans for the user's sizes (issue 23): ``--bind`` values and ``size_hints`` are the sizes
it weighs layouts at (only what is left symbolic is sampled), and ``--bind num_workers`` works on a
module without a mesh as in shard-params."""

from __future__ import annotations

import pytest

import distir
from distir.cli import opt
from distir.ir.types import DTensorType
from distir.transform import PassContext, get_pass
from distir.tvm.nn_gpt2 import block_module

SIZES = {"b": 2, "s": 10}


@pytest.fixture(scope="module")
def block():
    return block_module("split")


def test_bind_num_workers_on_a_module_without_a_mesh(block, tmp_path, capsys):
    src = tmp_path / "gpt2_block.py"
    src.write_text(block.script())
    code = opt.main([str(src), "-p", "auto-shard", "--bind", "num_workers=4", "--bind", "b=2", "--bind", "s=10"])
    out, err = capsys.readouterr()
    assert code in (0, None) and err == "", err
    (f,) = distir.parse(out).functions.values()
    x = f.params[0].type
    assert isinstance(x, DTensorType) and x.shape == (2, 10, 64) and x.mesh.shape == (4,)


def test_size_hints_are_the_sizes_planned_for(block):
    # the search's budget sizes and report take the size hints where --bind does not name them
    with PassContext(config={"propagate-sharding.size_hints": SIZES}):
        auto = get_pass("auto-shard")
        auto(block)
    assert {k: auto.report.env[k] for k in SIZES} == SIZES
