"""Running where TVM users run: worker processes, pre-sharded weights in TVM's format, build
targets, an export whose device kernels read no host tensor and whose collectives are all
Disco's own. Process sessions are slow to start (each worker imports TVM): the runs share them
(distir keeps a session per size), and the models are built once per count."""

from __future__ import annotations

import json
import os
import signal
import time

import numpy as np
import pytest
import tvm
from disco_faults import hook_allreduce
from tvm import relax

import distir
from distir import examples
from distir.cli import main as distir_main
from distir.driver import Driver, random_inputs, run_disco
from distir.examples.nn import llama as L
from distir.ir import DeviceMesh, Range, sym
from distir.transform import ShardParams
from distir.transform.pipelines import distribute_pipeline
from distir.transform.weights import WeightsError
from distir.tvm import DiscoRunError, from_nn, reshard_weights, shard_weights, specialize_and_build, to_relax
from distir.tvm.disco import workers as disco_workers
from distir.tvm.errors import TargetError
from distir.tvm.weights import read_set
from helpers import redistribute_module

W = sym.var("num_workers")
COUNTS = (1, 2, 3, 4)
needs_cuda = pytest.mark.skipif(not tvm.cuda(0).exist, reason="needs a CUDA GPU")


# ---------------------------------------------------------------- models, built once per count


@pytest.fixture(scope="module")
def nn_llama():
    """(driver of the frontend Llama, one layer: 12 heads, a vocabulary of 250 that 3 and 4 do not divide;
    its inputs; its global weights)."""
    config = L.LlamaConfig(num_layers=1)
    model = L.Llama(config)
    driver = Driver(ShardParams(L.TP_PLAN)(from_nn(model, L.spec(config))), func="forward")
    ids = (np.arange(10) * 7 % config.vocab_size).astype("int32")
    return driver, [ids, *L.rope_tables(10, config.head_dim)], L.random_weights(model)


@pytest.fixture(scope="module")
def llama():
    """(driver of the bundled llama, its 3 inputs, its 9 weights in order)."""
    mod = examples.load("llama")
    args = random_inputs(mod, seed=7, dims={"s": 8})
    return Driver(mod), args[:3], args[3:]


@pytest.fixture(scope="module")
def weight_sets(tmp_path_factory, nn_llama, llama):
    """Each model's weights pre-sharded for 4 workers, and re-sharded from those to 1, 2 and 3."""
    root = tmp_path_factory.mktemp("weights")
    out = {}
    for name, (driver, _, weights), num_input in (("nn_llama", nn_llama, None), ("llama", llama, 3)):
        four = shard_weights(driver.local, weights, 4, root / f"{name}4", num_input=num_input)
        out[name] = {4: four, **{n: reshard_weights(four, n, root / f"{name}{n}") for n in (1, 2, 3)}}
    return out


@pytest.mark.parametrize("workers", COUNTS)
@pytest.mark.parametrize("model", ["nn_llama", "llama"])
def test_worker_processes_equal_one_device_from_global_and_presharded_weights(model, workers, request, weight_sets,
                                                                               monkeypatch):
    driver, inputs, weights = request.getfixturevalue(model)
    # the frontend model names its weights (num_input); the bundled llama takes them as arguments
    args, named = (inputs, {"weights": weights}) if model == "nn_llama" else (inputs + weights, {})
    sim = driver.run(args, workers, **named)
    got = driver.run(args, workers, backend="tvm", session="processes", **named)
    assert got.ok, got.comparison.mismatch
    assert (got.disco["session"], got.disco["num_workers"]) == ("processes", workers)
    # one count of bytes: the same steps and bytes as the simulator, and Disco's all-reduces move them
    assert got.disco["calls"] == sim.stats.counts and got.disco["bytes_sent"] == sim.stats.total_bytes
    assert got.disco["transport"]["bytes_sent"] == sim.stats.total_bytes
    # each worker loads its own pieces (TVM's ShardLoader); the set for 1, 2, 3 was re-cut from the set for 4;
    # named relative to a directory the worker processes (started above) were not started in
    monkeypatch.chdir(weight_sets[model][workers].parent)
    pre = driver.run(inputs, workers, weights=weight_sets[model][workers].name, backend="tvm", session="processes")
    assert pre.ok, pre.comparison.mismatch
    np.testing.assert_array_equal(pre.outputs, got.outputs)  # the same pieces, the same program


def test_a_resharded_set_holds_exactly_the_pieces_of_a_set_written_for_its_count(nn_llama, weight_sets, tmp_path):
    driver, _, weights = nn_llama
    direct = read_set(shard_weights(driver.local, weights, 3, tmp_path / "w3"))
    resharded = read_set(weight_sets["nn_llama"][3])
    assert direct.meta["params"] == resharded.meta["params"]
    for i in range(len(direct.names)):
        for w in range(3):
            np.testing.assert_array_equal(direct.piece(i, w), resharded.piece(i, w))
    # TVM's own reader reads one worker's pieces; the vocabulary of 250 in blocks of 84 (the last two rows padding)
    pieces, meta = tvm.contrib.tvmjs.load_tensor_cache(str(direct.directory / "worker_2"), tvm.cpu())
    embed = pieces["param_0_shard-3-of-3"].numpy()
    np.testing.assert_array_equal(embed[:82], weights["embed_tokens.weight"][168:])
    assert not embed[82:].any() and meta == {"distir": {"worker": 2}}
    p = direct.meta["params"][0]
    assert (p["name"], p["placement"], p["global_shape"], p["local_shape"]) == ("embed_tokens.weight", "S[0]", [250, 96], [84, 96])
    assert p["padding"] == [[0, 0], [0, 0], [2, 0]] and direct.meta["count"] == 3 and direct.workers == 3
    # a worker or weight the set lacks is one line, not a KeyError of its records
    with pytest.raises(WeightsError, match=r"pre-sharded weights '.*w3' hold weights 0\.\.\d+ on workers 0\.\.2, not weight 0 on worker 3"):
        direct.piece(0, 3)
    with pytest.raises(WeightsError, match=r"on workers 0\.\.2, not weight -1 on worker 0"):
        direct.piece(-1, 0)


def test_a_set_that_does_not_fit_is_one_line(nn_llama, llama, weight_sets, tmp_path):
    driver, inputs, _ = nn_llama
    with pytest.raises(WeightsError, match=r"were saved for num_workers=3 \(3 Disco workers\); this run has 2: re-shard "
                                           r"them with distir\.tvm\.reshard_weights\("):
        driver.run(inputs, 2, weights=str(weight_sets["nn_llama"][3]), backend="tvm")
    with pytest.raises(WeightsError, match=r"are for @main, not @forward"):
        driver.run(inputs, 2, weights=str(weight_sets["llama"][2]), backend="tvm")
    with pytest.raises(WeightsError, match="no tensor-cache.json"):
        driver.run(inputs, 2, weights=str(tmp_path), backend="tvm")
    (tmp_path / "tensor-cache.json").write_text(json.dumps({"metadata": {}, "records": []}))
    with pytest.raises(WeightsError, match="is not a distir set of version 1"):
        read_set(tmp_path)
    with pytest.raises(DistirErrorLike, match="run with backend='tvm'"):
        driver.run(inputs, 2, weights=str(weight_sets["nn_llama"][2]))
    plain = from_nn(L.Llama(L.LlamaConfig(num_layers=1)), L.spec())
    other = Driver(ShardParams({**L.TP_PLAN, "lm_head.weight": "R"})(plain), func="forward")
    with pytest.raises(WeightsError, match=r"weight 9 'lm_head.weight' is laid out S\[0\] on mesh \(num_workers,\), "
                                           r"@forward takes it R on mesh \(num_workers,\)"):
        other.run(inputs, 2, weights=str(weight_sets["nn_llama"][2]), backend="tvm")


DistirErrorLike = distir.DistirError


def test_distir_run_on_worker_processes(capsys):
    assert distir_main.main(["run", str(examples.path("mlp")), "-n", "2", "--backend", "tvm", "--session", "processes"]) == 0
    out = capsys.readouterr().out
    assert "Disco ProcessSession of 2 workers (1 group(s), distir's host collectives)" in out
    assert "2 workers: all_reduce x1; 131072 bytes sent per worker (262144 in all); carried by Disco's collectives allreduce x1, 262144 bytes on the wire" in out
    assert distir_main.main(["run", str(examples.path("mlp")), "-n", "2", "--session", "processes"]) == 2
    assert "--session is for --backend tvm" in capsys.readouterr().err


def test_a_killed_worker_is_a_clear_error_within_seconds(llama):
    """Between runs (a kept session) and in the middle of one (worker 0, the caller's thread, waits
    in an all-reduce for the worker that was just killed): a DiscoRunError naming it, at once."""
    driver, inputs, weights = llama
    args = inputs + weights
    assert driver.run(args, 2, backend="tvm", session="processes").ok
    os.kill(disco_workers.process_workers(2).pids()[1], signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(DiscoRunError, match=r"worker 1 \(process \d+\) was killed by SIGKILL"):
        driver.run(args, 2, backend="tvm", session="processes")
    assert time.monotonic() - t0 < 30
    victim = disco_workers.process_workers(2).pids()[1]  # a new session
    t0 = time.monotonic()
    with (hook_allreduce(lambda: os.kill(victim, signal.SIGKILL)),
          pytest.raises(DiscoRunError, match=rf"worker 1 \(process {victim}\) was killed by SIGKILL")):
        driver.run(args, 2, backend="tvm", session="processes")
    assert time.monotonic() - t0 < 30
    assert driver.run(args, 2, backend="tvm", session="processes").ok  # and the next run starts afresh


# ---------------------------------------------------------------- the export, for a device


_KEEPS_DEVICE = ("vm.builtin.reshape", "vm.builtin.to_device")  # packed functions whose tensor stays where it was


def _host_tensors_read_by_kernels(mod: tvm.IRModule) -> list[str]:
    """Bindings where a kernel (a Relax op, or after lowering a call of a PrimFunc) reads a host tensor:
    one made by ``shape_to_tensor`` or by any packed function that returns a tensor (a VM builtin runs
    on the host), as exported or after TVM's lowering (packed calls are then calls of ExternFuncs)."""
    host, found = set(), []

    def makes_host_tensor(binding) -> bool:
        expr = binding.value
        if not isinstance(binding.var.ty, relax.TensorType):
            return False
        op = getattr(expr.op, "name", "")
        if op == "relax.shape_to_tensor":
            return True
        packed = expr.args[0] if op in ("relax.call_pure_packed", "relax.call_packed") else expr.op
        return isinstance(packed, relax.ExternFunc) and str(packed.global_symbol) not in _KEEPS_DEVICE

    def visit(binding, name):
        expr = binding.value
        if not isinstance(expr, relax.Call):
            return
        if makes_host_tensor(binding):
            host.add(str(binding.var.name))
            return
        for a in expr.args:
            fields = a.fields if isinstance(a, relax.Tuple) else [a]
            found.extend(f"{name} reads {f.name}" for f in fields if isinstance(f, relax.Var) and str(f.name) in host)

    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            for block in func.body.blocks:
                for b in block.bindings:
                    visit(b, f"{gv.name_hint}.{b.var.name}")
    return found


def _packed_calls(mod: tvm.IRModule) -> set[str]:
    """Every packed function a module's Relax functions call, in the branches of an ``R.If`` too."""
    names = set()

    def visit(v):
        if isinstance(v, relax.Call) and getattr(v.op, "name", "").startswith("relax.call_") and v.args:
            if isinstance(v.args[0], relax.ExternFunc):
                names.add(str(v.args[0].global_symbol))

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return names


CUDA = {"kind": "cuda", "arch": "sm_80"}


def test_the_check_finds_a_host_tensor_read_by_a_kernel():
    """The check is real: the worker id as TVM 0.27's shape_to_tensor makes it (a host tensor) read by a
    kernel is found, as exported and after TVM's CUDA pipeline."""
    bb = relax.BlockBuilder()
    with bb.function("main", []):
        worker = bb.emit(relax.op.call_pure_packed("runtime.disco.worker_id", ty_args=relax.ShapeType(ndim=1)))
        ids = bb.emit(relax.op.shape_to_tensor(worker), name_hint="worker_ids")
        out = bb.emit(relax.op.add(ids, relax.const(np.array([1], "int64"), "int64")))
        bb.emit_func_output(out)
    mod = bb.finalize()
    assert [f.split(" ", 1)[1] for f in _host_tensors_read_by_kernels(mod)] == ["reads worker_ids"]
    lowered = relax.get_default_pipeline(tvm.target.Target(CUDA))(mod)
    assert [f for f in _host_tensors_read_by_kernels(lowered) if "reads worker_ids" in f]


@pytest.fixture(scope="module")
def exports(nn_llama):
    """Distributed modules that read the worker id and move data every way: uneven counts, block
    exchanges with and without a reshape, re-blockings of the fused QKV output (symbolic), a
    vocabulary-parallel lookup, a transfer from a static mesh to a symbolic one."""
    one_d = DeviceMesh((W,), Range(0, W))
    return {
        "llama": distribute_pipeline()(examples.load("llama")),
        "nn_llama": nn_llama[0].local,
        "exchange": distribute_pipeline()(redistribute_module(one_d, (10, 7), "S[1]", "B[4, 3]")),
        "exchange_reshape": distribute_pipeline()(redistribute_module(one_d, (12, 8), "S[1]", "S[0]")),
        "transfer": distribute_pipeline()(redistribute_module(DeviceMesh((2,), Range(0, 2)), (8, 6), "S[0]", "S[1]", dst_mesh=one_d)),
    }


@pytest.mark.parametrize("count", [None, 3], ids=["symbolic", "3 workers"])
def test_no_kernel_reads_a_host_tensor_and_every_collective_is_disco_s(count, exports):
    from distir.transform.specialize import specialize

    for name, local in exports.items():
        mod = local if count is None else specialize(local, {"num_workers": count})
        exported = to_relax(mod)
        assert _host_tensors_read_by_kernels(exported) == [], name
        calls = _packed_calls(exported)
        assert all(c.startswith("runtime.disco.") for c in calls), (name, calls)
        assert "runtime.disco.worker_id" in calls, name
        if name.startswith("exchange"):
            assert "runtime.disco.allgather" in calls, name


def test_the_lowered_cuda_program_reads_no_host_tensor_in_a_kernel(exports):
    """TVM's CUDA pipeline (legalize, fuse, GPU schedules, VM lowering; no code generation) on a block
    exchange at 3 workers: the worker id is written by a kernel, and every kernel argument is a device tensor."""
    exported = relax.transform.BindSymbolicVars({"num_workers": 3})(to_relax(exports["exchange"]))
    lowered = relax.get_default_pipeline(tvm.target.Target(CUDA))(exported)
    assert _host_tensors_read_by_kernels(lowered) == []
    kernels = [gv.name_hint for gv, f in lowered.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert "distir_worker_index" in kernels and any(k.startswith("fused_") for k in kernels), kernels


# ---------------------------------------------------------------- sessions sized by device ids, targets


def test_a_static_and_a_symbolic_mesh_run_on_disco_at_every_count(tmp_path, capsys):
    """Disco sizes itself from the device ids at the count: max(2, num_workers) workers."""
    mod = redistribute_module(DeviceMesh((2,), Range(0, 2)), (8, 6), "S[0]", "S[1]", dst_mesh=DeviceMesh((W,), Range(0, W)))
    driver = Driver(mod)
    x = np.random.default_rng(0).standard_normal((8, 6)).astype("float32")
    symbolic = to_relax(driver.local)  # its session size is max(2, num_workers), evaluated per run
    for workers in (1, 3):
        got, sim = driver.run([x], workers, backend="tvm"), driver.run([x], workers)
        assert got.ok and got.disco["num_workers"] == max(2, workers)
        assert got.disco["calls"] == sim.stats.counts and got.disco["bytes_sent"] == sim.stats.total_bytes
        stats: dict = {}
        built = specialize_and_build(symbolic, {"num_workers": workers})
        np.testing.assert_array_equal(run_disco(built, driver.local, x, num_workers=workers, stats=stats), x)
        assert stats["num_workers"] == max(2, workers)
    path = tmp_path / "stages.py"
    path.write_text(mod.script())
    assert distir_main.main(["run", str(path), "-n", "3", "--backend", "tvm"]) == 0
    assert "Disco ThreadedSession of 3 workers" in capsys.readouterr().out


def test_disco_reports_the_simulator_s_steps_and_bytes_at_uneven_counts():
    """A block exchange, re-blockings of heads and uneven blocks: the same step names and bytes on both."""
    for mod in (examples.load("attention"), redistribute_module(DeviceMesh((W,), Range(0, W)), (10, 7), "S[1]", "B[4, 3]")):
        driver = Driver(mod)
        args = random_inputs(mod, seed=3, dims={"s": 8})
        got, sim = driver.run(args, 3, backend="tvm"), driver.run(args, 3)
        assert got.ok, got.comparison.mismatch
        assert got.disco["calls"] == sim.stats.counts and got.disco["bytes_sent"] == sim.stats.total_bytes


def test_an_unknown_target_or_a_missing_gpu_is_one_line(capsys):
    mlp = str(examples.path("mlp"))
    driver = Driver(examples.load("mlp"))
    args = random_inputs(driver.mod)
    with pytest.raises(TargetError, match=r"^target 'gpu9': Target kind \"gpu9\" is not defined.* \(e\.g\. 'llvm' or 'cuda'\)$"):
        driver.run(args, 2, backend="tvm", target="gpu9")
    assert distir_main.main(["run", mlp, "-n", "2", "--backend", "tvm", "--target", "gpu9"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("distir run: error: target 'gpu9'")
    assert distir_main.main(["sweep", mlp, "-n", "2", "--target", "cuda"]) == 2
    assert "--target is for --build" in capsys.readouterr().err
    if not tvm.cuda(0).exist:
        assert distir_main.main(["run", mlp, "-n", "2", "--backend", "tvm", "--target", "cuda"]) == 1
        assert capsys.readouterr().err == (
            "distir run: error: target 'cuda' runs on cuda devices, and TVM finds none on this machine (no GPU, or no "
            "CUDA driver)\n"
        )


@needs_cuda
def test_every_count_on_one_gpu(nn_llama):
    """W worker threads share the GPU; distir's host collectives stage device buffers through the host
    (NCCL, where TVM has it, at one worker)."""
    driver, inputs, weights = nn_llama
    for workers in (1, 2, 3):
        got = driver.run(inputs, workers, weights=weights, backend="tvm", target="cuda", rtol=1e-4, atol=1e-4)
        assert got.ok, (workers, got.comparison.mismatch)
        assert got.disco["device"].startswith("cuda")
