"""Optimizers assembled from the building blocks, one module per family.

An internal layer, not a namespace: ``steadax`` re-exports every name below at its top level.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from ._adam import (
      adam as adam,
      adamw as adamw,
      nadam as nadam,
      nadamw as nadamw,
      amsgrad as amsgrad,
      adamax as adamax,
      adamaxw as adamaxw,
  )
  from ._factored import adafactor as adafactor
  from ._lbfgs import (
      ScaleByLBFGSState as ScaleByLBFGSState,
      scale_by_lbfgs as scale_by_lbfgs,
      lbfgs as lbfgs,
  )
  from ._lion import lion as lion
  from ._rms import rmsprop as rmsprop, adagrad as adagrad
  from ._sgd import sgd as sgd
  from ._trust_ratio import lamb as lamb, lars as lars

  # Optax's remaining main-namespace optimizers (issue 3).
  from ._adam_variants import (
      adabelief as adabelief,
      adan as adan,
      radam as radam,
      yogi as yogi,
  )
  from ._adaptive import (
      adadelta as adadelta,
      novograd as novograd,
      sm3 as sm3,
  )
  from ._fromage import fromage as fromage
  from ._optimistic import (
      optimistic_gradient_descent as optimistic_gradient_descent,
      optimistic_adam as optimistic_adam,
      optimistic_adam_v2 as optimistic_adam_v2,
  )
  from ._sgd_variants import noisy_sgd as noisy_sgd, polyak_sgd as polyak_sgd
  from ._sign import (
      sign_sgd as sign_sgd,
      signum as signum,
      rprop as rprop,
  )

  # Beyond Optax: MARS, PSGD-Kron, low-memory Adam (issue 3).
  from ._lowmem import adam_lowmem as adam_lowmem, adam8bit as adam8bit
  from ._mars import mars as mars
  from ._psgd_kron import psgd_kron as psgd_kron

  # Beyond Optax: SOAP and Shampoo (issue 3).
  from ._shampoo import shampoo as shampoo
  from ._soap import soap as soap

__all__ = [
    "ScaleByLBFGSState", "adabelief", "adadelta", "adafactor", "adagrad", "adam", "adam8bit",
    "adam_lowmem", "adamax", "adamaxw", "adamw", "adan", "amsgrad", "fromage", "lamb", "lars", "lbfgs",
    "lion", "mars", "nadam", "nadamw", "noisy_sgd", "novograd", "optimistic_adam", "optimistic_adam_v2",
    "optimistic_gradient_descent", "polyak_sgd", "psgd_kron", "radam", "rmsprop", "rprop",
    "scale_by_lbfgs", "sgd", "shampoo", "sign_sgd", "signum", "sm3", "soap", "yogi",
]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
