"""Annealed Gaussian gradient noise.

References:
  Neelakantan et al., "Adding Gradient Noise Improves Learning for Very Deep Networks", 2015
  (arXiv:1511.06807, eq. 1: variance ``eta / (1 + t)^gamma``; Optax and steadax use ``t``
  counted from 1, i.e. ``eta / t^gamma``).
"""

import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._docs import shared_args
from .._core._transformation import Transformation
from .._core._checks import check_nonnegative
from .._core._leafwise import Scalars
from .._core._module import hyper_field
from .._core._policy import hyper, safe_increment, zero_count
from .._core._roles import COUNTER, OTHER, state_roles

__all__ = ["AddNoiseState", "add_noise"]


@state_roles(count=COUNTER, rng_key=OTHER)
class AddNoiseState(NamedTuple):
  """State of ``add_noise``: the int32 count (for annealing) and the typed PRNG key.

  Attributes:
    count: the number of updates so far (int32), for the noise's annealing.
    rng_key: the typed PRNG key of the next noise draw.
  """

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


def _check_key(owner: str, name: str, value: Any) -> None:
  _typed_key(owner, value)  # fail at construction, not at init


class AddNoise(Transformation):
  name = "add_noise"
  State = AddNoiseState
  eta: Any = hyper_field(check=check_nonnegative)
  gamma: Any = hyper_field(check=check_nonnegative)
  key: Any = hyper_field(0, check=_check_key)

  def init_fn(self, params):  # a PRNG key is not zeros: by hand (the roles still check the count)
    return AddNoiseState(count=zero_count(), rng_key=_typed_key(self.name, self.key))

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)
    rng_key, sample_key = jax.random.split(state.rng_key)
    leaves, treedef = jax.tree_util.tree_flatten(updates)
    # One key per leaf, split in leaf order (as Optax): the same key gives the same noise.
    keys = jax.random.split(sample_key, len(leaves))
    # The keys enter the leaf function as their raw uint32 data (integer inputs pass unchanged).
    impl = jax.random.key_impl(sample_key)
    key_data = treedef.unflatten(list(jax.random.key_data(keys)))

    def leaf(k, g, key_data):
      key = jax.random.wrap_key_data(key_data, impl=impl)
      # Sampled in the compute dtype, not in bfloat16/float16, then rounded once on the way out.
      return g + k.std * jax.random.normal(key, g.shape, g.dtype)

    def scalars(dt):
      # Variance eta / t^gamma (eq. 1, t counted from 1).
      return Scalars(std=jnp.sqrt(hyper(self.eta, dt) / hyper(count, dt) ** hyper(self.gamma, dt)))

    out, = self.leafwise(leaf, updates, params=params, reads=(key_data,), scalars=scalars)
    return out, AddNoiseState(count=count, rng_key=rng_key)


@shared_args
def add_noise(eta: ArrayLike, gamma: ArrayLike, key: ArrayLike | None = None, *, seed: int | None = None) -> Transformation:
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
  return AddNoise(eta, gamma, key)

