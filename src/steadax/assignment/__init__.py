"""The linear assignment problem (Optax's ``optax.assignment``)."""

from ._hungarian import (
    hungarian_algorithm as hungarian_algorithm,
    base_hungarian_algorithm as base_hungarian_algorithm,
)

__all__ = [
    "base_hungarian_algorithm", "hungarian_algorithm",
]
