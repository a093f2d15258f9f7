"""The dataflow graph that sharding propagation works on, and the preferred placements.

Propagation thinks in *slots*: one per tensor value (a parameter, one output of an op, a
constant). A tuple is just its fields' slots, so ``t = (a, b)``, ``y = t[1]`` and ``y = x``
add no slots, only aliases. Each binding that computes is a :class:`Site` whose inputs and
outputs are slots, with the op's sharding rule (factors per dim, see
:mod:`distir.ir.sharding`).

:func:`preferred_placements` is the first half of the pass: starting from the seeds
(DTensor-typed parameters, ``annotate_sharding`` hints, explicit redistributes; the types
of other vars are re-derived, since the parser infers them from the parameters anyway),
it spreads shardings forwards and backwards through the rules, one mesh axis at a time,
until nothing changes. A sharded dim carries its factor to every dim that shares it; a
contraction over a sharded factor makes its output partial. Seeds never change; what
propagation found first stays (a replicate found by propagation is weak and gives way to a
shard). Where two paths disagree about a tensor that no seed fixes, the disagreement is
recorded so the pass can name the tensor that one more hint would settle.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass, field

from ...errors import DiagnosticError, DistirError, Span, TypeInferenceError
from ...ir.expr import Binding, Call, Constant, Expr, Function, Tuple, TupleGetItem, Var
from ...ir.mesh import DeviceMesh
from ...ir.op import OpDef, call_key
from ...ir.placement import Partial, Placement, Replicate, Shard, Spec, StridedShard, shard_spec
from ...ir.sharding import ShardingRule, factor_at, forward, op_rule, spec_at, with_sizes, without_placement
from ...ir.types import DTensorType, TensorType, TupleType, Type

__all__ = [
    "Conflict",
    "Graph",
    "Preferences",
    "Site",
    "Slot",
    "build_graph",
    "field_slots",
    "preferred_placements",
    "tensor_leaves",
]

HINT_OPS = ("dist.annotate_sharding", "dist.redistribute", "dist.replicate")  # they pin a layout
_RULES: dict[tuple, ShardingRule] = {}  # call_key of (op, input and output tensors, attrs) -> its rule


@dataclass(eq=False)
class Slot:
    """One tensor value of the function."""

    id: int
    name: str
    tensor: TensorType  # global shape and dtype
    distributable: bool  # False for constants and values computed from constants only (kept plain)
    fixed: Placement | None = None  # from a DTensor type or a hint: propagation keeps it
    field_index: int | None = None  # which output of a tuple-valued op
    span: Span | None = None
    constant: Constant | None = None  # the literal, for constant slots
    hinted_as: str | None = None  # the var of the annotate_sharding that fixed this slot's layout
    _producer: weakref.ref | None = field(default=None, repr=False)

    @property
    def producer(self) -> Site | None:
        """The site that computes this value. Held weakly (the graph holds its sites): a site holds its
        slots, and a cycle between the two kept every graph until the cyclic collector ran, which then
        had to walk all that the pass had made (a fifth of the pipeline on an 80-layer stack)."""
        ref = self._producer
        return None if ref is None else ref()

    @producer.setter
    def producer(self, site: Site | None) -> None:
        self._producer = None if site is None else weakref.ref(site)


@dataclass(eq=False)
class Site:
    """One binding that computes (an op call) or pins a layout (a hint, a redistribute)."""

    binding: Binding
    op: OpDef
    ins: list[Slot]
    outs: list[Slot]
    rule: ShardingRule | None = None
    mesh: DeviceMesh | None = None  # the mesh its distributed slots live on
    lead_in: list[tuple[str | None, ...]] = field(default_factory=list)  # leading factor of each input dim
    lead_out: list[tuple[str | None, ...]] = field(default_factory=list)
    # (factor, inner split) the op may cut beyond its leading factors: strided shards (docs/strided.md)
    strided_cuts: list[tuple[str, int]] = field(default_factory=list)

    def cuts(self) -> list[tuple[str, int]]:
        """(factor, inner split) of every way to shard one factor: each leading factor of an input
        dim (split 1), then the strided cuts :func:`find_strided_cuts` found."""
        out = [(f, 1) for lead in self.lead_in for f in lead if f is not None]
        return list(dict.fromkeys(out + self.strided_cuts))

    def input_spec(self, k: int, factor: str, q: int = 1) -> Spec:
        """Input ``k``'s spec when ``factor`` (inner split ``q``) is sharded: S[d], S[d/k], or R (also
        where the op's local form cannot take a strided shard, so the rule refuses the cut)."""
        spec = _cut_spec(self.rule, self.rule.inputs[k], factor, q)
        return Replicate() if isinstance(spec, StridedShard) and not takes_strided(self.op) else spec

    @property
    def name(self) -> str:
        return self.binding.var.name

    @property
    def structure(self) -> tuple | None:
        """What the site's rule, strategies and costs depend on (the op, its attrs, its tensors'
        types, its mesh, its strided cuts): alike sites (the layers of a stack) share it, and what
        is worked out for one serves them all. None where an attr cannot be keyed."""
        key = self.__dict__.get("_structure", self)
        if key is self:
            call = call_key(self.op, [s.tensor for s in self.ins], self.binding.value.attrs)
            key = None if call is None else (call, tuple(s.tensor for s in self.outs), self.mesh,
                                               tuple(self.strided_cuts))
            self.__dict__["_structure"] = key
        return key

    @property
    def is_hint(self) -> bool:
        return self.op.name in HINT_OPS

    def input_dim(self, k: int, factor: str) -> int | None:
        lead = self.lead_in[k]
        return lead.index(factor) if factor in lead else None

    def output_dim(self, o: int, factor: str) -> int | None:
        lead = self.lead_out[o]
        return lead.index(factor) if factor in lead else None


@dataclass
class Graph:
    func: Function
    mesh_of: dict[int, DeviceMesh]  # slot id -> its mesh, for every distributed slot
    slots: list[Slot]
    sites: list[Site]
    var_slots: dict[Var, list[Slot]]  # every tensor or tuple var (and alias) -> its slots
    constants: dict[int, Slot]  # id(Constant expr) -> slot

    @property
    def is_distributed(self) -> bool:
        return bool(self.mesh_of)

    @functools.cached_property
    def position(self) -> dict[int, int]:
        """``id(site)`` -> its index in :attr:`sites`."""
        return {id(site): i for i, site in enumerate(self.sites)}

    @functools.cached_property
    def readers(self) -> dict[int, list[tuple[Site, int]]]:
        """Slot id -> the sites reading it and at which input, in the order of the sites."""
        found: dict[int, list[tuple[Site, int]]] = {}
        for site in self.sites:
            for i, s in enumerate(site.ins):
                found.setdefault(s.id, []).append((site, i))
        return found


def _lead(dims) -> tuple[str | None, ...]:
    return tuple(fs[0] if fs else None for fs in dims)


def tensor_leaves(t: Type) -> int:
    """How many slots a value of type ``t`` has (its tensors, tuples flattened in order)."""
    if isinstance(t, TupleType):
        return sum(tensor_leaves(f) for f in t.fields)
    return 1 if isinstance(t, (TensorType, DTensorType)) else 0


def field_slots(slots: list[Slot], t: TupleType, index: int) -> list[Slot]:
    """The slots of field ``index`` of a tuple of type ``t`` whose slots are ``slots``."""
    index %= len(t.fields)
    start = sum(tensor_leaves(f) for f in t.fields[:index])
    return slots[start : start + tensor_leaves(t.fields[index])]


class _Builder:
    def __init__(self, func: Function, mesh_names: dict | None = None):
        self.func = func
        self.mesh_names = mesh_names or {}
        self.seed_mesh: dict[int, tuple[DeviceMesh, str, Span | None]] = {}
        self.slots: list[Slot] = []
        self.sites: list[Site] = []
        self.var_slots: dict[Var, list[Slot]] = {}
        self.constants: dict[int, Slot] = {}
        self.meshes: list[tuple[DeviceMesh, str, Span | None]] = []
        self.tensors: dict[TensorType, TensorType] = {}

    def fail(self, b: Binding | None, msg: str):
        raise DiagnosticError(f"propagate-sharding: {msg}", (b.span or b.var.span) if b else self.func.span)

    def new_slot(self, name, t: TensorType, distributable: bool, span=None, fixed=None) -> Slot:
        # one object per type: the memos keyed by a slot's type (rules, strategies, costs) then find
        # it by identity, without comparing two equal types
        t = self.tensors.setdefault(t, t)
        s = Slot(len(self.slots), name, t, distributable, fixed=fixed, span=span)
        self.slots.append(s)
        return s

    def note_mesh(self, mesh: DeviceMesh, where: str, span, slot: Slot | None = None) -> None:
        self.meshes.append((mesh, where, span))
        if slot is not None and slot.id not in self.seed_mesh:
            self.seed_mesh[slot.id] = (mesh, where, span)

    def mesh_name(self, mesh: DeviceMesh) -> str:
        for m, name in self.mesh_names.items():
            if m == mesh:
                return f"{name} {mesh.shape_str()}"
        return f"mesh {mesh.shape_str()}"

    def slots_of_type(
        self, name: str, t: Type, distributable: bool, b: Binding | None, span, seed: bool = False
    ) -> list[Slot]:
        """Slots for a value of type ``t``; ``seed``: its DTensor placement is given (a parameter's)."""
        if isinstance(t, TupleType):
            out = []
            for i, f in enumerate(t.fields):
                if isinstance(f, TupleType):
                    self.fail(b, f"'{name}' is a nested tuple; propagation handles tuples of tensors only")
                out.extend(self.slots_of_type(f"{name}_{i}", f, distributable, b, span, seed))
            return out
        plain = without_placement(t)
        if not isinstance(plain, TensorType):
            return []
        fixed = None
        if isinstance(t, DTensorType) and seed:
            fixed = t.placement
        slot = self.new_slot(name, plain, distributable, span, fixed)
        if isinstance(t, DTensorType) and seed:
            self.note_mesh(t.mesh, f"the type of '{name}'", span, slot)
        return [slot]

    def arg_slots(self, e: Expr, b: Binding) -> list[Slot]:
        if isinstance(e, Var):
            if e not in self.var_slots:
                self.fail(b, f"'{e.name}' is used before it is defined")
            return list(self.var_slots[e])
        if isinstance(e, Tuple):
            return [s for f in e.fields for s in self.arg_slots(f, b)]
        if isinstance(e, Constant):
            slot = self.constants.get(id(e))
            if slot is None:
                slot = self.new_slot("const", e.type, False)
                slot.constant = e
                self.constants[id(e)] = slot
            return [slot]
        if isinstance(e, TupleGetItem):
            return field_slots(self.arg_slots(e.tuple_value, b), e.tuple_value.type, e.index)
        return []

    def binding(self, b: Binding) -> None:
        value = b.value
        if isinstance(value, (Var, Tuple, TupleGetItem)):
            self.var_slots[b.var] = self.arg_slots(value, b)
            return
        if isinstance(value, Constant):
            self.var_slots[b.var] = self.arg_slots(value, b)
            return
        if not isinstance(value, Call):
            self.var_slots[b.var] = []
            return
        op = value.op
        ins = [s for a in value.args for s in self.arg_slots(a, b)]
        if op.dist_aware and op.name not in HINT_OPS:
            self.fail(b, f"R.{op.name} belongs to a later stage; run propagate-sharding on the global view, before "
                      "legalize-redistribute and lowering")
        distributable = any(s.distributable for s in ins)
        outs = self.slots_of_type(b.var.name, b.var.type, distributable, b, b.span)
        for i, s in enumerate(outs):
            s.field_index = i if isinstance(b.var.type, TupleType) else None
        site = Site(b, op, ins, outs)
        if op.name in HINT_OPS:
            mesh = value.attrs["device_mesh"]
            placement = value.attrs.get("placement") or Placement.replicated(mesh.ndim)
            outs[0].fixed = placement
            outs[0].distributable = True
            self.note_mesh(mesh, f"the hint on '{b.var.name}'", b.span, outs[0])
            if op.name == "dist.annotate_sharding" and ins and ins[0].fixed is None and ins[0].distributable:
                ins[0].fixed = placement  # the hint is about the annotated tensor itself
                ins[0].hinted_as = b.var.name
        elif op.sharding is not None and outs:
            tensors = [s.tensor for s in ins]
            outs_t = [s.tensor for s in outs]
            key = call_key(op, tensors + outs_t, value.attrs)
            site.rule = _RULES.get(key) if key is not None else None
            if site.rule is None:
                try:
                    site.rule = with_sizes(op_rule(op, tensors, dict(op.full_attrs(value.attrs)), outs_t), tensors, outs_t)
                except (DistirError, IndexError) as err:
                    self.fail(b, f"the sharding rule of R.{op.name} does not apply here: {err}")
                if key is not None:
                    if len(_RULES) >= 4096:
                        _RULES.clear()
                    _RULES[key] = site.rule
            site.lead_in = [_lead(d) for d in site.rule.inputs]
            site.lead_out = [_lead(d) for d in site.rule.outputs]
        for s in outs:
            s.producer = site
        self.var_slots[b.var] = outs
        self.sites.append(site)

    def build(self) -> Graph:
        for p in self.func.params:
            self.var_slots[p] = self.slots_of_type(p.name, p.type, True, None, p.span, seed=True)
        for b in self.func.bindings():
            self.binding(b)
        self.declared_result()
        return Graph(self.func, self.assign_meshes(), self.slots, self.sites, self.var_slots, self.constants)

    def declared_result(self) -> None:
        """A declared DTensor return type puts the result on its mesh (its placement is honoured
        when the result is laid out), also when nothing else in the function is distributed."""
        declared = self.func.ret_type
        if declared is None or not isinstance(self.func.result, (Var, Tuple)):
            return
        leaves = list(declared.fields) if isinstance(declared, TupleType) else [declared]
        slots = self.arg_slots(self.func.result, None)
        if len(slots) != len(leaves):
            return
        for slot, t in zip(slots, leaves):
            if isinstance(t, DTensorType) and slot.constant is None:
                slot.distributable = True
                self.note_mesh(t.mesh, "the declared return type", self.func.span, slot)

    def assign_meshes(self) -> dict[int, DeviceMesh]:
        """Each distributed slot's mesh: an op's slots share one; only a redistribute crosses meshes."""
        parent = list(range(len(self.slots)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for site in self.sites:
            if site.op.name == "dist.redistribute":
                continue
            members = [s.id for s in site.ins + site.outs if s.distributable]
            for m in members[1:]:
                parent[find(m)] = find(members[0])
        component_mesh: dict[int, tuple[DeviceMesh, str, Span | None]] = {}
        for sid, (mesh, where, span) in self.seed_mesh.items():
            root = find(sid)
            known = component_mesh.get(root)
            if known is None:
                component_mesh[root] = (mesh, where, span)
            elif known[0] != mesh:
                raise DiagnosticError(
                    f"propagate-sharding: {where} puts it on {self.mesh_name(mesh)}, but {known[1]} puts values "
                    f"computed together with it on {self.mesh_name(known[0])}; an op's inputs and outputs live on "
                    "one mesh, so move one of them with R.dist.redistribute",
                    span,
                )
        meshes = []
        for m, _, _ in self.meshes:
            if m not in meshes:
                meshes.append(m)
        mesh_of: dict[int, DeviceMesh] = {}
        if not meshes:
            return mesh_of
        for s in self.slots:
            if not s.distributable:
                continue
            found = component_mesh.get(find(s.id))
            if found is not None:
                mesh_of[s.id] = found[0]
            elif len(meshes) == 1:
                mesh_of[s.id] = meshes[0]
            else:
                raise DiagnosticError(
                    f"propagate-sharding: nothing says which of the function's meshes '{s.name}' lives on; "
                    "give it a DTensor type or an R.dist.annotate_sharding hint",
                    s.span,
                )
        for site in self.sites:
            on = [mesh_of[x.id] for x in site.outs + site.ins if x.id in mesh_of]
            site.mesh = on[0] if on else None
        return mesh_of


def build_graph(func: Function, mesh_names: dict | None = None, plain_params: bool = False,
                free_params: tuple[Var, ...] = ()) -> Graph:
    """Slots and sites of ``func``; DiagnosticError for what propagation cannot handle.

    ``mesh_names`` (mesh -> "mesh[i]") makes errors name meshes as the text does. ``plain_params``:
    each parameter declared with a strided shard ``S[d/k]`` is taken as declared ``S[d]`` (the plain
    twin a strided plan is compared with, docs/strided.md). ``free_params``: parameters whose layout
    is to be chosen (auto-shard's): their slots are left unfixed before the strided cuts are found, so
    a cut a reshape or split downstream asks of a weight is offered (a fused QKV weight's ``S[0/3]``)."""
    graph = _Builder(func, mesh_names).build()
    for p in free_params:
        for slot in graph.var_slots.get(p, []):
            slot.fixed = None
    if plain_params:
        for p in func.params:
            for slot in graph.var_slots.get(p, []):
                if slot.fixed is not None and not slot.fixed.is_block and slot.fixed.is_strided:
                    slot.fixed = plain_placement(slot.fixed)
    find_strided_cuts(graph)
    return graph


def strided_params(func: Function) -> list[tuple[str, Placement]]:
    """(name, declared placement) of each parameter declared with a strided shard."""
    return [(p.name, p.type.placement) for p in func.params
            if isinstance(p.type, DTensorType) and not p.type.placement.is_block and p.type.placement.is_strided]


def plain_placement(p: Placement) -> Placement:
    """``p`` with each strided shard ``S[d/k]`` replaced by the plain ``S[d]``."""
    return Placement(tuple(Shard(x.dim) if isinstance(x, StridedShard) else x for x in p.specs))


def _cut_spec(rule: ShardingRule, dims, factor: str, q: int) -> Spec:
    for d, fs in enumerate(dims):
        if factor in fs:
            split = spec_at(rule, fs, factor, q)
            return Replicate() if not isinstance(split, int) else shard_spec(d, split)
    return Replicate()


def takes_strided(op: OpDef) -> bool:
    """Whether ``op`` runs on strided shards: the same op on each worker's storage, or a local
    form that handles them (``OpDef.localize_strided``)."""
    return op.localize is None or op.localize_strided


def find_strided_cuts(graph: Graph) -> None:
    """Fill each site's ``strided_cuts``: the strided shards (docs/strided.md) a reshape asks of a
    dim (a factor that is not the first of its dim: the head part of a fused ``(s, 3 * d)``
    reshaped to ``(s, 3, heads, head_dim)``), carried to every op that shares the dim. A cut is
    offered only where its strided layout is *grounded*: held by a fixed layout, or reachable
    from a parameter whose layout is free (a weight laid out the way the reshape downstream
    needs it). A value whose layout is given otherwise is not redistributed into a strided one
    on the way (that would only move data a block exchange moves more directly)."""
    sites = [site for site in graph.sites if site.rule is not None and takes_strided(site.op)]
    sides = [[*zip(site.ins, site.rule.inputs), *zip(site.outs, site.rule.outputs)] for site in sites]

    def spread(start: dict[int, set[tuple[int, int]]], offer: bool) -> dict[int, set[tuple[int, int]]]:
        found = {k: set(v) for k, v in start.items()}
        # a site is visited again only where a slot's cuts grew since its last visit began (it reads
        # its slots alone): the sweep that confirms the fixed point visits none
        grown: dict[int, int] = dict.fromkeys(found, 1)
        visited: dict[int, int] = {}
        count, changed = 1, True
        while changed:
            changed = False
            for i, site in enumerate(sites):
                last = visited.get(i)
                if last is not None and all(grown.get(slot.id, 0) <= last for slot, _ in sides[i]):
                    continue
                visited[i] = count
                for slot, dims in sides[i]:
                    for d, split in sorted(found.get(slot.id, ())):
                        if d >= len(dims) or not dims[d]:
                            continue
                        cut = factor_at(site.rule, dims[d], split)
                        if cut is None or cut[0] in site.rule.blocked:
                            continue
                        if offer and cut not in site.strided_cuts:
                            site.strided_cuts.append(cut)
                        for other, odims in sides[i]:
                            spec = _cut_spec(site.rule, odims, *cut)
                            if isinstance(spec, StridedShard) and (spec.dim, spec.split) not in found.get(other.id, set()):
                                found.setdefault(other.id, set()).add((spec.dim, spec.split))
                                count += 1
                                grown[other.id] = count
                                changed = True
        return found

    fixed: dict[int, set[tuple[int, int]]] = {}
    for s in graph.slots:
        if s.fixed is not None and not s.fixed.is_block and s.fixed.is_strided:
            fixed[s.id] = {(sp.dim, sp.split) for _, sp in s.fixed.strided}
    asked: dict[int, set[tuple[int, int]]] = {}
    for site, both in zip(sites, sides):  # factors a reshape leaves in a minor place
        for slot, dims in both:
            for d, fs in enumerate(dims):
                for f in fs[1:]:
                    split = spec_at(site.rule, fs, f, 1)
                    if isinstance(split, int) and split > 1:
                        asked.setdefault(slot.id, set()).add((d, split))
    free = {s.id for s in graph.slots
            if s.fixed is None and s.producer is None and s.constant is None and s.distributable}
    wants = spread(asked, offer=False) if free and asked else {}  # (read only where a layout is free)
    grounded = dict(fixed)
    for sid in free & wants.keys():
        grounded.setdefault(sid, set()).update(wants[sid])
    # a split into equal sections reads its input per section: no reshape to fuse an exchange with, so
    # the conversion into the strided layout is offered, where it is one block exchange (static shapes;
    # with a run-time dim it is a regroup and an all-to-all, which the costs do not see)
    for site in sites:
        if site.op.name == "split" and site.ins and site.ins[0].distributable and all(
                isinstance(d, int) for d in site.ins[0].tensor.shape):
            grounded.setdefault(site.ins[0].id, set()).update(asked.get(site.ins[0].id, ()))
    spread(grounded, offer=True)


# ---------------------------------------------------------------------------------------------
# preferred placements

WEAK, FIRM, SEED = 1, 2, 3  # strength of what is known about one mesh axis of a slot


@dataclass(frozen=True)
class Conflict:
    slot: Slot
    mesh_axis: int
    kept: Spec
    offered: Spec
    site: Site
    other: Slot | None = None  # the tensor whose layout disagrees, when the clash is between two inputs
    factors: tuple[str, str] | None = None  # the op's dims (rule factors) the two layouts would cut


@dataclass
class Preferences:
    """Per slot and mesh axis: the spec propagation prefers (None: nothing known, i.e. R)."""

    specs: dict[int, list[Spec | None]]  # settled: propagation is done when Preferences is made
    conflicts: list[Conflict]
    _placements: dict[int, Placement] = field(default_factory=dict, repr=False)
    _interned: dict[tuple, Placement] = field(default_factory=dict, repr=False)  # specs -> their placement

    def placement(self, slot: Slot) -> Placement:
        p = self._placements.get(slot.id)
        if p is None:
            specs = tuple(s if s is not None else Replicate() for s in self.specs[slot.id])
            # one object per placement: the keys that hold it (windows' signatures, memos) compare by identity
            p = self._interned.get(specs)
            if p is None:
                p = self._interned[specs] = Placement(specs)
            self._placements[slot.id] = p
        return p


class _Propagator:
    def __init__(self, graph: Graph):
        self.graph = graph
        widest = max(m.ndim for m in graph.mesh_of.values())
        self.specs: dict[int, list[Spec | None]] = {}
        self.strength: dict[int, list[int]] = {}
        self.conflicts: list[Conflict] = []
        # changes made so far; the count when each slot last changed, and when each visit last began
        self.changes = 0
        self.changed_at: dict[int, int] = {}
        self.visited: dict[tuple[int, bool], int] = {}
        for s in graph.slots:
            ndim = graph.mesh_of[s.id].ndim if s.id in graph.mesh_of else widest
            if s.fixed is not None and s.fixed.is_block:  # a block layout says nothing of single mesh axes
                self.specs[s.id] = [None] * ndim
                self.strength[s.id] = [0] * ndim
            elif s.fixed is not None:
                self.specs[s.id] = list(s.fixed.specs)
                self.strength[s.id] = [SEED] * ndim
            elif not s.distributable:  # the same on every worker: replicated on any mesh
                self.specs[s.id] = [Replicate()] * ndim
                self.strength[s.id] = [SEED] * ndim
            else:
                self.specs[s.id] = [None] * ndim
                self.strength[s.id] = [0] * ndim

    def propose(self, s: Slot, a: int, spec: Spec, site: Site) -> bool:
        cur, st = self.specs[s.id][a], self.strength[s.id][a]
        if cur == spec:
            return False
        if cur is None or (st == WEAK and not isinstance(spec, Replicate)):
            self.specs[s.id][a] = spec
            self.strength[s.id][a] = WEAK if isinstance(spec, Replicate) else FIRM
            self.changes += 1
            self.changed_at[s.id] = self.changes
            return True
        if st != SEED and not isinstance(spec, Replicate):
            self.conflicts.append(Conflict(s, a, cur, spec, site))
        return False

    def shard_factor(self, site: Site, a: int, sources) -> tuple[str, int] | None:
        """The one (factor, inner split) the given (slot, factors per dim) pairs shard on axis ``a``
        (a plain shard: its dim's leading factor, split 1; a strided one, docs/strided.md: the factor
        its parts line up with), or None if none or several.

        Several is a disagreement: each slot that propagation (not a seed) sharded is recorded,
        since a hint on it would settle which layout the op runs in."""
        found: dict[tuple[str, int], Slot] = {}
        for s, dims in sources:
            spec = self.specs[s.id][a]
            if not isinstance(spec, (Shard, StridedShard)) or self.strength[s.id][a] < FIRM or spec.dim >= len(dims):
                continue
            if not dims[spec.dim]:
                continue
            cut = (dims[spec.dim][0], 1) if isinstance(spec, Shard) else factor_at(site.rule, dims[spec.dim], spec.split)
            if cut is not None and cut[0] not in site.rule.blocked:
                found.setdefault(cut, s)
        if len(found) > 1:
            owners = list(found.values())
            factor_of = {id(s): f if q == 1 else f"{f}/{q}" for (f, q), s in found.items()}
            for s in owners:
                if self.strength[s.id][a] != SEED:
                    other = next((o for o in owners if o is not s), None)  # None: the op reads it twice
                    offered = self.specs[other.id][a] if other is not None else self.specs[s.id][a]
                    factors = (factor_of[id(s)], factor_of[id(other)]) if other is not None else None
                    self.conflicts.append(Conflict(s, a, self.specs[s.id][a], offered, site, other, factors))
        return next(iter(found)) if len(found) == 1 else None

    def forward_site(self, site: Site, a: int) -> bool:
        changed = False
        rule = site.rule
        cut = self.shard_factor(site, a, zip(site.ins, rule.inputs))
        if cut is not None:
            f = cut[0]
            for k, s in enumerate(site.ins):
                spec = _cut_spec(rule, rule.inputs[k], *cut)
                if not isinstance(spec, Replicate) and s.distributable:
                    changed |= self.propose(s, a, spec, site)
            for o, s in enumerate(site.outs):
                spec = _cut_spec(rule, rule.outputs[o], *cut)
                if not isinstance(spec, Replicate):
                    changed |= self.propose(s, a, spec, site)
                elif f in rule.reductions and not any(f in fs for fs in rule.outputs[o]):
                    changed |= self.propose(s, a, Partial(rule.reductions[f]), site)
            return changed
        specs = [self.specs[s.id][a] for s in site.ins]
        if any(sp is None for sp in specs) or any(isinstance(sp, (Shard, StridedShard)) for sp in specs):
            return False
        try:
            outs = forward(rule, [Placement((sp,)) for sp in specs], 1, site.op.name)
        except TypeInferenceError:
            return False
        for s, p in zip(site.outs, outs):
            changed |= self.propose(s, a, p.specs[0], site)
        return changed

    def backward_site(self, site: Site, a: int) -> bool:
        cut = self.shard_factor(site, a, zip(site.outs, site.rule.outputs))
        if cut is None:
            return False
        changed = False
        for k, s in enumerate(site.ins):
            spec = _cut_spec(site.rule, site.rule.inputs[k], *cut)
            if not isinstance(spec, Replicate) and s.distributable:
                changed |= self.propose(s, a, spec, site)
        return changed

    def hint_site(self, site: Site, a: int) -> bool:
        # annotate_sharding is the identity: what is known of one side is known of the other
        if site.op.name != "dist.annotate_sharding" or not site.ins:
            return False
        x, y = site.ins[0], site.outs[0]
        changed = False
        for src, dst in ((x, y), (y, x)):
            spec = self.specs[src.id][a]
            if spec is not None and dst.distributable:
                changed |= self.propose(dst, a, spec, site)
        return changed

    def settled(self, i: int, site: Site, backward: bool) -> bool:
        """Whether visiting ``site`` (the ``i``-th; forwards, or ``backward``) would find what its last
        visit found: none of its slots changed since that visit began. A visit reads only its slots,
        so it would change nothing, and would only record its conflicts again."""
        last = self.visited.get((i, backward))
        if last is not None and all(self.changed_at.get(s.id, 0) <= last for s in (*site.ins, *site.outs)):
            return True
        self.visited[(i, backward)] = self.changes
        return False

    def run(self) -> Preferences:
        sites = [s for s in self.graph.sites if (s.rule is not None or s.is_hint) and s.mesh is not None]
        for _ in range(4 * len(sites) + 8):
            changed = False
            for i, site in enumerate(sites):
                if self.settled(i, site, False):
                    continue
                for a in range(site.mesh.ndim):
                    changed |= self.hint_site(site, a) if site.is_hint else self.forward_site(site, a)
            for i in reversed(range(len(sites))):
                site = sites[i]
                if site.is_hint or self.settled(i, site, True):
                    continue
                for a in range(site.mesh.ndim):
                    changed |= self.backward_site(site, a)
            if not changed:
                break
        return Preferences(self.specs, self.conflicts)


def preferred_placements(graph: Graph) -> Preferences:
    """Spread the seeds' shardings through the graph (see the module docstring)."""
    return _Propagator(graph).run()

