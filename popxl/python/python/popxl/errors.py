"""PopXL's exception types."""

from popxl._native import UndefinedValue

__all__ = ["UndefinedValue"]
