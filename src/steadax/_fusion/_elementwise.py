"""Which transformations may run on leaves concatenated into flat buffers (``fuse``, ``FlatParams``).

Each transformation declares it once, in its class attribute ``elementwise`` (the core declares the
attribute and never reads it; this module is its only reader):

* ``True``: the update is elementwise, or reduces over the whole tree (a global norm, a dot
  product), and never depends on a leaf's shape, position or per-leaf statistics;
* ``"children"``: as elementwise as the inner transformations (its ``child_field`` values);
* ``False`` (the default): never run on flat buffers;
* a function ``rule(tx, flat_params) -> reason or None``, where the answer depends on a field or
  differs between ``fuse`` and ``FlatParams`` (``children_on_flat_params`` for ``masked`` and
  ``partition``; a method named ``elementwise`` is such a function).
"""

import dataclasses
from typing import Any

from .._core._adapters import _WithExtraArgs
from .._core._interface import GradientTransformation
from .._core._module import _CHILD, _KIND
from .._core._transformation import Transformation

__all__ = ["child_transformations", "children_blocker", "children_on_flat_params", "fusion_blocker"]


def child_transformations(tx: Any) -> list:
  """The inner transformations held in ``tx``'s ``child_field`` values (tuples and dicts opened)."""
  found: list = []
  for field in dataclasses.fields(tx):
    if field.metadata.get(_KIND) != _CHILD:
      continue
    value = getattr(tx, field.name)
    values = value.values() if isinstance(value, dict) else value if isinstance(value, tuple) else (value,)
    found.extend(v for v in values if isinstance(v, GradientTransformation))
  return found


def children_blocker(tx: Any, flat_params: bool) -> str | None:
  """The rule ``"children"``: the first inner transformation's reason, or None when all fuse."""
  for child in child_transformations(tx):
    reason = fusion_blocker(child, flat_params)
    if reason is not None:
      return reason
  return None


def children_on_flat_params(tx: Any, flat_params: bool) -> str | None:
  """The rule of ``masked`` and ``partition``: ``"children"`` on ``FlatParams``, never in ``fuse``.

  They resolve their mask or labels on the parameters' tree and check that each buffer gets one
  value (``flat_params(params, groups=...)`` makes that so), which ``fuse``'s packed buffers,
  built without the mask, cannot offer.

  Args:
    tx: the transformation.
    flat_params: on ``FlatParams`` parameters rather than in ``fuse``.

  Returns:
    None, or why ``tx`` cannot run on concatenated leaves.
  """
  if not flat_params:
    return f"{tx.owner} (not declared elementwise)"
  return children_blocker(tx, flat_params)


def fusion_blocker(tx: Any, flat_params: bool = False) -> str | None:
  """Why ``tx`` cannot run on concatenated leaves, or None when it can: its ``elementwise``.

  Args:
    tx: a transformation.
    flat_params: on ``FlatParams`` parameters rather than in ``fuse``.

  Returns:
    None, or the name of the first piece that is not elementwise (with the reason when known).

  Example:
    >>> import steadax
    >>> fusion_blocker(steadax.adam(1e-3)) is None
    True
    >>> fusion_blocker(steadax.adafactor(1e-3))
    'scale_by_factored_rms (not declared elementwise)'
  """
  if isinstance(tx, Transformation):
    rule = type(tx).elementwise  # read from the class: a method is called as a function of tx
    if callable(rule):
      reason = rule(tx, flat_params)
      return None if reason is None else str(reason)
    if rule is True:
      return None
    if rule == "children":
      return children_blocker(tx, flat_params)
    return f"{tx.owner} (not declared elementwise)"
  if isinstance(tx, _WithExtraArgs):
    return fusion_blocker(tx.inner, flat_params)
  name = getattr(getattr(tx, "update_fn", None), "__qualname__", type(tx).__name__)
  return (f"{name} (a function pair: steadax cannot tell whether it is elementwise; write it as a "
          "Transformation subclass with `elementwise = True`)")
