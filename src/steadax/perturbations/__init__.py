"""Differentiable perturbed functions (Optax's ``optax.perturbations``)."""

from ._perturbed import *  # noqa: F401,F403
from ._perturbed import __all__ as _perturbed_all

__all__ = [*_perturbed_all]
