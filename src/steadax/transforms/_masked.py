"""masked: apply a transformation to a subset of the parameters.

Masks (and ``partition``'s labels) are *prefix trees* of the parameters: a leaf of the mask decides
for the whole subtree below it. Mappings are matched by key, so a plain ``dict`` mask works for
Flax ``FrozenDict`` parameters and the reverse; sequences are matched by position.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from .._core._adapters import as_inner
from .._core._docs import shared_args
from .._core._interface import GradientTransformation
from .._core._transformation import Transformation
from .._core._module import child_field, static_field
from .._core._prefix import align_prefix as align_prefix
from .._core._prefix import is_mask_callable as is_mask_callable
from .._core._prefix import prefix_leaves as prefix_leaves
from .._core._roles import INNER, state_roles
from .._core._state_tree import ParamsMarker
from .._core._types import OptState
from .._fusion._elementwise import children_on_flat_params
from .._fusion._flat import resolve_prefix

__all__ = ["MaskedNode", "MaskedState", "masked", "mask_tree"]


class MaskedNode(NamedTuple):
  """Stands for a parameter that a ``masked`` transformation does not see (an empty pytree)."""


@state_roles(inner_state=INNER)
class MaskedState(NamedTuple):
  """State of ``masked``: the inner transformation's state over the masked-in parameters.

  Attributes:
    inner_state: the state of the inner transformation, over the masked-in parameters.
  """

  inner_state: OptState


def _is_none(x: Any) -> bool:
  return x is None


def mask_tree(tree: Any, mask: Any) -> Any:
  """Replace the leaves (or subtrees) of ``tree`` where ``mask`` is False by ``MaskedNode()``.

  Args:
    tree: a pytree (parameters, updates or any tree with their structure).
    mask: a prefix tree of ``tree`` with boolean leaves.

  Returns:
    ``tree`` with the masked-out parts replaced.

  Example:
    >>> from steadax.transforms._masked import mask_tree
    >>> mask_tree({"w": 1.0, "b": 2.0}, {"w": True, "b": False})
    {'b': MaskedNode(), 'w': 1.0}
  """
  mask = align_prefix("mask_tree", "mask", mask, tree)
  return jax.tree_util.tree_map(
      lambda m, sub: sub if m else MaskedNode(), mask, tree, is_leaf=_is_none
  )


def is_params_marker(params: Any) -> bool:
  """Whether ``params`` is the leafless stand-in ``tree_map_params`` initialises states with."""
  return isinstance(params, ParamsMarker)


def _apply_mask(owner: str, tree: Any, mask: Any) -> Any:
  try:
    return jax.tree_util.tree_map(
        lambda m, sub: sub if m else MaskedNode(), mask, tree, is_leaf=_is_none
    )
  except (ValueError, TypeError) as err:
    raise ValueError(f"{owner}: the mask is not a prefix of the parameters/updates: {err}") from None


class Masked(Transformation):
  name = "masked"
  requires_float = False
  elementwise = children_on_flat_params  # the mask is resolved per leaf, one value per buffer
  State = MaskedState
  inner: Any = child_field()
  mask: Any = static_field()
  mask_compatible_extra_args: bool = static_field(default=False)

  def init_fn(self, params):
    if is_params_marker(params):
      return MaskedState(inner_state=self.inner.init(params))
    mask = resolve_prefix(self.owner, "mask", self.mask, params)
    return MaskedState(inner_state=self.inner.init(_apply_mask(self.owner, params, mask)))

  def _mask_extra_args(self, updates: Any, mask: Any, extra_args: dict) -> dict:
    if not self.mask_compatible_extra_args:
      return extra_args
    structure = jax.tree_util.tree_structure(updates)
    return {
        k: _apply_mask(self.owner, v, mask) if jax.tree_util.tree_structure(v) == structure else v
        for k, v in extra_args.items()
    }

  def update_fn(self, updates, state, params=None, **extra_args):
    mask = resolve_prefix(self.owner, "mask", self.mask, updates)
    masked_updates = _apply_mask(self.owner, updates, mask)
    masked_params = None if params is None else _apply_mask(self.owner, params, mask)
    new_masked, inner_state = self.inner.update(
        masked_updates, state.inner_state, masked_params,
        **self._mask_extra_args(updates, mask, extra_args),
    )
    merged = jax.tree_util.tree_map(
        lambda m, new, old: new if m else old, mask, new_masked, updates, is_leaf=_is_none,
    )
    return merged, MaskedState(inner_state=inner_state)


@shared_args
def masked(
    inner: GradientTransformation,
    mask: Any | Callable[[Any], Any],
    *,
    mask_compatible_extra_args: bool = False,
) -> Transformation:
  """Applies ``inner`` only where ``mask`` is True; other updates pass through unchanged.

  Args:
    inner: the transformation to apply.
    mask: a tree of Python booleans with the parameters' structure or a prefix of it (one boolean
      decides for a whole subtree; a single boolean for everything), or a callable returning one
      from the params/updates. Mappings are matched by key whatever their type (``dict``,
      Flax ``FrozenDict``), sequences by position. The mask is static: it is part of the compiled
      program.
    mask_compatible_extra_args: also mask the keyword extras (``grad``, ...) whose tree structure
      is the updates'.

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
  return Masked(as_inner(inner, "masked", "inner"), mask, mask_compatible_extra_args)
