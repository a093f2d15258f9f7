"""The Python API on the same kinds of mistakes the CLI tables try: each raises a ``DistirError``
(the CLI turns it into one line), never a ``KeyError`` or ``ValueError`` from inside."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir import examples
from distir.analysis.sweep import parse_counts, sweep
from distir.driver import Driver
from distir.errors import DistirError
from distir.ir import DeviceMesh, Placement, Range
from distir.runtime.spmd import run_spmd
from distir.transform import get_pass
from distir.transform.pipelines import distribute_pipeline
from distir.transform.specialize import specialize

MOD = examples.load("mlp")
LOCAL = distribute_pipeline()(MOD)
X, W1, W2 = np.ones((128, 256), "float32"), np.ones((256, 512), "float32"), np.ones((512, 256), "float32")

CASES = {
    "text that is not a module": (lambda: distir.parse("not a module"), "invalid syntax"),
    "no module at all": (lambda: distir.parse(""), "no @I.ir_module class or @R.function found"),
    "bytes for text": (lambda: distir.parse(b"x"), "takes IR text (a str), got bytes"),
    "a size below 1": (lambda: specialize(LOCAL, {"num_workers": 0}), "num_workers=0; sizes must be at least 1"),
    "a size as text": (lambda: specialize(LOCAL, {"num_workers": "4"}), "num_workers must be an integer"),
    "a half placement": (lambda: Placement.parse("S["), "is not R, S[dim], S[dim/parts], P or P[sum|max|min|avg]"),
    "an unknown reduction": (lambda: Placement.parse("P[foo]"), "unknown reduction 'foo'"),
    "an empty mesh": (lambda: DeviceMesh((0,), Range(0, 0)), "mesh axis 0 has size 0"),
    "counts that are not numbers": (lambda: parse_counts("a"), "device counts: 'a' is not a positive integer"),
    "no counts": (lambda: sweep(MOD, []), "give at least one device count"),
    "too few inputs": (lambda: run_spmd(specialize(LOCAL, {"num_workers": 2}), X), "takes 3 argument(s)"),
    "an input of the wrong shape": (
        lambda: run_spmd(specialize(LOCAL, {"num_workers": 2}), np.ones((128, 255), "float32"), W1, W2),
        "parameter 'x' dim 1: expected size 256, got 255"),
    "a symbolic module run as it is": (lambda: run_spmd(LOCAL, X, W1, W2), "specialize the modul"),
    "no workers": (lambda: Driver(MOD).run([X, W1, W2], 0), "num_workers=0"),
    "an input of the wrong dtype": (lambda: Driver(MOD).run([X.astype("int32"), W1, W2], 2),
                                    "expected dtype float32, got int32"),
    "an unknown pass": (lambda: get_pass("nope"), "unknown pass 'nope'"),
    "an unknown function": (lambda: MOD["nope"], "the module has no function 'nope' (it has: main)"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_api_mistakes_raise_distir_errors(case):
    call, fragment = CASES[case]
    with pytest.raises(DistirError) as info:
        call()
    assert fragment in str(info.value)


def test_an_unknown_function_is_still_a_key_error_for_dict_style_code():
    with pytest.raises(KeyError, match=r"the module has no function 'nope' \(it has: main\)"):
        MOD["nope"]
