"""distir.analysis: communication and memory formulas in num_workers, checked against what the SPMD
runtime measures at each specialized count, against hand counts, and against an independent
(quadratic, by definition) liveness count."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import distir
from distir import examples
from distir.analysis import (
    AnalysisError,
    CommModel,
    Maximum,
    Rational,
    comm_time,
    comm_time_formula,
    comm_volume,
    evaluate,
    memory_footprint,
)
from distir.ir import (
    Binding,
    Block,
    Call,
    Function,
    IRModule,
    Placement,
    Var,
    get_op,
    sym,
)
from distir.ir.expr import Tuple, TupleGetItem
from distir.ir.placement import Partial, Replicate, Shard
from distir.runtime.spmd import SpmdStats, run_spmd
from distir.transform.pipelines import distribute_pipeline
from distir.transform.specialize import specialize
from helpers import redistribute_module

W = sym.var("num_workers")
COUNTS = (1, 2, 3, 4, 8)
HIDDEN = 384  # divides by 1, 2, 3, 4 and 8


def mlp_text() -> str:
    """The bundled MLP with a hidden size every count in COUNTS divides."""
    return examples.text("mlp").replace("512", str(HIDDEN))


@pytest.fixture(scope="module")
def mlp_local():
    return distribute_pipeline()(distir.parse(mlp_text()))


def mlp_inputs(seed=0):
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal((128, 256)).astype("float32"),
        rng.standard_normal((256, HIDDEN)).astype("float32"),
        rng.standard_normal((HIDDEN, 256)).astype("float32"),
    ]


def measured(local, inputs, w) -> SpmdStats:
    stats = SpmdStats()
    run_spmd(specialize(local, {"num_workers": w}), *inputs, stats=stats)
    return stats


def assert_matches(volume, values, stats: SpmdStats):
    got = volume.evaluate(values)
    assert got.num_workers == stats.num_workers
    assert got.counts == stats.counts
    assert got.bytes_by_kind == stats.bytes_by_kind
    assert got.total_bytes == stats.total_bytes
    assert got.bytes_per_worker == stats.bytes_per_worker


# ---------------------------------------------------------------- communication


@pytest.mark.parametrize("w", COUNTS)
def test_mlp_comm_formula_equals_measured_bytes_and_hand_count(mlp_local, w):
    volume = comm_volume(mlp_local)
    stats = measured(mlp_local, mlp_inputs(), w)
    assert_matches(volume, {"num_workers": w}, stats)
    # by hand: one all-reduce of y (128 x 256 float32); a ring all-reduce sends 2 (n - 1) / n of it per worker
    y_bytes = 128 * 256 * 4
    assert stats.counts == {"all_reduce": 1}
    assert stats.total_bytes == 2 * (w - 1) * y_bytes
    assert volume.bytes_per_worker.evaluate({"num_workers": w}) == Fraction(2 * (w - 1) * y_bytes, w)
    # the specialized module gives the same numbers directly
    assert_matches(comm_volume(specialize(mlp_local, {"num_workers": w})), {}, stats)


def test_mlp_comm_formulas_are_symbolic_and_simplified(mlp_local):
    volume = comm_volume(mlp_local)
    assert volume.free_vars() == {"num_workers"}
    assert sym.to_str(volume.total_bytes) == "num_workers * 262144 - 262144"
    assert str(volume.bytes_per_worker) == "(num_workers * 262144 - 262144) / num_workers"
    (c,) = volume.collectives
    assert (c.binding, c.op, c.kind, c.mesh_axis) == ("y_r", "ccl.all_reduce", "all_reduce", 0)
    assert sym.to_str(c.input_bytes) == "131072" and sym.to_str(c.steps) == "num_workers * 2 - 2"


MESHES = {1: [(W,)], 2: [(2, W), (W, 2)]}


@st.composite
def chains(draw):
    mesh_shape = draw(st.sampled_from(MESHES[draw(st.sampled_from([1, 2]))]))
    fixed = sym.product(d for d in mesh_shape if isinstance(d, int))
    ndim = draw(st.integers(1, 2))
    op = draw(st.sampled_from(["sum", "max"]))  # one reduction per example: a placement may not mix them

    def spec():
        return st.one_of(st.just(Replicate()), st.builds(Shard, st.integers(0, ndim - 1)), st.just(Partial(op)))

    ok = [Placement(tuple(draw(spec()) for _ in mesh_shape)) for _ in range(draw(st.integers(2, 4)))]
    workers = draw(st.sampled_from([w for w in (1, 2, 3, 4) if w * fixed <= 8]))
    dtype = draw(st.sampled_from(["float32", "int32"]))
    shape = tuple(24 * draw(st.integers(1, 2)) for _ in range(ndim))
    return mesh_shape, workers, shape, dtype, ok


KINDS_SEEN: set = set()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains(), st.integers(0, 2**16))
# an all-to-all, which the drawn chains need not contain (the test after this one checks the kinds)
@example(((W,), 2, (48, 48), "float32", [Placement.parse("S[0]"), Placement.parse("S[1]")]), 0)
def test_comm_formulas_equal_measured_bytes_for_redistribute_chains(case, seed):
    mesh_shape, workers, shape, dtype, placements = case
    local = distribute_pipeline()(redistribute_module(mesh_shape, shape, *placements, dtype=dtype))
    KINDS_SEEN.update(comm_volume(local).evaluate({"num_workers": workers}).counts)
    rng = np.random.default_rng(seed)
    x = rng.integers(-5, 5, size=shape).astype(dtype)
    stats = measured(local, [x], workers)
    assert_matches(comm_volume(local), {"num_workers": workers}, stats)
    assert_matches(comm_volume(specialize(local, {"num_workers": workers})), {}, stats)


def test_the_chains_exercised_every_kind_of_collective():
    # runs after the property test above (pytest keeps file order)
    assert KINDS_SEEN >= {"all_gather", "all_reduce", "reduce_scatter", "all_to_all"}, KINDS_SEEN


def test_two_d_mesh_collectives_count_every_group():
    # on a (2, n) mesh, gathering mesh axis 1 runs two groups of n workers (840 columns: every count
    # up to 8 divides them, so the all-gather is the cheapest plan at each and is not re-planned)
    mod = redistribute_module((2, W), (48, 840), "S[0], S[1]", "S[0], R")
    local = distribute_pipeline()(mod)
    volume = comm_volume(local)
    (c,) = volume.collectives
    assert c.kind == "all_gather" and sym.to_str(c.groups) == "2" and sym.to_str(c.group_size) == "num_workers"
    for w in (1, 3, 4):
        piece = (48 // 2) * (840 // w) * 4
        stats = measured(local, [np.ones((48, 840), "float32")], w)
        assert stats.total_bytes == 2 * w * (w - 1) * piece  # every one of the 2w workers sends (w - 1) pieces
        assert_matches(volume, {"num_workers": w}, stats)


def test_comm_time_is_latency_times_steps_plus_bytes_over_bandwidth(mlp_local):
    volume = comm_volume(mlp_local)
    model = CommModel(latency=1e-5, bandwidth=1e9)
    y_bytes = 128 * 256 * 4
    for w in (1, 2, 4):
        want = 2 * (w - 1) * 1e-5 + 2 * (w - 1) * y_bytes / w / 1e9
        assert comm_time(volume, model, {"num_workers": w}) == pytest.approx(want)
        assert model.collective(volume.collectives[0], {"num_workers": w}) == pytest.approx(want)
    t = comm_time_formula(volume)
    assert "latency * (num_workers * 2 - 2)" in str(t)
    with pytest.raises(AnalysisError, match="bandwidth"):
        CommModel(bandwidth=0)


def test_global_view_module_is_refused_with_a_hint():
    mod = redistribute_module((W,), (8, 8), "S[0]", "R")
    with pytest.raises(AnalysisError, match="binding 'y' is R.dist.redistribute.*distribute pipeline"):
        comm_volume(mod)


def test_unknown_function_and_missing_value_are_errors(mlp_local):
    with pytest.raises(AnalysisError, match="no function 'nope'.*main"):
        comm_volume(mlp_local, "nope")
    with pytest.raises(AnalysisError, match="no value for symbolic variable 'num_workers'"):
        comm_volume(mlp_local).evaluate({})


# ---------------------------------------------------------------- memory


def brute_force_peak(f: Function) -> tuple[int, int]:
    """(parameter bytes, peak live intermediate bytes) of a specialized function, straight from the
    definition: at binding i, every computed tensor j <= i that is read at or after i (or is in the
    result). A call computes one tensor per field of its result (a tuple item reads its field only);
    a reshape, expand_dims or squeeze is a view of its input (TVM makes it one), not a new tensor, and
    so is a copy of the same type (a repeat by 1, a cast to the same dtype, the identity permutation)."""

    def nbytes(t) -> int:
        if hasattr(t, "shape"):
            return int(np.prod([int(d) for d in t.shape], dtype=np.int64)) * np.dtype(
                "uint16" if t.dtype == "bfloat16" else t.dtype
            ).itemsize
        return 0

    def tensors(t) -> list:
        return [x for ft in t.fields for x in tensors(ft)] if hasattr(t, "fields") else [t]

    bindings = list(f.bindings())
    refers: dict = {p: [set()] for p in f.params}  # per field: the computed tensors it is

    def parts(e) -> list:
        if isinstance(e, Var):
            return refers[e]
        if isinstance(e, Tuple):
            return [set().union(*parts(x)) for x in e.fields]
        if isinstance(e, TupleGetItem):
            p = parts(e.tuple_value)
            return [p[e.index]] if len(p) > 1 else p
        return [set()]

    def refs(e) -> set:
        if isinstance(e, Call):
            return set().union(*(refs(a) for a in e.args)) if e.args else set()
        return set().union(*parts(e))

    def is_view(call) -> bool:
        name, arg = call.op.name, call.args[0] if call.args else None
        if name in ("reshape", "expand_dims", "squeeze"):
            return isinstance(arg, Var)
        if not isinstance(arg, Var) or not hasattr(arg.type, "shape"):
            return False
        same = str(arg.type) == str(call.type)  # a specialized function: concrete shapes print alike
        if name == "permute_dims":
            axes = call.attrs.get("axes")
            return axes is not None and list(axes) == list(range(len(arg.type.shape)))
        return same and name in ("repeat", "tile", "broadcast_to", "astype")

    computed = {}
    for j, b in enumerate(bindings):
        if isinstance(b.value, Call) and is_view(b.value):
            refers[b.var] = parts(b.value.args[0])
        elif isinstance(b.value, Call):
            refers[b.var] = []
            for k, t in enumerate(tensors(b.var.type)):
                computed[(j, k)] = nbytes(t)
                refers[b.var].append({(j, k)})
        else:
            refers[b.var] = parts(b.value)
    reads = [refs(b.value) for b in bindings]
    result = refs(f.result)
    peak = 0
    for i in range(len(bindings)):
        live = [t for t in computed if t[0] <= i and (t[0] == i or t in result or any(t in reads[k] for k in range(i, len(bindings))))]
        peak = max(peak, sum(computed[t] for t in live))
    return sum(nbytes(p.type) for p in f.params), peak


@pytest.mark.parametrize("w", COUNTS)
def test_mlp_memory_formula_equals_hand_count_and_brute_force(mlp_local, w):
    fp = memory_footprint(mlp_local)
    got = fp.evaluate({"num_workers": w})
    h = HIDDEN // w
    # by hand: x replicated, w1 and w2 each a 1/n slice of the hidden dim
    assert got.param_bytes == 128 * 256 * 4 + 2 * 256 * h * 4
    # live: {h, a} while gelu runs, {a, y} during the second matmul, {y, y_r} during the all-reduce
    assert got.peak_bytes == max(2 * 128 * h * 4, 128 * h * 4 + 128 * 256 * 4, 2 * 128 * 256 * 4)
    local = specialize(mlp_local, {"num_workers": w})
    assert (got.param_bytes, got.peak_bytes) == brute_force_peak(local["main"])
    direct = memory_footprint(local).evaluate()
    assert (direct.param_bytes, direct.peak_bytes) == (got.param_bytes, got.peak_bytes)


def test_mlp_memory_formula_text(mlp_local):
    fp = memory_footprint(mlp_local)
    assert sym.to_str(fp.param_bytes) == "T.ceildiv(384, num_workers) * 2048 + 131072"
    assert str(fp.peak_bytes) == ("max(T.ceildiv(384, num_workers) * 1024, T.ceildiv(384, num_workers) * 512 + 131072, "
                                  "262144)")
    assert fp.peak_bytes.labels == ("a", "y", "y_r")
    assert fp.evaluate({"num_workers": 1}).peak_at == "a"
    assert fp.evaluate({"num_workers": 8}).peak_at == "y_r"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains())
def test_memory_formula_equals_brute_force_for_redistribute_chains(case):
    mesh_shape, workers, shape, dtype, placements = case
    local = distribute_pipeline()(redistribute_module(mesh_shape, shape, *placements, dtype=dtype))
    got = memory_footprint(local).evaluate({"num_workers": workers})
    assert (got.param_bytes, got.peak_bytes) == brute_force_peak(specialize(local, {"num_workers": workers})["main"])


def test_aliases_allocate_nothing_and_a_tuple_item_keeps_its_field_alive():
    t = distir.ir.TensorType((4, 8), "float32")
    x = Var("x", t)
    a = Var("a", t)
    b = Var("b", t)
    pair = Var("pair", distir.ir.TupleType((t, t)))
    first = Var("first", t)
    c = Var("c", t)
    relu, add = get_op("nn.relu"), get_op("add")
    bindings = (
        Binding(a, Call(relu, (x,))),
        Binding(b, Call(relu, (x,))),
        Binding(pair, Tuple((a, b))),
        Binding(first, TupleGetItem(pair, 0)),
        Binding(c, Call(add, (first, x))),
    )
    f = Function("main", (x,), (Block(bindings, True, (c,)),), c)
    fp = memory_footprint(IRModule({"main": f}))
    # the tuple item reads a only: b is freed after the tuple, so c runs with a and c live, and
    # the peak is 2 * 128 bytes (a and b while b is computed; a and c while c is)
    assert fp.evaluate().peak_bytes == 2 * 128 == brute_force_peak(f)[1]
    assert fp.evaluate().param_bytes == 128


# ---------------------------------------------------------------- formulas


def test_rational_and_maximum_evaluate_exactly():
    n = sym.var("num_workers")
    r = Rational.of(sym.mul(4, sym.sub(n, 1)), n) + Rational.of(sym.mul(8, n), n) + Rational.of(6)
    assert r.evaluate({"num_workers": 3}) == Fraction(8, 3) + 8 + 6
    assert str(r) == "14 + (num_workers * 4 - 4) / num_workers"  # 8 * n / n simplified to 8
    m = Maximum((sym.floordiv(64, n), 16), ("p", "q"))
    assert evaluate(m, {"num_workers": 2}) == 32 and evaluate(m, {"num_workers": 8}) == 16
    assert m.labels[m.argmax({"num_workers": 8})] == "q"
    assert str(m) == "max(64 // num_workers, 16)"


# ---------------------------------------------------------------- the Llama layer


def llama_layer_inputs(s: int, hidden: int, heads: int, ffn: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    hd = hidden // heads

    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype("float32")

    norm = (np.ones(hidden) + 0.1 * rng.standard_normal(hidden)).astype("float32")
    pos = np.arange(s)[:, None] * (10000.0 ** (-np.arange(0, hd, 2) / hd))[None, :]
    emb = np.concatenate([pos, pos], axis=-1)
    x = rng.standard_normal((s, hidden)).astype("float32")
    weights = [norm, w(hidden, hidden), w(hidden, hidden), w(hidden, hidden), w(hidden, hidden), norm,
               w(hidden, ffn), w(hidden, ffn), w(ffn, hidden)]
    return [x, np.cos(emb).astype("float32"), np.sin(emb).astype("float32"), *weights]


LLAMA_CASES = {
    # name: (module, hidden, heads, ffn, counts); 24 heads of 2 divide by 3 as well
    "bundled": (lambda: examples.load("llama"), 128, 8, 256, (1, 2, 3, 4, 5, 8)),
    "generated": (lambda: examples.llama_stack(1, hidden=48, heads=24, ffn=96), 48, 24, 96, COUNTS),
}


@pytest.mark.parametrize("case", sorted(LLAMA_CASES))
def test_llama_layer_formulas_equal_measured_bytes_hand_count_and_brute_force(case):
    make, hidden, heads, ffn, counts = LLAMA_CASES[case]
    local = distribute_pipeline()(make())
    volume, fp = comm_volume(local), memory_footprint(local)
    assert volume.free_vars() == {"num_workers", "s"}
    s = 8
    inputs = llama_layer_inputs(s, hidden, heads, ffn)
    for w in counts:
        values = {"num_workers": w, "s": s}
        stats = measured(local, inputs, w)
        assert_matches(volume, values, stats)
        # by hand: one all-reduce of the (s, hidden) activation after attention and one after the MLP;
        # a count that does not divide the heads also regroups Q, K, V and the attention output
        # from column blocks of ceil(hidden / w) to blocks of whole heads (measured = formula above)
        assert stats.counts["all_reduce"] == 2
        assert stats.bytes_by_kind["all_reduce"] == 2 * 2 * (w - 1) * s * hidden * 4
        assert stats.counts == ({"all_reduce": 2} if heads % w == 0 else {"all_reduce": 2, "regroup": 4})
        # parameters by hand: two norms and x, cos, sin whole; Q, K, V, O, gate, up, down a block
        # of ceil(1/w) of their sharded dim (of hidden or ffn)
        hd = hidden // heads
        want_params = (2 * hidden + s * hidden + 2 * s * hd + 4 * hidden * -(-hidden // w) + 3 * hidden * -(-ffn // w)) * 4
        got = fp.evaluate(values)
        assert got.param_bytes == want_params
        specialized = specialize(specialize(local, {"s": s}), {"num_workers": w})
        assert (got.param_bytes, got.peak_bytes) == brute_force_peak(specialized["main"])


# ---------------------------------------------------------------- transfers between meshes (pipeline stages)

def legalize_and_lower(mod):
    """The distribute pipeline without propagation (these functions are typed stage by stage)."""
    from distir.transform import get_pass

    return get_pass("lower-global-view-to-local-view")(get_pass("legalize-redistribute")(mod))


TWO_STAGES = '''\
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers")), \
R.device_mesh((2, "num_workers"), I.Range("num_workers", "3 * num_workers"))]})

    @R.function
    def main(x: R.DTensor((24, 48), "float32", "mesh[0]", "S[0]")):
        with R.dataflow():
            y: R.DTensor((24, 48), "float32", "mesh[1]", "S[1], R") = R.dist.redistribute(x, device_mesh="mesh[1]", \
placement="S[1], R")
            z: R.DTensor((24, 48), "float32", "mesh[1]", "R, R") = R.dist.redistribute(y, device_mesh="mesh[1]", \
placement="R, R")
            R.output(z)
        return z
'''


@pytest.mark.parametrize("w", [1, 2, 3, 4])
def test_transfer_between_stages_equals_measured_bytes(w):
    local = legalize_and_lower(distir.parse(TWO_STAGES))
    volume = comm_volume(local)
    assert {c.kind for c in volume.collectives} >= {"transfer"}
    stats = measured(local, [np.arange(24 * 48, dtype="float32").reshape(24, 48)], w)
    assert_matches(volume, {"num_workers": w}, stats)
    (t,) = [c for c in volume.collectives if c.kind == "transfer"]
    # by hand: each of the 2w target workers receives its half of the tensor
    assert evaluate(t.total_bytes, {"num_workers": w}) == 2 * w * 24 * 24 * 4
    assert stats.num_workers == 3 * w


SHARED_DEVICES = '''\
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((4,), I.Range(0, 4)), R.device_mesh((2, 2), I.Range(0, 4))]})

    @R.function
    def main(x: R.DTensor((8, 4), "float32", "mesh[0]", "S[0]")):
        with R.dataflow():
            y: R.DTensor((8, 4), "float32", "mesh[1]", "S[0], R") = R.dist.redistribute(x, device_mesh="mesh[1]", \
placement="S[0], R")
            R.output(y)
        return y
'''


def test_transfer_between_meshes_sharing_devices_counts_only_what_moves():
    local = legalize_and_lower(distir.parse(SHARED_DEVICES))
    stats = SpmdStats()
    run_spmd(local, np.ones((8, 4), "float32"), stats=stats)
    assert_matches(comm_volume(local), {}, stats)
    assert stats.total_bytes == 4 * (2 * 4) * 4  # each device keeps its own (2, 4) quarter and receives another


@pytest.mark.parametrize("meshes, devices", [
    # a static mesh far from id 0: its two devices, not 1 + the largest id
    ('R.device_mesh((2,), I.Range(100000000, 100000002))', {1: 2, 3: 2}),
    # two meshes provably apart, with a gap: the sum of their sizes
    ('R.device_mesh(("num_workers",), I.Range(3, "num_workers + 3")), R.device_mesh((2,), [0, 1])', {1: 3, 3: 5}),
    # overlapping for some counts only: counted exactly at each count
    ('R.device_mesh(("num_workers",), I.Range(1, "num_workers + 1")), R.device_mesh((2,), [0, 1])', {1: 2, 3: 4}),
    # stages, and another grid of the same devices
    ('R.device_mesh(("num_workers",), I.Range(0, "num_workers")), R.device_mesh((2, "num_workers"), '
     'I.Range("num_workers", "3 * num_workers")), R.device_mesh(("num_workers", 2), I.Range("num_workers", "3 * num_workers"))',
     {1: 3, 3: 9}),
])
def test_workers_are_the_devices_of_the_meshes(meshes, devices):
    """Bytes per worker divide by the devices of the module's meshes (ids in no mesh are no devices),
    in the simulator's statistics and the analysis alike."""
    text = f'''
@I.ir_module
class Module:
    I.module_global_infos({{"mesh": [{meshes}]}})

    @R.function
    def main(x: R.DTensor((12, 4), "float32", "mesh[0]", "S[0]")):
        with R.dataflow():
            y = R.dist.redistribute(x, device_mesh="mesh[0]", placement="R")
            R.output(y)
        return y
'''
    local = legalize_and_lower(distir.parse(text))
    for w, n in devices.items():
        stats = measured(local, [np.ones((12, 4), "float32")], w)
        assert stats.num_workers == stats.simulated == n
        assert stats.summary().startswith(f"{n} workers:")
        assert_matches(comm_volume(local), {"num_workers": w}, stats)
        assert stats.bytes_per_worker == Fraction(stats.total_bytes, n) > 0 or stats.total_bytes == 0
