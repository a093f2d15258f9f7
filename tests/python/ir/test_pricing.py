"""Pricing layout changes without a loop over devices (issue 22, docs/redistribute.md).

`received_total` (a block exchange), `transfer_volume` and `kept_shares` (a transfer between
meshes) count what moves by per-dim arithmetic. The oracle here lists, device by device, the
elements each one holds, from the layout rules alone (the nested block rule of docs/uneven.md,
chunks dealt round-robin for B[...]), with none of distir's layout code, and counts what each
device lacks. Static meshes above 2^20 devices are refused where the mesh is built."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import distir
from distir.errors import DistirError
from distir.ir import DeviceMesh, Placement, Range, sym
from distir.ir.exchange import received_total
from distir.ir.mesh import MAX_DEVICES, MeshError
from distir.ir.placement import Replicate, Shard
from distir.ir.transfer import kept_shares, transfer_volume
from distir.transform.cross_mesh_plan import MeshPoint, plan_cross_mesh, transfer_cost
from distir.transform.redistribute_plan import plan_cost, plan_redistribute
from distir.transform.specialize import specialize

# ---------------------------------------------------------------- the oracle: masks device by device


def _interval(n: int, counts: list[int], coords: list[int]) -> tuple[int, int]:
    """[lo, hi) of the real elements of the nested block at ``coords`` (blocks of ceil(n / k), then cut again)."""
    lo, hi, extent = 0, n, n
    for k, c in zip(counts, coords):
        extent = -(-extent // k)
        lo, hi = lo + c * extent, min(hi, lo + (c + 1) * extent)
    return lo, max(lo, hi)


def held_mask(shape, placement: Placement, sizes, pos: int) -> np.ndarray:
    """Which elements (flat, C order) mesh position ``pos`` holds."""
    devices = math.prod(sizes)
    if placement.is_block:
        block = [int(b) for b in placement.block]
        grid = [-(-n // b) for n, b in zip(shape, block)]
        chunk = np.zeros(shape, dtype=np.int64)
        for d, (b, g) in enumerate(zip(block, grid)):
            index = (np.arange(shape[d]) // b).reshape([-1 if e == d else 1 for e in range(len(shape))])
            chunk = chunk * g + index
        return (chunk % devices == pos).reshape(-1)
    coords = np.unravel_index(pos, sizes)
    mask = np.ones(shape, dtype=bool)
    for d, n in enumerate(shape):
        axes = [a for a, s in enumerate(placement.specs) if isinstance(s, Shard) and s.dim == d]
        lo, hi = _interval(n, [sizes[a] for a in axes], [int(coords[a]) for a in axes])
        keep = (np.arange(n) >= lo) & (np.arange(n) < hi)
        mask &= keep.reshape([-1 if e == d else 1 for e in range(len(shape))])
    return mask.reshape(-1)


def exchange_oracle(src_shape, src, dst_shape, dst, sizes) -> int:
    return sum(int((held_mask(dst_shape, dst, sizes, p) & ~held_mask(src_shape, src, sizes, p)).sum())
               for p in range(math.prod(sizes)))


def transfer_oracle(shape, src_sizes, src_ids, src, dst_sizes, dst_ids, dst) -> int:
    """Each target device receives its block, less what the same device holds on the source mesh."""
    out = 0
    for t, dev in enumerate(dst_ids):
        want = held_mask(shape, dst, dst_sizes, t)
        if dev in src_ids:
            want &= ~held_mask(shape, src, src_sizes, list(src_ids).index(dev))
        out += int(want.sum())
    return out


# ---------------------------------------------------------------- random layouts

DIMS = st.sampled_from([1, 2, 3, 5, 6, 7, 8, 12])
MESHES = st.sampled_from([(1,), (2,), (3,), (5,), (6,), (7,), (2, 2), (2, 3), (3, 2), (1, 3), (2, 1, 3), (2, 2, 2)])


@st.composite
def rs_layout(draw, mesh_ndim: int, ndim: int) -> Placement:
    return Placement(tuple(draw(st.sampled_from([Replicate()] + [Shard(d) for d in range(ndim)])) for _ in range(mesh_ndim)))


@st.composite
def block_layout(draw, shape) -> Placement:
    return Placement.blocked(tuple(draw(st.integers(1, n + 1)) for n in shape))


@st.composite
def factorization(draw, total: int) -> tuple[int, ...]:
    out, rest = [], total
    while rest > 1 and len(out) < 3:
        d = draw(st.sampled_from([k for k in range(2, rest + 1) if rest % k == 0]))
        out.append(d)
        rest //= d
    if rest > 1:
        out.append(rest)
    if draw(st.booleans()):
        out.insert(draw(st.integers(0, len(out))), 1)
    return tuple(out) or (1,)


@st.composite
def exchange_case(draw):
    sizes = draw(MESHES)
    shape = tuple(draw(st.lists(DIMS, min_size=1, max_size=3)))
    kind = draw(st.sampled_from(["rs", "reshape", "block"]))
    if kind == "block":
        src = draw(st.one_of(block_layout(shape), rs_layout(len(sizes), len(shape))))
        dst = draw(block_layout(shape)) if not src.is_block or draw(st.booleans()) else draw(rs_layout(len(sizes), len(shape)))
        return shape, src, shape, dst, sizes
    dst_shape = draw(factorization(math.prod(shape))) if kind == "reshape" else shape
    return shape, draw(rs_layout(len(sizes), len(shape))), dst_shape, draw(rs_layout(len(sizes), len(dst_shape))), sizes


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exchange_case())
def test_exchange_count_equals_the_device_by_device_oracle(case):
    src_shape, src, dst_shape, dst, sizes = case
    assert received_total(src_shape, src, dst_shape, dst, sizes) == exchange_oracle(*case)


@st.composite
def transfer_case(draw):
    src_sizes, dst_sizes = draw(MESHES), draw(MESHES)
    shape = tuple(draw(st.lists(DIMS, min_size=1, max_size=3)))
    src, dst = draw(rs_layout(len(src_sizes), len(shape))), draw(rs_layout(len(dst_sizes), len(shape)))

    def ids(n):
        if draw(st.booleans()):
            start = draw(st.integers(0, 8))
            return range(start, start + n)
        return tuple(draw(st.permutations(range(12)))[:n]) if n <= 12 else range(n)

    return shape, src_sizes, ids(math.prod(src_sizes)), src, dst_sizes, ids(math.prod(dst_sizes)), dst


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transfer_case())
def test_transfer_volume_equals_the_device_by_device_oracle(case):
    assert transfer_volume(*case) == transfer_oracle(*case)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transfer_case())
def test_kept_shares_are_the_oracle_at_extents_every_block_count_divides(case):
    _, src_sizes, src_ids, src, dst_sizes, dst_ids, dst = case
    ndim = len(case[0])
    targets = [dst, Placement.replicated(len(dst_sizes))]
    got = kept_shares(src_sizes, src_ids, src, dst_sizes, dst_ids, targets, ndim)
    for q, share in zip(targets, got):
        extents = tuple(math.lcm(*(math.prod(s[a] for a, sp in enumerate(p.specs) if isinstance(sp, Shard) and sp.dim == d)
                                   for s, p in ((src_sizes, src), (dst_sizes, q)))) for d in range(ndim))
        copies = math.prod(n for n, sp in zip(dst_sizes, q.specs) if not isinstance(sp, Shard))
        sent = transfer_oracle(extents, src_sizes, src_ids, src, dst_sizes, dst_ids, q)
        assert share == copies - Fraction(sent, math.prod(extents))


# ---------------------------------------------------------------- sizes far beyond a device loop


def test_a_static_mesh_above_the_limit_is_refused_with_one_line():
    for devices in (MAX_DEVICES + 1, 10**9, 10**10, 2**63 - 1):
        text = HUGE.format(n=devices)
        with pytest.raises(DistirError) as err:
            distir.parse(text)
        first = str(err.value).splitlines()[0]
        assert f"mesh of shape ({devices},) has {devices} devices" in first and "at most 1048576" in first
    with pytest.raises(MeshError, match="at most 1048576"):
        DeviceMesh((1024, 1025), Range(0, 1024 * 1025))


def test_specializing_past_the_limit_is_refused():
    mod = distir.parse(SYMBOLIC)
    with pytest.raises(DistirError, match=r"mesh of shape \(1048577,\) has 1048577 devices"):
        specialize(mod, {"num_workers": MAX_DEVICES + 1})


HUGE = '''
@I.ir_module
class Module:
    I.module_global_infos({{"mesh": [R.device_mesh(({n},), I.Range(0, {n}))]}})

    @R.function
    def main(x: R.DTensor((8, 8), "float32", "mesh[0]", "S[0]")):
        with R.dataflow():
            y = R.dist.redistribute(x, device_mesh="mesh[0]", placement="R")
            R.output(y)
        return y
'''

SYMBOLIC = HUGE.replace("({n},), I.Range(0, {n})", '("num_workers",), I.Range(0, "num_workers")').replace("{{", "{").replace("}}", "}")


def test_the_largest_static_mesh_is_priced_exactly():
    """A gather on 2^20 devices: each of the 64 elements goes to every device but its holder."""
    mesh = DeviceMesh((MAX_DEVICES,), Range(0, MAX_DEVICES))
    src, dst = Placement.parse("S[0]"), Placement.parse("R")
    assert received_total((8, 8), src, (8, 8), dst, (MAX_DEVICES,)) == 64 * (MAX_DEVICES - 1)
    plan = plan_redistribute(mesh, 2, src, dst, (8, 8))
    assert plan_cost(plan, src, (MAX_DEVICES,), (8, 8)) * 64 * MAX_DEVICES == 64 * (MAX_DEVICES - 1)
    # two 1024 x 1024 meshes over the same devices, the axes swapped: the swap moves all but the diagonal
    swap = received_total((4096, 4096), Placement.parse("S[0], S[1]"), (4096, 4096), Placement.parse("S[1], S[0]"),
                          (1024, 1024))
    assert swap == 4096 * 4096 - 1024 * 16


def test_the_issue_cross_mesh_case_prices_what_the_oracle_counts():
    """(num_workers, 2) -> (2, num_workers, 3) over shared devices: the chosen plan's transfer at each
    sampled count moves what the device-by-device oracle counts at extents every block count divides."""
    mod = distir.parse(CROSS)
    m0, m1 = mod.meshes()
    src, dst = Placement.parse("S[0], S[1]"), Placement.parse("S[2], R, S[1]")
    plan = plan_cross_mesh(m0, src, m1, dst, 3)
    assert [type(s).__name__ for s in plan] == ["Transfer"]
    for n in (2, 3, 4):
        point = MeshPoint.of(m0, m1, {"num_workers": n})
        extents = (6 * n, 6 * n, 6 * n)
        sent = transfer_oracle(extents, point.src_sizes, point.src_devices, src, point.dst_sizes, point.dst_devices, dst)
        assert transfer_cost(src, dst, point, 3) == Fraction(sent, math.prod(extents))


CROSS = '''
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers", 2), I.Range(0, "2 * num_workers")),
                                    R.device_mesh((2, "num_workers", 3), I.Range(0, "6 * num_workers"))]})

    @R.function
    def main(x: R.DTensor((16, 12, 8), "float32", "mesh[0]", "S[0], S[1]")):
        with R.dataflow():
            y = R.dist.redistribute(x, device_mesh="mesh[1]", placement="S[2], R, S[1]")
            R.output(y)
        return y
'''


def test_symbolic_sizes_are_not_needed_for_the_counts():
    with pytest.raises(sym.SymbolicError, match=r"the source shape is symbolic \(s\); an exchange is computed at"):
        received_total((sym.var("s"), 4), Placement.parse("S[0]"), (sym.var("s"), 4), Placement.parse("R"), (2,))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exchange_case())
def test_both_counts_of_kept_elements_agree(case):
    # small meshes are counted position by position, large ones by tables: the same number
    from distir.ir.exchange import _kept_by_position, _kept_joined

    src_shape, src, dst_shape, dst, sizes = case
    assume(not (src.is_block or dst.is_block) and tuple(src_shape) == tuple(dst_shape))
    assert _kept_by_position(src_shape, src, dst, sizes) == _kept_joined(src_shape, src, dst_shape, dst, sizes)
