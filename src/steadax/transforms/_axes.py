"""Which axes of a parameter form a matrix: the one dimension-numbers type of the matrix optimizers.

A ``WeightDimensionNumbers`` record has ``reduction_axis`` and ``output_axis`` (an int or a
sequence of ints each); the remaining axes are batch axes. A parameter viewed this way is a stack
of ``(prod(reduction), prod(output))`` matrices.
"""

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax

from .._core._policy import key_path_str
from ._masked import align_prefix

__all__ = ["WeightDimensionNumbers"]


class WeightDimensionNumbers(NamedTuple):
  """Which axes of a weight form the matrix a matrix optimizer works on.

  A weight used as ``y = x @ W`` has its reduction (input) axis first and its output axis second,
  the default. Axes named in neither field are batch axes: each slice along them is a separate
  matrix (a stack of layers, heads or experts), with its own statistics. Several axes in one field
  are flattened together (an attention projection ``(embed, heads, head_dim)`` with
  ``output_axis=(1, 2)``). Optax's ``MuonDimensionNumbers`` is this type
  (``steadax.contrib.MuonDimensionNumbers`` and ``GaLoreDimensionNumbers`` are aliases).

  Attributes:
    reduction_axis: the input axis or axes.
    output_axis: the output axis or axes.

  Example:
    >>> import steadax
    >>> steadax.WeightDimensionNumbers(reduction_axis=1, output_axis=2)  # (layers, d_in, d_out)
    WeightDimensionNumbers(reduction_axis=1, output_axis=2)
  """

  reduction_axis: Sequence[int] | int = 0
  output_axis: Sequence[int] | int = 1


class MatrixView(NamedTuple):
  """How a parameter of a given shape is read as a stack of matrices."""

  batch_axes: tuple[int, ...]
  reduction_axes: tuple[int, ...]
  output_axes: tuple[int, ...]
  shape: tuple[int, ...]

  @property
  def fan_in(self) -> int:
    return math.prod(self.shape[a] for a in self.reduction_axes)

  @property
  def fan_out(self) -> int:
    return math.prod(self.shape[a] for a in self.output_axes)

  @property
  def matrix_axes(self) -> tuple[int, ...]:
    return self.reduction_axes + self.output_axes

  @property
  def batch_shape(self) -> tuple[int, ...]:
    return tuple(self.shape[a] for a in self.batch_axes)

  def to_matrices(self, x: jax.Array) -> jax.Array:
    """``x`` as ``(*batch_shape, fan_in, fan_out)``."""
    order = self.batch_axes + self.reduction_axes + self.output_axes
    batch_shape = tuple(self.shape[a] for a in self.batch_axes)
    return x.transpose(order).reshape((*batch_shape, self.fan_in, self.fan_out))

  def from_matrices(self, m: jax.Array) -> jax.Array:
    """The inverse of ``to_matrices``."""
    order = self.batch_axes + self.reduction_axes + self.output_axes
    m = m.reshape(tuple(self.shape[a] for a in order))
    inverse = sorted(range(len(order)), key=lambda i: order[i])
    return m.transpose(inverse)


def _as_tuple(axis: Any) -> tuple[int, ...]:
  return (int(axis),) if isinstance(axis, int) else tuple(int(a) for a in axis)


def matrix_view(owner: str, where: str, shape: tuple[int, ...], dims: Any) -> MatrixView:
  """Validate ``dims`` for a parameter of ``shape`` and return its matrix view.

  Raises:
    ValueError: naming ``owner`` and the parameter's path ``where`` for ranks below 2, axes out of
      range, overlapping axes, or (``allow_batch=False``) axes left out.
  """
  ndim = len(shape)
  if ndim < 2:
    raise ValueError(
        f"{owner}: the parameter at {where} has shape {shape}; dimension numbers need rank >= 2.")
  red, out = _as_tuple(dims.reduction_axis), _as_tuple(dims.output_axis)
  for a in red + out:
    if not -ndim <= a < ndim:
      raise ValueError(f"{owner}: axis {a} of {dims} is out of range for the parameter at {where} "
                       f"with shape {shape}.")
  red = tuple(a % ndim for a in red)
  out = tuple(a % ndim for a in out)
  if set(red) & set(out) or len(set(red)) != len(red) or len(set(out)) != len(out):
    raise ValueError(f"{owner}: reduction and output axes of {dims} must be distinct and disjoint "
                     f"(parameter at {where} with shape {shape}).")
  return MatrixView(tuple(a for a in range(ndim) if a not in set(red) | set(out)), red, out, tuple(shape))


def leaf_dims(owner: str, argname: str, spec: Any, tree: Any, kind: type,
              default: Callable[[Any], Any]) -> list[Any]:
  """One dimension-number record (or None) per leaf of ``tree`` (None leaves included).

  Args:
    owner: the transformation's name, for errors.
    argname: the argument's name, for errors.
    spec: None (``default`` decides per leaf), one record of type ``kind`` (every leaf), a prefix
      tree of records and None, or a callable returning one from ``tree``.
    tree: the updates (``MaskedNode()`` subtrees and None leaves allowed).
    kind: the record class (``WeightDimensionNumbers``, ``QKClipSpec``).
    default: ``leaf -> record | None`` used when ``spec`` is None, or for every leaf with a single
      record given as ``default``'s closure.

  Returns:
    A list aligned with ``jax.tree_util.tree_leaves(tree, is_leaf=lambda x: x is None)``.
  """
  leaves = jax.tree_util.tree_leaves(tree, is_leaf=lambda x: x is None)
  if spec is None:
    return [None if leaf is None else default(leaf) for leaf in leaves]
  if callable(spec):
    spec = spec(tree)
  if isinstance(spec, kind):
    return [None if leaf is None else spec for leaf in leaves]
  spec = align_prefix(owner, argname, spec, tree)
  spec_leaves, spec_def = jax.tree_util.tree_flatten(
      spec, is_leaf=lambda x: x is None or isinstance(x, kind))
  try:
    subtrees = spec_def.flatten_up_to(tree)
  except (ValueError, TypeError) as err:
    raise ValueError(f"{owner}: `{argname}` is not a prefix of the parameters: {err}") from None
  out: list[Any] = []
  for record, sub in zip(spec_leaves, subtrees):
    n = len(jax.tree_util.tree_leaves(sub, is_leaf=lambda x: x is None))
    out.extend([record] * n)
  return out


def leaf_paths(tree: Any) -> list[str]:
  """Readable paths of ``tree``'s leaves (None leaves included), for error messages."""
  return [key_path_str(p) for p, _ in
          jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: x is None)[0]]


def leaf_views(owner: str, spec: Any, tree: Any, default: WeightDimensionNumbers | None = None,
               required: tuple[str, str] | None = None) -> list[MatrixView | None]:
  """Per leaf of ``tree`` (None leaves included), the ``MatrixView`` of its dimension numbers, or
  None (the optimizer's default treatment): a None entry of a tree of specs, a leaf of rank below 2
  given one spec for every leaf, or without ``spec`` every leaf, except the 2-D ones where a
  ``default`` is given (Muon's and GaLore's ``(input, output)`` matrices).

  Raises:
    ValueError: naming ``owner`` and the parameter's path for dimension numbers that do not fit,
      and with ``required = (why, factory)`` for a leaf left without a view: ``why`` it must be a
      matrix, and the ``factory`` that sends such leaves elsewhere.
  """
  leaves = jax.tree_util.tree_leaves(tree, is_leaf=lambda x: x is None)
  paths = leaf_paths(tree)
  if spec is None:
    dims: list = [default if x is not None and len(x.shape) == 2 else None for x in leaves]
  else:
    dims = leaf_dims(owner, "weight_dimension_numbers", spec, tree, WeightDimensionNumbers, lambda x: None)
    if isinstance(spec, WeightDimensionNumbers) and required is None:
      dims = [None if x is None or len(x.shape) < 2 else d for x, d in zip(leaves, dims)]
  for x, d, where in zip(leaves, dims, paths):
    if x is not None and d is None and required is not None:
      raise ValueError(f"{owner}: the parameter at {where} has shape {tuple(x.shape)}; {required[0]}: pass "
                       f"MuonDimensionNumbers for it or optimize it with another transformation ({required[1]}() "
                       f"sends it to AdamW).")
  return [None if x is None or d is None else matrix_view(owner, where, tuple(x.shape), d)
          for x, d, where in zip(leaves, dims, paths)]
