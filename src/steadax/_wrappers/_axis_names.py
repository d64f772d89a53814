"""Dimension numbers from the axis names a model already carries (stacked layers, sharding).

Large models keep each weight of a layer stack as one array, ``(layers, d_in, d_out)``, and the
frameworks that stack them record the stacked axis by name in the parameter's metadata: Flax NNX's
``nnx.vmap``/``nnx.scan`` with ``transform_metadata={nnx.PARTITION_NAME: "layers"}`` insert
``"layers"`` into each ``Variable``'s ``out_sharding`` at the stacked position, and Linen's
``nn.scan(..., metadata_params={nn.PARTITION_NAME: "layers"})`` into ``nn.Partitioned.names``.
``dimension_numbers_from`` reads those names and returns the ``weight_dimension_numbers`` tree of
the matrix optimizers, so that nobody writes it leaf by leaf.

Both frameworks record the axis only where the parameter has names (``nnx.with_partitioning``,
``nn.with_partitioning`` / ``nn.with_logical_partitioning``): an unannotated parameter of a stacked
module looks unstacked. ``stacked`` covers those (and models without metadata, such as an Equinox
stack built with ``eqx.filter_vmap``) by path.
"""

import fnmatch
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from .._core._policy import key_path_str
from .._core._tree import is_variable
from .._core._types import Params, PyTree
from ._groups import dotted_path
from ..transforms._axes import WeightDimensionNumbers, matrix_view

__all__ = ["dimension_numbers_from"]

_OWNER = "dimension_numbers_from"


def _is_box(x: Any) -> bool:
  """A Linen metadata box (``nn.Partitioned``, ``nn.LogicallyPartitioned``): names and a value."""
  return hasattr(x, "names") and callable(getattr(x, "unbox", None)) and hasattr(x, "value")


def _is_param(x: Any) -> bool:
  return x is None or is_variable(x) or _is_box(x)


def _value(x: Any) -> Any:
  if is_variable(x):
    return x.get_value()
  return x.value if _is_box(x) else x


def _metadata_names(x: Any) -> Any:
  """The axis names a parameter carries (None: it carries none)."""
  if is_variable(x) and callable(getattr(x, "get_metadata", None)):
    metadata = x.get_metadata()
    return metadata.get("out_sharding") or metadata.get("sharding_names") or metadata.get("sharding")
  if _is_box(x):
    return x.names
  return None


def _first_match(patterns: Mapping[str, Any] | None, path: str) -> tuple[bool, Any]:
  """``(True, value)`` of the first pattern (``fnmatch``, ``|`` between alternatives) that matches
  ``path``, ``(False, None)`` if none does: the rule of ``steadax.groups``."""
  for pattern, value in (patterns or {}).items():
    if any(fnmatch.fnmatchcase(path, alternative) for alternative in pattern.split("|")):
      return True, value
  return False, None


def _is_batch(name: Any, batch: frozenset) -> bool:
  """Whether one entry of a names tuple (a name, None, or a tuple of mesh axes) names a batch axis."""
  if isinstance(name, tuple):
    return any(n in batch for n in name)
  return isinstance(name, str) and name in batch


def _from_remaining(remaining: list[int]) -> WeightDimensionNumbers | None:
  """The rule: fewer than two axes is not a matrix; the first axis left is the reduction axis, the
  others the output axes (an attention projection ``(embed, heads, head_dim)``)."""
  if len(remaining) < 2:
    return None
  return WeightDimensionNumbers(reduction_axis=remaining[0],
                                output_axis=remaining[1] if len(remaining) == 2 else tuple(remaining[1:]))


def _names_tree_leaves(axis_names: Any, params: Any) -> list[Any]:
  """``axis_names`` aligned with ``params``' parameters: one names tuple (or None) per parameter."""
  treedef = jax.tree_util.tree_structure(params, is_leaf=_is_param)
  try:
    entries = treedef.flatten_up_to(axis_names)
  except (ValueError, TypeError) as err:
    raise ValueError(f"{_OWNER}: `axis_names` does not have the parameters' structure: {err}") from None
  return [_value(e) if is_variable(e) else e for e in entries]


def dimension_numbers_from(
    params: Params,
    *,
    batch_axes: str | Sequence[str] = (),
    axis_names: PyTree | None = None,
    stacked: Mapping[str, int] | None = None,
    override: Mapping[str, WeightDimensionNumbers | None] | None = None,
) -> PyTree:
  """The ``weight_dimension_numbers`` of a model, read from its axis names: stacked layers in one call.

  Each parameter's axes are named by its framework's metadata (an NNX ``Variable``'s
  ``out_sharding``, a Linen ``nn.Partitioned``'s ``names``) or by ``axis_names``. Axes whose name
  is in ``batch_axes`` become batch axes (each slice a separate matrix, with its own statistics);
  of the other axes, in order:

  * fewer than two: not a matrix (None; Muon gives it to AdamW, the others treat it elementwise);
  * two: the first is the reduction (input) axis, the second the output axis (``y = x @ W``);
  * more than two: the first is the reduction axis, all the others output axes, as in an attention
    projection ``(embed, heads, head_dim)``. Where that is wrong (an output projection
    ``(heads, head_dim, embed)``, a convolution's ``(h, w, in, out)``), ``override`` says so.

  A parameter with no names is read by ``stacked`` (its leading axes are batch axes) or as
  unstacked. Both frameworks record the stacked axis only in parameters created with names
  (``nnx.with_partitioning``; ``nn.with_partitioning`` or ``nn.with_logical_partitioning``): give
  every parameter of a stacked module names, or list its path in ``stacked``.

  Compute the tree once, from the model, and pass the tree to the optimizer. It is a prefix of the
  parameters as every client gives them to the optimizer: ``nnx.Optimizer(model, tx, wrt=nnx.Param)``
  (an ``nnx.State`` of ``Param`` variables at ``init``, of plain arrays at ``update``), a Linen
  ``TrainState`` with boxed or ``nn.unbox``-ed parameters, plain arrays. Do not pass this function
  itself as the callable form of ``weight_dimension_numbers``: at ``update`` the parameters come
  without their metadata.

  Args:
    params: the parameters: an ``nnx.State`` (``nnx.state(model, nnx.Param)``) or an NNX module
      (its ``nnx.Param`` state is read), Linen parameters with metadata boxes, or any tree of
      arrays (with ``axis_names`` or ``stacked``). ``jax.ShapeDtypeStruct`` leaves work too.
    batch_axes: the axis names that are batch axes (``"layers"``, or several: ``("layers",
      "experts")``). A names entry that is a tuple of mesh axes is a batch axis if any of them is.
    axis_names: for parameters without metadata, a tree with ``params``' structure whose leaves
      are tuples of axis names (a ``jax.sharding.PartitionSpec`` tree, such as
      ``nn.get_partition_spec(params)``; a tuple shorter than the rank names the leading axes). An
      empty tuple (Linen's ``PartitionSpec()`` for an unannotated parameter) names nothing.
      Metadata wins where both are given.
    stacked: ``{path pattern: k}``: a parameter without names whose path matches has ``k`` leading
      batch axes (``{"blocks.*": 1}`` for an Equinox stack). Paths and patterns as in
      ``steadax.groups`` (``dotted_path``, ``fnmatch``, ``|`` between alternatives; the first
      matching pattern wins).
    override: ``{path pattern: WeightDimensionNumbers or None}``, applied last: the dimension
      numbers of every matching parameter (axes counted over its full shape, batch axes included),
      or None to keep it out of the matrices (``{"embed*|head*": None}``: Muon's authors give the
      embedding and the output layer to AdamW). Negative axes count from the end, whatever the
      stack: Equinox's ``Linear`` keeps its weight as ``(out, in)``, so
      ``{"*.weight": WeightDimensionNumbers(reduction_axis=-1, output_axis=-2)}``.

  Returns:
    A tree with ``params``' structure down to each parameter (a ``Variable`` or box counts as one),
    holding a ``WeightDimensionNumbers`` or None per parameter: the ``weight_dimension_numbers``
    (Muon: ``muon_weight_dimension_numbers``) of the matrix optimizers.

  Raises:
    ValueError: naming the parameter's path, when ``axis_names`` does not have ``params``'
      structure, a names tuple is longer than the parameter's rank, or an ``override`` or
      ``stacked`` entry does not fit the parameter's shape.
    TypeError: for a ``stacked`` value that is not a non-negative int, or an ``override`` value
      that is neither ``WeightDimensionNumbers`` nor None.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> from flax import nnx
    >>> class Block(nnx.Module):
    ...   def __init__(self, rngs):
    ...     init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ("embed", "mlp"))
    ...     self.up = nnx.Linear(8, 16, kernel_init=init, use_bias=False, rngs=rngs)
    ...   def __call__(self, x):
    ...     return jax.nn.relu(self.up(x)).sum(-1, keepdims=True) + x
    >>> @nnx.split_rngs(splits=4)
    ... @nnx.vmap(in_axes=(0,), out_axes=0, transform_metadata={nnx.PARTITION_NAME: "layers"})
    ... def stack(rngs):
    ...   return Block(rngs)
    >>> with nnx.use_eager_sharding(False):   # names as metadata only (no mesh here)
    ...   blocks = stack(nnx.Rngs(0))
    >>> dims = steadax.dimension_numbers_from(nnx.state(blocks, nnx.Param), batch_axes="layers")
    >>> dims["up"]["kernel"]   # (layers, embed, mlp): one 8x16 matrix per layer
    WeightDimensionNumbers(reduction_axis=1, output_axis=2)
    >>> tx = steadax.contrib.muon(1e-2, muon_weight_dimension_numbers=dims)
    >>> optimizer = nnx.Optimizer(blocks, tx, wrt=nnx.Param)

    Plain arrays, the stacked axis said by path:

    >>> params = {"blocks": {"w": jnp.ones((4, 8, 16)), "b": jnp.ones((4, 16))}, "head": jnp.ones((8, 2))}
    >>> steadax.dimension_numbers_from(params, stacked={"blocks.*": 1})
    {'blocks': {'b': None, 'w': WeightDimensionNumbers(reduction_axis=1, output_axis=2)}, 'head': WeightDimensionNumbers(reduction_axis=0, output_axis=1)}

  References:
    Flax, "Scale up on multiple devices" and ``nnx.PARTITION_NAME``
    (https://flax.readthedocs.io/en/latest/guides/flax_gspmd.html); Optax's
    ``MuonDimensionNumbers`` (``optax.contrib.muon``).
  """
  nnx = sys.modules.get("flax.nnx")  # loaded wherever an NNX module exists: nothing to import
  if nnx is not None and isinstance(params, nnx.Module):
    params = nnx.state(params, nnx.Param)
  batch = frozenset((batch_axes,) if isinstance(batch_axes, str) else batch_axes)
  for value in (stacked or {}).values():
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
      raise TypeError(f"{_OWNER}: `stacked` maps path patterns to a count of leading batch axes "
                      f"(an int >= 0), got {value!r}.")
  for value in (override or {}).values():
    if value is not None and not isinstance(value, WeightDimensionNumbers):
      raise TypeError(f"{_OWNER}: `override` maps path patterns to WeightDimensionNumbers or None, "
                      f"got {value!r}.")

  with_paths, treedef = jax.tree_util.tree_flatten_with_path(params, is_leaf=_is_param)
  given = ([None] * len(with_paths) if axis_names is None
           else _names_tree_leaves(axis_names, params))
  out = []
  for (key_path, leaf), extra_names in zip(with_paths, given):
    out.append(None if leaf is None else _one(key_path, leaf, extra_names, batch, stacked, override))
  return jax.tree_util.tree_unflatten(treedef, out)


def _one(key_path: Any, leaf: Any, extra_names: Any, batch: frozenset,
         stacked: Mapping[str, int] | None, override: Mapping[str, Any] | None) -> Any:
  """The dimension numbers of one parameter (see ``dimension_numbers_from``)."""
  path = dotted_path(key_path)
  where = key_path_str(key_path) or "the root"
  value = _value(leaf)
  shape = tuple(value.shape) if hasattr(value, "shape") else np.shape(value)
  matched, dims = _first_match(override, path)
  if matched:
    if dims is not None:
      matrix_view(_OWNER, where, shape, dims)  # the error names the path
    return dims
  names = _metadata_names(leaf)
  if not names and extra_names:
    names = tuple(extra_names)
  if names:
    names = tuple(names)
    if len(names) > len(shape):
      raise ValueError(f"{_OWNER}: the parameter at {where} has shape {shape} but {len(names)} axis "
                       f"names {names}.")
    is_batch = [_is_batch(n, batch) for n in names] + [False] * (len(shape) - len(names))
  else:
    matched, leading = _first_match(stacked, path)
    leading = leading if matched else 0
    if leading > len(shape):
      raise ValueError(f"{_OWNER}: `stacked` gives the parameter at {where} (shape {shape}) "
                       f"{leading} leading batch axes; it has {len(shape)} axes.")
    is_batch = [a < leading for a in range(len(shape))]
  return _from_remaining([a for a in range(len(shape)) if not is_batch[a]])
