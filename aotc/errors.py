"""Errors that reach the user: one clear line, plus a hint saying what to do about it."""
from __future__ import annotations


class AotcError(Exception):
    """Base class. `exit_code` is what the CLI returns for it."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


class ModelError(AotcError):
    """The ONNX file cannot be read or is not a valid graph."""


class ShapeError(AotcError):
    """A shape is unknown or inconsistent."""


class UnsupportedError(AotcError):
    """Operators (or other features: element types, attribute values) aotc does not handle.
    All of them are listed at once."""

    def __init__(self, items: list[str], hint: str | None = None, what: str = "feature(s)"):
        self.items = items
        lines = "\n".join(f"  - {i}" for i in items)
        super().__init__(f"{len(items)} unsupported {what}:\n{lines}", hint)


class BuildError(AotcError):
    """The C compiler failed on generated code (a bug in aotc)."""


class InputError(AotcError):
    """Inputs given to a compiled model do not match what it expects."""


class ArtifactError(AotcError):
    """An artifact directory is missing files or is inconsistent."""


class RunError(AotcError):
    """A compiled model stopped with an error status (an index out of range in the data, say)."""
