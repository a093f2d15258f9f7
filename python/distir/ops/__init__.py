"""Op declarations. Importing this package registers every op (see distir.ir.op)."""

from . import ccl, create, dist, dist_steps, elementwise, index, linalg, manipulate, nn, reduce  # noqa: F401
