"""Wrappers and combinators around transformations."""

from ._masked import *  # noqa: F401,F403
from ._masked import __all__ as _masked_all

__all__ = [*_masked_all]
