"""Clipping: element-wise, by the global norm of the whole tree, and by each block's root mean square.

References:
  Pascanu, Mikolov & Bengio, "On the difficulty of training Recurrent Neural Networks", ICML 2013
  (clipping by the gradient's norm, Algorithm 1).
  Shazeer & Stern, "Adafactor: Adaptive Learning Rates with Sublinear Memory Cost", ICML 2018
  (update clipping by the block's root mean square, §6).
"""

from typing import Any

import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core._docs import shared_args
from .._core._interface import EmptyState
from .._core._transformation import Transformation
from .._core._checks import check_nonnegative, check_positive
from .._core._leafwise import Scalars
from .._core._module import hyper_field
from .._core._policy import reciprocal
from .._core._tree import l2_norm
from ._moments import abs_sq

__all__ = ["ClipState", "ClipByGlobalNormState", "clip", "clip_by_global_norm", "clip_by_block_rms"]

# Optax's names for the (empty) states of clip and clip_by_global_norm.
ClipState = EmptyState
ClipByGlobalNormState = EmptyState


def _check_scalar(owner: str, name: str, value: Any) -> None:
  if callable(value) or isinstance(value, (str, bytes, bool)) or value is None:
    raise TypeError(f"{owner}: {name} must be a number, got {value!r}.")
  if np.shape(value) != ():
    raise ValueError(f"{owner}: {name} must be a scalar, got an array of shape {np.shape(value)}.")


def _check_scalar_nonnegative(owner: str, name: str, value: Any) -> None:
  _check_scalar(owner, name, value)
  check_nonnegative(owner, name, value)


def _check_scalar_positive(owner: str, name: str, value: Any) -> None:
  _check_scalar(owner, name, value)
  check_positive(owner, name, value)


class Clip(Transformation):
  name = "clip"
  elementwise = True
  max_delta: Any = hyper_field(check=_check_scalar_nonnegative)

  def update_fn(self, updates, state, params=None, **extra_args):
    def leaf(k, g):
      if jnp.iscomplexobj(g):
        # Complex numbers have no order: bound the modulus and keep the phase.
        modulus = jnp.abs(g)
        over = modulus > k.bound
        return g * jnp.where(over, k.bound / jnp.where(over, modulus, 1), 1)
      return jnp.clip(g, -k.bound, k.bound)

    scalars = Scalars(bound=self.max_delta)
    out, = self.leafwise(leaf, updates, params=params, scalars=scalars)
    return out, state


@shared_args
def clip(max_delta: ArrayLike) -> Transformation:
  """Clips each element of the updates to ``[-max_delta, max_delta]``.

  Complex elements have their modulus clipped to ``max_delta`` and keep their phase.

  Args:
    max_delta: the largest absolute value an element may keep (non-negative).

  Returns:
    A stateless transformation.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.clip(1.0)
    >>> tx.update(jnp.array([-3.0, 0.5, 2.0]), tx.init(jnp.zeros(3)))[0]
    Array([-1. ,  0.5,  1. ], dtype=float32)
  """
  return Clip(max_delta)


class ClipByGlobalNorm(Transformation):
  name = "clip_by_global_norm"
  elementwise = True
  max_norm: Any = hyper_field(check=_check_scalar_nonnegative)

  def update_fn(self, updates, state, params=None, **extra_args):
    # The whole-tree reduction, outside the leaf function: in the widest dtype present (>= float32).
    norm = l2_norm(updates)
    below = norm < self.max_norm
    # Optax's arithmetic, ``(u / norm) * max_norm``; dividing by 1 on the untaken branch, and for a
    # zero tree, keeps the value and the gradient finite at a zero norm (Optax's are NaN there).
    safe_norm = jnp.where(below | (norm == 0), np.asarray(1, norm.dtype), norm)
    out, = self.leafwise(lambda k, g: jnp.where(k.below, g, (g / k.norm) * k.max_norm), updates, params=params,
                         scalars=Scalars(below=below, norm=safe_norm, max_norm=self.max_norm))
    return out, state


@shared_args
def clip_by_global_norm(max_norm: ArrayLike) -> Transformation:
  """Rescales the updates so their global l2 norm is at most ``max_norm``.

  The norm is taken over all leaves together in the widest floating dtype present (at least
  float32), so a mixed float32/bfloat16 tree is clipped by its exact norm. Updates whose norm is
  at most ``max_norm`` pass unchanged; others become ``u * max_norm / ||u||``.

  Args:
    max_norm: the largest global norm (non-negative).

  Returns:
    A stateless transformation.

  References:
    Pascanu, Mikolov & Bengio, "On the difficulty of training Recurrent Neural Networks", ICML 2013.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.clip_by_global_norm(1.0)
    >>> tx.update({"a": jnp.array([3.0]), "b": jnp.array([4.0])}, tx.init(None))[0]
    {'a': Array([0.6], dtype=float32), 'b': Array([0.8], dtype=float32)}
  """
  return ClipByGlobalNorm(max_norm)


class ClipByBlockRms(Transformation):
  name = "clip_by_block_rms"
  threshold: Any = hyper_field(check=_check_scalar_positive)

  def update_fn(self, updates, state, params=None, **extra_args):
    def leaf(k, g):
      if g.size == 0:
        return g
      # Update clipping (Shazeer & Stern 2018, §6, eq. 12): u / max(1, RMS(u) / d), per block.
      rms = jnp.sqrt(jnp.mean(abs_sq(g)))
      # Optax's rms / threshold: compiled as a multiplication by the reciprocal of the constant.
      return g / jnp.maximum(1.0, rms * k.inv_threshold)

    scalars = lambda dt: Scalars(inv_threshold=reciprocal(self.threshold, dt))
    out, = self.leafwise(leaf, updates, params=params, scalars=scalars)
    return out, state


@shared_args
def clip_by_block_rms(threshold: ArrayLike) -> Transformation:
  """Rescales each leaf (block) of the updates so its root mean square is at most ``threshold``.

  Args:
    threshold: the largest root mean square of a block (positive).

  Returns:
    A stateless transformation.

  References:
    Shazeer & Stern, "Adafactor: Adaptive Learning Rates with Sublinear Memory Cost", ICML 2018, §6.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.clip_by_block_rms(1.0)
    >>> tx.update(jnp.array([2.0, -2.0]), tx.init(jnp.zeros(2)))[0]
    Array([ 1., -1.], dtype=float32)
  """
  return ClipByBlockRms(threshold)
