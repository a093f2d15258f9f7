# Block layouts (TT-Metal's ND sharding, docs/blocks.md) on a 2 x 3 mesh: the three examples of
# TT-Metal's "ND Sharding" proposal, and a batch reduction that needs no communication before the
# final combine.
#
# This file is distir IR text in TVMScript syntax: distir.parse reads it, nothing imports or runs it.
# "B[2, 2, 2]" cuts a tensor into chunks of 2 x 2 x 2, numbers them row-major and deals chunk j to
# mesh position j % 6; edge chunks are partial. x is laid out one batch entry per chunk, so the sum
# over the batch is a local sum on every device (a partial value), then one all-reduce.
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((2, 3), I.Range(0, 6))]})

    @R.function
    def main(
        a: R.DTensor((3, 7, 5), "float32", "mesh[0]", "B[2, 2, 2]"),
        b: R.DTensor((10, 10, 10), "float32", "mesh[0]", "B[1, 10, 10]"),
        c: R.DTensor((10, 10, 10), "float32", "mesh[0]", "B[10, 1, 1]"),
        x: R.DTensor((8, 3, 4, 4), "float32", "mesh[0]", "B[1, 3, 4, 4]"),
    ):
        with R.dataflow():
            e = R.exp(x)
            s = R.sum(e, axis=[0])
            ab = R.dist.redistribute(a, device_mesh="mesh[0]", placement="S[1], R")
            R.output(s, ab)
        return (s, ab)
