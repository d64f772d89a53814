"""partition (multi_transform), freeze and selective_transform: different transformations per subset.

``partition`` is ``masked`` applied once per label: each transformation sees only the parameters
carrying its label (``MaskedNode()`` elsewhere), so its state allocates nothing for the others and
keeps the exact types the contract demands.
"""

from collections.abc import Callable, Hashable, Mapping
from typing import Any, NamedTuple

import jax

from .._core._adapters import as_inner
from .._core._contract import InputMismatchError
from .._core._docs import shared_args
from .._core._interface import GradientTransformation
from .._core._stateless import set_to_zero
from .._core._transformation import Transformation
from .._core._module import child_field, static_field
from .._core._policy import key_path_str
from .._core._roles import INNER, state_roles
from .._fusion._elementwise import children_on_flat_params
from .._fusion._flat import resolve_prefix
from ..transforms._masked import Masked, is_params_marker
from .._core._types import OptState, Params

__all__ = [
    "PartitionState",
    "MultiTransformState",
    "partition",
    "multi_transform",
    "freeze",
    "selective_transform",
]


@state_roles(inner_states=INNER)
class PartitionState(NamedTuple):
  """State of ``partition``.

  Attributes:
    inner_states: ``{label: MaskedState(inner_state)}``, one entry per transformation, each over the
      parameters carrying that label.
  """

  inner_states: Mapping[Hashable, OptState]


MultiTransformState = PartitionState  # Optax's older name


def _is_none(x: Any) -> bool:
  return x is None


def _describe(label: Any) -> str:
  return repr(label)


class Partition(Transformation):
  """The transformation ``partition`` returns."""

  name = "partition"
  requires_float = False
  elementwise = children_on_flat_params  # the labels are resolved per leaf, one per buffer
  State = PartitionState
  labels: tuple = static_field()
  transforms: tuple = child_field(())
  param_labels: Any = static_field(default=None)
  mask_compatible_extra_args: bool = static_field(default=False)

  def label_tree(self, tree: Any) -> Any:
    """The labels of ``tree``'s parameters (a prefix tree), checked against the transformations."""
    labels = resolve_prefix(self.owner, "param_labels", self.param_labels, tree)
    known = self.labels
    for path, label in jax.tree_util.tree_flatten_with_path(labels, is_leaf=_is_none)[0]:
      if label is None:
        continue
      try:
        ok = label in known
      except TypeError:  # an unhashable label can match no key
        ok = False
      if not ok:
        raise ValueError(
            f"{self.owner}: the parameters at {key_path_str(path)} have label {_describe(label)}, "
            f"which has no transformation; the transformations' labels are "
            f"[{', '.join(_describe(k) for k in known)}]."
        )
    return labels

  def _masked(self, labels: Any, label: Any, inner: Any) -> Masked:
    mask = jax.tree_util.tree_map(lambda l: l is not None and l == label, labels, is_leaf=_is_none)
    return Masked(inner, mask, self.mask_compatible_extra_args)

  def init_fn(self, params):
    if is_params_marker(params):
      return PartitionState({k: Masked(t, True).init(params) for k, t in zip(self.labels, self.transforms)})
    labels = self.label_tree(params)
    return PartitionState(
        {k: self._masked(labels, k, t).init(params) for k, t in zip(self.labels, self.transforms)}
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    labels = self.label_tree(updates)
    inner_states = dict(state.inner_states)
    if set(inner_states) != set(self.labels):
      raise ValueError(
          f"{self.owner}: the state holds labels {sorted(map(_describe, inner_states))}, the "
          f"transformation {sorted(map(_describe, self.labels))}."
      )
    for label, inner in zip(self.labels, self.transforms):
      try:
        updates, inner_states[label] = self._masked(labels, label, inner).update(
            updates, inner_states[label], params, **extra_args
        )
      except (InputMismatchError, AttributeError, TypeError, ValueError) as error:
        if not isinstance(error, InputMismatchError) and "MaskedNode" not in str(error):
          raise
        raise InputMismatchError(self._relabelled(label, labels, error)) from error
    return updates, PartitionState(inner_states)

  def _relabelled(self, label: Any, labels: Any, error: Exception) -> str:
    """The message for a label's state that does not fit the parameters labelled now."""
    now = [
        f"{key_path_str(path)} -> {_describe(value)}"
        for path, value in jax.tree_util.tree_flatten_with_path(labels, is_leaf=_is_none)[0]
    ]
    return (
        f"{self.owner}: the state of label {_describe(label)} does not fit the parameters that carry "
        f"this label now ({error}). The parameters given to update are labelled differently from "
        "those given to init: the labels must come out the same for a parameter in both calls (a "
        "label function that reads the tree's form, e.g. a wrapper node such as a Flax Variable "
        f"present in one call only, changes them). Labels at update: {', '.join(now[:12])}"
        + (" ..." if len(now) > 12 else ".")
    )


@shared_args
def partition(
    transforms: Mapping[Hashable, GradientTransformation],
    param_labels: Any | Callable[[Any], Any],
    *,
    mask_compatible_extra_args: bool = False,
) -> Partition:
  """Applies a different transformation to each labelled subset of the parameters.

  Every transformation gets the whole update tree with the parameters of other labels replaced by
  ``MaskedNode()``; its state holds nothing for them. A transformation whose label no parameter
  carries still gets a (leafless) state, as in Optax. A parameter whose label is ``None`` is left
  unchanged by all of them.

  Args:
    transforms: ``{label: transformation}``.
    param_labels: a tree with the parameters' structure or a prefix of it whose leaves are labels
      (keys of ``transforms``), or a callable returning one from the params/updates. Mappings are
      matched by key whatever their type (``dict``, ``FrozenDict``).
    mask_compatible_extra_args: also mask the keyword extras whose tree structure is the
      updates'.

  Returns:
    A transformation with state ``PartitionState(inner_states={label: MaskedState(...)})``.

  Raises:
    ValueError: at ``init``/``update`` when a parameter's label has no transformation (the message
      names the parameter's path and the known labels).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> params = {"w": jnp.ones(2), "b": jnp.ones(1)}
    >>> tx = steadax.partition({"adam": steadax.adam(0.1), "sgd": steadax.sgd(0.5)},
    ...                        {"w": "adam", "b": "sgd"})
    >>> updates, _ = tx.update(params, tx.init(params), params)
    >>> updates["b"]
    Array([-0.5], dtype=float32)
  """
  items = list(transforms.items())
  return Partition(
      labels=tuple(k for k, _ in items),
      transforms=tuple(as_inner(t, "partition", f"transforms[{k!r}]") for k, t in items),
      param_labels=param_labels,
      mask_compatible_extra_args=mask_compatible_extra_args,
  )


@shared_args
def multi_transform(
    transforms: Mapping[Hashable, GradientTransformation],
    param_labels: Any | Callable[[Any], Any],
    *,
    mask_compatible_extra_args: bool = False,
) -> Partition:
  """Optax's older name for ``partition`` (same arguments, same transformation).

  Args:
    transforms: ``{label: transformation}``.
    param_labels: labels as a (prefix) tree or a callable returning one.
    mask_compatible_extra_args: also mask the extras with the updates' structure.

  Returns:
    ``partition(transforms, param_labels)``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.multi_transform({"a": steadax.sgd(1.0)}, "a")
    >>> tx.update(jnp.ones(1), tx.init(jnp.zeros(1)))[0]
    Array([-1.], dtype=float32)
  """
  return partition(transforms, param_labels, mask_compatible_extra_args=mask_compatible_extra_args)


@shared_args
def freeze(mask: Params) -> Masked:
  """Sets the updates of the parameters where ``mask`` is True to zero (holds them constant).

  Args:
    mask: a static boolean prefix tree of the parameters (True freezes), or one boolean for all.

  Returns:
    ``masked(set_to_zero(), mask)``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.freeze({"w": True, "b": False})
    >>> g = {"w": jnp.ones(1), "b": jnp.ones(1)}
    >>> tx.update(g, tx.init(g))[0]
    {'b': Array([1.], dtype=float32), 'w': Array([0.], dtype=float32)}
  """
  return Masked(set_to_zero(), mask)


class _FreezeLabels:
  """``param_labels`` of ``selective_transform``: "freeze" where the mask is True, else "train"."""

  def __init__(self, freeze_mask: Any):
    self.freeze_mask = freeze_mask

  def __call__(self, tree: Any) -> Any:
    mask = resolve_prefix("selective_transform", "freeze_mask", self.freeze_mask, tree)
    return jax.tree_util.tree_map(lambda m: "freeze" if m else "train", mask)


@shared_args
def selective_transform(optimizer: GradientTransformation, *, freeze_mask: Params) -> Partition:
  """Applies ``optimizer`` to the parameters where ``freeze_mask`` is False; zero updates elsewhere.

  Unlike ``chain(freeze(mask), optimizer)``, the optimizer holds no state for frozen parameters.

  Args:
    optimizer: the transformation for the trainable parameters.
    freeze_mask: a static boolean prefix tree of the parameters (True freezes), or one boolean.

  Returns:
    ``partition({"train": optimizer, "freeze": set_to_zero()}, labels)``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.selective_transform(steadax.sgd(1.0), freeze_mask={"w": True, "b": False})
    >>> g = {"w": jnp.ones(1), "b": jnp.ones(1)}
    >>> tx.update(g, tx.init(g))[0]
    {'b': Array([-1.], dtype=float32), 'w': Array([0.], dtype=float32)}
  """
  return partition({"train": optimizer, "freeze": set_to_zero()}, _FreezeLabels(freeze_mask))
