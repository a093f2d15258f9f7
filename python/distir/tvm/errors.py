"""Errors of the TVM bridge: export, import and running on Disco."""

from __future__ import annotations

from ..errors import DiagnosticError, DistirError


class TvmExportError(DiagnosticError):
    """A distir module cannot be expressed as a TVM Relax module (unknown op, not lowered, ...)."""


class TvmImportError(DiagnosticError):
    """A TVM Relax module uses something distir does not know (an op, a type, a construct)."""


class DiscoRunError(DistirError):
    """Running on Disco failed: wrong inputs, a module built for other sizes, a collective that failed."""


class ArtifactError(DistirError):
    """An artifact folder (``distir build``'s output) that is missing, damaged or not this build's."""


def tvm_message(err: Exception) -> str:
    """The last non-empty line of a TVM error (its message, without TVM's traceback)."""
    lines = [ln for ln in str(err).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(err).__name__


class TargetError(DistirError):
    """A build target TVM does not know, a device the machine lacks, or a build that failed."""
