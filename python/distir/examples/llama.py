# One Llama decoder layer, tensor-parallel Megatron style, on a 1-D mesh of num_workers devices
# (num_workers stays symbolic) and a dynamic sequence length s: hidden 128 = 8 heads of 16, FFN 256.
#
# This file is distir IR text in TVMScript syntax: distir.parse reads it, nothing imports or runs it.
#   h  = x + Wo · attention(rope(rms_norm(x) · Wq), rope(rms_norm(x) · Wk), rms_norm(x) · Wv)
#   y  = h + W_down · (silu(rms_norm(h) · W_gate) * (rms_norm(h) · W_up))        (SwiGLU MLP)
# attention is causal (R.triu of R.full: -1e9 above the diagonal) with softmax over keys; rope is the
# rotary embedding x * cos + rotate_half(x) * sin, rotate_half(x) = concat(-x[..., 8:], x[..., :8]),
# with the cos and sin tables given as inputs (one row per position). Only the parameters carry
# layouts: Q, K, V, gate and up are column-parallel (S[1]), the attention output and down
# projections row-parallel (S[0]), the norm weights replicated; propagate-sharding lays out the
# rest, one all-reduce after each row-parallel projection.
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(
        x: R.Tensor(("s", 128), dtype="float32"),
        cos: R.Tensor(("s", 16), dtype="float32"),
        sin: R.Tensor(("s", 16), dtype="float32"),
        attn_norm: R.DTensor((128,), "float32", "mesh[0]", "R"),
        wq: R.DTensor((128, 128), "float32", "mesh[0]", "S[1]"),
        wk: R.DTensor((128, 128), "float32", "mesh[0]", "S[1]"),
        wv: R.DTensor((128, 128), "float32", "mesh[0]", "S[1]"),
        wo: R.DTensor((128, 128), "float32", "mesh[0]", "S[0]"),
        mlp_norm: R.DTensor((128,), "float32", "mesh[0]", "R"),
        w_gate: R.DTensor((128, 256), "float32", "mesh[0]", "S[1]"),
        w_up: R.DTensor((128, 256), "float32", "mesh[0]", "S[1]"),
        w_down: R.DTensor((256, 128), "float32", "mesh[0]", "S[0]"),
    ) -> R.Tensor(("s", 128), dtype="float32"):
        s = T.int64()
        with R.dataflow():
            # attention: norm, projections, heads
            hn: R.Tensor((s, 128), dtype="float32") = R.nn.rms_norm(x, attn_norm, axes=[-1], epsilon=1e-5)
            q: R.Tensor((s, 128), dtype="float32") = R.matmul(hn, wq, out_dtype=None)
            k: R.Tensor((s, 128), dtype="float32") = R.matmul(hn, wk, out_dtype=None)
            v: R.Tensor((s, 128), dtype="float32") = R.matmul(hn, wv, out_dtype=None)
            q_h: R.Tensor((s, 8, 16), dtype="float32") = R.reshape(q, R.shape([s, 8, 16]))
            k_h: R.Tensor((s, 8, 16), dtype="float32") = R.reshape(k, R.shape([s, 8, 16]))
            v_h: R.Tensor((s, 8, 16), dtype="float32") = R.reshape(v, R.shape([s, 8, 16]))
            # rotary embedding of q and k; cos and sin broadcast over the heads
            cos_b: R.Tensor((s, 1, 16), dtype="float32") = R.expand_dims(cos, axis=[1])
            sin_b: R.Tensor((s, 1, 16), dtype="float32") = R.expand_dims(sin, axis=[1])
            q_lo: R.Tensor((s, 8, 8), dtype="float32") = R.strided_slice(q_h, axes=[2], begin=[0], end=[8])
            q_hi: R.Tensor((s, 8, 8), dtype="float32") = R.strided_slice(q_h, axes=[2], begin=[8], end=[16])
            q_hi_n: R.Tensor((s, 8, 8), dtype="float32") = R.negative(q_hi)
            q_rot: R.Tensor((s, 8, 16), dtype="float32") = R.concat((q_hi_n, q_lo), axis=2)
            q_cos: R.Tensor((s, 8, 16), dtype="float32") = R.multiply(q_h, cos_b)
            q_sin: R.Tensor((s, 8, 16), dtype="float32") = R.multiply(q_rot, sin_b)
            q_r: R.Tensor((s, 8, 16), dtype="float32") = R.add(q_cos, q_sin)
            k_lo: R.Tensor((s, 8, 8), dtype="float32") = R.strided_slice(k_h, axes=[2], begin=[0], end=[8])
            k_hi: R.Tensor((s, 8, 8), dtype="float32") = R.strided_slice(k_h, axes=[2], begin=[8], end=[16])
            k_hi_n: R.Tensor((s, 8, 8), dtype="float32") = R.negative(k_hi)
            k_rot: R.Tensor((s, 8, 16), dtype="float32") = R.concat((k_hi_n, k_lo), axis=2)
            k_cos: R.Tensor((s, 8, 16), dtype="float32") = R.multiply(k_h, cos_b)
            k_sin: R.Tensor((s, 8, 16), dtype="float32") = R.multiply(k_rot, sin_b)
            k_r: R.Tensor((s, 8, 16), dtype="float32") = R.add(k_cos, k_sin)
            # causal softmax attention per head
            q_t: R.Tensor((8, s, 16), dtype="float32") = R.permute_dims(q_r, axes=[1, 0, 2])
            k_t: R.Tensor((8, 16, s), dtype="float32") = R.permute_dims(k_r, axes=[1, 2, 0])
            v_t: R.Tensor((8, s, 16), dtype="float32") = R.permute_dims(v_h, axes=[1, 0, 2])
            scores: R.Tensor((8, s, s), dtype="float32") = R.matmul(q_t, k_t, out_dtype=None)
            scaled: R.Tensor((8, s, s), dtype="float32") = R.multiply(scores, R.const(0.25, "float32"))
            neg: R.Tensor((s, s), dtype="float32") = R.full(R.shape([s, s]), R.const(-1e9, "float32"), dtype="float32")
            mask: R.Tensor((s, s), dtype="float32") = R.triu(neg, k=1)
            masked: R.Tensor((8, s, s), dtype="float32") = R.add(scaled, mask)
            probs: R.Tensor((8, s, s), dtype="float32") = R.nn.softmax(masked, axis=-1)
            ctx: R.Tensor((8, s, 16), dtype="float32") = R.matmul(probs, v_t, out_dtype=None)
            ctx_t: R.Tensor((s, 8, 16), dtype="float32") = R.permute_dims(ctx, axes=[1, 0, 2])
            ctx_m: R.Tensor((s, 128), dtype="float32") = R.reshape(ctx_t, R.shape([s, 128]))
            attn: R.Tensor((s, 128), dtype="float32") = R.matmul(ctx_m, wo, out_dtype=None)
            h: R.Tensor((s, 128), dtype="float32") = R.add(x, attn)
            # SwiGLU MLP
            mn: R.Tensor((s, 128), dtype="float32") = R.nn.rms_norm(h, mlp_norm, axes=[-1], epsilon=1e-5)
            gate: R.Tensor((s, 256), dtype="float32") = R.matmul(mn, w_gate, out_dtype=None)
            up: R.Tensor((s, 256), dtype="float32") = R.matmul(mn, w_up, out_dtype=None)
            act: R.Tensor((s, 256), dtype="float32") = R.nn.silu(gate)
            gu: R.Tensor((s, 256), dtype="float32") = R.multiply(act, up)
            down: R.Tensor((s, 128), dtype="float32") = R.matmul(gu, w_down, out_dtype=None)
            y: R.Tensor((s, 128), dtype="float32") = R.add(h, down)
            R.output(y)
        return y
