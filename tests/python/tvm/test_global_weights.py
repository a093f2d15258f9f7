"""One global checkpoint for every count: each worker reads its own byte ranges of the unsharded set.

The pieces read from a set TVM's own ``dump_tensor_cache`` wrote are checked, worker by worker,
against the simulator's cut (``shard_input``) and against pieces cut by hand, for every layout
(even, uneven, strided, blocks, 2-D meshes, meshes past device 0, replicated, 0-d); Disco runs from
the one set at 1-4 workers give the outputs of the same build fed the same weights as arrays, bit
for bit; the bundled GPT-2 (c_attn S[0/3]) runs from one set at 2 and 3; a damaged set is one line.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil

import numpy as np
import pytest
from tvm.contrib import tvmjs

import distir
from distir.driver import Driver
from distir.ir.mesh import DeviceMesh, Range
from distir.ir.placement import Placement
from distir.ir.types import DTensorType, TensorType
from distir.runtime.spmd import shard_input
from distir.transform.weights import WeightsError
from distir.tvm import DiscoRunError
from distir.tvm.checkpoint import BoundSet, is_global_set, read_global, save_global_weights
from distir.tvm.ranges import ReadError, read_worker, runs
from test_weight_sets import MLP, ON_4_TO_7, TWO_D  # the same modules the pre-sharded tests use


def dump(arrays: dict, path, **kwargs):
    """A global set as a TVM user writes one: TVM's own dump_tensor_cache, raw, no distir metadata."""
    with contextlib.redirect_stdout(io.StringIO()):
        tvmjs.dump_tensor_cache(arrays, str(path), encode_format="raw", show_progress=False, **kwargs)
    return path


def pieces_of(path, names, types, values, workers):
    """Every worker's piece of every weight, read through the plan each worker gets."""
    bound = BoundSet(read_global(path), None, "main", 0, list(names), list(types))
    plan = json.loads(bound.ranged(values, workers).plan)
    return {w: [a.view(t.dtype) for a, t in zip(read_worker(plan, w), types)] for w in range(workers)}


def mesh(shape, start=0):
    n = int(np.prod(shape))
    return DeviceMesh(tuple(shape), Range(start, start + n))


# (name, global shape, mesh shape, first device id, placement): every layout distir has
LAYOUTS = [
    ("replicated", (5, 3), (3,), 0, "R"),
    ("even rows", (6, 4), (3,), 0, "S[0]"),
    ("uneven columns", (4, 10), (3,), 0, "S[1]"),
    ("fewer rows than workers", (2, 3), (4,), 0, "S[0]"),
    ("3-D middle dim", (2, 7, 3), (3,), 0, "S[1]"),
    ("strided rows", (12, 5), (2,), 0, "S[0/3]"),
    ("strided uneven", (9, 4), (2,), 0, "S[0/3]"),
    ("strided columns", (3, 12), (3,), 0, "S[1/2]"),
    ("2-D both dims", (8, 12), (2, 3), 0, "S[0], S[1]"),
    ("2-D one dim twice", (10, 3), (2, 2), 0, "S[0], S[0]"),
    ("2-D strided and plain", (12, 8), (2, 3), 0, "S[1/2], S[0]"),
    ("2-D shard and replicate", (8, 9), (2, 2), 0, "S[1], R"),
    ("blocks", (9, 8), (2, 2), 0, "B[3, 4]"),
    ("blocks, more slots", (7, 5), (3,), 0, "B[2, 2]"),
    ("mesh past device 0", (8, 10), (3,), 2, "S[1]"),
    ("blocks past device 0", (9, 8), (2, 2), 4, "B[3, 4]"),
    ("0-d", (), (2,), 0, "R"),
]


@pytest.mark.parametrize("name, shape, mshape, start, placement", LAYOUTS, ids=[x[0] for x in LAYOUTS])
def test_each_worker_reads_the_simulator_s_piece(tmp_path, name, shape, mshape, start, placement):
    rng = np.random.default_rng(1)
    dtypes = ["float32", "int8", "float16"]
    arrays = {f"w_{dt}": np.asarray(rng.standard_normal(shape) * 50).astype(dt) for dt in dtypes}
    path = dump(arrays, tmp_path / "g", shard_cap_mb=1)
    m = mesh(mshape, start)
    types = [DTensorType(shape, dt, m, Placement.parse(placement)) for dt in dtypes]
    workers = start + int(np.prod(mshape)) + 1  # one worker past the mesh too
    got = pieces_of(path, list(arrays), types, {}, workers)
    for t, (n, a) in zip(types, arrays.items()):
        sim = shard_input(t, a, {}, rng)
        for w in range(workers):
            want = sim.get(w, np.zeros_like(next(iter(sim.values()))))  # outside the mesh: zeros
            assert got[w][types.index(t)].shape == want.shape, (n, w)
            np.testing.assert_array_equal(got[w][types.index(t)], want, err_msg=f"{n} on worker {w}")


def test_pieces_cut_by_hand(tmp_path):
    """Uneven columns (10 over 3: 4, 4, 2 + 2 zeros), strided rows (q, k, v of 12 rows over 2: rows 0-1,
    4-5, 8-9 and 2-3, 6-7, 10-11), blocks (9 x 8 in 3 x 4 chunks on 2 x 2 at devices 4-7) and a replicated
    weight, written out by hand."""
    rng = np.random.default_rng(2)
    a, b, c, d = (rng.standard_normal(s).astype("float32") for s in [(4, 10), (12, 5), (9, 8), (3,)])
    path = dump({"a": a, "b": b, "c": c, "d": d}, tmp_path / "g")
    types = [DTensorType((4, 10), "float32", mesh((3,)), Placement.parse("S[1]")),
             DTensorType((12, 5), "float32", mesh((2,)), Placement.parse("S[0/3]")),
             DTensorType((9, 8), "float32", mesh((2, 2), 4), Placement.parse("B[3, 4]")),
             TensorType((3,), "float32")]
    got = pieces_of(path, "abcd", types, {}, 8)
    np.testing.assert_array_equal(got[0][0], a[:, 0:4])
    np.testing.assert_array_equal(got[2][0], np.concatenate([a[:, 8:10], np.zeros((4, 2), "float32")], axis=1))
    np.testing.assert_array_equal(got[5][0], 0)
    np.testing.assert_array_equal(got[0][1], b[[0, 1, 4, 5, 8, 9]])
    np.testing.assert_array_equal(got[1][1], b[[2, 3, 6, 7, 10, 11]])
    chunks = [c[3 * (j // 2):3 * (j // 2) + 3, 4 * (j % 2):4 * (j % 2) + 4] for j in range(6)]
    for p in range(4):
        storage = np.zeros((2, 3, 4), "float32")
        for k, j in enumerate(range(p, 6, 4)):
            storage[k] = chunks[j]
        np.testing.assert_array_equal(got[4 + p][2], storage)
        np.testing.assert_array_equal(got[p][2], 0)  # devices 0-3 are outside the mesh
    for w in range(8):
        np.testing.assert_array_equal(got[w][3], d)


def test_a_box_s_runs_are_its_bytes_only():
    """Columns 2..5 of a 4 x 10 matrix are 4 runs of 3; whole rows merge into one run."""
    assert list(runs([4, 10], [0, 2], [4, 5])) == [(2, 3), (12, 3), (22, 3), (32, 3)]
    assert list(runs([4, 10], [1, 0], [3, 10])) == [(10, 20)]
    assert list(runs([2, 3, 4], [0, 1, 0], [2, 2, 4])) == [(4, 4), (16, 4)]
    assert list(runs([5], [5], [5])) == [] and list(runs([], [], [])) == [(0, 1)]


@pytest.mark.parametrize("text, counts", [
    (MLP, (1, 2, 3, 4)),
    (TWO_D.replace("START", "0"), (1, 2)),
    (TWO_D.replace("START", "num_workers"), (1, 2)),
    (ON_4_TO_7, (4,)),
], ids=["mlp", "2xW", "2xW-from-device-W", "2x2-on-4..7"])
def test_a_disco_run_from_one_global_set_is_exact_at_every_count(tmp_path, text, counts):
    """The one set, read by each worker, gives bit for bit what the same build gives from the weights as
    arrays (cut and scattered by the caller), and the single-device result."""
    rng = np.random.default_rng(5)
    driver = Driver(distir.parse(text))
    x = rng.standard_normal((4, 8)).astype("float32")
    weights = [rng.standard_normal(p.type.shape).astype("float32") for p in driver.mod["main"].params[1:]]
    path = save_global_weights(driver.local, weights, tmp_path / "g", num_input=1)
    assert is_global_set(path)
    for n in counts:
        for session in ("threads", "processes") if n == counts[-1] else ("threads",):
            r = driver.run([x], n, weights=str(path), backend="tvm", session=session)
            assert r.ok, (n, session, r.comparison.mismatch)
            scattered = driver.run([x, *weights], n, backend="tvm")  # no num_input: every argument an input
            np.testing.assert_array_equal(r.outputs, scattered.outputs)
            np.testing.assert_allclose(r.outputs, x @ weights[0] @ weights[1], rtol=1e-5, atol=1e-5)


def test_gpt2_runs_from_one_global_checkpoint_at_2_and_3(tmp_path):
    """c_attn is S[0/3]; the one set written with TVM's dump_tensor_cache (no distir metadata) runs at 2
    and 3 workers, bit for bit as the weights given as arrays, and matches one device."""
    from distir.examples.nn import gpt2 as G
    from distir.transform import ShardParams
    from distir.tvm import from_nn

    config = G.GPT2Config(n_layer=1)
    model = G.GPT2(config)
    weights = G.random_weights(model)
    ids = np.random.default_rng(3).integers(0, config.vocab_size, (1, 7)).astype("int32")
    driver = Driver(ShardParams(G.TP_PLAN)(from_nn(model, G.spec(config))), func="forward")
    path = dump(weights, tmp_path / "gpt2")
    for n in (2, 3):
        r = driver.run([ids], n, weights=str(path), backend="tvm")
        assert r.ok, (n, r.comparison.mismatch)
        np.testing.assert_array_equal(r.outputs, driver.run([ids], n, weights=weights, backend="tvm").outputs)


# ---------------------------------------------------------------- damaged sets


@pytest.fixture
def mlp_set(tmp_path):
    rng = np.random.default_rng(0)
    driver = Driver(distir.parse(MLP))
    x = rng.standard_normal((4, 8)).astype("float32")
    w1, w2 = rng.standard_normal((8, 10)).astype("float32"), rng.standard_normal((10, 8)).astype("float32")
    path = dump({"w1": w1, "w2": w2}, tmp_path / "g")
    manifest = json.loads((path / "tensor-cache.json").read_text())

    def save():
        (path / "tensor-cache.json").write_text(json.dumps(manifest))

    return driver, x, path, manifest, save


def record(manifest, name):
    return next(r for f in manifest["records"] for r in f["records"] if r["name"] == name)


def refused(driver, x, path, match):
    for run in (lambda: read_global(path).bind(driver.local, "main"),
                lambda: driver.run([x], 2, weights=str(path), backend="tvm")):
        with pytest.raises(WeightsError, match=match) as err:
            run()
        assert "\n" not in str(err.value) and f"global weights '{path}" in str(err.value)


@pytest.mark.parametrize("damage, match", [
    (lambda m, p: m["records"][0].update(dataPath="../outside.bin"), r"dataPath goes up \('\.\.'\)"),
    (lambda m, p: m["records"][0].update(dataPath="/etc/passwd"), "dataPath is absolute"),
    (lambda m, p: m["records"][0].update(md5sum="0" * 32), "checksum mismatch"),
    (lambda m, p: m["records"][0].update(nbytes=1), r"is \d+ bytes, the manifest says 1"),
    (lambda m, p: record(m, "w1").update(dtype="float16", nbytes=160), r"weight 'w1' is float16, @main takes float32"),
    (lambda m, p: record(m, "w1").update(shape=[10, 8]), r"weight 'w1' has shape \(10, 8\), @main takes \(8, 10\)"),
    (lambda m, p: record(m, "w1").update(dtype="complex64"), "unknown dtype 'complex64'"),
    (lambda m, p: record(m, "w1").update(format="f32-to-bf16"), "format 'f32-to-bf16', not 'raw'"),
    (lambda m, p: record(m, "w2").update(byteOffset=10**12), "lie past the end of the file"),
    (lambda m, p: record(m, "w2").update(name="w3"), "hold 1 record.s. that are not weights of @main: 'w3'"),
    (lambda m, p: (m.update(metadata={"distir": {"format": "distir.global-weights", "num_input": 1}}),
                   m["records"][0]["records"].remove(record(m, "w2"))), "lack 1 of the 2 weights of @main: 'w2'"),
    (lambda m, p: m["records"][0]["records"].append({**record(m, "w1"), "name": "extra"}),
     "hold 1 record.s. that are not weights of @main: 'extra'"),
    (lambda m, p: m["records"][0]["records"].append(dict(record(m, "w1"))), "record 'w1' .*listed twice"),
    (lambda m, p: m.update(metadata={"distir": {"format": "distir.global-weights", "function": "other"}}),
     "are for @other, not @main"),
], ids=["up", "absolute", "checksum", "file-size", "dtype", "shape", "unknown-dtype", "bf16-encoded", "offset",
        "renamed", "missing", "extra", "twice", "function"])
def test_a_damaged_global_set_is_one_line(mlp_set, damage, match):
    driver, x, path, manifest, save = mlp_set
    damage(manifest, path)
    save()
    refused(driver, x, path, match)


def test_a_fifo_named_by_a_global_set_is_refused_without_waiting(mlp_set):
    driver, x, path, manifest, save = mlp_set
    os.mkfifo(path / "pipe.bin")
    manifest["records"][0]["dataPath"] = "pipe.bin"
    save()
    refused(driver, x, path, "names a FIFO, not a data file")


def test_a_file_cut_after_the_check_is_a_disco_error_not_a_crash(mlp_set, monkeypatch):
    """Between the caller's check and the workers' reads the data file loses its end: each worker notices
    (the size it was checked at) and the run is one DiscoRunError line; the process lives on."""
    driver, x, path, manifest, _ = mlp_set
    data = path / manifest["records"][0]["dataPath"]
    original = BoundSet.ranged

    def ranged_then_cut(self, values, workers):
        plan = original(self, values, workers)
        os.truncate(data, 16)
        return plan

    monkeypatch.setattr(BoundSet, "ranged", ranged_then_cut)
    with pytest.raises(DiscoRunError, match=r"global weights: '.*' \(weight 'w1'\): is 16 bytes, \d+ when it was checked"):
        driver.run([x], 2, weights=str(path), backend="tvm", verify_weights=False)


def test_a_short_read_is_a_read_error(tmp_path):
    (tmp_path / "f.bin").write_bytes(bytes(8))
    plan = {"files": [[str(tmp_path / "f.bin"), 8]], "weights": [
        {"name": "w", "dtype": "float32", "itemsize": 4, "file": 0, "offset": 0, "view": [4], "store": [4],
         "shape": [4], "pieces": [[[[0], [4], [0]]]]}]}
    with pytest.raises(ReadError, match="the file ended at byte 8, shorter than when it was checked"):
        read_worker(plan, 0)


def test_a_presharded_set_is_still_told_apart(tmp_path):
    from distir.tvm import shard_weights

    driver = Driver(distir.parse(MLP))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8)).astype("float32")
    ws = [rng.standard_normal((8, 10)).astype("float32"), rng.standard_normal((10, 8)).astype("float32")]
    pre = shard_weights(driver.local, ws, 2, tmp_path / "pre", num_input=1)
    glob = save_global_weights(driver.mod, ws, tmp_path / "glob", num_input=1)
    assert not is_global_set(pre) and is_global_set(glob)
    a = driver.run([x], 2, weights=str(pre), backend="tvm")
    b = driver.run([x], 2, weights=str(glob), backend="tvm")
    assert a.ok and b.ok
    np.testing.assert_array_equal(a.outputs, b.outputs)
    shutil.rmtree(pre)
