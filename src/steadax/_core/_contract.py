"""The type-stability contract, checked in one place for every transformation steadax builds.

1. ``update`` returns a state with exactly the structure, shapes and dtypes (and no weak types) of
   the state it was given.
2. Updates have, leaf by leaf, the dtype of the corresponding parameter (of the incoming update
   where ``params`` is None).
3. ``init`` returns strongly typed arrays only.

Structure and shape drift always raise. Dtype drift and weak-typed leaves raise in strict mode and
are cast back otherwise. All checks look only at shapes and dtypes, so under ``jit`` they run once,
at trace time, and cost nothing per step.
"""

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any, TypeGuard

import jax
import jax.numpy as jnp
import numpy as np

from ._config import entered, is_strict, mode
from ._policy import compute_dtype, key_path_str

__all__ = ["ContractError", "InputMismatchError", "collect_drift", "conform_init", "conform_state", "conform_updates", "is_weak"]


class ContractError(TypeError):
  """A transformation broke the type-stability contract (names the transformation and path)."""


class InputMismatchError(TypeError, ValueError):
  """The arguments of ``update`` do not belong together: a state from another transformation's
  ``init``, or updates, params and state with different tree structures.

  The message names the transformation (and the wrappers around it, outermost first), the trees
  involved and the paths where they differ.
  """

  def within(self, owner: str) -> "InputMismatchError":
    """The same error with ``owner`` (an enclosing transformation) named in front.

    An error that ``owner``'s own ``update_fn`` raised (its message starts with ``owner``) is
    returned as it is, once.
    """
    if not getattr(self, "_named", False) and str(self.args[0]).startswith(f"{owner}:"):
      self._named = True
      return self
    error = InputMismatchError(f"{owner} > {self.args[0]}")
    error._named = True
    return error


# The contract checker's diagnosis (steadax.testing): strict mode raises on the first drifting leaf,
# which would hide the others and those of later transformations. Inside ``collect_drift`` each
# dtype drift is recorded and cast back instead, so one trace finds them all. The flag is one of the
# switches of ``_config``'s mode, part of the jit cache key like strict mode, so a trace made while
# collecting (drift cast back) never serves a strict call; the records live in a context variable.
_DRIFTS: contextvars.ContextVar[list[ContractError] | None] = contextvars.ContextVar(
    "steadax_contract_drifts", default=None)


@contextlib.contextmanager
def collect_drift() -> Iterator[list[ContractError]]:
  """Within the context, the dtype and weak-type drift that strict mode raises on is appended to
  the yielded list (one ContractError per leaf) and cast back; structure and shape drift still
  raise. For the contract checker, which reports every drifting leaf of every transformation."""
  drifts: list[ContractError] = []
  token = _DRIFTS.set(drifts)
  try:
    with entered(collecting=True):
      yield drifts
  finally:
    _DRIFTS.reset(token)


def _drift(message: str) -> None:
  """Raise the drift ``message`` (strict mode), or record it inside ``collect_drift``."""
  drifts = _DRIFTS.get()
  if drifts is None or not mode().collecting:
    raise ContractError(message)
  drifts.append(ContractError(message))


def is_weak(x: Any) -> bool:
  """Whether ``x`` is weakly typed (a Python scalar or a weak jax value)."""
  if isinstance(x, (bool, int, float, complex)):
    return True
  aval = getattr(x, "aval", None)
  if aval is not None:
    return bool(getattr(aval, "weak_type", False))
  return bool(getattr(x, "weak_type", False))


def _is_array_like(x: Any) -> TypeGuard[Any]:  # narrows a union with Python scalars to Any
  return hasattr(x, "dtype") and hasattr(x, "shape")


def _array_type(x: Any) -> Any:
  """``(shape, dtype, weak_type)`` of a jax value (array or tracer); its type, shape and dtype for
  anything else."""
  aval = getattr(x, "aval", None)
  if aval is None:  # a Python number, a numpy array, or another object: compared as the slow path does
    return (type(x), getattr(x, "shape", None), getattr(x, "dtype", None))
  return (aval.shape, aval.dtype, aval.weak_type)


def _strong(x: Any) -> Any:
  if isinstance(x, (bool, int, float, complex)):
    x = jnp.asarray(x)
  if _is_array_like(x) and is_weak(x):
    return x.astype(x.dtype)
  return x


def _structure_mismatch(owner: str, what: str, expected: Any, got: Any) -> ContractError:
  exp_paths = [key_path_str(p) for p, _ in jax.tree_util.tree_flatten_with_path(expected)[0]]
  got_paths = [key_path_str(p) for p, _ in jax.tree_util.tree_flatten_with_path(got)[0]]
  missing = [p for p in exp_paths if p not in set(got_paths)]
  extra = [p for p in got_paths if p not in set(exp_paths)]
  detail = []
  if missing:
    detail.append(f"missing {missing[:5]}")
  if extra:
    detail.append(f"unexpected {extra[:5]}")
  if not detail:
    detail.append(
        f"expected structure {jax.tree_util.tree_structure(expected)}, "
        f"got {jax.tree_util.tree_structure(got)}"
    )
  return ContractError(f"{owner}: {what} changed structure: " + "; ".join(detail))


def conform_init(owner: str, state: Any) -> Any:
  """Check (strict) or normalise the leaves of a freshly initialised state: strong arrays only."""
  def fix(path, leaf):
    if isinstance(leaf, (bool, int, float, complex)) or (_is_array_like(leaf) and is_weak(leaf)):
      if is_strict():
        raise ContractError(
            f"{owner}: init produced a weakly typed state leaf at {key_path_str(path)} "
            f"({type(leaf).__name__}); state leaves must be strongly typed arrays."
        )
      return _strong(leaf)
    return leaf

  return jax.tree_util.tree_map_with_path(fix, state)


def conform_state(owner: str, old_state: Any, new_state: Any) -> Any:
  """Return ``new_state`` with exactly the types of ``old_state`` or raise a ContractError."""
  old_leaves, old_def = jax.tree_util.tree_flatten(old_state)
  new_leaves, new_def = jax.tree_util.tree_flatten(new_state)
  if old_def != new_def:
    raise _structure_mismatch(owner, "state", old_state, new_state)
  if all(type(new) is type(old) and _array_type(new) == _array_type(old)
         for old, new in zip(old_leaves, new_leaves)):
    return new_state  # every leaf as it was: the common case, checked without the detail below
  fixed = []
  paths = None
  for i, (old, new) in enumerate(zip(old_leaves, new_leaves)):
    if not _is_array_like(old) and not isinstance(old, (int, float, complex)):
      fixed.append(new)
      continue
    old_shape, new_shape = np.shape(old), np.shape(new)
    old_dtype = jnp.result_type(old) if not _is_array_like(old) else old.dtype
    new_dtype = jnp.result_type(new) if not _is_array_like(new) else new.dtype
    old_weak = False if _is_array_like(old) and not is_weak(old) else is_weak(old)
    bad_dtype = old_dtype != new_dtype
    bad_weak = is_weak(new) and not old_weak
    if old_shape != new_shape or bad_dtype or bad_weak:
      if paths is None:
        paths = [key_path_str(p) for p, _ in jax.tree_util.tree_flatten_with_path(old_state)[0]]
      where = paths[i]
      if old_shape != new_shape:
        raise ContractError(
            f"{owner}: state leaf at {where} changed shape from {old_shape} to {new_shape}."
        )
      if is_strict():
        change = (
            f"dtype from {np.dtype(old_dtype).name} to {np.dtype(new_dtype).name}"
            if bad_dtype
            else f"to a weak type ({np.dtype(new_dtype).name})"
        )
        _drift(f"{owner}: state leaf at {where} changed {change}.")
      new = jnp.asarray(new).astype(old_dtype)
    fixed.append(new)
  return jax.tree_util.tree_unflatten(new_def, fixed)


def conform_updates(owner: str, old_updates: Any, params: Any, new_updates: Any) -> Any:
  """Check the updates' structure and shapes and give each leaf its parameter's dtype."""
  if old_updates is None and new_updates is None:
    return None  # no updates at all, whatever the params: nothing to check or cast
  old_leaves, old_def = jax.tree_util.tree_flatten(old_updates)
  new_leaves, new_def = jax.tree_util.tree_flatten(new_updates)
  if old_def != new_def:
    raise _structure_mismatch(owner, "updates", old_updates, new_updates)
  ref_leaves = old_leaves
  if params is not None:
    param_leaves, param_def = jax.tree_util.tree_flatten(params)
    if param_def != old_def:
      raise _structure_mismatch(owner, "params (compared with the updates)", old_updates, params)
    ref_leaves = param_leaves
  if all(isinstance(new, jax.Array) and isinstance(ref, jax.Array) and isinstance(old, jax.Array)
         and _array_type(new) == (old.shape, ref.dtype, False)
         for ref, old, new in zip(ref_leaves, old_leaves, new_leaves)):
    return new_updates  # each leaf strong, in its parameter's dtype and the incoming shape
  fixed = []
  for i, (ref, old, new) in enumerate(zip(ref_leaves, old_leaves, new_leaves)):
    if not _is_array_like(new):
      fixed.append(new)
      continue
    if np.shape(new) != np.shape(old):
      where = key_path_str(jax.tree_util.tree_flatten_with_path(old_updates)[0][i][0])
      raise ContractError(
          f"{owner}: update at {where} has shape {np.shape(new)}, expected {np.shape(old)}."
      )
    if new.dtype == jax.dtypes.float0:
      # A float0 update (``jax.grad(..., allow_int=True)`` of an integer parameter) passed through:
      # it carries no value to cast, and apply_updates leaves its parameter unchanged.
      fixed.append(new)
      continue
    target = np.dtype(ref.dtype if _is_array_like(ref) else jnp.result_type(ref))
    if new.dtype != target or is_weak(new):
      incoming = np.dtype(old.dtype) if _is_array_like(old) else target
      if jnp.issubdtype(new.dtype, jnp.complexfloating) and not jnp.issubdtype(target, jnp.complexfloating):
        where = key_path_str(jax.tree_util.tree_flatten_with_path(old_updates)[0][i][0])
        raise ContractError(
            f"{owner}: update at {where} is complex ({new.dtype.name}) for a real parameter "
            f"({target.name}); the imaginary part would be lost."
        )
      # The documented casts: to the parameter's dtype from the incoming update's dtype (a
      # transformation that keeps its input's dtype) or from their compute dtype (one that computed
      # in at least float32). Anything else is a dtype the transformation had no reason to produce.
      allowed = {target, incoming, np.dtype(compute_dtype(incoming, target))}
      if is_strict() and np.dtype(new.dtype) not in allowed and jnp.issubdtype(target, jnp.inexact):
        where = key_path_str(jax.tree_util.tree_flatten_with_path(old_updates)[0][i][0])
        _drift(
            f"{owner}: update at {where} came back as {np.dtype(new.dtype).name}; expected "
            f"{target.name} (the parameter's), {incoming.name} (the incoming update's) or their "
            "compute dtype."
        )
      new = new.astype(target)
    fixed.append(new)
  return jax.tree_util.tree_unflatten(new_def, fixed)
