# A two-layer MLP, Megatron style, on a 1-D mesh of num_workers devices (num_workers stays symbolic).
#
# This file is distir IR text in TVMScript syntax: distir.parse reads it, nothing imports or runs it.
# The hints shard w1 by columns and w2 by rows, so the hidden activation is S[1] and the second
# matmul contracts a sharded dim (a partial sum); the result is asked for replicated.
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(
        x: R.Tensor((128, 256), dtype="float32"),
        w1: R.Tensor((256, 512), dtype="float32"),
        w2: R.Tensor((512, 256), dtype="float32"),
    ) -> R.Tensor((128, 256), dtype="float32"):
        with R.dataflow():
            w1_s: R.Tensor((256, 512), dtype="float32") = R.dist.annotate_sharding(w1, device_mesh="mesh[0]", placement="S[1]")
            w2_s: R.Tensor((512, 256), dtype="float32") = R.dist.annotate_sharding(w2, device_mesh="mesh[0]", placement="S[0]")
            h: R.Tensor((128, 512), dtype="float32") = R.matmul(x, w1_s, out_dtype=None)
            a: R.Tensor((128, 512), dtype="float32") = R.nn.gelu(h)
            a_s: R.Tensor((128, 512), dtype="float32") = R.dist.annotate_sharding(a, device_mesh="mesh[0]", placement="S[1]")
            y: R.Tensor((128, 256), dtype="float32") = R.matmul(a_s, w2_s, out_dtype=None)
            y_r: R.Tensor((128, 256), dtype="float32") = R.dist.annotate_sharding(y, device_mesh="mesh[0]", placement="R")
            R.output(y_r)
        return y_r
