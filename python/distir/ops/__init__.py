"""Op declarations. Importing this package registers every op (see distir.ir.op)."""

from . import collectives, create, dist, elementwise, index, linalg, manipulate, nn, reduce  # noqa: F401
