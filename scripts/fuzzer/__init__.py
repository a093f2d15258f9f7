"""Differential fuzzer for distir: random distributed programs, distributed once, run on
simulated workers (and optionally on TVM's Disco), compared with the single-device run.

Each case is a random global-view program in distir's IR text: random meshes (1-D, 2-D,
3-D; static sizes or a symbolic ``num_workers`` axis; device ranges that start anywhere;
explicit device lists, out of order too; one or two meshes), random tensors (static sizes
including 1, primes and sizes below the device count; symbolic sizes like ``s`` bound only
at run time), random placements (R, S[d], P, P[max], P[min], P[avg]), chains of
``R.dist.redistribute`` (also between meshes) and ops (elementwise, matmul, reductions,
reshape, permute_dims, softmax, rms_norm, concat, split, strided_slice ...) with
``R.dist.annotate_sharding`` hints so that sharding propagation has work to do.

With --strided, placements may also be strided shards ``S[d/k]`` (k divides the dim; parameters,
hints, redistribute targets, on 1-D and 2-D meshes), meshes of 6 and 7 devices join the static
ones, and fused-QKV chains appear: ``x @ w`` with ``w`` declared or hinted ``S[1/k]`` (or free,
the heads hinted), reshaped to ``(..., k, heads, head_dim)`` and maybe merged back (head counts
that do not divide the device count included). With --axis-costs, a case whose meshes all have
two or more axes is sometimes distributed with random per-mesh-axis time costs
(``legalize-redistribute.axis_costs``: propagation and legalize plan by time, replans record the
costs); numbers must still equal one device and the analysis' bytes the simulator's. Without
these options a seed gives the cases it gave before them.

With --blocks, programs also lay values out in block layouts ``B[...]`` (parameters, hints,
redistributes; shard sizes from 1 to one past the dim, run-time dims whole; tensors up to
160 x 160), run elementwise ops and reductions on the chunks and convert to other block shapes
and to R / S / P. With --cross, every program has two meshes (the same devices in another grid,
ranges that overlap, or the next stage: ``(num_workers, 2)`` and ``(2, num_workers, 3)``) and
moves values between them, run-time dims included. With --time-limit S, a case still running
after S seconds of CPU time (the load of a shared machine does not count) is stopped and counted
SLOW.

The distribute pipeline runs ONCE with num_workers symbolic; then, for a few device counts,
the module is specialized, simulated (``distir.runtime.run_spmd``) and compared with the
single-device interpreter (``distir.runtime.run``) on the same random inputs. The bytes the
simulator moved are compared with the cost model (``distir.analysis.comm_volume``, both the
symbolic formula and the specialized module). With --tvm the module is also exported to
TVM Relax, built and run on Disco (in a child process: an error inside Disco aborts it).

Every case gets one class (the worst over its device counts):

  WRONG-NUMBER     results differ and nothing complained (or the simulator found replicas
                   that disagree): the worst outcome
  CRASH            an exception that is not a distir.errors.DistirError (or a timeout, or
                   the Disco process died): a bug
  SLOW             with --time-limit: the case used more CPU time than the limit (a few hundred
                   bytes of program should never keep a CPU busy); named after the stage it was in
  COST-MISMATCH    numbers fine, but the simulator's bytes differ from the cost model's
  SUSPECT-REFUSAL  a DistirError: distir computes every layout at every device count, so a
                   refusal may be a bug (listed, not fatal)
  CLEAN-REFUSAL    a DistirError that is a documented limitation (KNOWN_LIMITATIONS)
  OK               the numbers are equal
  INVALID          the generator wrote a program the parser or the single-device
                   interpreter rejects (the generator's fault; should stay near zero)

Failures (all but OK, CLEAN-REFUSAL and INVALID) are shrunk to a small reproducer (fewer
bindings and outputs, smaller shapes and device counts, fewer mesh axes, simpler layouts)
and written to --out as IR text, with a header giving the class, the message and the
command lines that reproduce it. The exit status is 1 when a WRONG-NUMBER, a CRASH or a SLOW
case was found, else 0.

examples:
  python scripts/fuzz.py --cases 500 --seed 1            500 cases, then a summary
  python scripts/fuzz.py --minutes 10 --jobs 2           ten minutes on two processes
  python scripts/fuzz.py --cases 50 --tvm                also build with TVM, run on Disco
  python scripts/fuzz.py --minutes 10 --strided --axis-costs   strided shards, plans by time
  python scripts/fuzz.py --minutes 10 --blocks --cross --time-limit 10   block layouts, two meshes, SLOW cases
  python scripts/fuzz.py --seed 1 --only 37              re-run case 37 of seed 1, verbosely
  python scripts/fuzz.py --replay fuzz-out/wrong-1.ir    re-run a written reproducer
  python scripts/fuzz.py --seed 1 --only 37 --print      print the program of a case

Run from the repository root with the package importable (pip install -e . or
PYTHONPATH=python).

The code (scripts/fuzzer/): model.py (the program model and its IR text), generate.py (random
programs), dtypes.py (dtype-directed programs), cases.py (case I of seed S), compare.py (inputs and
the comparison with one device), execute.py (running a case, outcome classes), tvm_child.py (the
Disco runs in a child process), shrink.py (reproducers made small), repro.py (reproducers written,
read and replayed), campaign.py (the command line and the summary).
"""
