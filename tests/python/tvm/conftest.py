"""Fixtures the TVM tests share across modules."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def frontend_llama():
    """The frontend Llama, its weights, inputs and TVM's logits, and the driver of its tensor-parallel
    plan (distributed once per session: test_tvm_frontend and test_tvm_auto_shard both use it)."""
    import frontend_llama as fl

    return fl.frontend_llama()
