"""Operator definitions, one module per op family (see registry.py)."""
from .registry import get, register, supported_ops, is_supported  # noqa: F401
