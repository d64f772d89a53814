"""Comparing the types of two trees: what ``check_transformation`` and the conformance suite report.

``type_differences(expected, got)`` lists every leaf of ``got`` whose structure, shape, dtype or
weak type differs from ``expected``'s (a state after a step against the state before it);
``update_type_differences(params, updates)`` every update that lacks its parameter's shape or dtype
(the contract's rule 2). Each difference is a ``(path, message)`` pair, so a test can assert on the
whole list and show every leaf at fault at once.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._core._policy import key_path_str
from .._core._types import ArrayTree, Params, Updates

__all__ = ["non_finite", "type_differences", "type_signature", "update_type_differences", "weak_leaves"]


def type_signature(tree: Params) -> tuple[Any, list[tuple[str, tuple, Any, bool]]]:
  """The types of a tree of arrays or abstract values.

  Args:
    tree: a pytree of arrays, ``jax.ShapeDtypeStruct`` values or Python scalars.

  Returns:
    ``(treedef, [(path, shape, dtype, weak_type), ...])``, one entry per leaf.

  Example:
    >>> import jax.numpy as jnp
    >>> from steadax.testing import type_signature
    >>> type_signature({"w": jnp.zeros(2)})[1]
    [("['w']", (2,), dtype('float32'), False)]
  """
  leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
  return treedef, [_leaf_type(path, leaf) for path, leaf in leaves]


def _leaf_type(path: Any, leaf: Any) -> tuple[str, tuple, Any, bool]:
  if isinstance(leaf, (bool, int, float, complex)):
    # A Python scalar in a state is weakly typed: it takes its dtype from whatever meets it.
    return key_path_str(path), (), jnp.result_type(leaf), True
  aval = getattr(leaf, "aval", None)
  weak = bool(getattr(aval, "weak_type", getattr(leaf, "weak_type", False)))
  # leaf.dtype itself, not np.dtype(...): typed PRNG keys have no numpy dtype.
  return key_path_str(path), tuple(np.shape(leaf)), leaf.dtype, weak


def _dtype_name(dtype: Any) -> str:
  return getattr(dtype, "name", str(dtype))


def _describe(shape: tuple, dtype: Any, weak: bool) -> str:
  return f"{_dtype_name(dtype)}{list(shape)}" + (" (weak)" if weak else "")


def type_differences(expected: ArrayTree, got: ArrayTree, what: str = "the tree") -> list[tuple[str, str]]:
  """Every leaf of ``got`` whose type differs from ``expected``'s: the type-stability check.

  The two trees must have the same structure and, leaf by leaf, the same shape, the same dtype, and
  no weak type where ``expected`` has a strong one: what ``lax.scan`` demands of its carry and what
  steadax's contract demands of a state from one step to the next. Values are not compared.

  Args:
    expected: a tree of arrays, ``jax.ShapeDtypeStruct`` values or Python scalars (the state before
      a step, the types a test expects).
    got: the tree to compare (the state after the step).
    what: what ``got`` is, said at the start of each message (``"state after one update"``).

  Returns:
    ``(path, message)`` for each difference, in leaf order: an empty list when the types agree.
    A different structure gives one entry per missing or unexpected leaf (or one for the root).

  Example:
    >>> import jax.numpy as jnp
    >>> from steadax.testing import type_differences
    >>> state = {"mu": jnp.zeros(2), "count": jnp.zeros([], jnp.int32)}
    >>> type_differences(state, {"mu": jnp.zeros(2, jnp.bfloat16), "count": jnp.zeros([], jnp.int32)},
    ...                  "state after one update")
    [("['mu']", 'state after one update: dtype changed from float32 to bfloat16')]
    >>> type_differences(state, state)
    []
  """
  exp_def, exp_sig = type_signature(expected)
  got_def, got_sig = type_signature(got)
  problems = []
  if exp_def != got_def:
    exp_paths = [s[0] for s in exp_sig]
    got_paths = [s[0] for s in got_sig]
    missing = [p for p in exp_paths if p not in set(got_paths)]
    extra = [p for p in got_paths if p not in set(exp_paths)]
    problems += [(p, f"{what}: leaf missing (the structure changed)") for p in missing]
    problems += [(p, f"{what}: unexpected leaf (the structure changed)") for p in extra]
    if not problems:
      problems.append(("<root>", f"{what}: structure changed from {exp_def} to {got_def}"))
    return problems
  for (path, e_shape, e_dtype, e_weak), (_, g_shape, g_dtype, g_weak) in zip(exp_sig, got_sig):
    if e_shape != g_shape:
      problems.append((path, f"{what}: shape changed from {e_shape} to {g_shape}"))
    elif e_dtype != g_dtype:
      problems.append((path, f"{what}: dtype changed from {_dtype_name(e_dtype)} to "
                             f"{_dtype_name(g_dtype)}"))
    elif g_weak and not e_weak:
      problems.append((path, f"{what}: became weakly typed ({_dtype_name(g_dtype)})"))
  return problems


def update_type_differences(params: Params | None, updates: Updates, what: str = "the updates", *,
                            incoming: Updates | None = None) -> list[tuple[str, str]]:
  """Every update leaf without its parameter's shape and dtype: the contract's rule 2.

  Each update must have its parameter's shape and dtype (mixed-precision trees stay mixed), or,
  when there are no parameters, the incoming update's. A ``float0`` update (the tangent of an
  integer parameter) carries no value and is not compared.

  Args:
    params: the parameters, or None to compare with ``incoming``.
    updates: the updates a transformation returned.
    what: what ``updates`` are, said at the start of each message.
    incoming: the updates the transformation was given (the reference when ``params`` is None).

  Returns:
    ``(path, message)`` for each difference: an empty list when every update conforms. Updates of
    another tree structure give one entry for the root.

  Example:
    >>> import jax.numpy as jnp
    >>> from steadax.testing import update_type_differences
    >>> params = {"w": jnp.ones(2, jnp.bfloat16), "b": jnp.ones(3)}
    >>> update_type_differences(params, {"w": jnp.ones(2), "b": jnp.ones(3)})
    [("['w']", 'the updates: dtype float32 for a parameter of dtype bfloat16')]
  """
  reference = incoming if params is None else params
  problems = _structure_only(reference, updates, what)
  if problems:
    return problems
  ref_paths = jax.tree_util.tree_flatten_with_path(reference)[0]
  for (path, ref), upd in zip(ref_paths, jax.tree_util.tree_leaves(updates)):
    if upd.dtype == jax.dtypes.float0:
      continue  # the tangent of an integer parameter: no value to type
    ref_dtype = getattr(ref, "dtype", None) or jnp.result_type(ref)
    if tuple(np.shape(upd)) != tuple(np.shape(ref)):
      problems.append((key_path_str(path), f"{what}: shape {tuple(np.shape(upd))} for a parameter "
                                           f"of shape {tuple(np.shape(ref))}"))
    elif upd.dtype != ref_dtype:
      owner = "an incoming update" if params is None else "a parameter"
      problems.append((key_path_str(path), f"{what}: dtype {_dtype_name(upd.dtype)} for {owner} "
                                           f"of dtype {_dtype_name(ref_dtype)}"))
  return problems


def _structure_only(reference: Any, got: Any, what: str) -> list[tuple[str, str]]:
  ref_def = jax.tree_util.tree_structure(reference)
  got_def = jax.tree_util.tree_structure(got)
  if ref_def == got_def:
    return []
  return [("<root>", f"{what}: structure {got_def} differs from the parameters' {ref_def}")]


def weak_leaves(tree: Any, what: str) -> list[tuple[str, str]]:
  """``(path, message)`` for each weakly typed leaf of a fresh state."""
  return [(path, f"{what}: weakly typed leaf {_describe(shape, dtype, weak)}; state leaves must be "
                 "strongly typed arrays (a weak type drifts at the first step)")
          for path, shape, dtype, weak in type_signature(tree)[1] if weak]


def non_finite(tree: Any, what: str) -> list[tuple[str, str]]:
  """``(path, message)`` for each floating leaf of a concrete tree holding a NaN or infinity."""
  problems = []
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    dtype = getattr(leaf, "dtype", None)
    if dtype is None or not jnp.issubdtype(dtype, jnp.inexact):
      continue
    values = np.asarray(leaf)
    if values.dtype.itemsize <= 2 and not jnp.issubdtype(dtype, jnp.complexfloating):
      values = values.astype(np.float32)  # bfloat16/float16 through numpy, not a compiled cast
    if not np.all(np.isfinite(values)):
      problems.append((key_path_str(path), f"{what}: non-finite values"))
  return problems
