"""``Transformation``: the base of every transformation steadax builds, run under the contract.

A subclass writes ``init_fn`` and ``update_fn``; ``init`` and ``update`` wrap them with the
parameter checks, the state roles, the contract (``_contract.py``) and, when a call fails on trees
that do not belong together, the diagnosis (``_diagnosis.py``).
"""

from collections.abc import Callable
from typing import Any, ClassVar

import jax

from ._containers import in_init_containers
from ._contract import ContractError, InputMismatchError, conform_init, conform_state, conform_updates
from ._diagnosis import diagnose_update, input_shape_mismatch, short_repr
from ._interface import EmptyState, GradientTransformationExtraArgs
from ._leafwise import leafwise
from ._policy import check_float_params, key_path_str
from ._roles import check_roles, init_from_roles, roles_of
from ._tree import PYTHON_NUMBERS, number_as_array, param_array, tree_map, unwrap_unlike_variables
from ._types import OptState, Params, Updates

__all__ = ["Transformation", "register_parameter_check"]

# Checks of the parameters that a layer above the core adds to every ``init`` (the fusion layer
# refuses its flat buffers for a transformation that is not elementwise): ``init`` runs each without
# knowing what it looks for. A layer registers its check when its module is imported, which it is
# before any of its values can reach ``init``.
_PARAMETER_CHECKS: list[Callable[[Any, Any], None]] = []


def register_parameter_check(check: Callable[[Any, Any], None]) -> None:
  """Run ``check(tx, params)`` in every ``Transformation.init``, after the leaves are checked.

  Args:
    check: raises (naming ``tx.owner``) when ``tx`` cannot be initialised on ``params``; the
      parameters it gets have their leaves read through (arrays, not variable wrappers).
  """
  if check not in _PARAMETER_CHECKS:
    _PARAMETER_CHECKS.append(check)


class Transformation(GradientTransformationExtraArgs):
  """Base of every transformation steadax builds: ``init_fn``/``update_fn`` under the contract.

  Subclasses implement ``init_fn(params)`` and ``update_fn(updates, state, params, **extra_args)``;
  ``init``/``update`` wrap them with the checks of ``steadax._core._contract``.

  Integer and boolean parameters (a step counter or an index among the parameters, as Flax's
  TrainState allows) are accepted, as Optax accepts them: state is created for them as Optax
  creates it (accumulators in the parameter's dtype), and transformations written on ``leafwise``
  give them a zero update and keep their state (docs/contract.md, "Integer parameters").

  Class attributes:
    requires_float: set True on a transformation that cannot handle integer or boolean parameters:
      its ``init`` raises a TypeError naming the path.
    updates_follow_params: updates keep the incoming structure and take the parameters' dtypes.
    elementwise: whether the update may run on the leaves concatenated into flat buffers:
      ``True`` (elementwise, or a reduction over the whole tree), ``"children"`` (as elementwise as
      the inner transformations), ``False`` (the default), or a function ``(tx, flat_params) ->
      reason or None`` where it depends on a field. Declared here, read only by the fusion layer
      (``steadax._fusion._elementwise``), which the core never imports.
  """

  requires_float: ClassVar[bool] = False
  updates_follow_params: ClassVar[bool] = True
  elementwise: ClassVar[Any] = False
  name: ClassVar[str] = ""

  @property
  def owner(self) -> str:
    return self.name or type(self).__name__

  def init_fn(self, params: Params) -> OptState:
    """The fresh state: built from the roles of ``State`` when the class declares one."""
    state_cls = getattr(type(self), "State", None)
    if state_cls is not None and roles_of(state_cls) is not None:
      return init_from_roles(state_cls, self, params)
    return EmptyState()

  def update_fn(self, updates, state, params=None, **extra_args):  # pragma: no cover - abstract
    raise NotImplementedError

  def init(self, params: Params) -> OptState:
    # Read array-like leaves through their arrays (Flax's hijax Variables have no dtype of their
    # own once traced), so every init_fn and the role check see shapes, dtypes and shardings;
    # Python numbers become strong arrays of their default dtype (Optax accepts `{"w": 1.0}`).
    params = tree_map(param_array, params)
    _check_param_leaves(self.owner, params)
    for check in _PARAMETER_CHECKS:
      check(self, params)
    if self.requires_float:
      check_float_params(self.owner, params)
    state = self.init_fn(params)
    if type(state) is getattr(type(self), "State", None):
      check_roles(self.owner, self, state, params)
    return conform_init(self.owner, unwrap_unlike_variables(params, state))

  def leafwise(self, fn, updates, *states, params=None, reads=(), scalars=None):
    """The per-leaf primitive (``steadax._core._leafwise.leafwise``) under this transformation's name.

    Args:
      fn: ``fn(k, g, *state_leaves, *read_leaves) -> update`` or ``(update, *new_state_leaves)``,
        written on compute-dtype inputs.
      updates: the incoming updates.
      *states: state trees, each written back in its stored dtype.
      params: the parameters (the updates take their dtypes), or None.
      reads: read-only trees passed after the state leaves.
      scalars: the leaf function's ``k``: a ``Scalars`` record of hyperparameters (each cast to
        the compute dtype), or ``scalars(dtype) -> Scalars`` for values computed per dtype.

    Returns:
      ``(updates, *new_states)``.
    """
    return leafwise(self.owner, fn, updates, *states, params=params, reads=reads, scalars=scalars)

  def update(self, updates: Updates, state: OptState, params: Params | None = None, **extra_args):
    updates = _python_numbers_as_arrays(updates)
    params = _python_numbers_as_arrays(params)
    _check_state_type(self, state)
    # A framework may have given the state back in other containers (NNX): see _containers.
    state, back, context = in_init_containers(self, state, updates if params is None else params)
    if self.updates_follow_params:
      # A gradient of another shape than its parameter or its moments may broadcast in the maths:
      # named here, before it runs, as the caller's mismatch (not the transformation's fault).
      mismatch = input_shape_mismatch(self.owner, updates, state, params)
      if mismatch is not None:
        raise InputMismatchError(mismatch)
    try:
      with context:
        new_updates, new_state = self.update_fn(updates, state, params, **extra_args)
    except InputMismatchError as error:
      raise error.within(self.owner) from error.__cause__
    except (ValueError, TypeError) as error:
      # Trees that do not belong together are named from the trees themselves (_diagnosis.py);
      # any other error is raised as it is.
      if isinstance(error, ContractError):
        raise
      message = diagnose_update(self.owner, self.init, updates, state, params,
                                self.updates_follow_params)
      if message is None:
        raise
      raise InputMismatchError(message) from error
    new_state = back(conform_state(self.owner, state, new_state))
    if self.updates_follow_params:
      new_updates = conform_updates(self.owner, updates, params, new_updates)
    return new_updates, new_state


def _check_param_leaves(owner: str, params: Any) -> None:
  """A parameter leaf that is neither an array nor a number (a string, an object) has no dtype."""
  if all(hasattr(leaf, "dtype") for leaf in jax.tree_util.tree_leaves(params)):
    return  # the paths are built only to name a culprit
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    if not hasattr(leaf, "dtype"):
      raise TypeError(
          f"{owner}: the parameter at {key_path_str(path)} is a {type(leaf).__name__} "
          f"({short_repr(leaf)}); parameters must be arrays or numbers (keep other values out of "
          "the params tree, or give them to init as None).")


def _python_numbers_as_arrays(tree: Any) -> Any:
  """``tree`` with its Python number leaves as strong arrays (the tree itself when it has none)."""
  if tree is None or not any(isinstance(x, PYTHON_NUMBERS) for x in jax.tree_util.tree_leaves(tree)):
    return tree
  return jax.tree_util.tree_map(
      lambda x: number_as_array(x) if isinstance(x, PYTHON_NUMBERS) else x, tree)


def _expected_state_type(tx: Transformation) -> type | None:
  state_cls = getattr(type(tx), "State", None)
  if state_cls is not None:
    return state_cls
  if type(tx).init_fn is Transformation.init_fn:
    return EmptyState
  return None


def _check_state_type(tx: Transformation, state: Any) -> None:
  """A state record of another class than the one ``tx.init`` makes: another optimizer's state."""
  expected = _expected_state_type(tx)
  if expected is None or isinstance(state, expected):
    return
  if isinstance(state, tuple) and not state and (
      expected is EmptyState or type(tx).init_fn is not Transformation.init_fn):
    return  # `()` or Optax's EmptyState: the same empty node (an init_fn may return it)
  if expected is EmptyState and (state is None or (isinstance(state, (dict, list)) and not state)):
    return  # Optax's idiom for a stateless transformation (`update(u, None)`): given back as it is
  if (isinstance(state, tuple) and type(state).__name__ == expected.__name__
      and getattr(state, "_fields", None) == getattr(expected, "_fields", ())):
    return  # the same record from Optax (a state made by Optax's init, kept across the switch)
  what = type(state).__name__
  hint = ""
  if isinstance(state, tuple) and hasattr(state, "_fields"):
    hint = " (the state record of another transformation)"
  raise InputMismatchError(
      f"{tx.owner}: update was given a {what}{hint}, but {tx.owner}'s init makes a "
      f"{expected.__name__}: this state is not {tx.owner}'s state. Pass the state that this "
      "transformation's init returned (was the optimizer changed after the state was made?)."
  )


