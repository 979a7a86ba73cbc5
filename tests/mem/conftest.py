"""Fixtures of the memory tests."""

from ..cuda_calls import cuda_initialised, recorder

__all__ = ["cuda_initialised", "recorder"]
