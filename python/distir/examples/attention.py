# A Megatron-style causal self-attention block with a residual, on a 1-D mesh of num_workers devices
# (num_workers stays symbolic) and a dynamic sequence length s: hidden 128 = 8 heads of 16.
#
# This file is distir IR text in TVMScript syntax: distir.parse reads it, nothing imports or runs it.
# Only the parameters say how anything is laid out: the Q, K and V projections are column-parallel
# (S[1]: each worker computes whole heads), the output projection is row-parallel (S[0]: each worker
# contracts its heads, a partial sum). Every binding is a plain tensor: propagate-sharding decides
# their layouts, so the heads stay sharded through attention and the one all-reduce comes before the
# residual add. Head count and hidden size divide by 1, 2, 4 and 8 workers.
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(
        x: R.Tensor(("s", 128), dtype="float32"),
        wq: R.DTensor((128, 128), "float32", "mesh[0]", "S[1]"),
        wk: R.DTensor((128, 128), "float32", "mesh[0]", "S[1]"),
        wv: R.DTensor((128, 128), "float32", "mesh[0]", "S[1]"),
        wo: R.DTensor((128, 128), "float32", "mesh[0]", "S[0]"),
    ) -> R.Tensor(("s", 128), dtype="float32"):
        s = T.int64()
        with R.dataflow():
            # projections, then split the hidden dim into (heads, head_dim)
            q: R.Tensor((s, 128), dtype="float32") = R.matmul(x, wq, out_dtype=None)
            k: R.Tensor((s, 128), dtype="float32") = R.matmul(x, wk, out_dtype=None)
            v: R.Tensor((s, 128), dtype="float32") = R.matmul(x, wv, out_dtype=None)
            q_h: R.Tensor((s, 8, 16), dtype="float32") = R.reshape(q, R.shape([s, 8, 16]))
            k_h: R.Tensor((s, 8, 16), dtype="float32") = R.reshape(k, R.shape([s, 8, 16]))
            v_h: R.Tensor((s, 8, 16), dtype="float32") = R.reshape(v, R.shape([s, 8, 16]))
            q_t: R.Tensor((8, s, 16), dtype="float32") = R.permute_dims(q_h, axes=[1, 0, 2])
            k_t: R.Tensor((8, 16, s), dtype="float32") = R.permute_dims(k_h, axes=[1, 2, 0])
            v_t: R.Tensor((8, s, 16), dtype="float32") = R.permute_dims(v_h, axes=[1, 0, 2])
            # scores scaled by 1 / sqrt(16), causal mask (-1e9 above the diagonal), softmax over keys
            scores: R.Tensor((8, s, s), dtype="float32") = R.matmul(q_t, k_t, out_dtype=None)
            scaled: R.Tensor((8, s, s), dtype="float32") = R.multiply(scores, R.const(0.25, "float32"))
            neg: R.Tensor((s, s), dtype="float32") = R.full(R.shape([s, s]), R.const(-1e9, "float32"), dtype="float32")
            mask: R.Tensor((s, s), dtype="float32") = R.triu(neg, k=1)
            masked: R.Tensor((8, s, s), dtype="float32") = R.add(scaled, mask)
            probs: R.Tensor((8, s, s), dtype="float32") = R.nn.softmax(masked, axis=-1)
            # weighted values, heads merged back, output projection and residual
            ctx: R.Tensor((8, s, 16), dtype="float32") = R.matmul(probs, v_t, out_dtype=None)
            ctx_t: R.Tensor((s, 8, 16), dtype="float32") = R.permute_dims(ctx, axes=[1, 0, 2])
            ctx_m: R.Tensor((s, 128), dtype="float32") = R.reshape(ctx_t, R.shape([s, 128]))
            out: R.Tensor((s, 128), dtype="float32") = R.matmul(ctx_m, wo, out_dtype=None)
            y: R.Tensor((s, 128), dtype="float32") = R.add(out, x)
            R.output(y)
        return y
