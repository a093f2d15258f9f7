"""Dtype-directed cases (--dtypes): every dtype, extreme inputs, and a comparison that allows for rounding."""


from __future__ import annotations

from dataclasses import replace

from .generate import BINARY, PARTIALS, UNARY_FLOAT, UNARY_INT, Generator, Val
from .model import Pl, Program, Raw, Ref

# what bools combine by (numpy's bool results: or, and; subtract, divide and power are type errors)
BOOL_BINARY = ["R.maximum", "R.minimum", "R.add", "R.multiply"]
DIRECTED_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "bool", "float16", "bfloat16", "float32", "float64"]
DIRECTED_WEIGHTS = [3, 2, 2, 3, 3, 3, 2, 2, 1, 1]  # mostly the dtypes the default generator never draws
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
COMPARE = ["R.less", "R.greater_equal", "R.equal", "R.not_equal"]


class DtypeGenerator(Generator):
    """Programs on every dtype (--dtypes): integers of every width, unsigned, bool and half floats,
    partial placements of every kind the dtype holds (distir.ir.combine), integer means and
    products, comparisons that make bools, casts between any two dtypes; the inputs reach each
    dtype's range (:func:`extreme_inputs`) and integer and bool results are compared exactly.
    Ops that need floats are not drawn for other dtypes."""

    def program_dtype(self) -> str:
        return self.rng.choices(DIRECTED_DTYPES, DIRECTED_WEIGHTS)[0]

    def program(self) -> Program:
        return replace(super().program(), values="extreme")

    def placement(self, mesh: int, shape, partial: bool, dtype: str) -> Pl:
        from distir.ir.combine import partial_refusal

        pl = super().placement(mesh, shape, partial, dtype)
        held = [p for p in PARTIALS if partial_refusal(p[2:-1] if "[" in p else "sum", dtype) is None]
        swap = {p: p if p in held else self.rng.choice(held) for p in PARTIALS}  # one kind per value stays one
        return Pl(tuple(swap.get(s, s) for s in pl.specs))

    def _float(self, a: Val) -> bool:
        return a.dtype in FLOAT_DTYPES

    def op_unary(self, a: Val):
        if a.dtype == "bool":
            return self.op_astype(a)
        return self.emit(self.rng.choice(UNARY_FLOAT if self._float(a) else UNARY_INT), [Ref(a.name)], shape=a.shape,
                         dtype=a.dtype, mesh=a.mesh)

    def op_binary(self, a: Val):
        r = self.rng
        if r.random() < 0.25 and (not self._float(a) or self._exact_float(a)):
            # a comparison: a bool from numbers or bools (of floats, only of exact ones: see op_astype)
            same = [v for v in self.vals if v.shape == a.shape and v.dtype == a.dtype and v.mesh == a.mesh
                    and (not self._float(v) or self._exact_float(v))]
            b = r.choice(same)
            return self.emit(r.choice(COMPARE), [Ref(a.name), Ref(b.name)], shape=a.shape, dtype="bool", mesh=a.mesh)
        ops = BOOL_BINARY if a.dtype == "bool" else BINARY
        if r.random() < 0.12 and a.dtype != "bool":
            c = f'R.const({r.choice([0.5, -1.5, 2.0])}, "{a.dtype}")' if self._float(a) else \
                f'R.const({r.choice([1, 2, 3, 100])}, "{a.dtype}")'
            return self.emit(r.choice(ops), [Ref(a.name), Raw(c)], shape=a.shape, dtype=a.dtype, mesh=a.mesh)
        same = [v for v in self.vals if v.shape == a.shape and v.dtype == a.dtype and v.mesh == a.mesh]
        b = r.choice(same) if same and r.random() < 0.5 else self.new_param(a.shape, a.dtype, a.mesh)
        args = [Ref(a.name), Ref(b.name)]
        if r.random() < 0.3:
            args.reverse()
        return self.emit(r.choice(ops), args, shape=a.shape, dtype=a.dtype, mesh=a.mesh)

    def op_matmul(self, a: Val):
        if a.dtype == "bool" or len(a.shape) < 2:
            return None
        k = a.shape[-1]
        b = self.new_param((k, self.size()), a.dtype, a.mesh)
        return self.emit("R.matmul", [Ref(a.name), Ref(b.name)], [("out_dtype", None)], shape=a.shape[:-1] + b.shape[-1:],
                         dtype=a.dtype, mesh=a.mesh)

    def op_reduce(self, a: Val):
        r = self.rng
        rank = len(a.shape)
        if rank == 0:
            return None
        op = r.choice(["R.sum", "R.max", "R.min", "R.mean", "R.mean", "R.prod"])
        keep = r.random() < 0.4
        axes = sorted(r.sample(range(rank), r.choice([1, 1, 2]) if rank > 1 else 1)) if r.random() > 0.15 else None
        pos = set(range(rank)) if axes is None else set(axes)
        shape = tuple(1 if i in pos else d for i, d in enumerate(a.shape) if keep or i not in pos)
        return self.emit(op, [Ref(a.name)], [("axis", axes), ("keepdims", keep)], shape=shape, dtype=a.dtype, mesh=a.mesh)

    def op_astype(self, a: Val):
        targets = [d for d in DIRECTED_DTYPES if d != a.dtype]
        if self._float(a) and not self._exact_float(a):
            # a float computed by a sum (or from partial parts) is exact only within rounding, and the order
            # of its additions is the layout's: cast to an integer, 19.999 and 20.001 differ by one
            targets = [d for d in targets if d in FLOAT_DTYPES]
        to = self.rng.choice(targets)
        return self.emit("R.astype", [Ref(a.name)], [("dtype", to)], shape=a.shape, dtype=to, mesh=a.mesh)

    def _exact_float(self, a: Val) -> bool:
        """Whether float value ``a`` is the same bits under any layout: a parameter not given in parts."""
        p = next((p for p in self.params if p.name == a.name), None)
        return p is not None and not any(s.startswith("P") for s in (p.placement.specs if p.placement else ()))

    def op_softmax(self, a: Val):
        return super().op_softmax(a) if self._float(a) else None

    def op_rms_norm(self, a: Val):
        return super().op_rms_norm(a) if self._float(a) else None

    def op_layer_norm(self, a: Val):
        return super().op_layer_norm(a) if self._float(a) else None

    def op_constant(self, a: Val):
        return super().op_constant(a) if self._float(a) else None

    def op_qkv(self, a: Val):
        return super().op_qkv(a) if self._float(a) else None


