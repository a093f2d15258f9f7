"""The planner's shared search (:class:`~distir.transform.redistribute_plan._SharedSearch`, one
search from a layout serving every target of a kind) returns what a search of the full graph
toward one target returns (:func:`~distir.transform.redistribute_plan._full_dijkstra`): the very
plan for targets without partials, and a plan of the same cost, block exchanges and steps for
targets with partials. Random layouts with partials of every reduction, on 1-3 axis meshes of
sizes 1-8, tensors of rank 1-4, with and without concrete (uneven) extents, by bytes and by time
(random axis costs)."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distir.errors import DistirError
from distir.ir.axis_cost import AxisCost
from distir.ir.placement import Partial, Placement, Replicate, Shard
from distir.transform.redistribute_plan import Timing, _dijkstra, _full_dijkstra, _penalty, plan_cost

OPS = ("sum", "max", "min", "avg", "prod")


@st.composite
def layouts(draw, mesh_ndim: int, ndim: int, op: str):
    specs = []
    for _ in range(mesh_ndim):
        kind = draw(st.sampled_from(["R", "S", "P"]))
        specs.append(Replicate() if kind == "R" else Shard(draw(st.integers(0, ndim - 1))) if kind == "S" else Partial(op))
    return Placement(tuple(specs))


@st.composite
def searches(draw):
    mesh_ndim = draw(st.integers(1, 3))
    sizes = tuple(draw(st.lists(st.integers(1, 8), min_size=mesh_ndim, max_size=mesh_ndim)))
    ndim = draw(st.integers(1, 4))
    src_op, dst_op = draw(st.sampled_from(OPS)), draw(st.sampled_from(OPS))
    src, dst = draw(layouts(mesh_ndim, ndim, src_op)), draw(layouts(mesh_ndim, ndim, dst_op))
    extents = draw(st.none() | st.lists(st.integers(1, 13), min_size=ndim, max_size=ndim).map(tuple))
    timing = None
    if draw(st.booleans()):
        costs = tuple(AxisCost(Fraction(draw(st.integers(0, 20)), 10**6), Fraction(draw(st.integers(1, 50)) * 10**9))
                      for _ in sizes)
        timing = Timing(costs, draw(st.integers(1, 1 << 24)))
    return src, dst, ndim, sizes, extents, timing


def _key(plan, src, sizes, extents, timing):
    return plan_cost(plan, src, sizes, extents, timing), sum(map(_penalty, plan)), len(plan)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(searches())
def test_the_shared_search_finds_the_full_searchs_plan(case):
    src, dst, ndim, sizes, extents, timing = case
    try:
        full = _full_dijkstra(src, dst, ndim, sizes, extents, timing)
    except DistirError as exc:  # a layout no step reaches (e.g. P[max] to P): both must refuse alike
        full = exc
    try:
        shared = _dijkstra(src, dst, ndim, sizes, extents, timing)
    except DistirError as exc:
        shared = exc
    if full is None or isinstance(full, Exception):
        assert isinstance(shared, Exception), (src, dst, shared)
        return
    assert not isinstance(shared, Exception), (src, dst, shared)
    if not dst.has_partial:
        assert shared == full
    else:
        assert _key(shared, src, sizes, extents, timing) == _key(full, src, sizes, extents, timing)
