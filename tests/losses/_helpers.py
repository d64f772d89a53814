"""Shared helpers of the loss tests: calling Optax under its own (standard) promotion rules."""

from __future__ import annotations

import contextlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np

X64 = bool(jax.config.jax_enable_x64)


@contextlib.contextmanager
def optax_rules():
  """Optax relies on implicit promotion and rank broadcasting; the suite forbids both."""
  with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", DeprecationWarning)
      yield


def call_optax(fn, *args, **kwargs):
  with optax_rules():
    return jax.tree_util.tree_map(np.asarray, fn(*args, **kwargs))


def assert_close(actual, expected, *, rtol, atol, what=""):
  actual = np.asarray(jnp.asarray(actual).astype(jnp.float32) if jnp.asarray(actual).dtype
                      == jnp.bfloat16 else actual, dtype=np.float64)
  expected = np.asarray(expected, dtype=np.float64)
  assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
  np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=what)


def to_f64(x) -> np.ndarray:
  """An array's exact values as float64 numpy (bfloat16 included)."""
  x = jnp.asarray(x)
  if x.dtype == jnp.bfloat16:
    x = x.astype(jnp.float32)
  return np.asarray(x, dtype=np.float64)
