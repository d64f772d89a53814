"""Annealed Gaussian gradient noise.

References:
  Neelakantan et al., "Adding Gradient Noise Improves Learning for Very Deep Networks", 2015
  (arXiv:1511.06807, eq. 1: variance ``eta / (1 + t)^gamma``; Optax and steadax use ``t``
  counted from 1, i.e. ``eta / t^gamma``).
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core._base import Transformation
from .._core._checks import check_nonnegative
from .._core._policy import as_compute, compute_dtype, hyper, per_dtype, real_dtype, safe_increment, zero_count
from .._core._module import hyper_field

__all__ = ["AddNoiseState", "add_noise"]


class AddNoiseState(NamedTuple):
  """State of ``add_noise``: the int32 count (for annealing) and the typed PRNG key."""

  count: jax.Array
  rng_key: jax.Array


def _typed_key(owner: str, key: Any) -> jax.Array:
  """A typed PRNG key from a typed key, raw ``uint32[2]`` key data or an integer seed."""
  if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    return key
  try:
    arr = jnp.asarray(key)
  except TypeError:  # strings and other non-numeric values
    arr = None
  if arr is not None and arr.shape == (2,) and arr.dtype == jnp.uint32:
    return jax.random.wrap_key_data(arr)
  if arr is not None and arr.shape == () and jnp.issubdtype(arr.dtype, jnp.integer):
    return jax.random.key(arr)
  what = f"{type(key).__name__} {key!r}" if arr is None else (
      f"{type(key).__name__} with shape {arr.shape} and dtype {arr.dtype}")
  raise TypeError(
      f"{owner}: key must be a jax.random.key, raw uint32[2] key data or an integer seed, got {what}.")


class AddNoise(Transformation):
  name = "add_noise"
  eta: Any = hyper_field()
  gamma: Any = hyper_field()
  key: Any = hyper_field(0)

  def init_fn(self, params):
    return AddNoiseState(count=zero_count(), rng_key=_typed_key(self.name, self.key))

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)
    rng_key, sample_key = jax.random.split(state.rng_key)
    leaves, treedef = jax.tree_util.tree_flatten(updates)
    # One key per leaf, split in leaf order (as Optax): the same key gives the same noise.
    keys = jax.random.split(sample_key, len(leaves))

    @per_dtype
    def std(rdt):
      return jnp.sqrt(hyper(self.eta, rdt) / count.astype(rdt) ** hyper(self.gamma, rdt))

    def leaf(g, k):
      cdt = compute_dtype(g.dtype)
      # Sampled in the compute dtype, not in bfloat16/float16, then rounded once on the way out.
      noise = jax.random.normal(k, g.shape, cdt)
      return (as_compute(g, cdt) + std(real_dtype(cdt)).astype(cdt) * noise).astype(g.dtype)

    out = treedef.unflatten([leaf(g, keys[i]) for i, g in enumerate(leaves)])
    return out, AddNoiseState(count=count, rng_key=rng_key)


def add_noise(eta: Any, gamma: Any, key: Any = None, *, seed: int | None = None) -> Transformation:
  """Adds Gaussian noise of variance ``eta / t^gamma`` to the updates (``t`` counts from 1).

  The noise is drawn in at least float32 and added before rounding to each leaf's dtype, so
  bfloat16 leaves get properly distributed noise.

  Args:
    eta: the base variance.
    gamma: the annealing exponent of the variance.
    key: a ``jax.random.key``, raw key data or an integer seed. None warns and uses 0 (as Optax).
    seed: deprecated spelling of an integer ``key``.

  Returns:
    A transformation with ``AddNoiseState(count, rng_key)``.

  References:
    Neelakantan et al., "Adding Gradient Noise Improves Learning for Very Deep Networks", 2015
    (arXiv:1511.06807).

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> tx = steadax.add_noise(eta=0.0, gamma=0.55, key=jax.random.key(0))
    >>> tx.update(jnp.ones(2), tx.init(jnp.zeros(2)))[0]
    Array([1., 1.], dtype=float32)
  """
  owner = "add_noise"
  if seed is not None:
    warnings.warn(f"{owner}: `seed` is deprecated; pass `key` instead.", DeprecationWarning, stacklevel=2)
    if key is not None:
      raise ValueError(f"{owner}: pass either key or seed, not both.")
    key = seed
  if key is None:
    warnings.warn(f"{owner}: no `key` given; using 0. Pass `key` for reproducible, independent noise.",
                  UserWarning, stacklevel=2)
    key = 0
  check_nonnegative(owner, "eta", eta)
  check_nonnegative(owner, "gamma", gamma)
  _typed_key(owner, key)  # fail at construction, not at init
  return AddNoise(eta, gamma, key)

