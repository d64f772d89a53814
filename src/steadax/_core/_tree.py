"""Internal tree math used by the transformations (the public `steadax.tree` builds on it)."""

from collections.abc import Callable
from typing import Any

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import jax.numpy as jnp
import numpy as np

from ._deprecations import warn_deprecated_call
from ._leafwise import place_like
from ._policy import accumulator_dtype, compute_dtype, hyper, real_dtype
from ._types import Updates

__all__ = [
    "tree_map",
    "unwrap_unlike_variables",
    "array_leaf",
    "zeros_mirroring",
    "zeros_like",
    "full_like",
    "filled_like",
    "copy_like",
    "cast_like",
    "tree_sum_of_squares",
    "cond",
    "global_norm",
    "l2_norm",
    "is_none",
    "is_variable",
    "unwrap_variables",
    "key_entry_name",
]


def key_entry_name(entry: Any) -> str | None:
  """The name of one entry of a ``jax.tree_util`` key path (a dict key, an attribute, a sequence
  index, a flattened index) as a string; None for a key type of another library, which each caller
  names its own way (a checkpoint's path on disk, a ``groups`` pattern)."""
  if isinstance(entry, jax.tree_util.DictKey):
    return str(entry.key)
  if isinstance(entry, jax.tree_util.GetAttrKey):
    return entry.name
  if isinstance(entry, jax.tree_util.SequenceKey):
    return str(entry.idx)
  if isinstance(entry, jax.tree_util.FlattenedIndexKey):
    return str(entry.key)
  return None


def is_none(x: Any) -> bool:
  return x is None


def tree_map(fn: Callable, tree: Any, *rest: Any) -> Any:
  """``jax.tree.map`` that keeps None leaves of the first tree as None.

  The single place where elementwise optimizers map over leaves, so a fused multi-tensor path can
  replace it later without touching the optimizers.
  """
  return jax.tree_util.tree_map(
      lambda x, *r: None if x is None else fn(x, *r), tree, *rest, is_leaf=is_none
  )


def array_leaf(x: Any) -> Any:
  """The array behind one parameter leaf, for reading its shape, dtype and sharding.

  jax Arrays, tracers, ShapeDtypeStructs and numpy arrays are returned as they are. A leaf that
  carries its array (a Flax NNX *hijax* Variable: a leaf of the params tree which, once traced
  under ``jit`` or ``eval_shape``, has no ``dtype`` or ``shape`` of its own) gives its value.
  (Plain NNX Variables are pytree nodes: ``tree_map`` already reaches their arrays.)

  Example:
    >>> import jax.numpy as jnp
    >>> array_leaf(jnp.ones(2)).shape
    (2,)
  """
  if x is None or isinstance(x, (jax.Array, jax.ShapeDtypeStruct, np.ndarray, np.generic)):
    return x
  get_value = getattr(x, "get_value", None)
  return get_value() if callable(get_value) else x



PYTHON_NUMBERS = (bool, int, float, complex)


def number_as_array(x: Any) -> Any:
  """A Python number as a strong array of its default dtype (float32, or float64 under x64)."""
  return jnp.asarray(x, jax.dtypes.canonicalize_dtype(type(x)))


def param_array(x: Any) -> Any:
  """A parameter leaf as an array: ``array_leaf``'s array, a Python number as a strong array
  (Optax accepts ``{"w": 1.0}``)."""
  x = array_leaf(x)
  return number_as_array(x) if isinstance(x, PYTHON_NUMBERS) else x


def unwrap_unlike_variables(params: Any, state: Any) -> Any:
  """``state`` with every variable wrapper node (``is_variable``) that does not hold an array
  shaped like the parameter it mirrors replaced by its value.

  A state built by mapping over parameters held in Flax NNX Variables keeps those Variables, and
  their metadata, around each parameter's entry: a moment is rightly a Variable with its
  parameter's sharding annotation, but ``nnx.Optimizer`` also gives that annotation to a statistic
  of another shape (Shampoo's ``(blocks, b, b)`` statistics, Adafactor's factors, a
  per-parameter scalar), where it does not fit (``IndivisibleError`` at ``nnx.Optimizer(...)``).
  Such entries are left as plain values: ``nnx.Optimizer`` holds them without metadata. A state
  node mirrors the parameter whose key path ends its own key path.

  Example:
    >>> import jax.numpy as jnp
    >>> unwrap_unlike_variables({"w": jnp.ones(2)}, {"w": jnp.zeros(())})["w"].shape
    ()
  """
  shapes = {tuple(path): np.shape(node.get_value())
            for path, node in jax.tree_util.tree_flatten_with_path(params, is_leaf=is_variable)[0]
            if is_variable(node)}
  if not shapes:
    return state

  def unwrap(path, node):
    if not is_variable(node):
      return node
    value = node.get_value()
    path = tuple(path)
    mirrored = next((shapes[path[i:]] for i in range(len(path)) if path[i:] in shapes), None)
    if mirrored is not None and hasattr(value, "shape") and np.shape(value) == mirrored:
      return node
    return value

  return jax.tree_util.tree_map_with_path(unwrap, state, is_leaf=is_variable)


def is_variable(x: Any) -> bool:
  """Whether ``x`` is a variable wrapper node (a Flax NNX ``Variable``) holding one parameter.

  The wrappers ``array_leaf`` reads through: a non-array object with a ``get_value`` method. As a
  pytree node its key path adds an entry (``.value``) that the plain array does not have.

  Example:
    >>> import jax.numpy as jnp
    >>> is_variable(jnp.ones(1))
    False
  """
  return (callable(getattr(x, "get_value", None))
          and not isinstance(x, (jax.Array, jax.ShapeDtypeStruct, np.ndarray, np.generic)))


def unwrap_variables(tree: Any) -> Any:
  """``tree`` with each variable wrapper node replaced by the array it holds.

  Flax's ``nnx.Optimizer`` gives ``init`` a state of ``Param`` variables (paths ``l1.bias.value``)
  and ``update`` their plain arrays (``l1.bias``): a mask or label function called on the unwrapped
  tree sees one path per parameter in both calls.

  Example:
    >>> import jax.numpy as jnp
    >>> unwrap_variables({"w": jnp.ones(1)})
    {'w': Array([1.], dtype=float32)}
  """
  return jax.tree_util.tree_map(
      lambda x: x.get_value() if is_variable(x) else x, tree, is_leaf=is_variable)


def zeros_mirroring(x: Any, dtype: Any) -> jax.Array:
  """Zeros of ``dtype`` with the shape and the sharding of the array-like leaf ``x``.

  The one constructor of parameter-shaped state. ``jnp.zeros_like`` keeps the sharding of a
  committed jax Array and of a ShapeDtypeStruct that has one; under ``jit``/``eval_shape`` the new
  value takes the sharding in the tracer's type (explicit mesh axes), and with automatic axes
  ``place_like`` ties it to the parameter's sharding (a zero depends on no input, so the compiler
  would otherwise replicate it or leave it on one device). No ``device=`` argument, which a tracer
  cannot take.

  Args:
    x: a jax Array, tracer, ShapeDtypeStruct, numpy array or Flax variable.
    dtype: the dtype of the zeros.

  Returns:
    The zeros.

  Example:
    >>> import jax.numpy as jnp
    >>> zeros_mirroring(jax.ShapeDtypeStruct((2,), jnp.float32), jnp.bfloat16)
    Array([0, 0], dtype=bfloat16)
  """
  x = array_leaf(x)
  return place_like(x, jnp.zeros_like(x, dtype=jax.dtypes.canonicalize_dtype(dtype)))


def zeros_like(tree: Any, dtype: Any = None, *, real: bool = False) -> Any:
  """Zeros mirroring ``tree`` (shape and sharding), in ``dtype`` or each leaf's own.

  Args:
    tree: the reference tree (arrays, ShapeDtypeStructs, Flax variables; None leaves stay None).
    dtype: an explicit dtype, or None for each leaf's own.
    real: complex leaves get their real dtype (for second-moment statistics).

  Example:
    >>> import jax.numpy as jnp
    >>> zeros_like({"w": jnp.ones(2, jnp.complex64)}, real=True)["w"].dtype
    dtype('float32')
  """
  def make(x):
    x = array_leaf(x)
    return zeros_mirroring(x, accumulator_dtype(x.dtype, dtype, real=real))

  return tree_map(make, tree)


def copy_like(tree: Any, dtype: Any = None) -> Any:
  """A strongly typed copy of ``tree`` (distinct buffers, so both can be donated), in ``dtype`` or
  each leaf's accumulator dtype; a jax Array's copy keeps its sharding."""
  def copy(x):
    x = array_leaf(x)
    return jnp.array(x, dtype=accumulator_dtype(x.dtype, dtype), copy=True)

  return tree_map(copy, tree)


def full_like(tree: Any, value: Any, dtype: Any = None) -> Any:
  """Constant tree mirroring ``tree`` (shape and sharding, as ``zeros_mirroring``)."""
  def make(x):
    x = array_leaf(x)
    d = jax.dtypes.canonicalize_dtype(dtype if dtype is not None else x.dtype)
    return place_like(x, jnp.full_like(x, value, dtype=d))

  return tree_map(make, tree)


def filled_like(tree: Any, value: Any, *, real: bool = False) -> Any:
  """Accumulators mirroring ``tree`` (shape and sharding) holding ``value`` in each leaf's
  accumulator dtype (its real part with ``real``); ``value`` may be traced (a hyperparameter leaf
  under ``jit``). The fill is placed after it is computed: a constant tied to the parameter's
  layout and then shifted would be folded into a fresh, unplaced constant.

  Example:
    >>> import jax.numpy as jnp
    >>> filled_like({"w": jnp.zeros(2, jnp.complex64)}, 0.1, real=True)["w"]
    Array([0.1, 0.1], dtype=float32)
  """
  def make(x):
    x = array_leaf(x)
    dtype = accumulator_dtype(x.dtype, None, real=real)
    zeros = jnp.zeros_like(x, dtype=dtype)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
      return place_like(x, zeros)
    return place_like(x, zeros + hyper(value, dtype))

  return tree_map(make, tree)


def tree_sum_of_squares(tree: Any) -> jax.Array:
  """Sum of ``|x|^2`` over all leaves, accumulated in the widest dtype present (at least f32)."""
  # A float0 leaf (the gradient of an integer parameter) holds no numbers: it adds nothing.
  leaves = [x for x in jax.tree_util.tree_leaves(tree) if x is not None and x.dtype != jax.dtypes.float0]
  dtype = real_dtype(compute_dtype(*[x.dtype for x in leaves]))
  total = jnp.zeros([], dtype)
  for x in leaves:
    x = x.astype(compute_dtype(x.dtype))
    sq = jnp.real(x * jnp.conj(x)) if jnp.iscomplexobj(x) else x * x
    total = total + jnp.sum(sq).astype(dtype)
  return total


def l2_norm(updates: Any) -> jax.Array:
  """The l2 norm of all leaves together (float32 at least, exact for mixed-precision trees).

  Its gradient at a zero tree is zero (not NaN).

  Args:
    updates: a tree of arrays.

  Returns:
    A scalar.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> float(l2_norm({"a": jnp.array([3.0]), "b": jnp.array([4.0])}))
    5.0
  """
  return safe_sqrt(tree_sum_of_squares(updates))


@jax.custom_jvp
def safe_sqrt(x: jax.Array) -> jax.Array:
  """``sqrt(x)`` whose derivative at ``x == 0`` is zero rather than infinite.

  For norms: gradients through clipping or a projection (meta-learning, differentiating an
  optimizer step) stay finite at a zero tree. The rule is in the derivative only: the value is
  ``jnp.sqrt``'s, NaN included. (Routing zeros around ``sqrt`` with ``where`` in the value instead,
  ``where(x > 0, sqrt(where(x > 0, x, 1)), 0)``, made XLA's CPU compiler take 3x as long on a
  clipped 200-leaf AdamW step: 68 s against 21 s; ``benchmarks/cases/recipes.py`` compares with Optax.)
  """
  return jnp.sqrt(x)


@safe_sqrt.defjvp
def _safe_sqrt_jvp(primals: tuple, tangents: tuple) -> tuple:
  (x,), (dx,) = primals, tangents
  y = safe_sqrt(x)
  positive = x > 0
  return y, jnp.where(positive, dx / (2 * jnp.where(positive, y, jnp.ones_like(y))), jnp.zeros_like(dx))


def global_norm(updates: Updates) -> jax.Array:
  """The l2 norm of all leaves together; deprecated (as in Optax 0.2.8) in favour of
  ``steadax.tree.norm``, and warns so when called.

  Args:
    updates: a tree of arrays.

  Returns:
    A scalar (float32 at least, exact for mixed-precision trees; zero gradient at a zero tree).

  Example:
    >>> import jax.numpy as jnp, steadax, warnings
    >>> with warnings.catch_warnings():
    ...   warnings.simplefilter("ignore", DeprecationWarning)
    ...   float(steadax.global_norm({"a": jnp.array([3.0]), "b": jnp.array([4.0])}))
    5.0
  """
  warn_deprecated_call("steadax.global_norm is deprecated in favor of steadax.tree.norm")
  return l2_norm(updates)


def cast_like(tree: Any, reference: Any) -> Any:
  """Each leaf of ``tree`` as a strong array in the dtype of the matching leaf of ``reference``.

  For values a transformation does not compute itself (a user's gradients or measures, a skip
  function's diagnostics): they are pinned to the types fixed at init.
  """
  return tree_map(lambda x, r: jnp.asarray(x).astype(r.dtype), tree, reference)


def cond(pred: Any, true_fun: Callable[..., Any], false_fun: Callable[..., Any], *operands: Any) -> Any:
  """``jax.lax.cond`` that takes the known branch when ``pred`` is concrete (an eager update).

  Under ``jit``, ``vmap`` or any trace it is ``lax.cond`` (both branches traced, one run). Eagerly
  the predicate is a concrete array: ``lax.cond`` would trace both branches, close over this step's
  arrays as constants and compile a new program at every step (80 ms per eager SOAP update on CPU,
  330 ms for PSGD-Kron's); the branch is called instead, with the same result.

  For branches of a transformation's own arithmetic (a preconditioner refresh). Wrappers whose
  branches run an inner transformation (MultiSteps, apply_if_finite, skip_spikes) keep
  ``lax.cond``: tracing both branches checks the inner transformation's contract at the first
  eager step, whichever branch runs.

  Args:
    pred: a scalar boolean (array or tracer).
    true_fun: called when ``pred`` is true.
    false_fun: called otherwise.
    *operands: passed to the branch.

  Returns:
    The branch's result.

  Example:
    >>> import jax.numpy as jnp
    >>> cond(jnp.asarray(True), lambda x: x + 1, lambda x: x - 1, jnp.asarray(1, jnp.int32))
    Array(2, dtype=int32)
  """
  if isinstance(pred, jax.core.Tracer):
    return jax.lax.cond(pred, true_fun, false_fun, *operands)
  return true_fun(*operands) if bool(pred) else false_fun(*operands)
