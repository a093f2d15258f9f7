"""Choosing layouts: where each tensor lives on the mesh, before legalize turns the choice into
collectives (docs/propagation.md, docs/auto_shard.md).

From the bottom up:

- :mod:`.sharding_graph`: the function as ops over slots (one per tensor), and the preferred
  placement the seeds spread to each;
- :mod:`.cost_model`: sizes at the hints and samples, the bytes of a redistribute, which cuts fit;
- :mod:`.strategies`: the layouts one op may run in;
- :mod:`.plan`: what the solver gives (:class:`~.plan.LayoutPlan`) and what auto-shard adds to it;
- :mod:`.program`: the integer program (Alpa's formulation); :mod:`.solution`: solving it with
  HiGHS and reading the plan; :mod:`.windows`: a long function solved window by window;
- :mod:`.measure`: the bytes and the peak memory of a written function at concrete sizes;
- the passes: :mod:`.propagate_sharding` (``propagate-sharding``: the plan, or the greedy choice,
  written into the function), :mod:`.auto_shard` (``auto-shard``: the parameters' layouts chosen
  too, under memory budgets) and :mod:`.shard_params` (``shard-params``: parameters laid out by name).
"""
