"""IR the tests share, made with the public builder (distir.ir.builder)."""

from __future__ import annotations

import warnings

import distir.ops  # noqa: F401  (declares the ops the builder calls)
from distir.analysis import comm_volume
from distir.driver import compare, random_inputs
from distir.ir import DeviceMesh, IRModule, Placement
from distir.ir.builder import FunctionBuilder, dtensor, mesh, module_of
from distir.runtime import run
from distir.runtime.spmd import SpmdStats, run_spmd
from distir.transform import PassContext
from distir.transform.layout_choice.propagate_sharding import ShardingAmbiguityWarning
from distir.transform.pipelines import distribute_pipeline
from distir.transform.specialize import specialize


def redistribute_module(
    on: DeviceMesh | tuple,
    shape: tuple,
    src: str | Placement,
    *dsts: str | Placement,
    dtype: str = "float32",
    dst_mesh: DeviceMesh | None = None,
) -> IRModule:
    """``x`` of ``shape`` laid out ``src`` on mesh ``on`` (a mesh, or the shape of one over
    devices 0, 1, ...), redistributed to each of ``dsts`` in turn, the last onto ``dst_mesh``
    when given; returns the last. One redistribute binds ``y``, several ``y0, y1, ...``."""
    m = on if isinstance(on, DeviceMesh) else mesh(on)
    meshes = [m] if dst_mesh is None else [m, dst_mesh]
    b = FunctionBuilder("main", meshes=meshes)
    cur = b.param("x", dtensor(shape, dtype, m, src))
    with b.dataflow():
        for i, dst in enumerate(dsts):
            target = dst_mesh if dst_mesh is not None and i == len(dsts) - 1 else m
            name = "y" if len(dsts) == 1 else f"y{i}"
            cur = b.call("dist.redistribute", cur, device_mesh=target, placement=dst, name=name)
    b.ret(cur)
    return module_of(b)


# An MLP written the way nn.Linear exports: weights stored (out, in), used through permute_dims;
# a bias, an embedding table, a norm weight; num_input and dotted names as from_nn records them.
NN_MLP = """
@I.ir_module
class Module:
    @R.function
    def main(ids: R.Tensor(("s",), dtype="int32"), emb: R.Tensor((50, 16), dtype="float32"),
             norm: R.Tensor((16,), dtype="float32"), up: R.Tensor((64, 16), dtype="float32"),
             up_b: R.Tensor((64,), dtype="float32"), down: R.Tensor((16, 64), dtype="float32"),
             head: R.Tensor((16, 50), dtype="float32")) -> R.Tensor(("s", 50), dtype="float32"):
        s = T.int64()
        R.func_attr({"num_input": 1, "distir.param_names": ["ids", "embed.weight", "norm.weight",
                     "mlp.up.weight", "mlp.up.bias", "mlp.down.weight", "head.weight"]})
        with R.dataflow():
            x: R.Tensor((s, 16), dtype="float32") = R.take(emb, ids, axis=0, mode="fast")
            xn: R.Tensor((s, 16), dtype="float32") = R.nn.rms_norm(x, norm, axes=[-1], epsilon=1e-5)
            up_t: R.Tensor((16, 64), dtype="float32") = R.permute_dims(up, axes=None)
            h: R.Tensor((s, 64), dtype="float32") = R.matmul(xn, up_t, out_dtype=None)
            hb: R.Tensor((s, 64), dtype="float32") = R.add(h, up_b)
            a: R.Tensor((s, 64), dtype="float32") = R.nn.silu(hb)
            down_t: R.Tensor((64, 16), dtype="float32") = R.permute_dims(down, axes=None)
            y: R.Tensor((s, 16), dtype="float32") = R.matmul(a, down_t, out_dtype=None)
            z: R.Tensor((s, 16), dtype="float32") = R.add(x, y)
            logits: R.Tensor((s, 50), dtype="float32") = R.matmul(z, head, out_dtype=None)
            R.output(logits)
        return logits
"""


# A plain two-layer MLP on a symbolic mesh (auto-shard's explanations): 10 rows or columns of w1 and w2
# cut unevenly at 3, 6 and 7 workers, 6 rows of x fewer than 7 or 8 workers
PLAIN_MLP = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})
    @R.function
    def main(x: R.Tensor((6, 10), "float32"), w1: R.Tensor((10, 12), "float32"),
             w2: R.Tensor((12, 10), "float32")) -> R.Tensor((6, 10), "float32"):
        with R.dataflow():
            h = R.matmul(x, w1)
            r = R.nn.relu(h)
            y = R.matmul(r, w2)
            R.output(y)
        return y
"""


# the guarantee of propagate-sharding's default search: no more bytes than the greedy choice, at every size

GUARANTEE_SEQ = (1, 10, 64, 512)
GUARANTEE_COUNTS = (2, 3, 4, 8)


def bytes_over_sizes(mod, search: str, func: str = "main", local=None):
    """The distributed module for ``search`` and its bytes per worker (the analysis' formula, which
    tests/python/analysis checks against the simulator) at every sequence length and count above.
    ``local``: that module when the caller has it already."""
    if local is None:
        with warnings.catch_warnings(), PassContext(config={"propagate-sharding.search": search}):
            warnings.simplefilter("ignore", ShardingAmbiguityWarning)
            local = distribute_pipeline()(mod)
    volume = comm_volume(local, func)
    names = volume.free_vars() - {"num_workers"}
    return local, {
        (s, w): volume.evaluate({"num_workers": w, **dict.fromkeys(names, s)}).bytes_per_worker
        for s in GUARANTEE_SEQ
        for w in GUARANTEE_COUNTS
    }


def assert_no_worse_than_greedy(mod, func: str = "main", dims=None, local=None):
    """``local``: ``mod`` distributed by the default search ("auto"), when the caller has it."""
    local, chosen = bytes_over_sizes(mod, "auto", func, local)
    _, greedy = bytes_over_sizes(mod, "greedy", func)
    worse = {k: (chosen[k], greedy[k]) for k in chosen if chosen[k] > greedy[k]}
    assert not worse, worse
    # one point on the simulator: the formula's bytes, and the numbers of one device
    stats = SpmdStats()
    inputs = random_inputs(local, func, dims or dict.fromkeys(comm_volume(local, func).free_vars() - {"num_workers"}, 10))
    got = run_spmd(specialize(local, {"num_workers": 4}), *inputs, func=func, stats=stats)
    reference = run(mod, *inputs, func=func)
    assert compare(got, reference, rtol=1e-4, atol=1e-5).ok
    if not dims:
        assert stats.bytes_per_worker == chosen[(10, 4)]
    return chosen, greedy


def run_cli(main, argv, capsys) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of one command run in process by ``main`` (a CLI's entry
    point; argparse's usage errors exit through SystemExit)."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err
