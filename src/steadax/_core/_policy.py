"""The one dtype policy of steadax (DESIGN.md, "The type-stability contract").

* Counters are int32 in every mode and increment saturating.
* Per-parameter accumulators take an explicit dtype or the parameter's dtype (real-valued statistics
  of complex parameters take the real dtype); arithmetic runs in at least float32 and is cast back.
* Scalar statistics (learning-rate-free estimates) take one dtype fixed at init: the widest floating
  dtype among the parameters, at least float32.
* Hyperparameters are cast to the computation dtype; they never widen state.
"""

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "COUNTER_DTYPE",
    "zero_count",
    "safe_increment",
    "compute_dtype",
    "promote_types",
    "real_dtype",
    "accumulator_dtype",
    "scalar_stat_dtype",
    "hyper",
    "complex_of",
    "check_float_params",
    "hyperparam_dtype",
    "derived_correction",
    "derived_value",
    "scalar_sqrt",
    "reciprocal",
    "key_path_str",
    "is_inexact_dtype",
]

COUNTER_DTYPE = jnp.int32
_COUNTER_MAX = np.iinfo(np.int32).max


def zero_count() -> jax.Array:
  """A fresh int32 step counter."""
  return jnp.zeros([], COUNTER_DTYPE)


def safe_increment(count: jax.Array) -> jax.Array:
  """``count + 1`` that saturates at the int32 maximum instead of wrapping; keeps count's dtype.

  Args:
    count: an integer (or floating) scalar counter.

  Returns:
    The incremented counter with the same dtype.

  Raises:
    ValueError: for a count that is neither integer nor floating (bool, complex).

  Example:
    >>> import jax.numpy as jnp
    >>> int(safe_increment(jnp.asarray(2147483647, jnp.int32)))
    2147483647
  """
  count = jnp.asarray(count)
  dtype = count.dtype
  if jnp.issubdtype(dtype, jnp.integer):
    top = jnp.asarray(jnp.iinfo(dtype).max, dtype)
    return jnp.where(count < top, count + jnp.asarray(1, dtype), top)
  if not jnp.issubdtype(dtype, jnp.floating):  # bool, complex: no order to saturate in (as Optax)
    raise ValueError(
        f"safe_increment: cannot safely increment a count of dtype {dtype}; valid dtypes are "
        'subdtypes of "jnp.integer" or "jnp.floating".')
  one = jnp.asarray(1, dtype)
  return count + one


def is_inexact_dtype(dtype: Any) -> bool:
  return jnp.issubdtype(dtype, jnp.inexact)


@functools.lru_cache(maxsize=None)
def _promote_pair(a: np.dtype, b: np.dtype) -> np.dtype:
  with jax.numpy_dtype_promotion("standard"):
    return np.dtype(jnp.promote_types(a, b))


def promote_types(*dtypes: Any) -> np.dtype:
  """JAX's standard promotion of ``dtypes``, explicit, so it works under strict promotion too."""
  result = np.dtype(dtypes[0])
  for d in dtypes[1:]:
    result = _promote_pair(result, np.dtype(d))
  return result


def compute_dtype(*dtypes: Any) -> np.dtype:
  """The arithmetic dtype for values of the given dtypes: their promotion, at least float32.

  JAX's canonical dtype for the x64 mode: numpy float64 values with x64 off compute in float32
  (what ``jnp`` makes of them), so statistics made from them match the arrays JAX creates.
  """
  result = np.dtype(jnp.float32)
  for d in dtypes:
    if d is None:
      continue
    d = np.dtype(d)
    if not jnp.issubdtype(d, jnp.inexact):
      continue
    result = _promote_pair(result, d)
  return np.dtype(jax.dtypes.canonicalize_dtype(result))


def real_dtype(dtype: Any) -> np.dtype:
  """The real counterpart of a (possibly complex) floating dtype."""
  dtype = np.dtype(dtype)
  if jnp.issubdtype(dtype, jnp.complexfloating):
    return np.dtype(jnp.finfo(dtype).dtype)
  return dtype


def accumulator_dtype(param_dtype: Any, override: Any = None, *, real: bool = False) -> np.dtype:
  """Dtype of a per-parameter accumulator: ``override`` if given, else the parameter's.

  Args:
    param_dtype: the parameter's dtype.
    override: an explicit dtype (``mu_dtype``, ``nu_dtype``, ...), or None.
    real: the statistic is real-valued (a second moment): complex dtypes map to their real part.
  """
  param_dtype = np.dtype(param_dtype)
  dtype = np.dtype(override) if override is not None else param_dtype
  if real:
    dtype = real_dtype(dtype)
  elif jnp.issubdtype(param_dtype, jnp.complexfloating) and not jnp.issubdtype(dtype, jnp.complexfloating):
    # A real override (mu_dtype=bfloat16) for a complex parameter keeps the imaginary part.
    dtype = _promote_pair(dtype, np.dtype(jnp.complex64))
  return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def scalar_stat_dtype(params: Any) -> np.dtype:
  """Dtype of scalar statistics: the widest real floating dtype among params, at least float32."""
  leaves = [l for l in jax.tree_util.tree_leaves(params) if hasattr(l, "dtype")]
  return np.dtype(real_dtype(compute_dtype(*[l.dtype for l in leaves])))


def complex_of(dtype: Any) -> np.dtype:
  """The complex dtype whose real part is ``dtype`` (complex dtypes map to themselves)."""
  dtype = np.dtype(dtype)
  if jnp.issubdtype(dtype, jnp.complexfloating):
    return dtype
  return _promote_pair(dtype, np.dtype(jnp.complex64))


def hyper(value: Any, dtype: Any) -> Any:
  """A hyperparameter (Python number, array or tracer) as a strong scalar of ``dtype``.

  Concrete numbers become numpy constants (folded at trace time: no per-leaf operations); traced
  values are converted once per call. A complex value keeps its imaginary part: it becomes the
  complex counterpart of a real ``dtype`` (``scale(1j)`` rotates complex updates, as in Optax, and a
  complex factor reaching a real parameter is caught by the contract); a concrete complex number
  with a zero imaginary part is real.

  Example:
    >>> hyper(0.5, jnp.float32).dtype, hyper(1j, jnp.float32).dtype
    (dtype('float32'), dtype('complex64'))
  """
  dtype = np.dtype(dtype)
  if isinstance(value, (int, float, complex, np.number, np.ndarray)) and not isinstance(value, bool):
    arr = np.asarray(value)
    if np.iscomplexobj(arr) and not jnp.issubdtype(dtype, jnp.complexfloating):
      if np.all(np.imag(arr) == 0):
        arr = np.real(arr)
      else:
        dtype = complex_of(dtype)
    return arr.astype(dtype)
  value = jnp.asarray(value)
  if jnp.issubdtype(value.dtype, jnp.complexfloating) and not jnp.issubdtype(dtype, jnp.complexfloating):
    dtype = complex_of(dtype)
  return value.astype(dtype)


# --- Constants derived from hyperparameters (``1 - b2``), exact as Optax computes them -----------
# Optax closes over Python numbers: ``(1 - b2) * g`` computes ``1 - 0.999`` in float64 and rounds it
# once where it meets ``g``. steadax keeps hyperparameters as pytree leaves; a transformation given
# to ``jit`` as an argument turns a Python-float leaf into a float32 tracer (x64 off), and
# ``1 - float32(0.999)`` is 1.3e-5 relative off. A derived constant (``_module.derived_field``) is
# Optax's expression ``fn(tx)``, evaluated on the values the transformation holds, plus a
# *correction* leaf computed at construction: ``fn`` in float64 minus ``fn`` in float32, from the
# Python numbers. It is added only where ``fn`` comes out in float32 (the float32 tracers of a
# jit argument), and restores the float64 value's rounding there. Closed over, the Python numbers
# give the float64 value directly; under x64 the float64 tracers do. A correction left stale by a
# tree surgery on the leaves is at most the float32 rounding of ``fn``'s inputs: harmless.


class _NotFloat(Exception):
  """``fn`` read a value that is not a Python float: no correction (the value computes as Optax
  would compute on it: a traced or array hyperparameter, a schedule)."""


class _Float32View:
  """Attribute access on a transformation with its Python floats as numpy float32: ``fn`` on it
  computes what JAX computes on float32 leaves (numpy scalars follow NEP 50: a Python number
  meeting a float32 stays float32, as a weakly typed one does in JAX)."""

  def __init__(self, obj: Any):
    self._obj = obj

  def _number(self, value: Any) -> Any:
    return np.float32(value)

  def _view(self, value: Any) -> Any:
    if type(value) is float:
      return self._number(value)
    if isinstance(value, (bool, str, type(None))):
      return value
    if type(value) in (tuple, list):  # Adam's betas=(b1, b2)
      return type(value)(self._view(v) for v in value)
    raise _NotFloat(value)

  def __getattr__(self, name: str) -> Any:
    return self._view(getattr(self._obj, name))


class _Float64View(_Float32View):
  def _number(self, value: Any) -> Any:
    return value


def scalar_sqrt(x: Any) -> Any:
  """The square root of a hyperparameter in a derived constant's ``fn``, correctly rounded in
  every form ``fn`` meets (Python float, numpy float32, traced), so the correction cancels exactly
  (``x ** 0.5`` is ``pow``, which numpy and XLA round differently in float32)."""
  if type(x) is float:
    return math.sqrt(x)
  if isinstance(x, np.floating):
    return np.sqrt(x)
  return jnp.sqrt(x)


def reciprocal(value: Any, dtype: Any) -> Any:
  """``1 / value`` rounded in ``dtype``: how XLA divides by a constant.

  Optax divides by Python-number hyperparameters (``x / estim_lr0``); XLA compiles a division by a
  constant as a multiplication by its reciprocal in the array's dtype. A traced hyperparameter
  (the transformation a ``jit`` argument) is not a constant, and XLA keeps a true division where
  the value has several uses, which rounds differently. A leaf function that multiplies by this
  reciprocal (a scalar of its record) rounds as Optax's compiled code in every case.

  Example:
    >>> float(reciprocal(1e-6, jnp.float32)) == float(np.float32(1) / np.float32(1e-6))
    True
  """
  return 1 / hyper(value, dtype)


def derived_correction(obj: Any, fn: Any) -> float:
  """``fn(obj)`` in float64 minus ``fn(obj)`` in float32, from ``obj``'s Python floats (0.0 when
  ``fn`` reads anything else, or does not give a finite float).

  Example:
    >>> class T: b2 = 0.999
    >>> derived_correction(T(), lambda t: 1 - t.b2) != 0.0
    True
  """
  try:
    with np.errstate(all="ignore"):
      exact = fn(_Float64View(obj))
      rounded = fn(_Float32View(obj))
  except (_NotFloat, ArithmeticError, TypeError, ValueError):
    return 0.0
  if type(exact) is not float or not (isinstance(rounded, np.floating) and rounded.dtype == np.float32):
    return 0.0
  correction = exact - float(rounded)
  return correction if np.isfinite(correction) else 0.0


def derived_value(obj: Any, fn: Any, correction: Any) -> Any:
  """Optax's ``fn(obj)`` on the values ``obj`` holds, with ``correction`` added where it comes out
  in float32 (see above): a Python float, or a traced value."""
  value = fn(obj)
  if isinstance(correction, (int, float)) and correction == 0:
    return value
  dtype = getattr(value, "dtype", None)
  if dtype is not None and np.dtype(dtype) == np.float32 and np.ndim(value) == 0:
    return value + correction
  return value


def hyperparam_dtype(value: Any) -> np.dtype:
  """The dtype an injected hyperparameter keeps: the declared one, Python numbers as 32-bit."""
  if isinstance(value, bool):
    return np.dtype(jnp.bool_)
  if isinstance(value, int):
    return np.dtype(jnp.int32)
  if isinstance(value, float):
    return np.dtype(jnp.float32)
  if isinstance(value, complex):
    return np.dtype(jnp.complex64)
  arr = jnp.asarray(value) if not hasattr(value, "dtype") else value
  weak = getattr(getattr(arr, "aval", arr), "weak_type", False)
  if weak:
    if jnp.issubdtype(arr.dtype, jnp.floating):
      return np.dtype(jnp.float32)
    if jnp.issubdtype(arr.dtype, jnp.integer):
      return np.dtype(jnp.int32)
    if jnp.issubdtype(arr.dtype, jnp.complexfloating):
      return np.dtype(jnp.complex64)
  return np.dtype(arr.dtype)


def key_path_str(path: Any) -> str:
  """A readable tree path (``['layer']['w']``), or ``<root>`` for the whole tree."""
  text = jax.tree_util.keystr(tuple(path))
  return text if text else "<root>"


def check_float_params(owner: str, params: Any) -> None:
  """Raise a TypeError naming the tree path if any parameter leaf is not floating or complex."""
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    dtype = getattr(leaf, "dtype", None)
    if dtype is None:
      if isinstance(leaf, (bool, int)):
        raise TypeError(
            f"{owner}: parameter at {key_path_str(path)} is a Python {type(leaf).__name__}; "
            "optimizers need floating or complex parameters."
        )
      continue
    if not jnp.issubdtype(dtype, jnp.inexact):
      raise TypeError(
          f"{owner}: parameter at {key_path_str(path)} has dtype {np.dtype(dtype).name}; "
          "optimizers need floating or complex parameters (mask integer leaves out with "
          "`masked` or `set_to_zero`)."
      )


# --- Result dtypes of elementwise functions (steadax.tree, losses, linalg) -----------------------
# These functions cast explicitly, so they run the same under ``jax_numpy_dtype_promotion="strict"``
# as under "standard": the result dtype is JAX's *standard* promotion of the inputs, with Python
# scalars and weakly typed values counted as weak (they never widen an array), computed once per
# dtype combination at trace time.


def _dtype_token(x: Any) -> Any:
  """A hashable stand-in for ``x`` in promotion: a numpy dtype, or a Python type when weak."""
  if isinstance(x, (bool, int, float, complex)):
    return type(x)
  # numpy values and dtypes count in JAX's canonical dtype for the x64 mode (a numpy complex128 is
  # complex64 with x64 off, as jnp makes it, and JAX's truncation warning is not raised per call).
  if isinstance(x, np.dtype):
    return np.dtype(jax.dtypes.canonicalize_dtype(x))
  dtype = getattr(x, "dtype", None)
  if dtype is None:
    return np.dtype(jax.dtypes.canonicalize_dtype(np.asarray(x).dtype))
  aval = getattr(x, "aval", None)
  if aval is not None and getattr(aval, "weak_type", False):
    kind = np.dtype(dtype).kind
    return {"b": bool, "i": int, "u": int, "f": float, "V": float, "c": complex}.get(kind, float)
  return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


_REPRESENTATIVE = {bool: False, int: 0, float: 0.0, complex: 0j}


@functools.lru_cache(maxsize=None)
def _promote_tokens(tokens: tuple[Any, ...]) -> np.dtype:
  args = [_REPRESENTATIVE[t] if isinstance(t, type) else t for t in tokens]
  with jax.numpy_dtype_promotion("standard"):
    return np.dtype(jnp.result_type(*args))


def result_dtype(*values: Any) -> np.dtype:
  """JAX's standard promotion of ``values`` (arrays, tracers, Python scalars or dtypes), strict-safe.

  None values are ignored. Example: a bfloat16 array and an int32 array give bfloat16; a float32
  array and a Python float give float32 in both x64 modes.
  """
  return _promote_tokens(tuple(_dtype_token(v) for v in values if v is not None))


def with_weak(dtype: Any, *scalars: Any) -> np.dtype:
  """The dtype of ``leaf op scalar`` when the scalars are weak: they change the kind, not the width.

  A float32 scalar scales a bfloat16 leaf in bfloat16; a complex scalar makes a float32 leaf
  complex64.
  """
  tokens = [np.dtype(dtype)]
  for s in scalars:
    if s is None:
      continue
    token = _dtype_token(s)
    if isinstance(token, np.dtype):
      token = {"b": bool, "i": int, "u": int, "c": complex}.get(token.kind, float)
    tokens.append(token)
  return _promote_tokens(tuple(tokens))


def default_float_dtype() -> np.dtype:
  """JAX's default floating dtype in the current mode: float64 under x64, float32 otherwise."""
  return np.dtype(jax.dtypes.canonicalize_dtype(jnp.float64))


def cast(x: Any, dtype: Any) -> jax.Array:
  """``x`` as a strong array of ``dtype`` (no operation when it already is one).

  The one explicit cast of the non-optimizer code (losses, tree maths, linear algebra): a complex
  value cast to a real dtype raises a TypeError instead of silently losing its imaginary part.
  """
  dtype = np.dtype(dtype)
  if isinstance(x, jax.Array) and x.dtype == dtype and not getattr(x.aval, "weak_type", False):
    return x
  x = jnp.asarray(x)
  if jnp.issubdtype(x.dtype, jnp.complexfloating) and not jnp.issubdtype(dtype, jnp.complexfloating):
    raise TypeError(f"cannot cast a complex value to {dtype.name} without dropping its imaginary part")
  return x.astype(dtype)


__all__ += ["result_dtype", "with_weak", "default_float_dtype", "cast"]
