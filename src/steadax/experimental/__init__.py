"""Experimental modules, as Optax's ``optax.experimental`` (today: ``aggregating``)."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from . import aggregating as aggregating

__all__ = ["aggregating"]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
