"""Registry entries: Adafactor (factored and unfactored statistics, momentum, weight decay)."""

import jax
import jax.numpy as jnp
import numpy as np

import steadax

from .registry import Entry, Problem

_TARGET = np.linspace(-0.5, 0.5, 12, dtype=np.float32).reshape(3, 4)
_SCALES = np.outer(np.array([1.0, 2.0, 0.5], np.float32), np.array([1.0, 0.5, 1.5, 1.0], np.float32))


def _matrix_init():
  return {"w": jnp.asarray(np.linspace(1.0, -1.0, 12, dtype=np.float32).reshape(3, 4)),
          "b": jnp.array([0.8, -0.6], jnp.float32)}


def _matrix_loss(params):
  w = params["w"].astype(jnp.float32)
  b = params["b"].astype(jnp.float32)
  return 0.5 * jnp.sum(jnp.asarray(_SCALES) * (w - jnp.asarray(_TARGET)) ** 2) + 0.5 * jnp.sum(b**2)


# A 3x4 weight matrix, so that min_dim_size_to_factor=2 exercises the factored statistics.
MATRIX = Problem("matrix_quadratic", _matrix_loss, _matrix_init)


def _has_two_axes(params):
  return jax.tree_util.tree_map(lambda x: x.ndim >= 2, params)


ENTRIES = [
    Entry("adafactor", lambda: steadax.adafactor(0.1), lambda o: o.adafactor(0.1)),
    Entry("adafactor_factored", lambda: steadax.adafactor(0.1, min_dim_size_to_factor=2),
          lambda o: o.adafactor(0.1, min_dim_size_to_factor=2), problem=MATRIX),
    Entry("adafactor_momentum_weight_decay",
          lambda: steadax.adafactor(0.05, min_dim_size_to_factor=2, momentum=0.9, weight_decay_rate=0.01,
                                    weight_decay_mask=_has_two_axes),
          lambda o: o.adafactor(0.05, min_dim_size_to_factor=2, momentum=0.9, weight_decay_rate=0.01,
                                weight_decay_mask=_has_two_axes), problem=MATRIX),
    Entry("adafactor_unfactored",
          lambda: steadax.adafactor(0.1, factored=False, multiply_by_parameter_scale=False, clipping_threshold=None),
          lambda o: o.adafactor(0.1, factored=False, multiply_by_parameter_scale=False, clipping_threshold=None)),
]
