"""One TVM build for every count: the driver's symbolic build, the process-wide cache, artifacts.

The oracle of every run is the single-device interpreter on the global-view module (``r.ok``) and the
simulator's count of steps and bytes at the same count, neither of which goes through TVM.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import tvm

from distir import examples
from distir.cli import main as distir_main
from distir.driver import Driver, random_inputs
from distir.tvm import ArtifactError, build_cache, load_artifact

MLP = str(examples.path("mlp"))
LLAMA = str(examples.path("llama"))


@pytest.fixture(scope="module")
def llama():
    mod = examples.load("llama")
    return mod, random_inputs(mod, dims={"s": 8}, seed=3)


def test_one_build_runs_exactly_at_every_count(llama):
    mod, x = llama
    d = Driver(mod, specialize=False)
    before = build_cache.cache_info()["builds"]
    for w in (1, 2, 3, 4, 5):
        r = d.run(x, w, backend="tvm")
        sim = d.run(x, w)
        assert r.ok, (w, r.comparison.mismatch)
        assert r.disco["build"] == "symbolic" and r.disco["num_workers"] == w
        assert r.summary() == sim.summary()  # the steps and bytes of the program specialized to w
        if w > 1:
            assert r.timings["build"] == 0.0
    assert build_cache.cache_info()["builds"] - before <= 1  # one compile (none if another test built it)
    assert d.build() is d.build(3) is d.build(5)


def test_the_cache_serves_an_equal_export_and_keeps_other_targets_apart(llama):
    mod, _ = llama
    a, b = Driver(mod, specialize=False), Driver(mod, specialize=False)
    assert a.export() is not b.export()  # two exports, structurally equal: one build
    assert a.build() is b.build()
    specialized = a.build(2, specialize=True)
    assert specialized is not a.build() and specialized is b.build(2, specialize=True)
    other = tvm.target.Target({"kind": "llvm", "opt-level": 1})
    assert a.build(target=other) is not a.build()


def test_specialize_builds_per_count_with_the_same_numbers(llama):
    mod, x = llama
    d = Driver(mod, specialize=True)
    for w in (2, 3):
        r, sym = d.run(x, w, backend="tvm"), Driver(mod, specialize=False).run(x, w, backend="tvm")
        assert r.ok and r.disco["build"] == "specialized"
        assert r.summary() == sym.summary()
        np.testing.assert_allclose(r.outputs, sym.outputs, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def mlp_artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("art") / "mlp.art"
    assert distir_main.main(["build", MLP, "-o", str(out)]) == 0
    return out


def _no_compile(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("tvm.compile called while running an artifact")

    monkeypatch.setattr(tvm, "compile", refuse)


@pytest.mark.parametrize("workers", [1, 2, 3, 4])
def test_the_artifact_runs_at_every_count_through_the_cli_without_compiling(mlp_artifact, workers, capsys,
                                                                             monkeypatch):
    _no_compile(monkeypatch)
    assert distir_main.main(["run", "--artifact", str(mlp_artifact), "-n", str(workers)]) == 0
    out = capsys.readouterr().out
    assert "the artifact's build for llvm (no tvm.compile)" in out
    assert f"tvm result on {workers} workers matches the single-device result" in out


def test_the_artifact_runs_from_python_and_checks_it_is_this_modules(mlp_artifact, llama, monkeypatch):
    _no_compile(monkeypatch)
    art = load_artifact(mlp_artifact)
    d = Driver.from_artifact(art)
    mod = examples.load("mlp")
    x = random_inputs(mod, seed=1)
    for w in (2, 5):
        r = d.run(x, w, backend="tvm")
        assert r.ok and r.disco["build"] == "artifact"
        assert r.summary() == Driver(mod).run(x, w).summary()
    assert Driver(mod).run(x, 3, backend="tvm", artifact=str(mlp_artifact)).ok
    other, y = llama
    with pytest.raises(ArtifactError, match="was built from another module than this driver's"):
        Driver(other).run(y, 2, backend="tvm", artifact=art)


def _copy(src, tmp_path):
    dst = tmp_path / "copy.art"
    shutil.copytree(src, dst)
    return dst


def _edit_manifest(path, change):
    data = json.loads((path / "distir-artifact.json").read_text())
    change(data)
    (path / "distir-artifact.json").write_text(json.dumps(data))


def _bad_cases():
    def lib_bytes(p):
        with open(p / "module.so", "r+b") as f:
            f.seek(100)
            byte = f.read(1)
            f.seek(100)
            f.write(bytes([byte[0] ^ 1]))

    def symlink_out(p):
        (p / "module.so").rename(p.parent / "elsewhere.so")
        os.symlink(p.parent / "elsewhere.so", p / "module.so")

    def local_text(p):
        _edit_manifest(p, lambda d: d.update(local=d["local"].replace("gelu", "silu", 1)))

    return {
        "no manifest": (lambda p: (p / "distir-artifact.json").unlink(), r"no distir-artifact\.json"),
        "not json": (lambda p: (p / "distir-artifact.json").write_text("{"), "is not valid JSON"),
        "repeated key": (lambda p: (p / "distir-artifact.json").write_text('{"format": 1, "format": 2}'),
                         "repeats the key 'format'"),
        "other format": (lambda p: _edit_manifest(p, lambda d: d.update(format="x")), "is not a distir artifact"),
        "a field's type": (lambda p: _edit_manifest(p, lambda d: d.update(bind=[])), "'bind' is .*, not a dict"),
        "other distir": (lambda p: _edit_manifest(p, lambda d: d.update(distir_version="0.0.1")),
                         "built with distir '0.0.1'"),
        "missing library": (lambda p: (p / "module.so").unlink(), "no such file"),
        "path out": (lambda p: _edit_manifest(p, lambda d: d["library"].update(path="../mlp.art/module.so")),
                     "is not a relative path inside the artifact"),
        "absolute path": (lambda p: _edit_manifest(p, lambda d: d["library"].update(path="/bin/sh")),
                          "is not a relative path inside the artifact"),
        "symlink out": (symlink_out, "resolves outside the artifact"),
        "truncated": (lambda p: os.truncate(p / "module.so", 1000), "is 1000 bytes, the manifest says"),
        "damaged": (lib_bytes, "checksum mismatch"),
        "local text": (local_text, "the module text is not what the library was built from"),
    }


@pytest.mark.parametrize("case", list(_bad_cases()))
def test_a_bad_artifact_is_one_line(mlp_artifact, tmp_path, case, capsys, monkeypatch):
    damage, message = _bad_cases()[case]
    path = _copy(mlp_artifact, tmp_path)
    damage(path)
    with pytest.raises(ArtifactError, match=message):
        load_artifact(path)
    monkeypatch.setenv("DISTIR_TRACEBACK", "")
    assert distir_main.main(["run", "--artifact", str(path), "-n", "2"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"distir run: error: artifact '{path}'"), err


def test_a_missing_folder_and_flags_that_contradict_the_artifact(mlp_artifact, tmp_path, capsys):
    with pytest.raises(ArtifactError, match="no such folder"):
        load_artifact(tmp_path / "none")
    assert distir_main.main(["run", MLP, "--artifact", str(mlp_artifact), "-n", "2"]) == 2
    assert "give FILE or --artifact, not both" in capsys.readouterr().err
    assert distir_main.main(["run", "--artifact", str(mlp_artifact), "-n", "2", "--target", "llvm"]) == 2
    assert "--target does not go with --artifact" in capsys.readouterr().err
    assert distir_main.main(["run", "-n", "2"]) == 2
    assert "give the module to run (FILE), or --artifact DIR" in capsys.readouterr().err
