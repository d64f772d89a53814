"""Small deterministic objectives shared by the line-search and L-BFGS tests."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

X64 = bool(jax.config.jax_enable_x64)
DTYPE = jnp.float64 if X64 else jnp.float32
RTOL = 1e-10 if X64 else 2e-5  # agreement of two implementations of the same arithmetic

_rng = np.random.RandomState(0)
_FEATURES = _rng.randn(12, 3)
_LABELS = (_FEATURES @ np.array([1.0, -2.0, 0.5]) + 0.3 * _rng.randn(12) > 0).astype(np.float64)
_SCALES = np.array([1.0, 10.0, 0.5, 3.0])
_TARGET = np.array([0.3, -1.0, 2.0, 0.1])


def quadratic(w):
  return 0.5 * jnp.sum(jnp.asarray(_SCALES, w.dtype) * (w - jnp.asarray(_TARGET, w.dtype)) ** 2)


def rosenbrock(w):
  return jnp.sum(100.0 * (w[1:] - w[:-1] ** 2) ** 2 + (1.0 - w[:-1]) ** 2)


def logistic(w):
  logits = jnp.asarray(_FEATURES, w.dtype) @ w
  labels = jnp.asarray(_LABELS, w.dtype)
  return jnp.mean(jnp.logaddexp(0.0, logits) - labels * logits) + 0.01 * jnp.sum(w**2)


# (name, objective, initial point)
PROBLEMS = [
    ("quadratic", quadratic, np.array([1.0, 1.0, -1.0, 0.5])),
    ("rosenbrock", rosenbrock, np.array([-1.2, 1.0])),
    ("logistic", logistic, np.array([0.5, 0.5, -0.5])),
]


def start(point) -> jax.Array:
  return jnp.asarray(point, DTYPE)
