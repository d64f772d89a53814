"""Check any transformation, your own included, against steadax's type-stability contract.

``check_transformation(tx, params)`` runs the checks of steadax's own conformance suite (which is
built on it) and returns a ``ConformanceReport`` listing every violation with the check that failed,
the configuration (x64 mode, mixed precision) and the tree path; ``type_differences`` and
``update_type_differences`` are its comparisons of two trees' types, for a test of your own. See
``docs/testing.md``.

Example:
  >>> import jax.numpy as jnp, steadax
  >>> from steadax.testing import check_transformation
  >>> report = check_transformation(steadax.sgd(0.1, momentum=0.9), {"w": jnp.ones(3)})
  >>> report.ok, report.violations
  (True, ())
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from ._check import (
      CHECKS as CHECKS,
      check_transformation as check_transformation,
      default_grads as default_grads,
      perturb_hyperparameters as perturb_hyperparameters,
  )
  from ._compare import (
      type_differences as type_differences,
      type_signature as type_signature,
      update_type_differences as update_type_differences,
  )
  from ._pytest import parametrize_transformations as parametrize_transformations
  from ._report import (
      ConformanceError as ConformanceError,
      ConformanceReport as ConformanceReport,
      Violation as Violation,
  )

__all__ = [
    "CHECKS",
    "ConformanceError",
    "ConformanceReport",
    "Violation",
    "check_transformation",
    "default_grads",
    "parametrize_transformations",
    "perturb_hyperparameters",
    "type_differences",
    "type_signature",
    "update_type_differences",
]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
