"""Declared roles of state fields: what each field of a state record is, and so its dtype.

A state record (a NamedTuple with Optax's field names) declares the role of every field with
``@state_roles``:

    @state_roles(count=COUNTER, mu=accumulator("mu_dtype"), nu=accumulator("nu_dtype", real=True))
    class ScaleByAdamState(NamedTuple):
      count: jax.Array
      mu: Any
      nu: Any

The roles are the dtype policy written once (DESIGN.md):

* ``COUNTER``: an int32 scalar, in both x64 modes.
* ``accumulator(dtype_field, real=False, wide=False)``: a tree mirroring the parameters. Its dtype
  is the transformation's ``dtype_field`` attribute when set, else the parameter's; ``real`` takes
  the real part for complex parameters (second moments); ``wide`` stores at least float32
  (statistics scaled by a learning-rate-free estimate such as Prodigy's ``d``, which underflow or
  overflow in 16 bits).
* ``SCALAR``: a scalar statistic in one dtype fixed at init: the widest floating dtype among the
  parameters, at least float32.
* ``INNER``: an inner transformation's state (checked by that transformation's own contract).
* ``OTHER``: anything else (a PRNG key, a flag, injected hyperparameters): checked for drift only.

``Transformation.init`` checks the state its ``init_fn`` built against the roles (a dtype that is
wrong from the first step raises a ContractError naming the field and path, not only later drift),
and ``init_from_roles`` builds the whole state when every field is a counter, an accumulator or a
scalar.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._contract import ContractError
from ._policy import COUNTER_DTYPE, accumulator_dtype, key_path_str, promote_types, scalar_stat_dtype
from ._tree import array_leaf, tree_map, zeros_mirroring

__all__ = [
    "Role",
    "COUNTER",
    "SCALAR",
    "INNER",
    "OTHER",
    "accumulator",
    "state_roles",
    "roles_of",
    "init_from_roles",
    "role_zeros",
    "check_roles",
]


@dataclasses.dataclass(frozen=True)
class Role:
  """The role of one state field (see the module docstring)."""

  kind: str
  dtype_field: str | None = None
  real: bool = False
  wide: bool = False

  def leaf_dtype(self, param_dtype: Any, tx: Any) -> np.dtype:
    """The dtype of this accumulator's leaf for a parameter of ``param_dtype``."""
    override = getattr(tx, self.dtype_field, None) if self.dtype_field else None
    dtype = accumulator_dtype(param_dtype, override, real=self.real)
    if self.wide and jnp.issubdtype(dtype, jnp.floating):
      dtype = promote_types(dtype, jnp.float32)
    if self.wide and jnp.issubdtype(dtype, jnp.complexfloating):
      dtype = promote_types(dtype, jnp.complex64)
    return np.dtype(dtype)


COUNTER = Role("counter")
SCALAR = Role("scalar")
INNER = Role("inner")
OTHER = Role("other")


def accumulator(dtype_field: str | None = None, *, real: bool = False, wide: bool = False) -> Role:
  """The role of a per-parameter accumulator.

  Args:
    dtype_field: the transformation's attribute holding an explicit dtype (``"mu_dtype"``), or None.
    real: real-valued statistic (complex parameters give their real dtype).
    wide: stored in at least float32.

  Returns:
    A Role.

  Example:
    >>> accumulator("mu_dtype").kind
    'accumulator'
  """
  return Role("accumulator", dtype_field, real, wide)


def state_roles(**roles: Role):
  """Class decorator declaring the role of every field of a state NamedTuple.

  Args:
    **roles: one Role per field, by field name.

  Returns:
    The decorator.

  Example:
    >>> from typing import NamedTuple
    >>> @state_roles(count=COUNTER)
    ... class CountState(NamedTuple):
    ...   count: jax.Array
    >>> roles_of(CountState)["count"].kind
    'counter'
  """
  def decorate(cls):
    fields = tuple(getattr(cls, "_fields", ()))
    if set(fields) != set(roles):
      raise TypeError(
          f"{cls.__name__}: state_roles must name every field exactly once; fields {fields}, "
          f"roles {tuple(roles)}."
      )
    cls.__state_roles__ = dict(roles)
    return cls

  return decorate


def roles_of(cls: Any) -> dict | None:
  """The declared roles of a state class (None when it declares none)."""
  return getattr(cls, "__state_roles__", None)


def declared_roles(cls: Any) -> dict:
  """The declared roles of a state class; a ``TypeError`` names a class that declares none."""
  roles = roles_of(cls)
  if roles is None:
    raise TypeError(f"{getattr(cls, '__qualname__', cls)} declares no state roles (use @state_roles).")
  return roles


def role_zeros(params: Any, role: Role, tx: Any) -> Any:
  """Zeros mirroring ``params`` (shape and sharding), each leaf in the dtype ``role`` gives it.

  ``zeros_like`` (``_core/_tree.py``) with the role's dtype rule: both build every leaf with
  ``zeros_mirroring``, the one constructor of parameter-shaped state.
  """
  def make(x):
    x = array_leaf(x)
    return zeros_mirroring(x, role.leaf_dtype(x.dtype, tx))

  return tree_map(make, params)


def init_from_roles(state_cls: Any, tx: Any, params: Any) -> Any:
  """Build a fresh state from its roles: zero counters, zero accumulators, zero scalars.

  Args:
    state_cls: a state NamedTuple class decorated with ``state_roles``.
    tx: the transformation (its ``dtype_field`` attributes give explicit dtypes).
    params: the parameters (arrays or ShapeDtypeStructs).

  Returns:
    An instance of ``state_cls``.
  """
  roles = declared_roles(state_cls)
  values = {}
  for name in state_cls._fields:
    role = roles[name]
    if role.kind == "counter":
      values[name] = jnp.zeros([], COUNTER_DTYPE)
    elif role.kind == "accumulator":
      values[name] = role_zeros(params, role, tx)
    elif role.kind == "scalar":
      values[name] = jnp.zeros([], scalar_stat_dtype(params))
    else:
      raise TypeError(f"{state_cls.__name__}.{name}: a {role.kind} field needs a hand-written init.")
  return state_cls(**values)


def check_roles(owner: str, tx: Any, state: Any, params: Any) -> None:
  """Raise a ContractError if a fresh ``state`` disagrees with its declared roles.

  Only a record of the transformation's own ``State`` class is checked: a wrapper that returns its
  inner transformation's record (``flatten`` builds it on the raveled parameters) is not checked
  against its own parameters; records without roles are not checked.
  """
  roles = roles_of(type(state))
  if roles is None:
    return
  for name in type(state)._fields:
    role, value = roles[name], getattr(state, name)
    where = f"{type(state).__name__}.{name}"
    if role.kind == "counter":
      if np.shape(value) != () or np.dtype(value.dtype) != np.dtype(COUNTER_DTYPE):
        raise ContractError(
            f"{owner}: {where} is a counter: expected an int32 scalar, got "
            f"{np.dtype(value.dtype).name}{list(np.shape(value))}."
        )
    elif role.kind == "scalar":
      want = scalar_stat_dtype(params)
      if np.shape(value) != () or np.dtype(value.dtype) != want:
        raise ContractError(
            f"{owner}: {where} is a scalar statistic: expected a {want.name} scalar (the widest "
            f"parameter dtype, at least float32), got {np.dtype(value.dtype).name}"
            f"{list(np.shape(value))}."
        )
    elif role.kind == "accumulator" and not _none_held(value):
      _check_accumulator(owner, tx, where, role, value, params)


def _none_held(value: Any) -> bool:
  """An accumulator field may hold nothing: ``None`` or ``()`` (MultiSteps with k=1 keeps no
  accumulator; a line search stores its gradient only when asked). Drift is still checked."""
  return value is None or (isinstance(value, tuple) and not hasattr(value, "_fields") and not value)


def _check_accumulator(owner: str, tx: Any, where: str, role: Role, value: Any, params: Any) -> None:
  is_none = lambda x: x is None  # noqa: E731
  try:
    treedef = jax.tree_util.tree_structure(params, is_leaf=is_none)
    leaves = treedef.flatten_up_to(value)
  except (ValueError, TypeError) as e:
    raise ContractError(f"{owner}: {where} must mirror the parameters' structure ({e}).") from None
  paths = jax.tree_util.tree_flatten_with_path(params, is_leaf=is_none)[0]
  for (path, p), leaf in zip(paths, leaves):
    if p is None or leaf is None:
      continue
    want = role.leaf_dtype(p.dtype, tx)
    if np.shape(leaf) != np.shape(p) or np.dtype(leaf.dtype) != want:
      raise ContractError(
          f"{owner}: {where} at {key_path_str(path)}: expected {want.name}{list(np.shape(p))} "
          f"for a {np.dtype(p.dtype).name} parameter, got {np.dtype(leaf.dtype).name}"
          f"{list(np.shape(leaf))}."
      )
