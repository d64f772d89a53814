"""Experimental modules, as Optax's ``optax.experimental`` (today: ``aggregating``)."""

from . import aggregating as aggregating

__all__ = ["aggregating"]
