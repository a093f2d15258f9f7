"""Op declarations. Importing this package registers every op (see distir.ir.op)."""

from . import ccl, dist, dist_steps, elementwise, linalg, manipulate, nn, reduce  # noqa: F401
