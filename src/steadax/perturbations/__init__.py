"""Differentiable perturbed functions (Optax's ``optax.perturbations``)."""

from ._perturbed import (
    Normal as Normal,
    Gumbel as Gumbel,
    make_perturbed_fun as make_perturbed_fun,
)

__all__ = [
    "Gumbel", "Normal", "make_perturbed_fun",
]
