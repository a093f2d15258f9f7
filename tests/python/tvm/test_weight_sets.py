"""A pre-sharded set is data, never a path into the machine: each kind of damage is one WeightsError line.

A two-weight model's set for 3 workers, damaged one way at a time, read through the public entry
points (read_set, assemble_weights, reshard_weights, and a Disco run with weights=, where TVM's
ShardLoader would read the files). Nothing outside the set is read, nothing the manifest claims is
allocated before it is checked against the files, a FIFO does not hang, and a data file swapped for
another of the same size is a checksum mismatch, not a run on wrong weights.
"""

from __future__ import annotations

import json
import os
import shutil
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import tvm

import distir
from distir.driver import Driver
from distir.runtime.spmd import shard_input
from distir.transform.weights import WeightsError
from distir.tvm import reshard_weights, shard_weights
from distir.tvm.weights import assemble_weights, read_set

MLP = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(x: R.Tensor((4, 8), dtype="float32"), w1: R.Tensor((8, 10), dtype="float32"),
             w2: R.Tensor((10, 8), dtype="float32")) -> R.Tensor((4, 8), dtype="float32"):
        with R.dataflow():
            w1_s: R.Tensor((8, 10), dtype="float32") = R.dist.annotate_sharding(w1, device_mesh="mesh[0]", placement="S[1]")
            w2_s: R.Tensor((10, 8), dtype="float32") = R.dist.annotate_sharding(w2, device_mesh="mesh[0]", placement="S[0]")
            h: R.Tensor((4, 10), dtype="float32") = R.matmul(x, w1_s, out_dtype=None)
            y: R.Tensor((4, 8), dtype="float32") = R.matmul(h, w2_s, out_dtype=None)
            y_r: R.Tensor((4, 8), dtype="float32") = R.dist.annotate_sharding(y, device_mesh="mesh[0]", placement="R")
            R.output(y_r)
        return y_r
"""
DATA = "worker_1/params_shard_0.bin"  # worker 1's pieces of both weights


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """(driver, x, w1, w2, the set for 3 workers)."""
    rng = np.random.default_rng(0)
    x, w1, w2 = (rng.standard_normal(s).astype("float32") for s in [(4, 8), (8, 10), (10, 8)])
    driver = Driver(distir.parse(MLP))
    good = shard_weights(driver.local, [w1, w2], 3, tmp_path_factory.mktemp("good") / "set", num_input=1)
    return driver, x, w1, w2, good


@pytest.fixture
def damaged(mlp, tmp_path):
    """A fresh copy of the set, its manifest as a dict, and a function that writes the manifest back."""
    *_, good = mlp
    d = tmp_path / "set"
    shutil.copytree(good, d)
    manifest = json.loads((d / "tensor-cache.json").read_text())

    def save():
        (d / "tensor-cache.json").write_text(json.dumps(manifest))

    return d, manifest, save


def file_entry(manifest: dict, data_path: str = DATA) -> dict:
    return next(f for f in manifest["records"] if f["dataPath"] == data_path)


def refused_everywhere(d: Path, match: str, tmp_path: Path, verify: bool = True) -> None:
    """The set is one WeightsError line (naming the set) through every reader."""
    where = "pre-sharded weights '" + str(d)
    for read in (lambda: read_set(d, verify=verify), lambda: assemble_weights(d, verify=verify),
                 lambda: reshard_weights(d, 2, tmp_path / "out", verify=verify)):
        with pytest.raises(WeightsError, match=match) as err:
            read()
        assert str(err.value).startswith(where) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- paths: nothing outside the set


def test_a_data_path_up_and_out_is_refused(damaged, tmp_path):
    d, manifest, save = damaged
    shutil.copy(d / DATA, tmp_path / "outside.bin")  # the right size: only the path is wrong
    file_entry(manifest)["dataPath"] = "../outside.bin"
    save()
    refused_everywhere(d, r"data file '\.\./outside\.bin' \(record 'param_0_shard-2-of-3'\): dataPath goes up", tmp_path)
    file_entry(manifest, "../outside.bin")["dataPath"] = "worker_1/../../outside.bin"
    save()
    refused_everywhere(d, r"dataPath goes up \('\.\.'\)", tmp_path, verify=False)


@pytest.mark.parametrize("target", ["copy", "/dev/zero", "/etc/passwd", "/proc/self/environ"])
def test_an_absolute_data_path_is_refused(damaged, tmp_path, target):
    d, manifest, save = damaged
    if target == "copy":
        target = str(tmp_path / "abs.bin")
        shutil.copy(d / DATA, target)
    file_entry(manifest)["dataPath"] = target
    save()
    refused_everywhere(d, r"dataPath is absolute; a set names its files relative to its folder", tmp_path)


@pytest.mark.parametrize("target", ["copy", "/dev/zero"])
def test_a_symbolic_link_out_of_the_set_is_refused(damaged, tmp_path, target):
    d, _, _ = damaged
    if target == "copy":
        target = tmp_path / "elsewhere.bin"
        shutil.copy(d / DATA, target)
    (d / DATA).unlink()
    (d / DATA).symlink_to(target)
    refused_everywhere(d, r"data file 'worker_1/params_shard_0\.bin' .*resolves to a file outside the set", tmp_path)


def test_a_symbolic_link_inside_the_set_is_followed(damaged, mlp):
    _, _, w1, w2, _ = mlp
    d, _, _ = damaged
    (d / "moved.bin").write_bytes((d / DATA).read_bytes())
    (d / DATA).unlink()
    (d / DATA).symlink_to("../moved.bin")
    got = assemble_weights(d)
    np.testing.assert_array_equal(got["w1"], w1)
    np.testing.assert_array_equal(got["w2"], w2)


@pytest.mark.timeout(30)
def test_a_fifo_inside_the_set_is_refused_without_waiting(damaged, tmp_path):
    d, _, _ = damaged
    (d / DATA).unlink()
    os.mkfifo(d / DATA)  # opening it to read would wait for a writer forever
    refused_everywhere(d, r"data file 'worker_1/params_shard_0\.bin' .*names a FIFO, not a data file", tmp_path)
    (d / DATA).unlink()
    os.mkfifo(d / "tensor-cache.json.fifo")
    os.replace(d / "tensor-cache.json.fifo", d / "tensor-cache.json")
    refused_everywhere(d, r"tensor-cache\.json is not a regular file", tmp_path)


def test_a_record_naming_a_directory_is_refused(damaged, tmp_path):
    d, manifest, save = damaged
    file_entry(manifest)["dataPath"] = "worker_1"
    save()
    refused_everywhere(d, r"data file 'worker_1' \(record 'param_0_shard-2-of-3'\): names a directory, not a data file",
                       tmp_path)


def test_a_missing_file_or_worker_folder_is_refused(damaged, tmp_path):
    d, _, _ = damaged
    (d / DATA).unlink()
    refused_everywhere(d, r"data file 'worker_1/params_shard_0\.bin' \(record 'param_0_shard-2-of-3'\): no such file",
                       tmp_path)
    shutil.rmtree(d / "worker_2")
    refused_everywhere(d, r"no such file", tmp_path)


# ---------------------------------------------------------------- sizes: checked against the files


@pytest.mark.parametrize("keep", [100, 0])
def test_a_truncated_or_empty_file_is_refused(damaged, tmp_path, keep):
    d, manifest, save = damaged
    (d / DATA).write_bytes((d / DATA).read_bytes()[:keep])
    refused_everywhere(d, rf"'worker_1/params_shard_0\.bin' .*: is {keep} bytes, the manifest says 256 \(truncated or replaced\)",
                       tmp_path)
    file_entry(manifest)["nbytes"] = keep  # the file's size agreed with: its records still lie past its end
    save()
    refused_everywhere(d, rf"record 'param_\d_shard-2-of-3' in 'worker_1/params_shard_0\.bin': bytes \d+\.\.\d+ lie past "
                          rf"the end of the file \({keep} bytes\)", tmp_path, verify=False)


@pytest.mark.parametrize("field, value, match", [
    ("dtype", "float64", r"dtype 'float64', weight 'w1' is float32"),
    ("dtype", "complex128", r"dtype 'complex128', weight 'w1' is float32"),
    ("shape", [8, 5], r"shape \[8, 5\], weight 'w1' has pieces of shape \(8, 4\)"),
    ("shape", [-8, 4], r"shape \[-8, 4\], weight 'w1' has pieces of shape \(8, 4\)"),
    ("nbytes", 64, r"nbytes 64, a piece of shape \(8, 4\) float32 is 128"),
    ("nbytes", 2 ** 40, r"nbytes 1099511627776, a piece of shape \(8, 4\) float32 is 128"),
    ("byteOffset", -8, r"byteOffset -8 is not a non-negative integer"),
    ("byteOffset", 200, r"bytes 200\.\.328 lie past the end of the file \(256 bytes\)"),
    ("byteOffset", "0", r"byteOffset '0' is not a non-negative integer"),
    ("format", "f32-to-bf16", r"format 'f32-to-bf16', not 'raw'"),
    ("name", "param_0_shard-2-of-4", r"record 'param_0_shard-2-of-4' in .*: not a piece of this set"),
    ("name", {}, r"record \{\} in .*: not a piece of this set"),  # once a TypeError (a dict is unhashable)
    ("name", ["param_0_shard-2-of-3"], r'record \["param_0_shard-2-of-3"\] in .*: not a piece of this set'),
])
def test_a_record_that_disagrees_with_its_weight_or_file_is_refused(damaged, tmp_path, field, value, match):
    d, manifest, save = damaged
    file_entry(manifest)["records"][0][field] = value
    save()
    refused_everywhere(d, match, tmp_path, verify=False)


def big(allocate):
    """Peak bytes Python and numpy allocate while ``allocate`` runs (numpy reports its buffers to tracemalloc)."""
    tracemalloc.start()
    try:
        allocate()
    except WeightsError:
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def test_a_huge_global_shape_is_refused_before_anything_is_allocated(damaged, tmp_path):
    d, manifest, save = damaged
    p = manifest["metadata"]["distir"]["params"][0]
    p["global_shape"] = [100000, 100000]
    save()
    refused_everywhere(d, r"weight 0 'w1': global shape \(100000, 100000\) is not its formula \('8', '10'\)", tmp_path)
    p["global_shape_formula"] = ["100000", "100000"]
    save()
    refused_everywhere(d, r"weight 0 'w1': local shape \(8, 4\) is not the piece of \(100000, 100000\) laid out S\[1\] "
                          r"\(\(100000, 33334\)\)", tmp_path)
    p["local_shape"] = [100000, 33334]
    save()
    refused_everywhere(d, r"record 'param_0_shard-1-of-3' .*shape \[8, 4\], weight 'w1' has pieces of shape "
                          r"\(100000, 33334\)", tmp_path)
    for f in manifest["records"]:  # every record agrees: the bytes it claims are not in the files
        f["records"][0].update(shape=[100000, 33334], nbytes=100000 * 33334 * 4)
    save()
    refused_everywhere(d, r"record 'param_0_shard-1-of-3' .*: bytes 0\.\.13333600000 lie past the end of the file "
                          r"\(256 bytes\)", tmp_path)
    assert big(lambda: assemble_weights(d)) < 2 ** 22


def test_a_count_of_a_billion_workers_is_refused_before_anything_is_allocated(damaged, tmp_path):
    d, manifest, save = damaged
    meta = manifest["metadata"]["distir"]
    meta["sizes"] = {"num_workers": 10 ** 9}
    save()
    refused_everywhere(d, r'metadata .sizes. \{"num_workers": 1000000000\} do not say num_workers=3', tmp_path)
    meta["count"] = 10 ** 9
    save()
    refused_everywhere(d, r"metadata says 3 workers; its meshes at .* have 1000000000", tmp_path)
    meta["workers"] = 10 ** 9
    save()
    refused_everywhere(d, r"weight 0 'w1': local shape \(8, 4\) is not the piece of \(8, 10\) laid out S\[1\] \(\(8, 1\)\)",
                       tmp_path)
    for p in meta["params"]:
        p["local_shape"] = [8, 1] if p["name"] == "w1" else [1, 8]
    save()
    refused_everywhere(d, r"lists 6 records, not 2000000000 \(2 weights x 1000000000 workers\): the set is incomplete",
                       tmp_path)
    assert big(lambda: assemble_weights(d)) < 2 ** 22


@pytest.mark.parametrize("drop, match", [
    ("params", r"metadata has no 'params'"),
    ("workers", r"metadata has no 'workers'"),
    ("meshes", r"metadata has no 'meshes'"),
])
def test_metadata_without_a_field_is_refused(damaged, tmp_path, drop, match):
    d, manifest, save = damaged
    del manifest["metadata"]["distir"][drop]
    save()
    refused_everywhere(d, match, tmp_path)


@pytest.mark.parametrize("change, match", [
    (lambda m: m["params"][0].update(placement="S[5]"), r"weight 0 'w1': placement \"S\[5\]\": mesh axis 0 shards dim 5"),
    (lambda m: m["params"][0].update(dtype="float128"), r"weight 0 'w1': unknown dtype 'float128'"),
    (lambda m: m["params"][0].update(mesh={"shape": ["3"], "list": [0, 1, 2]}), r"its mesh is not one of the set's"),
    (lambda m: m["params"][1].update(index=0), r"weight 1 'w2': metadata index 0 is not its position 1"),
    (lambda m: m["params"][0].update(global_shape_formula=["8", "1/0"]), r"weight 0 'w1': "),
    (lambda m: m.update(num_input=-1), r"metadata 'num_input' is -1, not a non-negative integer"),
    (lambda m: m.update(workers=True), r"metadata 'workers' is true, not a positive integer"),
    (lambda m: m["meshes"][0].update(range=["0", "num_workers + 1"]), r"metadata 'meshes': mesh of shape \(num_workers,\) has num_workers devices but its device range holds"),
    (lambda m: m["meshes"][0].update(shape=["n"], range=["0", "n"]), r"metadata 'meshes' use n, which 'sizes' do not bind"),
    (lambda m: m.update(version=True), r"is not a distir set of version 1"),
])
def test_metadata_that_disagrees_with_itself_is_refused(damaged, tmp_path, change, match):
    d, manifest, save = damaged
    change(manifest["metadata"]["distir"])
    save()
    refused_everywhere(d, match, tmp_path)


@pytest.mark.parametrize("text, match", [
    ('{"metadata": {"distir": 1}, "records": []', r"tensor-cache\.json is not valid JSON"),
    ("[1, 2]", r"is not a distir set of version 1 \(no metadata\.distir\)"),
    ('{"records": [], "records": [], "metadata": {}}', r"is not valid JSON: an object repeats the key 'records'"),
])
def test_a_manifest_that_is_not_a_set_is_refused(damaged, tmp_path, text, match):
    d, _, _ = damaged
    (d / "tensor-cache.json").write_text(text)
    refused_everywhere(d, match, tmp_path)


def test_a_repeated_key_cannot_point_the_loader_elsewhere(damaged, tmp_path):
    """Python's JSON keeps the last of two equal keys; another parser may keep the first."""
    d, manifest, _ = damaged
    text = json.dumps(manifest).replace(f'"dataPath": "{DATA}"', f'"dataPath": "../outside.bin", "dataPath": "{DATA}"')
    (d / "tensor-cache.json").write_text(text)
    refused_everywhere(d, r"an object repeats the key 'dataPath'", tmp_path)


# ---------------------------------------------------------------- checksums


def test_a_swapped_data_file_is_a_checksum_mismatch(damaged, tmp_path, mlp):
    _, _, w1, _, _ = mlp
    d, _, _ = damaged
    shutil.copy(d / "worker_2/params_shard_0.bin", d / DATA)  # the same size, another worker's pieces
    refused_everywhere(d, r"data file 'worker_1/params_shard_0\.bin' \(record 'param_0_shard-2-of-3'\): checksum mismatch "
                          r"\(MD5 [0-9a-f]{32}, the manifest says '[0-9a-f]{32}'\): the file is damaged or not this set's",
                       tmp_path)
    # verify=False skips the checksum and only it: the swapped pieces are read as they are
    got = assemble_weights(d, verify=False)["w1"]
    np.testing.assert_array_equal(got[:, 4:8], np.pad(w1[:, 8:], ((0, 0), (0, 2)))[:, :4])
    assert not np.array_equal(got, w1)


def test_a_missing_checksum_is_refused_unless_unverified(damaged, tmp_path, mlp):
    _, _, w1, _, _ = mlp
    d, manifest, save = damaged
    del file_entry(manifest)["md5sum"]
    save()
    refused_everywhere(d, r"no md5sum to verify \(pass verify=False to load it unverified\)", tmp_path)
    np.testing.assert_array_equal(assemble_weights(d, verify=False)["w1"], w1)


# ---------------------------------------------------------------- a piece that is not there


def test_a_piece_out_of_range_is_one_line(mlp):
    *_, good = mlp
    s = read_set(good)
    for index, worker in [(2, 0), (0, 3), (-1, 0), (0, -1), ("0", 0)]:
        with pytest.raises(WeightsError, match=r"hold weights 0\.\.1 on workers 0\.\.2, not weight .* on worker"):
            s.piece(index, worker)


# ---------------------------------------------------------------- a run: checked before TVM reads a file


def test_a_run_refuses_a_damaged_set_before_any_worker_reads_it(damaged, mlp, tmp_path):
    driver, x, w1, w2, good = mlp
    ok = driver.run([x], 3, weights=str(good), backend="tvm")
    assert ok.ok, ok.comparison.mismatch
    np.testing.assert_allclose(ok.outputs, x @ w1 @ w2, rtol=1e-5, atol=1e-5)  # the model's own weights, not the set's
    d, manifest, save = damaged
    shutil.copy(d / "worker_2/params_shard_0.bin", d / DATA)
    with pytest.raises(WeightsError, match=r"'worker_1/params_shard_0\.bin' .*: checksum mismatch"):
        driver.run([x], 3, weights=str(d), backend="tvm")
    shutil.copy(good / DATA, d / DATA)
    shutil.copy(d / DATA, tmp_path / "outside.bin")
    file_entry(manifest)["dataPath"] = "../outside.bin"
    save()
    for verify in (True, False):
        with pytest.raises(WeightsError, match=r"data file '\.\./outside\.bin' .*: dataPath goes up"):
            driver.run([x], 3, weights=str(d), backend="tvm", verify_weights=verify)
    from distir.driver import run_disco

    with pytest.raises(WeightsError, match=r"dataPath goes up"):
        run_disco(driver.build(3), driver.local, x, num_workers=3, weights=str(d))


# ---------------------------------------------------------------- 2-D meshes, meshes not starting at device 0

TWO_D = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((2, "num_workers"), I.Range(START, "2 * num_workers + START"))]})

    @R.function
    def main(x: R.Tensor((4, 8), dtype="float32"), w1: R.Tensor((8, 12), dtype="float32"),
             w2: R.Tensor((12, 8), dtype="float32")) -> R.Tensor((4, 8), dtype="float32"):
        with R.dataflow():
            w1_s: R.Tensor((8, 12), dtype="float32") = R.dist.annotate_sharding(w1, device_mesh="mesh[0]", placement="S[0], S[1]")
            w2_s: R.Tensor((12, 8), dtype="float32") = R.dist.annotate_sharding(w2, device_mesh="mesh[0]", placement="S[1/2], S[0]")
            h: R.Tensor((4, 12), dtype="float32") = R.matmul(x, w1_s, out_dtype=None)
            y: R.Tensor((4, 8), dtype="float32") = R.matmul(h, w2_s, out_dtype=None)
            y_r: R.Tensor((4, 8), dtype="float32") = R.dist.annotate_sharding(y, device_mesh="mesh[0]", placement="R, R")
            R.output(y_r)
        return y_r
"""
ON_4_TO_7 = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((2, 2), I.Range(4, 8))]})

    @R.function
    def main(x: R.Tensor((4, 8), dtype="float32"), w1: R.Tensor((8, 9), dtype="float32"),
             w2: R.Tensor((9, 8), dtype="float32")) -> R.Tensor((4, 8), dtype="float32"):
        with R.dataflow():
            w1_s: R.Tensor((8, 9), dtype="float32") = R.dist.annotate_sharding(w1, device_mesh="mesh[0]", placement="S[1], R")
            w2_s: R.Tensor((9, 8), dtype="float32") = R.dist.annotate_sharding(w2, device_mesh="mesh[0]", placement="B[3, 4]")
            h: R.Tensor((4, 9), dtype="float32") = R.matmul(x, w1_s, out_dtype=None)
            y: R.Tensor((4, 8), dtype="float32") = R.matmul(h, w2_s, out_dtype=None)
            y_r: R.Tensor((4, 8), dtype="float32") = R.dist.annotate_sharding(y, device_mesh="mesh[0]", placement="R, R")
            R.output(y_r)
        return y_r
"""


def pad(a: np.ndarray, shape) -> np.ndarray:
    out = np.zeros(shape, dtype=a.dtype)
    out[tuple(slice(0, n) for n in a.shape)] = a
    return out


def two_d_pieces(w1, w2, n: int, start: int = 0) -> dict[int, list[np.ndarray]]:
    """Device start+nr+c (row-major on the 2 x n mesh) holds w1's rows of block r and columns of block c,
    and w2's rows of block c and, of each of its 2 column parts, the block r (written out by hand);
    devices below ``start`` are outside the mesh and hold zeros."""
    out = {w: [np.zeros((4, 12 // n), "float32"), np.zeros((12 // n, 4), "float32")] for w in range(start)}
    for r in range(2):
        for c in range(n):
            b1, b2 = 12 // n, 12 // n
            cols = [2 * r, 2 * r + 1, 4 + 2 * r, 4 + 2 * r + 1]
            out[start + r * n + c] = [w1[4 * r:4 * r + 4, b1 * c:b1 * c + b1], w2[b2 * c:b2 * c + b2][:, cols]]
    return out


def four_to_seven_pieces(w1, w2) -> dict[int, list[np.ndarray]]:
    """Devices 0..3 are outside the mesh (zeros); device 4+2r+c holds w1's columns of block r (5 and
    4 + 1 padding) and the chunks c0 = p, c1 = p + 4 of w2's 3 x 2 grid of 3 x 4 chunks (p = 2r + c)."""
    out = {w: [np.zeros((8, 5), "float32"), np.zeros((2, 3, 4), "float32")] for w in range(4)}
    chunks = [w2[3 * (j // 2):3 * (j // 2) + 3, 4 * (j % 2):4 * (j % 2) + 4] for j in range(6)]
    for p in range(4):
        r = p // 2
        mine = [chunks[j] for j in (p, p + 4) if j < 6]
        storage = np.zeros((2, 3, 4), "float32")
        storage[:len(mine)] = mine
        out[4 + p] = [pad(w1[:, 5 * r:5 * r + 5], (8, 5)), storage]
    return out


@pytest.mark.parametrize("text, count, expected", [
    (TWO_D.replace("START", "0"), 3, lambda w1, w2: two_d_pieces(w1, w2, 3)),
    (TWO_D.replace("START", "0"), 2, lambda w1, w2: two_d_pieces(w1, w2, 2)),
    (TWO_D.replace("START", "num_workers"), 3, lambda w1, w2: two_d_pieces(w1, w2, 3, start=3)),
    (ON_4_TO_7, 4, four_to_seven_pieces),
], ids=["2xW-at-3", "2xW-resharded-to-2", "2xW-from-device-W", "2x2-on-4..7"])
def test_pieces_on_2d_meshes_and_on_devices_4_to_7_are_each_worker_s_own(tmp_path, text, count, expected):
    rng = np.random.default_rng(5)
    driver = Driver(distir.parse(text))
    f = driver.local["main"]
    x = rng.standard_normal((4, 8)).astype("float32")
    weights = [rng.standard_normal(p.type.shape).astype("float32") for p in driver.mod["main"].params[1:]]
    if count == 2:  # written for 3, re-cut for 2
        path = reshard_weights(shard_weights(driver.local, weights, 3, tmp_path / "w3", num_input=1), 2, tmp_path / "w")
    else:
        path = shard_weights(driver.local, weights, count, tmp_path / "w", num_input=1)
    want = expected(*weights)
    assert read_set(path).workers == len(want)
    values = {"num_workers": count}
    for w, pieces in want.items():
        # TVM's own reader of one worker's folder: the pieces written out by hand, and the simulator's
        got, _ = tvm.contrib.tvmjs.load_tensor_cache(str(path / f"worker_{w}"), tvm.cpu())
        for i, (piece, t) in enumerate(zip(pieces, f.attrs["distir.global_params"][1:])):
            held = got[f"param_{i}_shard-{w + 1}-of-{len(want)}"].numpy()
            np.testing.assert_array_equal(held, piece, err_msg=f"weight {i} on worker {w}")
            sim = shard_input(t, weights[i], values, rng).get(w)
            if sim is not None:
                np.testing.assert_array_equal(held, sim)
    put_back = assemble_weights(path)
    np.testing.assert_array_equal(put_back["w1"], weights[0])
    np.testing.assert_array_equal(put_back["w2"], weights[1])
    r = driver.run([x], count, weights=str(path), backend="tvm")
    assert r.ok and r.disco["num_workers"] == len(want), r.comparison.mismatch
    np.testing.assert_allclose(r.outputs, x @ weights[0] @ weights[1], rtol=1e-5, atol=1e-5)
