"""masked: apply a transformation to a subset of the parameters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from .._core._base import GradientTransformation, Transformation, with_extra_args_support
from .._core._module import static_field

__all__ = ["MaskedNode", "MaskedState", "masked", "mask_tree"]


class MaskedNode(NamedTuple):
  """Stands for a parameter that a ``masked`` transformation does not see (an empty pytree)."""


class MaskedState(NamedTuple):
  """State of ``masked``: the inner transformation's state over the masked-in parameters."""

  inner_state: Any


def mask_tree(tree: Any, mask: Any) -> Any:
  """Replace the leaves (or subtrees) of ``tree`` where ``mask`` is False by ``MaskedNode()``."""
  return jax.tree_util.tree_map(
      lambda m, sub: sub if m else MaskedNode(), mask, tree, is_leaf=lambda x: x is None
  )


def _resolve(mask: Any, tree: Any) -> Any:
  return mask(tree) if callable(mask) else mask


class Masked(Transformation):
  name = "masked"
  requires_float = False
  inner: Any
  mask: Any = static_field()

  def init_fn(self, params):
    mask = _resolve(self.mask, params)
    return MaskedState(inner_state=self.inner.init(mask_tree(params, mask)))

  def update_fn(self, updates, state, params=None, **extra_args):
    mask = _resolve(self.mask, updates)
    masked_updates = mask_tree(updates, mask)
    masked_params = None if params is None else mask_tree(params, mask)
    new_masked, inner_state = self.inner.update(
        masked_updates, state.inner_state, masked_params, **extra_args
    )
    merged = jax.tree_util.tree_map(
        lambda m, new, old: new if m else old, mask, new_masked, updates,
        is_leaf=lambda x: isinstance(x, MaskedNode) or x is None,
    )
    return merged, MaskedState(inner_state=inner_state)


def masked(inner: GradientTransformation, mask: Any | Callable[[Any], Any]) -> Transformation:
  """Applies ``inner`` only where ``mask`` is True; other updates pass through unchanged.

  Args:
    inner: the transformation to apply.
    mask: a tree of Python booleans with the parameters' structure (or a prefix of it), or a
      callable returning one from the params/updates. Mappings of any kind (dict, FrozenDict) work.

  Returns:
    A transformation with ``MaskedState(inner_state)``; the inner state holds ``MaskedNode()`` where
    the mask is False, so it allocates nothing for those leaves.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.masked(steadax.scale(0.0), {"w": True, "b": False})
    >>> g = {"w": jnp.ones(1), "b": jnp.ones(1)}
    >>> tx.update(g, tx.init(g))[0]
    {'b': Array([1.], dtype=float32), 'w': Array([0.], dtype=float32)}
  """
  return Masked(with_extra_args_support(inner), mask)
