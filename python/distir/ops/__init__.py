"""Op declarations. Importing this package registers every op (see distir.ir.op)."""

from . import collectives, conv, create, dist, elementwise, index, linalg, manipulate, nn, reduce, sorting  # noqa: F401
