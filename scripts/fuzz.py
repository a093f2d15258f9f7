#!/usr/bin/env python3
"""Differential fuzzer for distir (the command; the code is the package scripts/fuzzer/, whose
docstring, printed by --help, says what it does). Importable as ``fuzz`` with scripts/ on the path:
the names below are what tests and other scripts use."""

from __future__ import annotations

import sys

from fuzzer.campaign import main
from fuzzer.cases import generate_case
from fuzzer.compare import compare_case
from fuzzer.execute import FATAL, CaseResult, Options, Outcome, execute
from fuzzer.generate import SYM_MESHES, GenConfig, Generator, Val
from fuzzer.model import NW, Case, Lin, Mesh, Param, Program
from fuzzer.repro import read_repro, repro_case, repro_text
from fuzzer.shrink import shrink
from fuzzer.tvm_child import TvmRunner

__all__ = ["Case", "CaseResult", "FATAL", "GenConfig", "Generator", "Lin", "Mesh", "NW", "Options", "Outcome", "Param", "Program", "SYM_MESHES", "TvmRunner", "Val", "compare_case", "execute", "generate_case", "main", "read_repro", "repro_case", "repro_text", "shrink"]

if __name__ == "__main__":
    sys.exit(main())
