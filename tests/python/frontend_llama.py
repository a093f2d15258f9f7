"""The Llama of ``distir.examples.nn.llama`` as the TVM tests share it: imported, laid out by its
tensor-parallel plan, and run by TVM alone on one device for reference (tests/python/tvm)."""

from __future__ import annotations

import numpy as np
import tvm
from tvm.relax.frontend import nn

from distir.driver import Driver
from distir.transform import ShardParams
from distir.tvm import from_nn
from distir.examples.nn import llama as L
from tvm_build import one_device_vm

SEQ = 10


def tvm_reference(model: nn.Module, spec: dict, inputs, weights: dict[str, np.ndarray]):
    """The model exported, built and run by TVM alone on one device (no distir)."""
    exported, params = model.export_tvm(spec)
    vm = one_device_vm(exported)
    args = [tvm.runtime.tensor(a) for a in inputs] + [tvm.runtime.tensor(weights[n]) for n, _ in params]
    return vm["forward"](*args).numpy()


def llama_inputs(config: L.LlamaConfig, seed: int = 1):
    ids = np.random.default_rng(seed).integers(0, config.vocab_size, SEQ).astype("int32")
    cos, sin = L.rope_tables(SEQ, config.head_dim)
    return [ids, cos, sin]


def frontend_llama():
    """(config, model, imported module, weights, inputs, TVM's single-device logits, driver of the
    tensor-parallel plan): what the session fixture ``frontend_llama`` (tests/python/tvm/conftest.py) holds."""
    config = L.LlamaConfig()
    model = L.Llama(config)
    mod = from_nn(model, L.spec(config))
    weights = L.random_weights(model)
    inputs = llama_inputs(config)
    expected = tvm_reference(model, L.spec(config), inputs, weights)
    driver = Driver(ShardParams(L.TP_PLAN)(mod), func="forward")
    return config, model, mod, weights, inputs, expected, driver
