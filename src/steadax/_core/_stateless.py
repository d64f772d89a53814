"""Stateless transformations: ``identity``, ``set_to_zero``, ``stateless`` and its tree map."""

from collections.abc import Callable

import jax
import jax.numpy as jnp

from ._docs import shared_args
from ._interface import GradientTransformationExtraArgs
from ._module import static_field
from ._transformation import Transformation
from ._types import Params, Updates

__all__ = ["identity", "set_to_zero", "stateless", "stateless_with_tree_map"]


class _Identity(Transformation):
  name = "identity"
  elementwise = True

  def update_fn(self, updates, state, params=None, **extra_args):
    return updates, state


@shared_args
def identity() -> GradientTransformationExtraArgs:
  """Leaves updates unchanged.

  Returns:
    A stateless transformation.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.identity()
    >>> tx.update(jnp.ones(2), tx.init(jnp.zeros(2)))[0]
    Array([1., 1.], dtype=float32)
  """
  return _Identity()


class _SetToZero(Transformation):
  name = "set_to_zero"
  elementwise = True

  def update_fn(self, updates, state, params=None, **extra_args):
    return jax.tree_util.tree_map(jnp.zeros_like, updates), state


@shared_args
def set_to_zero() -> GradientTransformationExtraArgs:
  """Replaces every update with zeros (freezes the parameters it is applied to).

  Returns:
    A stateless transformation.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.set_to_zero()
    >>> tx.update(jnp.ones(2), tx.init(jnp.zeros(2)))[0]
    Array([0., 0.], dtype=float32)
  """
  return _SetToZero()


class _Stateless(Transformation):
  name = "stateless"
  fn: Callable = static_field()

  def update_fn(self, updates, state, params=None, **extra_args):
    return self.fn(updates, params), state


@shared_args
def stateless(f: Callable[[Updates, Params | None], Updates]) -> GradientTransformationExtraArgs:
  """A stateless transformation from ``f(updates, params) -> updates``.

  Args:
    f: maps the whole updates tree (and params, possibly None) to new updates.

  Returns:
    The transformation.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> tx = steadax.stateless(lambda u, p: jax.tree.map(lambda x: -x, u))
    >>> tx.update(jnp.ones(1), tx.init(None))[0]
    Array([-1.], dtype=float32)
  """
  return _Stateless(f)


class _StatelessTreeMap(Transformation):
  name = "stateless_with_tree_map"
  requires_float = False
  fn: Callable = static_field()

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      return jax.tree_util.tree_map(lambda g: self.fn(g, None), updates), state
    return jax.tree_util.tree_map(self.fn, updates, params), state


@shared_args
def stateless_with_tree_map(
    f: Callable[[jax.Array, jax.Array | None], jax.Array]) -> GradientTransformationExtraArgs:
  """A stateless transformation applying ``f(update, param)`` leaf by leaf.

  Args:
    f: maps one update leaf and its parameter (None when params are not given) to a new leaf.

  Returns:
    The transformation.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.stateless_with_tree_map(lambda g, p: 2 * g)
    >>> tx.update(jnp.ones(1), tx.init(None))[0]
    Array([2.], dtype=float32)
  """
  return _StatelessTreeMap(f)
