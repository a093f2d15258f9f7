"""Op declarations. Importing this package registers every op (see distir.ir.op)."""

from . import dist, elementwise, linalg, manipulate, nn, reduce  # noqa: F401
