"""sweep: many configurations of one transformation stacked into one pytree, for ``jax.vmap``.

A steadax transformation is a frozen pytree whose hyperparameters are leaves and whose flags,
dtypes and functions are static (``_core/_module.py``). Configurations that differ only in leaves
therefore share one tree structure, and stacking their leaves gives one transformation that
``jax.vmap`` runs as n optimizers in one compiled program. ``sweep`` builds that stack and refuses,
with the tree path, configurations that would need different programs.
"""

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._core._module import Module, _static_equal
from .._core._policy import key_path_str

__all__ = ["sweep"]

_HINT = (
    "only hyperparameter leaves (numbers, and the numbers inside steadax schedules) can differ "
    "between the configurations of one sweep; run one sweep per value of a static setting")
_FUNCTION_HINT = (
    "functions compare by identity, so two schedules written as separate functions or closures are "
    "two programs: use a steadax schedule (its numbers are leaves), or write the schedule as a "
    "steadax.Module whose swept number is a hyper_field")


def _is_leaf_value(x: Any) -> bool:
  structure = jax.tree_util.tree_structure(x)
  return structure.num_leaves == 1 and structure.num_nodes == 1


def _kind(x: Any) -> str:
  if x is None:
    return "None"
  if _is_leaf_value(x):
    return f"a leaf ({type(x).__name__})"
  return type(x).__name__


def _one_level(x: Any) -> tuple[list, Any]:
  """The children of the pytree node ``x`` with their keys, and the node's one-level structure."""
  is_child = lambda y: y is not x  # noqa: E731 - every node below the root is a child
  children, structure = jax.tree_util.tree_flatten_with_path(x, is_leaf=is_child)
  return [(path[0], child) for path, child in children], structure


def _first_difference(a: Any, b: Any, path: tuple = ()) -> tuple[tuple, str] | None:
  """Where ``a`` and ``b`` first differ in tree structure or static data: ``(path, what)``, or None."""
  if _is_leaf_value(a) and _is_leaf_value(b):
    return None  # leaves are what a sweep stacks (their shapes are checked when stacking)
  if type(a) is not type(b):
    return path, f"{_kind(a)} vs {_kind(b)}"
  if isinstance(a, Module):
    cls = type(a)
    for name in cls._static_fields:
      va, vb = a.__dict__[name], b.__dict__[name]
      if not _static_equal(va, vb):
        what = f"static field {cls.__name__}.{name}: {va!r} vs {vb!r}"
        if inspect.isfunction(va) or inspect.isfunction(vb):
          what += f"; {_FUNCTION_HINT}"
        return path + (jax.tree_util.GetAttrKey(name),), what
    for name in cls._dynamic_fields:
      found = _first_difference(a.__dict__[name], b.__dict__[name],
                                path + (jax.tree_util.GetAttrKey(name),))
      if found is not None:
        return found
    return None
  if jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b):
    return None
  children_a, node_a = _one_level(a)
  children_b, node_b = _one_level(b)
  keys_a, keys_b = [k for k, _ in children_a], [k for k, _ in children_b]
  if keys_a != keys_b or node_a != node_b:
    return path, f"{type(a).__name__} with children {keys_a} vs {keys_b}"
  for (key, x), (_, y) in zip(children_a, children_b):
    found = _first_difference(x, y, path + (key,))
    if found is not None:
      return found
  return path, f"{node_a} vs {node_b}"  # pragma: no cover - a node type with hidden data


def _stack_leaf(owner: str, path: tuple, values: list) -> jax.Array:
  where = key_path_str(path)
  for value in values:
    if not isinstance(value, (bool, int, float, complex, np.generic, np.ndarray, jax.Array)):
      raise TypeError(f"{owner}: the leaf at {where} is a {type(value).__name__}, not a number or "
                      "an array; only numeric hyperparameter leaves can be stacked.")
  shapes = [tuple(np.shape(v)) for v in values]
  if len(set(shapes)) > 1:
    raise ValueError(f"{owner}: the leaf at {where} has different shapes in different "
                     f"configurations ({', '.join(map(str, shapes))}); stacked leaves need one shape.")
  try:
    # As JAX stacks them: Python numbers stay weakly typed (as a transformation's Python numbers
    # are when it is a jit argument), so the slices promote, and inject_hyperparams stores them,
    # exactly as the n configurations run alone do.
    stacked = jnp.stack([jnp.asarray(v) for v in values])
  except Exception as error:  # strict promotion refuses, e.g., an int32 array beside a bfloat16 one
    raise TypeError(f"{owner}: the leaf at {where} has dtypes that do not promote to one "
                    f"({', '.join(str(jnp.asarray(v).dtype) for v in values)}): {error}") from None
  if not (jnp.issubdtype(stacked.dtype, jnp.number) or jnp.issubdtype(stacked.dtype, jnp.bool_)):
    raise TypeError(f"{owner}: the leaf at {where} has dtype {stacked.dtype}; only numeric "
                    "hyperparameter leaves can be stacked.")
  return stacked


def _stack(owner: str, configurations: list, describe: Callable[[int], str],
           culprits: Callable[[int], str]) -> Any:
  first = configurations[0]
  structure = jax.tree_util.tree_structure(first)
  for i, other in enumerate(configurations[1:], start=1):
    if jax.tree_util.tree_structure(other) == structure:
      continue
    path, what = _first_difference(first, other) or ((), "different tree structures")
    raise ValueError(
        f"{owner}: {describe(i)} differs from {describe(0)} in static structure at "
        f"{key_path_str(path)} ({what}), so they cannot run as one program{culprits(i)}; {_HINT}.")
  columns = [jax.tree_util.tree_leaves(c) for c in configurations]
  paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(first)[0]]
  stacked = [_stack_leaf(owner, path, list(values)) for path, values in zip(paths, zip(*columns))]
  return jax.tree_util.tree_unflatten(structure, stacked)


def _is_swept(value: Any) -> bool:
  if isinstance(value, list):
    return True
  return isinstance(value, (np.ndarray, jax.Array)) and np.ndim(value) >= 1


def _factory_name(factory: Any) -> str:
  while hasattr(factory, "func") and not hasattr(factory, "__name__"):  # functools.partial
    factory = factory.func
  return getattr(factory, "__name__", None) or type(factory).__name__


def _check_transformation(owner: str, what: str, value: Any) -> None:
  if not isinstance(value, Module):
    raise TypeError(
        f"{owner}: {what} is a {type(value).__name__}, not a steadax transformation (a frozen "
        "pytree Module); an Optax transformation keeps its hyperparameters in closures, where they "
        "cannot be stacked.")


def sweep(factory: Callable[..., Any] | Sequence[Any], /, *args: Any, **kwargs: Any) -> Any:
  """n configurations of one transformation stacked into one, to run under ``jax.vmap``.

  A hyperparameter sweep as one compiled program: the returned transformation has the structure of
  a single configuration, and each of its hyperparameter leaves (swept or not) has a leading axis
  of size n; ``jax.vmap`` over it, with the parameters and the state stacked alike, trains the n
  configurations at once. Slice ``i`` of the vmapped run equals configuration ``i`` run alone.

  Two forms:

  * ``sweep(factory, *args, **kwargs)``: every argument that is a list or an array with at least
    one dimension is swept along its first axis (all swept arguments have the same length n);
    every other argument (a number, a 0-d array, a tuple, a schedule, a function, None, a dtype, a
    mask) is passed unchanged to each of the n calls ``factory(...)``. To pass a list or an array
    unchanged, bind it with ``functools.partial`` or a ``lambda``; a ``lambda`` also sweeps a
    number inside a schedule (``lambda peak: adamw(warmup_cosine_decay_schedule(0.0, peak, ...))``)
    or one inside a chain.
  * ``sweep([tx_0, tx_1, ...])``: stack transformations built beforehand.

  The configurations must differ only in hyperparameter leaves. A difference in a static field (a
  flag, a dtype, a mask, a schedule's function or its class, ``None`` against a number) raises a
  ValueError naming the tree path, both values and, for the factory form, the swept argument
  responsible; leaves of different shapes or of non-numeric values raise with their path.

  How to run it, with ``n`` stacked copies of the parameters (``in_axes=0`` for the transformation,
  the state and the parameters; ``None`` for what the n runs share, such as a batch)::

    state = jax.vmap(lambda tx, p: tx.init(p))(opt, params)
    updates, state = jax.vmap(lambda tx, g, s, p: tx.update(g, s, p))(opt, grads, state, params)

  ``jax.vmap(lambda tx: tx.init(params))(opt)`` initialises from one shared copy. The stacked
  state has the structure and dtypes of one configuration's state, with a leading axis n on every
  leaf. The stacked transformation must not be used without ``vmap``: its hyperparameters are
  vectors, which would broadcast against the parameters.

  Args:
    factory: a function returning a steadax transformation (``steadax.adamw``,
      ``steadax.inject_hyperparams(steadax.sgd)``, a ``lambda`` building a chain), or a list or
      tuple of already built transformations (then no other argument).
    *args: positional arguments of ``factory``; lists and arrays are swept.
    **kwargs: keyword arguments of ``factory``; lists and arrays are swept.

  Returns:
    One transformation of the configurations' class whose hyperparameter leaves are arrays with a
    leading axis of size n, stacked as ``jnp.stack`` stacks the n values (Python numbers stay
    weakly typed, as they are when a transformation is a ``jax.jit`` argument).

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> opt = steadax.sweep(steadax.adamw, learning_rate=jnp.array([1e-3, 1e-2, 1e-1]),
    ...                     weight_decay=1e-4)
    >>> params = {"w": jnp.ones((3, 2))}                    # 3 copies of a model with w: (2,)
    >>> state = jax.vmap(lambda tx, p: tx.init(p))(opt, params)
    >>> state[0].mu["w"].shape
    (3, 2)
    >>> grads = {"w": jnp.ones((3, 2))}
    >>> step = jax.vmap(lambda tx, g, s, p: tx.update(g, s, p))
    >>> updates, state = step(opt, grads, state, params)
    >>> updates["w"][:, 0].tolist()                        # -learning_rate * (1 + weight_decay)
    [-0.001, -0.01, -0.1]

  References:
    Bradbury et al., `JAX: composable transformations of Python+NumPy programs
    <http://github.com/jax-ml/jax>`_, 2018 (``jax.vmap``);
    Kidger and Garcia, `Equinox: neural networks in JAX via callable PyTrees and filtered
    transformations <https://arxiv.org/abs/2111.00254>`_, 2021 (vmapped ensembles of pytrees).
  """
  if isinstance(factory, (list, tuple)):
    owner = "sweep"
    if args or kwargs:
      raise TypeError(f"{owner}: a list of transformations takes no other arguments; to sweep "
                      "arguments, pass a factory: sweep(steadax.adamw, learning_rate=[...]).")
    if not factory:
      raise ValueError(f"{owner}: nothing to stack: the list of transformations is empty.")
    for i, tx in enumerate(factory):
      _check_transformation(owner, f"item {i}", tx)
    return _stack(owner, list(factory), lambda i: f"transformation {i}", lambda i: "")

  if not callable(factory):
    raise TypeError(f"sweep: expected a factory or a list of transformations, got "
                    f"{type(factory).__name__}.")
  owner = f"sweep({_factory_name(factory)})"
  named = [(f"argument {i}", i, v) for i, v in enumerate(args)] + [
      (k, k, v) for k, v in kwargs.items()]
  swept = [(label, key, value) for label, key, value in named if _is_swept(value)]
  if not swept:
    raise ValueError(
        f"{owner}: nothing to sweep: pass at least one argument as a list or an array with a "
        "leading axis (learning_rate=jnp.array([1e-3, 1e-2])).")
  sizes = {label: len(value) for label, _, value in swept}
  if len(set(sizes.values())) > 1:
    listed = ", ".join(f"{label} has {size}" for label, size in sizes.items())
    raise ValueError(f"{owner}: swept arguments have different sizes ({listed}); every list or "
                     "array argument is swept along its first axis.")
  n = next(iter(sizes.values()))
  if n == 0:
    raise ValueError(f"{owner}: the swept arguments are empty.")

  def build(choice: Callable[[Any, Any], Any]) -> Any:
    call_args = [choice(i, v) for i, v in enumerate(args)]
    call_kwargs = {k: choice(k, v) for k, v in kwargs.items()}
    return factory(*call_args, **call_kwargs)

  swept_keys = {key for _, key, _ in swept}

  def configuration(i: int) -> Any:
    return build(lambda key, v: v[i] if key in swept_keys else v)

  configurations = []
  for i in range(n):
    tx = configuration(i)
    _check_transformation(owner, f"configuration {i}", tx)
    configurations.append(tx)

  def describe(i: int) -> str:
    values = ", ".join(f"{label}={value[i]!r}" for label, _, value in swept)
    return f"configuration {i} ({values})"

  def culprits(i: int) -> str:
    # Only on the error path: rebuild configuration 0 with one swept argument moved to value i.
    reference = jax.tree_util.tree_structure(configurations[0])
    found = []
    for label, key, value in swept:
      try:
        moved = build(lambda k, v: v[i] if k == key else (v[0] if k in swept_keys else v))
      except Exception:  # noqa: BLE001 - attribution is best effort
        continue
      if jax.tree_util.tree_structure(moved) != reference:
        found.append(label)
    if not found:
      return ""
    return f"; swept argument{'s' if len(found) > 1 else ''} responsible: {', '.join(found)}"

  return _stack(owner, configurations, describe, culprits)
