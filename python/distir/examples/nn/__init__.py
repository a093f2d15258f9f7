"""Models written with ``tvm.relax.frontend.nn`` as a TVM user writes them, each with its plan.

Unlike the IR-text examples beside this package, these are Python modules, imported (they need
TVM): ``llama`` (a Llama, with ``TP_PLAN`` in placements and ``TP_PLAN_STRATEGIES``), ``gpt2``
(Hugging Face's names, a fused QKV cut strided, ``block_module`` for the layout benchmarks),
``gqa`` (grouped-query attention, MLC's count-dependent plan), ``decode`` (prefill and decode
with a KV cache), ``moe`` (mixture of experts, expert and tensor parallel). docs/frontend.md.

:func:`load` gives one as the other examples are: a distir module in the global view, imported
by :func:`distir.tvm.from_nn` at its default sizes, its weights laid out by its plan (the
``shard-params`` pass). The Llama's example name is ``nn_llama``: ``llama`` is the IR-text layer.
"""

from __future__ import annotations

import importlib
from pathlib import Path

__all__ = ["MODELS", "load", "model", "path"]


def _llama(m):
    config = m.LlamaConfig()
    return m.Llama(config), m.spec(config), m.TP_PLAN


def _gpt2(m):
    config = m.GPT2Config()
    return m.GPT2(config), m.spec(config), m.TP_PLAN


def _gqa(m):
    config = m.GQAConfig()
    return m.GQALlama(config), m.spec(config), m.tp_plan(config, 1)  # every projection cut by heads


def _decode(m):
    config = m.DecodeConfig()
    return m.DecoderLM(config), m.spec(config), m.TP_PLAN


def _moe(m):
    config = m.MoEConfig()
    return m.MoE(config), m.spec(config), m.TP_PLAN


#: example name -> (module of this package, the model at its default sizes: (nn.Module, spec, plan))
MODELS = {
    "nn_llama": ("llama", _llama),
    "gpt2": ("gpt2", _gpt2),
    "gqa": ("gqa", _gqa),
    "decode": ("decode", _decode),
    "moe": ("moe", _moe),
}


def path(name: str) -> Path:
    """The Python file of example ``name`` (a key of :data:`MODELS`)."""
    return Path(__file__).with_name(f"{MODELS[name][0]}.py")


def model(name: str):
    """``(nn.Module, spec, plan)`` of example ``name`` at its default sizes (imports TVM)."""
    module, make = MODELS[name]
    return make(importlib.import_module(f".{module}", __name__))


def load(name: str):
    """Example ``name`` as a distir module, imported with its spec and laid out by its plan."""
    from ...transform import get_pass
    from ...tvm import from_nn

    nn_model, spec, plan = model(name)
    return get_pass("shard-params", plan=plan)(from_nn(nn_model, spec))
