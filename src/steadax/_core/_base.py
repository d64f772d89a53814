"""Transformations: Optax's ``GradientTransformation`` interface as frozen pytree objects."""

from collections.abc import Callable
import dataclasses
import functools
import inspect
from typing import Any, ClassVar, NamedTuple, Self

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from ._containers import in_init_containers
from ._contract import ContractError, InputMismatchError, conform_init, conform_state, conform_updates
from ._flat import contains_flat_params
from ._leafwise import leafwise
from ._roles import check_roles, init_from_roles, roles_of
from ._module import _CHILD, _KIND, Module, child_field, static_field
from ._policy import check_float_params, key_path_str, promote_types
from ._tree import PYTHON_NUMBERS, number_as_array, param_array, tree_map
from ._types import OptState, Params, Updates

__all__ = [
    "GradientTransformation",
    "GradientTransformationExtraArgs",
    "Transformation",
    "EmptyState",
    "init_empty_state",
    "identity",
    "set_to_zero",
    "stateless",
    "stateless_with_tree_map",
    "with_extra_args_support",
    "as_inner",
    "InputMismatchError",
    "apply_updates",
    "incremental_update",
    "periodic_update",
    "TransformInitFn",
    "TransformUpdateFn",
    "TransformUpdateExtraArgsFn",
]

TransformInitFn = Callable[[Params], OptState]
TransformUpdateFn = Callable[..., tuple[Updates, OptState]]
TransformUpdateExtraArgsFn = TransformUpdateFn


class EmptyState(NamedTuple):
  """The state of a stateless transformation."""


def init_empty_state(params: Params) -> EmptyState:
  """Init function of stateless transformations: returns ``EmptyState()``.

  Args:
    params: the parameters (unused).

  Returns:
    ``EmptyState()``.

  Example:
    >>> import steadax
    >>> steadax.init_empty_state({"w": 1.0})
    EmptyState()
  """
  del params
  return EmptyState()


class GradientTransformation(Module):
  """A pair of pure functions ``init(params) -> state`` and ``update(updates, state, params)``.

  ``GradientTransformation(init_fn, update_fn)`` builds one from two functions, exactly as in Optax,
  and unpacks as a pair (``init, update = tx``). Every transformation steadax builds is an instance.

  Example:
    >>> import jax.numpy as jnp
    >>> tx = GradientTransformation(lambda p: EmptyState(), lambda u, s, p=None: (u, s))
    >>> tx.update(jnp.ones(2), tx.init(jnp.zeros(2)))[0]
    Array([1., 1.], dtype=float32)
  """

  def __new__(cls, *args: Any, **kwargs: Any) -> Self:
    # Both function-pair classes subclass the class called, so the result is an instance of `cls`.
    if cls is GradientTransformation:
      return object.__new__(_FunctionTransformation)  # pyright: ignore[reportReturnType]
    if cls is GradientTransformationExtraArgs:
      return object.__new__(_FunctionTransformationExtraArgs)  # pyright: ignore[reportReturnType]
    return object.__new__(cls)

  # The abstract interface; concrete subclasses override both.
  def init(self, params: Params) -> OptState:  # pragma: no cover - abstract
    raise NotImplementedError

  def update(self, updates: Updates, state: OptState, params: Params | None = None):  # pragma: no cover
    raise NotImplementedError

  # Optax's transformations are NamedTuples (init, update); keep that unpacking working.
  def __iter__(self):
    return iter((self.init, self.update))

  def __len__(self) -> int:
    return 2

  def __getitem__(self, index: int):
    return (self.init, self.update)[index]


class GradientTransformationExtraArgs(GradientTransformation):
  """A transformation whose ``update`` accepts keyword extras (``value``, ``grad``, ``value_fn``...).

  Every transformation steadax builds is one; unknown extras are ignored.

  Example:
    >>> import jax.numpy as jnp
    >>> tx = GradientTransformationExtraArgs(
    ...     lambda p: EmptyState(), lambda u, s, p=None, **extra: (u, s))
    >>> tx.update(jnp.ones(1), EmptyState(), value=3.0)[0]
    Array([1.], dtype=float32)
  """


def _set_function_pair(obj: Any, owner: str, init: Any, update: Any, fields: dict) -> None:
  """Fill the ``init_fn``/``update_fn`` fields from Optax's ``(init, update)`` arguments.

  Optax's transformations are NamedTuples built as ``GradientTransformation(init=..., update=...)``;
  the field names are accepted too because ``dataclasses.replace`` passes those.
  """
  init = fields.pop("init_fn", init)
  update = fields.pop("update_fn", update)
  if fields:
    raise TypeError(f"{owner}: unexpected arguments {sorted(fields)}; expected `init` and `update`.")
  for name, fn in (("init", init), ("update", update)):
    if not callable(fn):
      raise TypeError(f"{owner}: `{name}` must be a callable, got {fn!r}.")
  object.__setattr__(obj, "init_fn", init)
  object.__setattr__(obj, "update_fn", update)


class _FunctionTransformation(GradientTransformation):
  init_fn: Callable = static_field()
  update_fn: Callable = static_field()

  def __init__(self, init: Any = None, update: Any = None, **fields: Any):
    _set_function_pair(self, "GradientTransformation", init, update, fields)

  def init(self, params):
    return conform_init(_function_owner(self), self.init_fn(params))

  def update(self, updates, state, params=None, **extra_args):
    del extra_args
    result = self.update_fn(*_update_arguments(self.update_fn, updates, state, params))
    return _conform_pair(self, updates, state, params, *result)


class _FunctionTransformationExtraArgs(GradientTransformationExtraArgs):
  init_fn: Callable = static_field()
  update_fn: Callable = static_field()

  def __init__(self, init: Any = None, update: Any = None, **fields: Any):
    _set_function_pair(self, "GradientTransformationExtraArgs", init, update, fields)

  def init(self, params):
    return conform_init(_function_owner(self), self.init_fn(params))

  def update(self, updates, state, params=None, **extra_args):
    result = self.update_fn(*_update_arguments(self.update_fn, updates, state, params), **extra_args)
    return _conform_pair(self, updates, state, params, *result)


def _update_arguments(update_fn: Callable, updates: Any, state: Any, params: Any) -> tuple:
  """The positional arguments for a user's ``update`` function.

  Optax's ``GradientTransformation`` is a NamedTuple: ``tx.update(g, s)`` calls the user's function
  with exactly ``(g, s)``, so ``lambda u, s: (u, s)`` is a valid update there. Without params, the
  function gets ``None`` for them only where it takes a third positional argument.
  """
  if params is not None or _takes_params(update_fn):
    return updates, state, params
  return updates, state


def _takes_params(update_fn: Callable) -> bool:
  try:
    signature = inspect.signature(update_fn)
  except (TypeError, ValueError):
    return True  # a builtin or an odd callable: pass params as Optax's callers do
  try:
    signature.bind(None, None, None)
  except TypeError:
    return False
  return True


def _function_owner(tx: Any) -> str:
  return f"GradientTransformation({getattr(tx.update_fn, '__qualname__', 'update')})"


def _conform_pair(tx: Any, updates: Any, state: Any, params: Any, new_updates: Any, new_state: Any):
  """A function pair goes through the same contract as every steadax transformation."""
  owner = _function_owner(tx)
  return conform_updates(owner, updates, params, new_updates), conform_state(owner, state, new_state)


class _WithExtraArgs(GradientTransformationExtraArgs):
  inner: Any = child_field()

  def init(self, params):
    return self.inner.init(params)

  def update(self, updates, state, params=None, **extra_args):
    del extra_args
    return self.inner.update(updates, state, params)


def with_extra_args_support(tx: GradientTransformation | tuple[TransformInitFn, TransformUpdateFn]) -> GradientTransformationExtraArgs:
  """Wrap ``tx`` so its ``update`` accepts (and ignores) keyword extras.

  Args:
    tx: any transformation (an Optax ``(init, update)`` pair included).

  Returns:
    ``tx`` itself when it already accepts extras, else a wrapper.

  Raises:
    TypeError: when ``tx`` is not a transformation (see ``as_inner``).

  Example:
    >>> import steadax
    >>> steadax.with_extra_args_support(steadax.identity()) is not None
    True
  """
  return as_inner(tx, "with_extra_args_support", "tx")


def _factory_call_example(fn: Any) -> str:
  """``adam(learning_rate)``: how to call a factory, from its required parameters."""
  name = getattr(getattr(fn, "func", fn), "__name__", None) or type(fn).__name__
  try:
    signature = inspect.signature(fn)
  except (TypeError, ValueError):
    return f"{name}(...)"
  required = [
      p.name for p in signature.parameters.values()
      if p.default is inspect.Parameter.empty
      and p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
  ]
  return f"{name}({', '.join(required)})"


def as_inner(tx: Any, owner: str, argument: str) -> GradientTransformationExtraArgs:
  """``tx`` as a transformation that accepts keyword extras, or a TypeError naming the misuse.

  The one check of every transformation handed to ``chain``, ``partition``, ``masked`` and every
  wrapper: a factory passed without calling it (``chain(clip(1.0), adam)``), a schedule, a number or
  anything else that is not an ``(init, update)`` pair is reported at construction with the
  wrapper's name and the argument, instead of failing later inside ``init``.

  Args:
    tx: a steadax transformation, an Optax one (any object with callable ``init`` and ``update``)
      or an ``(init, update)`` pair of callables.
    owner: the wrapper's name, for the message.
    argument: the argument that received ``tx`` (``"inner"``, ``"transforms['adam']"``...).

  Returns:
    ``tx`` itself when it is a steadax transformation accepting extras, else a wrapper.

  Raises:
    TypeError: when ``tx`` is not a transformation.

  Example:
    >>> import steadax
    >>> as_inner(steadax.adam, "chain", "argument 1")
    Traceback (most recent call last):
    ...
    TypeError: chain: argument 1 is the function `adam`, not a transformation: it builds one; call it, e.g. `adam(learning_rate)`.
  """
  if isinstance(tx, GradientTransformationExtraArgs):
    return tx
  if isinstance(tx, GradientTransformation):
    return _WithExtraArgs(tx)
  init, update = getattr(tx, "init", None), getattr(tx, "update", None)
  # An Optax transformation (a NamedTuple of the pair); a class has unbound init/update: not one.
  if callable(init) and callable(update) and not isinstance(tx, type):
    return _WithExtraArgs(_FunctionTransformation(init, update))
  if isinstance(tx, (tuple, list)) and len(tx) == 2 and all(callable(f) for f in tx):
    return _WithExtraArgs(_FunctionTransformation(*tx))
  if isinstance(tx, type) or inspect.isroutine(tx) or isinstance(tx, functools.partial):
    kind = "class" if isinstance(tx, type) else "function"
    name = getattr(getattr(tx, "func", tx), "__name__", None) or type(tx).__name__
    raise TypeError(
        f"{owner}: {argument} is the {kind} `{name}`, not a transformation: it builds one; call it, "
        f"e.g. `{_factory_call_example(tx)}`."
    )
  raise TypeError(
      f"{owner}: {argument} must be a transformation (an object with `init` and `update`, such as "
      f"`steadax.adam(1e-3)`), got {type(tx).__name__} {_short_repr(tx)}."
  )


def _short_repr(value: Any) -> str:
  text = repr(value)
  return text if len(text) <= 60 else text[:57] + "..."


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
    elementwise: True declares that the transformation may run on its leaves concatenated into
      flat buffers (``fuse``): its update is elementwise, or reduces over the whole tree (a global
      norm, a dot product), and never depends on a leaf's shape, position or per-leaf statistics.
      ``"children"``: as elementwise as the inner transformations (its ``child_field`` values).
      False (the default): never fused. Override ``fusion_blocker`` where it depends on a field.
    elementwise_on_flat_params: the same for ``FlatParams`` parameters, where it differs (None:
      as ``elementwise``). ``masked`` and ``partition`` are ``"children"`` there: they resolve
      their mask or labels on the parameters' tree and check that each buffer gets one value,
      which ``fuse``'s packed buffers (built without the mask) cannot offer.
  """

  requires_float: ClassVar[bool] = False
  updates_follow_params: ClassVar[bool] = True
  elementwise: ClassVar[bool | str] = False
  elementwise_on_flat_params: ClassVar[bool | str | None] = None
  name: ClassVar[str] = ""

  def fusion_blocker(self, flat_params: bool = False) -> str | None:
    """Why this transformation cannot run on concatenated leaves, or None when it can.

    Args:
      flat_params: on ``FlatParams`` parameters (``elementwise_on_flat_params``) rather than in
        ``fuse``.

    Returns:
      None, or the name of the first piece that is not elementwise (with the reason when known).
    """
    mode = self.elementwise
    if flat_params and self.elementwise_on_flat_params is not None:
      mode = self.elementwise_on_flat_params
    if mode is True:
      return None
    if mode == "children":
      for child in child_transformations(self):
        reason = fusion_blocker(child, flat_params)
        if reason is not None:
          return reason
      return None
    return f"{self.owner} (not declared elementwise)"

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
    if contains_flat_params(params):
      reason = self.fusion_blocker(flat_params=True)
      if reason is not None:
        raise ValueError(
            f"{self.owner}: cannot run on FlatParams: {reason}. Its buffers concatenate many "
            "leaves, so only transformations whose update is elementwise or reduces over the whole "
            "tree give the per-leaf result. Use the parameters' tree (`flat.tree()`) with this "
            "transformation.")
    if self.requires_float:
      check_float_params(self.owner, params)
    state = self.init_fn(params)
    if type(state) is getattr(type(self), "State", None):
      check_roles(self.owner, self, state, params)
    return conform_init(self.owner, state)

  def leafwise(self, fn, updates, *states, params=None, reads=(), scalars=None):
    """The per-leaf primitive (``steadax._core._leafwise.leafwise``) under this transformation's name.

    Args:
      fn: ``fn(k, g, *state_leaves, *read_leaves) -> update`` or ``(update, *new_state_leaves)``,
        written on compute-dtype inputs.
      updates: the incoming updates.
      *states: state trees, each written back in its stored dtype.
      params: the parameters (the updates take their dtypes), or None.
      reads: read-only trees passed after the state leaves.
      scalars: ``scalars(dtype) -> Scalars`` built once per real compute dtype.

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
    try:
      with context:
        new_updates, new_state = self.update_fn(updates, state, params, **extra_args)
    except InputMismatchError as error:
      raise error.within(self.owner) from error.__cause__
    except (ValueError, TypeError) as error:
      if isinstance(error, ContractError) or not _is_tree_mismatch(error):
        raise
      message = _diagnose_structures(self.owner, updates, state, params)
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
          f"({_short_repr(leaf)}); parameters must be arrays or numbers (keep other values out of "
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


_SHAPE_MISMATCH_TEXT = ("incompatible shapes", "shapes must be equal", "Incompatible shapes")

_TREE_MISMATCH_TEXT = _SHAPE_MISMATCH_TEXT + (
    "Dict key mismatch", "Custom node type mismatch", "Tuple arity mismatch", "List arity mismatch",
    "Expected tuple", "Expected list", "Expected dict", "Expected named tuple", "Expected None",
    "tree structure", "Mismatch custom node data", "None arity", "Node arity mismatch",
)


def _is_tree_mismatch(error: Exception) -> bool:
  text = str(error)
  return any(fragment in text for fragment in _TREE_MISMATCH_TEXT)


def _leaf_paths(tree: Any) -> list[str]:
  return [key_path_str(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def _difference(owner: str, a_name: str, a: Any, b_name: str, b: Any) -> str:
  a_paths, b_paths = _leaf_paths(a), _leaf_paths(b)
  only_a = [p for p in a_paths if p not in set(b_paths)]
  only_b = [p for p in b_paths if p not in set(a_paths)]
  parts = []
  if only_a:
    parts.append(f"only in {a_name}: {', '.join(only_a[:8])}" + (" ..." if len(only_a) > 8 else ""))
  if only_b:
    parts.append(f"only in {b_name}: {', '.join(only_b[:8])}" + (" ..." if len(only_b) > 8 else ""))
  if not parts:
    parts.append(f"{a_name} is {jax.tree_util.tree_structure(a)}, {b_name} is "
                 f"{jax.tree_util.tree_structure(b)}")
  return f"{owner}: {a_name} and {b_name} have different tree structures; " + "; ".join(parts) + "."


def _state_subtrees(state: Any, path: str = "state"):
  """``(path, subtree)`` of the containers in a state record (NamedTuple fields, tuple entries)."""
  if isinstance(state, tuple) and hasattr(state, "_fields"):
    for name in getattr(state, "_fields"):
      value = getattr(state, name)
      yield f"{path}.{name}", value
      yield from _state_subtrees(value, f"{path}.{name}")
  elif isinstance(state, (tuple, list)):
    for i, value in enumerate(state):
      yield f"{path}[{i}]", value
      yield from _state_subtrees(value, f"{path}[{i}]")


def _shape_difference(owner: str, a_name: str, a: Any, b_name: str, b: Any) -> str | None:
  """The first leaf where two trees of one structure differ in shape, as a message (or None)."""
  for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(a)[0], jax.tree_util.tree_leaves(b)):
    if hasattr(x, "shape") and hasattr(y, "shape") and np.shape(x) != np.shape(y):
      return (f"{owner}: at {key_path_str(path)}, {a_name} have shape {np.shape(x)}, {b_name} "
              f"{np.shape(y)}.")
  return None


def _mirrors(subtree: Any) -> bool:
  """Whether a state subtree may mirror the parameters: a container that is not a state record."""
  if isinstance(subtree, tuple) and (hasattr(subtree, "_fields") or not subtree):
    return False
  return not hasattr(subtree, "dtype") and bool(jax.tree_util.tree_leaves(subtree))


def _diagnose_structures(owner: str, updates: Any, state: Any, params: Any) -> str | None:
  """Which of the trees given to ``update`` differ, and where; None when none is found."""
  structure = jax.tree_util.tree_structure(updates)
  updates_name = "the updates (gradients)"
  if params is not None:
    if jax.tree_util.tree_structure(params) != structure:
      return _difference(owner, updates_name, updates, "the params", params)
    message = _shape_difference(owner, updates_name, updates, "the params", params)
    if message is not None:
      return message
  hint = " The state was made by init for other parameters: call init with these parameters."
  for path, subtree in _state_subtrees(state):
    if not _mirrors(subtree):
      continue
    if jax.tree_util.tree_structure(subtree) != structure:
      return _difference(owner, updates_name, updates, path, subtree) + hint
    message = _shape_difference(owner, updates_name, updates, path, subtree)
    if message is not None:
      return message + hint
  return None


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


def fusion_blocker(tx: Any, flat_params: bool = False) -> str | None:
  """``tx.fusion_blocker(flat_params)`` for a steadax transformation; a reason for anything else.

  Args:
    tx: a transformation.
    flat_params: on ``FlatParams`` parameters rather than in ``fuse``.

  Returns:
    None, or why ``tx`` cannot run on concatenated leaves.

  Example:
    >>> import steadax
    >>> fusion_blocker(steadax.adam(1e-3)) is None
    True
  """
  if isinstance(tx, Transformation):
    return tx.fusion_blocker(flat_params)
  if isinstance(tx, _WithExtraArgs):
    return fusion_blocker(tx.inner, flat_params)
  name = getattr(getattr(tx, "update_fn", None), "__qualname__", type(tx).__name__)
  return (f"{name} (a function pair: steadax cannot tell whether it is elementwise; write it as a "
          "Transformation subclass with `elementwise = True`)")


class _Identity(Transformation):
  name = "identity"
  requires_float = False
  elementwise = True

  def update_fn(self, updates, state, params=None, **extra_args):
    return updates, state


def identity() -> GradientTransformationExtraArgs:
  """Leaves updates unchanged.

  Returns:
    A stateless transformation.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.identity()
    >>> tx.update(jnp.ones(2), tx.init(jnp.zeros(2)))[0]
    Array([1., 1.], dtype=float32)
  """
  return _Identity()


class _SetToZero(Transformation):
  name = "set_to_zero"
  requires_float = False
  elementwise = True

  def update_fn(self, updates, state, params=None, **extra_args):
    return jax.tree_util.tree_map(jnp.zeros_like, updates), state


def set_to_zero() -> GradientTransformationExtraArgs:
  """Replaces every update with zeros (freezes the parameters it is applied to).

  Returns:
    A stateless transformation.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.set_to_zero()
    >>> tx.update(jnp.ones(2), tx.init(jnp.zeros(2)))[0]
    Array([0., 0.], dtype=float32)
  """
  return _SetToZero()


class _Stateless(Transformation):
  name = "stateless"
  requires_float = False
  fn: Callable = static_field()

  def update_fn(self, updates, state, params=None, **extra_args):
    return self.fn(updates, params), state


def stateless(f: Callable[[Updates, Params | None], Updates]) -> GradientTransformationExtraArgs:
  """A stateless transformation from ``f(updates, params) -> updates``.

  Args:
    f: maps the whole updates tree (and params, possibly None) to new updates.

  Returns:
    The transformation.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> tx = steadax.stateless(lambda u, p: jax.tree.map(lambda x: -x, u))
    >>> tx.update(jnp.ones(1), tx.init(None))[0]
    Array([-1.], dtype=float32)
  """
  return _Stateless(f)


class _StatelessTreeMap(Transformation):
  name = "stateless_with_tree_map"
  requires_float = False
  fn: Callable = static_field()

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      return jax.tree_util.tree_map(lambda g: self.fn(g, None), updates), state
    return jax.tree_util.tree_map(self.fn, updates, params), state


def stateless_with_tree_map(
    f: Callable[[jax.Array, jax.Array | None], jax.Array]) -> GradientTransformationExtraArgs:
  """A stateless transformation applying ``f(update, param)`` leaf by leaf.

  Args:
    f: maps one update leaf and its parameter (None when params are not given) to a new leaf.

  Returns:
    The transformation.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.stateless_with_tree_map(lambda g, p: 2 * g)
    >>> tx.update(jnp.ones(1), tx.init(None))[0]
    Array([2.], dtype=float32)
  """
  return _StatelessTreeMap(f)


def _add_leaf(p, u):
  if p is None:
    return None
  p = jnp.asarray(p)
  u = jnp.asarray(u)
  if u.dtype == jax.dtypes.float0:
    return p  # the tangent of an integer leaf (``jax.grad(..., allow_int=True)``): no change
  dtype = promote_types(p.dtype, u.dtype)
  return (p.astype(dtype) + u.astype(dtype)).astype(p.dtype)


def apply_updates(params: Params, updates: Updates) -> Params:
  """``params + updates`` leaf by leaf, each result in its parameter's dtype.

  The addition runs in the wider of the two dtypes, then is cast back, so bfloat16 parameters with
  float32 updates stay bfloat16. A ``float0`` update (the gradient of an integer leaf) leaves its
  parameter unchanged.

  Args:
    params: a tree of parameters.
    updates: a tree of updates with the same structure (None leaves are kept).

  Returns:
    The updated parameters.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.apply_updates({"w": jnp.ones(2)}, {"w": jnp.ones(2)})
    {'w': Array([2., 2.], dtype=float32)}
  """
  try:
    return jax.tree_util.tree_map(_add_leaf, params, updates, is_leaf=lambda x: x is None)
  except (ValueError, TypeError) as error:
    if not _is_tree_mismatch(error):
      raise
    message = _difference("apply_updates", "the params", params, "the updates", updates)
    if jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(updates):
      message = (_shape_difference("apply_updates", "the params", params, "the updates", updates)
                 or message)
    raise InputMismatchError(message) from error


def incremental_update(new_tensors: Params, old_tensors: Params, step_size: ArrayLike) -> Params:
  """Polyak averaging: ``step_size * new + (1 - step_size) * old`` leaf by leaf.

  Args:
    new_tensors: the latest values.
    old_tensors: the running average.
    step_size: the weight of the new values, in [0, 1].

  Returns:
    The new running average, in each old tensor's dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.incremental_update(jnp.ones(1), jnp.zeros(1), 0.25)
    Array([0.25], dtype=float32)
  """
  def mix(new, old):
    if new is None:
      return None
    dtype = promote_types(new.dtype, old.dtype, jnp.float32)
    s = jnp.asarray(step_size).astype(dtype)
    out = s * new.astype(dtype) + (jnp.asarray(1, dtype) - s) * old.astype(dtype)
    return out.astype(old.dtype)

  return jax.tree_util.tree_map(mix, new_tensors, old_tensors, is_leaf=lambda x: x is None)


def periodic_update(new_tensors: Params, old_tensors: Params, steps: jax.Array,
                    update_period: int) -> Params:
  """Takes ``new_tensors`` every ``update_period`` steps, else keeps ``old_tensors``.

  Args:
    new_tensors: the latest values.
    old_tensors: the values kept in between.
    steps: the current step (an integer scalar).
    update_period: how many steps apart the copies happen.

  Returns:
    The selected tensors.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.periodic_update(jnp.ones(1), jnp.zeros(1), jnp.asarray(4), 2)
    Array([1.], dtype=float32)
  """
  take_new = (steps % update_period) == 0
  return jax.tree_util.tree_map(
      lambda n, o: None if n is None else jnp.where(take_new, n, o).astype(o.dtype),
      new_tensors, old_tensors, is_leaf=lambda x: x is None,
  )
