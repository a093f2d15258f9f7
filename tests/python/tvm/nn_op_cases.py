"""Every function of ``tvm.relax.frontend.nn.op``, as a TVM user calls it: the cases the op-coverage
tests run (test_nn_op_coverage.py) and the table of docs/frontend.md (scripts/gen_nn_op_table.py).

A :class:`Case` is a small ``nn.Module`` with the input shapes, a shard plan (``ShardParams``
patterns over inputs and weights) and the device counts it is run at. Which ``nn.op`` functions
a case covers, and which Relax ops each of them emits, is not written down: :func:`trace`
records it while TVM exports the module. A function distir does not import has an
:class:`Unsupported` case instead: the module, and the import error it must give.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from tvm import relax, te
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op

SIM_COUNTS = tuple(range(1, 9))  # every case runs on the simulator at these counts
DISCO_COUNTS = (3,)  # and, all cases in one module (one build per count), on Disco at these
SEQ = 5  # the dynamic size "s" at run time: below most counts, dividing none but 1 and 5


def nn_op_functions() -> list[str]:
    """The public functions of the installed ``tvm.relax.frontend.nn.op``."""
    return sorted(
        name for name, f in inspect.getmembers(op, inspect.isfunction)
        if f.__module__ == op.__name__ and not name.startswith("_")
    )


@dataclass(frozen=True)
class Case:
    """A module using some nn.op functions, run sharded by ``plan`` at ``counts``."""

    name: str
    module: Callable[[], nn.Module]
    spec: dict  # forward's inputs: name -> nn.spec.Tensor
    inputs: Callable[[np.random.Generator], list[np.ndarray]]
    plan: dict[str, str]
    counts: tuple[int, ...] = SIM_COUNTS
    note: str = ""  # what the plan shows

    def export_spec(self) -> dict:
        return {"forward": dict(self.spec)}


@dataclass(frozen=True)
class Unsupported:
    """An nn.op function distir does not import: a module calling it and the error it must give."""

    function: str
    module: Callable[[], nn.Module]
    spec: dict
    error: str  # a regular expression the one-line TvmImportError matches
    why: str  # for the table


def _t(*shape, dtype="float32"):
    return nn.spec.Tensor(list(shape), dtype)


def _f(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


def _weights_of(module: nn.Module, rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for name, p in module.state_dict().items():
        shape = tuple(int(d) for d in p.shape)
        out[name] = (rng.standard_normal(shape) / np.sqrt(max(shape[-1], 1))).astype(p.dtype)
    return out


def weights(case: Case, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights for the case's module (by state-dict name)."""
    return _weights_of(case.module(), np.random.default_rng(seed))


# ---------------------------------------------------------------- the modules


class Binary(nn.Module):
    def forward(self, x, y):
        c = op.greater(x, y)
        return (op.add(x, y), op.subtract(x, y), op.multiply(x, y), op.divide(x, op.exp(y)), op.maximum(x, y),
                op.minimum(x, y), op.equal(x, y), op.not_equal(x, y), op.less(x, y), op.less_equal(x, y), c,
                op.greater_equal(x, y), op.where(c, x, y))


class Unary(nn.Module):
    def __init__(self):
        self.alpha = nn.Parameter((6,), "float32")

    def forward(self, x):
        pos = op.square(x) + 1.0
        return (op.exp(x), op.log(pos), op.sqrt(pos), op.tanh(x), op.sigmoid(x), op.negative(x), op.relu(x),
                op.relu6(x * 4.0), op.silu(x), op.gelu(x), op.gelu(x, approximate="tanh"), op.softplus(x),
                op.floor(x * 3.0), op.prelu(x, self.alpha), op.astype(op.floor(x * 3.0), "int32"))


class Reductions(nn.Module):
    def __init__(self):
        self.w = nn.Parameter((7, 4), "float32")

    def forward(self, x):
        return (op.sum(x, axis=1), op.sum(x, axis=[1], keepdims=True), op.max(x, axis=1), op.min(x, axis=1),
                op.matmul(x, self.w))


class Norms(nn.Module):
    def __init__(self):
        self.ln = nn.LayerNorm(8)
        self.rms = nn.RMSNorm(8, axes=-1, bias=False)

    def forward(self, x):
        return op.softmax(x, axis=-1), self.ln(x), self.rms(x), op.rms_norm(x, self.rms.weight, axes=[-1])


class GroupNorm(nn.Module):
    def __init__(self):
        self.gn = nn.GroupNorm(2, 4)

    def forward(self, img):
        return self.gn(img)


class Shapes(nn.Module):
    def forward(self, x):
        s = x.shape[0]
        a, b = op.split(x, 2, axis=1)
        c, d, e = op.chunk(x, 3, dim=1)
        return (op.reshape(x, (s, 2, 3)), op.permute_dims(x), op.permute(x, [1, 0]),
                op.squeeze(op.unsqueeze(x, 0), 0), op.concat([x, a], dim=1), b, op.split(x, [1, 4], axis=1)[2], e,
                op.broadcast_to(op.unsqueeze(x, 0), (3, s, 6)), op.repeat(x, 2, axis=0), op.repeat(x, 3, axis=1))


class Pads(nn.Module):
    def forward(self, x):
        return (op.pad(x, [0, 0, 1, 2]), op.pad(x, [0, 0, 2, 1], value=1.5), op.pad(x, [0, 0, 2, 1], mode="reflect"),
                op.pad(x, [0, 0, 1, 2], mode="replicate"), op.pad(x, [0, 0, 2, 2], mode="circular"))


class Lookup(nn.Module):
    def __init__(self):
        self.emb = nn.Embedding(13, 6)
        self.table = nn.Parameter((4, 9), "float32")

    def forward(self, ids, cols):
        return self.emb(ids), op.take(self.table, cols, axis=1)


class Arange(nn.Module):
    def __init__(self):
        self.wpe = nn.Parameter((16, 6), "float32")

    def forward(self, x):
        s = x.shape[0]
        positions = op.arange(0, s, dtype="int32")
        steps = op.arange(3, 3 + 2 * s, 2, dtype="int32")
        ramp = op.arange(0, 6, dtype="float32")
        return x + op.take(self.wpe, positions, axis=0), steps, x * ramp


class Attention(nn.Module):
    def __init__(self, causal: bool):
        self.causal = causal

    def forward(self, q, k, v):
        return op.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


class MaskedAttention(nn.Module):
    """An additive mask: nn.op.scaled_dot_product_attention takes none, so through Relax's attention."""

    def forward(self, q, k, v, bias):
        return nn.wrap_nested(relax.op.nn.attention(q._expr, k._expr, v._expr, bias._expr), "masked_attention")


class Scans(nn.Module):
    def forward(self, x, i):
        return op.cumsum(x, axis=1), op.cumsum(i, axis=1, exclusive=True), op.cumsum(i, dtype="int64"), \
            op.cumsum(op.greater(x, op.zeros((7,), "float32")), axis=1, dtype="int32")


class Sorts(nn.Module):
    def forward(self, x, i):
        return (op.sort(x), op.sort(x, descending=True), op.argsort(x), op.argsort(i, descending=True),
                op.topk(x, 3), op.topk(x, 2, largest=False, dtype="int64"), op.topk(i, 3, ret_type="indices"))


class Convs(nn.Module):
    def __init__(self):
        self.c1 = nn.Conv1D(4, 6, 3, padding=1)
        self.c2 = nn.Conv2D(4, 6, 3, stride=2, padding=1)
        self.grouped = nn.Conv2D(4, 4, 3, groups=2, dilation=2, padding=2, bias=False)
        self.c3 = nn.Conv3D(4, 2, 2)

    def forward(self, seq, img, vol):
        return self.c1(seq), self.c2(img), self.grouped(img), self.c3(vol)


class ConvChannels(nn.Module):
    """Tensor parallel: output channels cut (column parallel), then input channels (row parallel)."""

    def __init__(self):
        self.up = nn.Conv2D(16, 32, 3, padding=1)
        self.down = nn.Conv2D(32, 16, 1, bias=False)

    def forward(self, img):
        return self.down(op.relu(self.up(img)))


class Resize(nn.Module):
    def forward(self, img):
        return (op.interpolate(img, size=(8, 10)), op.interpolate(img, scale_factor=2.0, mode="bilinear"),
                op.interpolate(img, size=(3, 7), mode="bilinear", align_corners=True))


class Masks(nn.Module):
    def forward(self, x):
        s = x.shape[0]
        causal = op.triu(op.full((s, s), -1e9, dtype="float32"), diagonal=1)
        return x + causal, op.zeros((s, 2), "float32") + op.ones((s, 2), "float32")


class Timesteps(nn.Module):
    def forward(self, t):
        return op.get_timestep_embedding(t, 8)


def _ints(rng, *shape, high=4):
    return rng.integers(-high, high, shape).astype("int32")


def _ties(rng, *shape):
    return (rng.integers(-3, 4, shape) * 0.5).astype("float32")  # ties on purpose


CASES: list[Case] = [
    Case("binary", Binary, {"x": _t("s", 6), "y": _t("s", 6)}, lambda r: [_ties(r, SEQ, 6), _ties(r, SEQ, 6)],
         {"x": "S[0]", "y": "S[0]"}),
    Case("unary", Unary, {"x": _t("s", 6)}, lambda r: [_f(r, SEQ, 6)], {"x": "S[1]", "alpha": "S[0]"},
         note="features cut; prelu's slopes cut alike"),
    Case("reductions", Reductions, {"x": _t("s", 7)}, lambda r: [_f(r, SEQ, 7)], {"x": "S[1]"},
         note="the reduced dim cut: partial sums, maxima, minima, then one all-reduce each"),
    Case("norms", Norms, {"x": _t(2, "s", 8)}, lambda r: [_f(r, 2, SEQ, 8)], {"x": "S[1]"}),
    Case("group_norm", GroupNorm, {"img": _t("n", 4, 3, 3)}, lambda r: [_f(r, SEQ, 4, 3, 3)], {"img": "S[0]"}),
    Case("shapes", Shapes, {"x": _t("s", 6)}, lambda r: [_f(r, SEQ, 6)], {"x": "S[0]"},
         note="repeat along the cut dim: blocks re-grouped where the count does not divide"),
    Case("pad", Pads, {"x": _t("s", 6)}, lambda r: [_f(r, SEQ, 6)], {"x": "S[0]"}),
    Case("lookup", Lookup, {"ids": _t("s", dtype="int32"), "cols": _t(3, dtype="int32")},
         lambda r: [r.integers(0, 13, SEQ).astype("int32"), np.array([8, 0, 3], "int32")],
         {"emb.weight": "S[0]", "table": "S[0]"}, note="vocabulary-parallel embedding"),
    Case("arange", Arange, {"x": _t("s", 6)}, lambda r: [_f(r, SEQ, 6)], {"x": "S[0]"}),
    Case("attention_causal", lambda: Attention(True), {k: _t(2, "s", 4, 3) for k in "qkv"},
         lambda r: [_f(r, 2, SEQ, 4, 3) for _ in "qkv"], {k: "S[2]" for k in "qkv"}, note="heads cut"),
    Case("attention_rows", lambda: Attention(False), {k: _t(2, "s", 4, 3) for k in "qkv"},
         lambda r: [_f(r, 2, SEQ, 4, 3) for _ in "qkv"], {"q": "S[1]"}, note="query rows cut (no mask)"),
    Case("attention_masked", MaskedAttention, {**{k: _t(2, "s", 4, 3) for k in "qkv"}, "bias": _t(2, 4, "s", "s")},
         lambda r: [*(_f(r, 2, SEQ, 4, 3) for _ in "qkv"), np.where(r.random((2, 4, SEQ, SEQ)) < 0.3, -1e9, 0.0)
                    .astype("float32")],
         {**{k: "S[2]" for k in "qkv"}, "bias": "S[1]"}, note="heads cut, the mask with them"),
    Case("scans", Scans, {"x": _t("s", 7), "i": _t("s", 7, dtype="int32")},
         lambda r: [_f(r, SEQ, 7), _ints(r, SEQ, 7, high=1000)], {"x": "S[0]", "i": "S[0]"}),
    Case("sorts", Sorts, {"x": _t("s", 7), "i": _t("s", 7, dtype="int32")},
         lambda r: [_ties(r, SEQ, 7), _ints(r, SEQ, 7)], {"x": "S[0]", "i": "S[0]"},
         note="rows cut; the sorted axis whole"),
    Case("convs", Convs, {"seq": _t("n", 4, 9), "img": _t("n", 4, 7, 6), "vol": _t("n", 4, 3, 4, 3)},
         lambda r: [_f(r, SEQ, 4, 9), _f(r, SEQ, 4, 7, 6), _f(r, SEQ, 4, 3, 4, 3)],
         {"seq": "S[0]", "img": "S[0]", "vol": "S[0]"}, note="batch cut"),
    Case("conv_channels", ConvChannels, {"img": _t("b", 16, 3, 3)}, lambda r: [_f(r, 2, 16, 3, 3)],
         {"up.weight": "S[0]", "up.bias": "S[0]", "down.weight": "S[1]"},
         note="output channels cut, then input channels: one all-reduce"),
    Case("resize", Resize, {"img": _t("n", 3, 4, 5)}, lambda r: [_f(r, SEQ, 3, 4, 5)], {"img": "S[1]"},
         note="channels cut"),
    Case("masks", Masks, {"x": _t("s", "s")}, lambda r: [_f(r, SEQ, SEQ)], {"x": "S[0]"},
         note="the causal mask sliced where it is made: no gather of x"),
    Case("timesteps", Timesteps, {"t": _t("s")}, lambda r: [r.integers(0, 1000, SEQ).astype("float32")],
         {"t": "S[0]"}),
]


# ---------------------------------------------------------------- every case in one module


def suite_module() -> tuple[nn.Module, dict, dict[str, str]]:
    """Every case in one nn.Module (one TVM build, one Disco build per count): the module, its spec and
    the cases' plans together. Case ``c``'s input ``x`` is ``c__x``, its weight ``w`` is ``c.w``; forward
    returns a tuple of the cases' outputs, in order."""
    names = [(case, k) for case in CASES for k in case.spec]
    params = ", ".join(f"{c.name}__{k}" for c, k in names)
    namespace: dict = {}
    exec(f"def forward(self, {params}):\n    return self.run_cases([{params}])", namespace)  # noqa: S102

    class Suite(nn.Module):
        def __init__(self):
            for case in CASES:
                setattr(self, case.name, case.module())

        def run_cases(self, inputs):
            outs, pos = [], 0
            for case in CASES:
                n = len(case.spec)
                outs.append(getattr(self, case.name)(*inputs[pos:pos + n]))
                pos += n
            return tuple(outs)

        forward = namespace["forward"]

    spec = {"forward": {f"{c.name}__{k}": t for c, k in names for t in [c.spec[k]]}}
    plan = {f"{c.name}__{k}" if k in c.spec else f"{c.name}.{k}": p for c in CASES for k, p in c.plan.items()}
    return Suite(), spec, plan


def suite_inputs(seed: int = 0) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """The inputs and weights of :func:`suite_module`, case by case as each case draws them."""
    inputs, params = [], {}
    for case in CASES:
        inputs += case.inputs(np.random.default_rng(seed))
        params.update({f"{case.name}.{k}": v for k, v in weights(case, seed).items()})
    return inputs, params


# ---------------------------------------------------------------- what distir refuses, and says


def _one(fn) -> type:
    """A module whose forward is ``fn(x)``."""

    class M(nn.Module):
        def forward(self, x):
            return fn(x)

    return M


_X = {"x": _t(4, 4)}
_OPAQUE = r"R\.call_tir of the TIR function .*: distir cannot see inside TIR.*write the computation with Relax ops"
_HAND = r"a collective of a hand-sharded program; write the single-device model and let a shard plan"


def _twice(x):
    return op.tensor_expr_op(lambda a: te.compute(a.shape, lambda i, j: a[i, j] * 2.0, name="twice"), "twice", [x])


def _tir_twice():
    a = te.placeholder((4, 4), "float32", name="a")
    return te.create_prim_func([a, te.compute((4, 4), lambda i, j: a[i, j] * 2.0, name="b")])


def _tir_double_inplace():
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def double(a: T.handle):
        A = T.match_buffer(a, (4, 4), "float32")
        for i, j in T.grid(4, 4):
            with T.sblock("b"):
                vi, vj = T.axis.remap("SS", [i, j])
                A[vi, vj] = A[vi, vj] * T.float32(2)

    return double


UNSUPPORTED: list[Unsupported] = [
    Unsupported("empty", _one(lambda x: x + op.empty((4, 4), "float32")), _X,
                r"relax\.builtin\.alloc_tensor \(from nn\.op\.empty\) .*use nn\.op\.zeros",
                "an uninitialised tensor: use `zeros`"),
    Unsupported("ccl_allreduce", _one(lambda x: op.ccl_allreduce(x)), _X, r"nn\.op\.ccl_allreduce.*" + _HAND,
                "a hand-placed collective: write the one-device model, shard by plan"),
    Unsupported("ccl_allgather", _one(lambda x: op.ccl_allgather(x, 2)), _X, r"nn\.op\.ccl_allgather.*" + _HAND,
                "a hand-placed collective: write the one-device model, shard by plan"),
    Unsupported("ccl_broadcast_from_worker0", _one(lambda x: op.ccl_broadcast_from_worker0(x)), _X,
                r"nn\.op\.ccl_broadcast_from_worker0.*" + _HAND,
                "a hand-placed collective: write the one-device model, shard by plan"),
    Unsupported("conv1d_transpose", _one(lambda x: op.conv1d_transpose(op.reshape(x, (1, 4, 4)),
                                                                       op.ones((4, 2, 3), "float32"))),
                _X, r"nn\.op\.conv1d_transpose.*not modelled; upsample with nn\.op\.interpolate",
                "not modelled: upsample (`interpolate`, `repeat`) and `conv1d`"),
    Unsupported("multinomial_from_uniform",
                _one(lambda x: op.multinomial_from_uniform(op.softmax(x), op.zeros((4, 1), "float32"),
                                                           op.zeros((4, 1), "int64"))),
                _X, r"nn\.op\.multinomial_from_uniform.*sampling is not modelled",
                "sampling: return the probabilities, sample outside the model"),
    Unsupported("tensor_expr_op", _one(_twice), _X, _OPAQUE, "TIR: write it with `nn.op` functions"),
    Unsupported("tensor_ir_op",
                _one(lambda x: op.tensor_ir_op(_tir_twice(), "twice", [x], nn.Tensor.placeholder((4, 4), "float32"))),
                _X, _OPAQUE, "TIR: write it with `nn.op` functions"),
    Unsupported("tensor_ir_inplace_op",
                _one(lambda x: op.tensor_ir_inplace_op(_tir_double_inplace(), "double", [x], 0,
                                                       nn.Tensor.placeholder((4, 4), "float32"))),
                _X, r"R\.call_tir_inplace of the TIR function .*write the computation with Relax ops",
                "TIR: write it with `nn.op` functions"),
    Unsupported("extern", _one(lambda x: op.extern("my_kernel", [x], nn.Tensor.placeholder((4, 4), "float32"))),
                _X, r"R\.call_dps_packed of the packed function 'my_kernel': distir cannot see inside it",
                "an external kernel: write it with `nn.op` functions"),
    Unsupported("debug_func", _one(lambda x: (op.debug_func("show", x), x)[1]), _X,
                r"export_tvm failed: RuntimeError: Debugging is only supported when debug mode is on",
                "debugging: export_tvm refuses it outside debug mode; remove it"),
    Unsupported("print_", _one(lambda x: (op.print_(x), x)[1]), _X,
                r"export_tvm failed: RuntimeError: Debugging is only supported when debug mode is on",
                "debugging: export_tvm refuses it outside debug mode; remove it"),
    Unsupported("sample_top_p_top_k_from_sorted_prob",
                _one(lambda x: op.sample_top_p_top_k_from_sorted_prob(
                    op.softmax(x), op.astype(op.argsort(x), "int64"), op.ones((4, 1), "float32"),
                    op.ones((4, 1), "int64"), op.zeros((4, 1), "float32"), op.zeros((4, 1), "int64"))),
                _X, _OPAQUE, "TIR sampling kernels: sample outside the model"),
    Unsupported("renormalize_top_p_top_k_prob",
                _one(lambda x: op.renormalize_top_p_top_k_prob(op.softmax(x), op.sort(op.softmax(x)),
                                                               op.ones((4, 1), "float32"), op.ones((4, 1), "int32"))),
                _X, _OPAQUE, "TIR kernels: write the filtering with `topk`, `where` and `softmax`"),
]


# ---------------------------------------------------------------- what each case calls


@functools.cache
def trace(module: Callable[[], nn.Module], spec_items: tuple) -> dict[str, tuple[str, ...]]:
    """nn.op function -> the Relax ops it emitted (in order, once each), while ``export_tvm`` traces the
    module: the functions are wrapped and BlockBuilder.emit is watched (only the outermost nn.op call
    counts, so a function made of others is charged with everything it emits)."""
    calls: dict[str, list[str]] = {}
    stack: list[str] = []

    def wrap(name, fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            stack.append(name)
            calls.setdefault(stack[0], [])
            try:
                return fn(*args, **kwargs)
            finally:
                stack.pop()

        return run

    emit = relax.BlockBuilder.emit

    def record(expr, ops):  # the ops of a nested expression, innermost first (TVM splits it into bindings)
        if isinstance(expr, relax.Call):
            for a in expr.args:
                record(a, ops)
            if hasattr(expr.op, "name") and str(expr.op.name) not in ops:
                ops.append(str(expr.op.name))
        elif isinstance(expr, relax.Tuple):
            for f in expr.fields:
                record(f, ops)

    def watched(self, expr, name_hint=""):
        if stack:
            record(expr, calls[stack[0]])
        return emit(self, expr, name_hint)

    with contextlib.ExitStack() as patches:
        for name in nn_op_functions():
            original = getattr(op, name)
            setattr(op, name, wrap(name, original))
            patches.callback(setattr, op, name, original)
        relax.BlockBuilder.emit = watched
        patches.callback(setattr, relax.BlockBuilder, "emit", emit)
        with contextlib.suppress(Exception):  # an unsupported case may fail later, in the import
            module().export_tvm({"forward": dict(spec_items)})
    return {k: tuple(v) for k, v in calls.items()}


def case_trace(case: Case | Unsupported) -> dict[str, tuple[str, ...]]:
    return trace(case.module, tuple(case.spec.items()))


# ---------------------------------------------------------------- the table of docs/frontend.md

TABLE_BEGIN = "<!-- nn-op-table -->\n"
TABLE_END = "<!-- /nn-op-table -->"


def _counts_text(counts) -> str:
    counts = sorted(set(counts))
    if counts == list(range(counts[0], counts[-1] + 1)) and len(counts) > 2:
        return f"{counts[0]}-{counts[-1]}"
    return ", ".join(map(str, counts))


# ops a function emits around its main one (a conv's bias is reshaped and added): not described
_PLUMBING = {"add", "subtract", "multiply", "divide", "reshape", "expand_dims", "astype", "permute_dims", "squeeze"}


def _rule_text(relax_ops) -> str:
    """What the distir ops need whole and where a cut leaves partial values; every other dim passes."""
    import distir.ops  # noqa: F401  (declares the ops)
    from distir.ir.op import get_op

    names = [o.removeprefix("relax.") for o in relax_ops]
    parts = []
    for name in [n for n in names if n not in _PLUMBING] or names:
        sd = get_op(name).sharding_doc
        words = [f"whole: {sd.blocked}"] if sd.blocked and sd.blocked != "size-1 dims" and not sd.blocked.startswith("–") \
            else []
        words += [f"partial: {sd.gives_partial}"] if sd.gives_partial else []
        if words:
            parts.append(f"`{name}`: " + "; ".join(words))
    return " / ".join(parts) or "every dim passes"


def render_table() -> str:
    """The markdown table: every nn.op function, imported or not, its sharding rule, where it is tested."""
    covered: dict[str, list[tuple[Case, tuple[str, ...]]]] = {}
    for case in CASES:
        for fn, relax_ops in case_trace(case).items():
            covered.setdefault(fn, []).append((case, relax_ops))
    refused = {u.function: u for u in UNSUPPORTED}
    lines = ["| `nn.op` function | imported | distir ops | sharding rule | tested (devices) |",
             "| --- | --- | --- | --- | --- |"]
    for fn in nn_op_functions():
        if fn in covered:
            ops = []
            for _, relax_ops in covered[fn]:
                ops += [o for o in relax_ops if o not in ops]
            cases = [c for c, _ in covered[fn]]
            sim = sorted({n for c in cases for n in c.counts})
            tested = f"simulator {_counts_text(sim)}, Disco {_counts_text(DISCO_COUNTS)} ({', '.join(c.name for c in cases)})"
            names = ", ".join(f"`{o.removeprefix('relax.')}`" for o in ops)
            lines.append(f"| `{fn}` | yes | {names} | {_rule_text(ops)} | {tested} |")
        elif fn in refused:
            lines.append(f"| `{fn}` | no | – | {refused[fn].why} | the error (`{fn}`) |")
        else:
            lines.append(f"| `{fn}` | ? | – | no case: add one to tests/python/tvm/nn_op_cases.py | – |")
    return "\n".join(lines) + "\n"


def update_table(text: str) -> str:
    """``text`` (docs/frontend.md) with the table between the markers rendered anew."""
    begin, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if begin < 0 or end < begin:
        raise ValueError(f"docs/frontend.md has no {TABLE_BEGIN.strip()} ... {TABLE_END} block")
    return text[: begin + len(TABLE_BEGIN)] + render_table() + text[end:]
