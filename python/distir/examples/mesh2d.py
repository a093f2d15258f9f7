# Three 8 x 8 tensors on a 2-D mesh of 2 x num_workers devices (num_workers stays symbolic), each laid
# out otherwise: a cut on both axes, the same cut transposed, and a partial sum over axis 0 (P, R).
#
# This file is distir IR text in TVMScript syntax: distir.parse reads it, nothing imports or runs it.
# The add reads a and b in a's layout, so propagation redistributes b; `distir show` draws the three
# layouts, and `distir-opt -p distribute --axis-cost ...` plans the change by the axes' time costs.
from distir.script import ir as I
from distir.script import relax as R

@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((2, "num_workers"), I.Range(0, "2 * num_workers"))]})

    @R.function
    def main(a: R.DTensor((8, 8), "float32", "mesh[0]", "S[0], S[1]"),
             b: R.DTensor((8, 8), "float32", "mesh[0]", "S[1], S[0]"),
             c: R.DTensor((8, 8), "float32", "mesh[0]", "P, R")):
        with R.dataflow():
            d = R.add(a, b)
            R.output(d)
        return d
