"""A case from a run seed and an index: the same program everywhere (generate_case)."""

from __future__ import annotations

import random

from .dtypes import DtypeGenerator
from .generate import GenConfig, Generator
from .model import Case, Program


def max_device(program: Program, w: int) -> int:
    return max(max(m.devices(w)) for m in program.meshes) + 1


def generate_case(seed: int, index: int, cfg: GenConfig | None = None) -> Case:
    """Case ``index`` of run ``seed``: the same program on every machine and run.

    Device counts are drawn alike whether or not the stated layouts divide (distir computes
    uneven blocks too); with even_only, only counts at which every stated layout divides.
    """
    cfg = cfg or GenConfig()
    workers = list(cfg.workers)
    rng = random.Random(f"distir-fuzz:{seed}:{index}")
    gen = (DtypeGenerator if cfg.dtypes else Generator)(rng, cfg)
    for attempt in range(50):
        prog = gen.program()
        fits = [w for w in workers if max_device(prog, w) <= cfg.max_devices]
        if not fits:
            continue
        if not cfg.even_only or any(gen.divides(prog, w) for w in fits):
            break
    if not fits:
        fits = [min(workers)]
    if cfg.even_only:
        fits = [w for w in fits if gen.divides(prog, w)] or fits
    if not prog.uses_workers():
        ws = (fits[0],)
    else:
        k = min(cfg.counts, len(fits))
        ws = tuple(sorted(rng.sample(fits, k)))
    flags = cfg.flags()
    return Case(prog, ws, rng.randrange(1000), origin=f"--seed {seed} --only {index}" + (f" {flags}" if flags else ""))
