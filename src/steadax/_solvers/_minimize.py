"""``minimize``: the whole optimization loop as one jitted ``lax.while_loop``, with a report.

The loop is written once for every transformation: it passes ``value``, ``grad`` and ``value_fn``
to ``update`` (what the line searches need; other transformations ignore them), and where the
state holds the value and gradient at the new point (a zoom search, or a backtracking search with
``store_grad=True``, as the last transformation) it reuses them instead of evaluating again, as
``value_and_grad_from_state`` does. Everything it carries has a fixed type (counters int32, values
in the scalar statistics dtype), so it runs under ``jit`` and ``vmap`` (several starting points or
data sets in one program: a batched ``while_loop`` keeps the finished members' carry).
"""

import enum
import functools
import inspect
from collections.abc import Callable

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import jax.numpy as jnp
import numpy as np
from typing import Any, NamedTuple, Union
from jax.typing import ArrayLike

from .._core._adapters import with_extra_args_support
from .._core._interface import GradientTransformationExtraArgs
from .._core._updates import apply_updates
from .._core._combine import Chain
from .._core._policy import key_path_str, scalar_stat_dtype
from .._core._tree import cast_like
from .._linesearch._backtracking import ScaleByBacktrackingLinesearch
from .._linesearch._common import _find_fields, real_vdot
from .._linesearch._zoom import ScaleByZoomLinesearch
from .._optimizers._lbfgs import lbfgs
from . import _bounds
from ._lbfgsb import LBFGSB, lbfgsb
from .._core._interface import GradientTransformation
from .._core._types import Params

__all__ = ["StopReason", "MinimizeInfo", "minimize", "stop_reason_message"]


class StopReason(enum.IntEnum):
  """Why ``minimize`` stopped (``MinimizeInfo.reason`` holds the code as an int32 array)."""

  CONVERGED = 1
  MAX_STEPS = 2
  LINESEARCH_FAILED = 3
  NONFINITE = 4


_MESSAGES = {
    0: "running",
    int(StopReason.CONVERGED): "converged: the gradient norm is at most the tolerance",
    int(StopReason.MAX_STEPS): "stopped: reached the maximum number of steps",
    int(StopReason.LINESEARCH_FAILED): (
        "stopped: the line search found no step that decreases the objective (the tolerance may be "
        "below what the objective's precision can resolve)"),
    int(StopReason.NONFINITE): "stopped: the objective or its gradient is not finite (NaN or inf)",
}


def stop_reason_message(reason: Union[ArrayLike, "MinimizeInfo"]) -> Any:
  """The text of a stop reason code: a string, or nested lists of them for a batch of codes.

  Args:
    reason: ``MinimizeInfo.reason`` (a concrete int array of any shape), a ``MinimizeInfo``, or an
      int.

  Returns:
    The message, or a (nested) list of messages with the array's shape.

  Example:
    >>> import steadax
    >>> steadax.stop_reason_message(steadax.StopReason.MAX_STEPS)
    'stopped: reached the maximum number of steps'
  """
  if isinstance(reason, MinimizeInfo):
    reason = reason.reason
  codes = np.asarray(reason)
  if codes.ndim == 0:
    return _MESSAGES.get(int(codes), f"unknown stop reason {int(codes)}")
  return [stop_reason_message(c) for c in codes]


class MinimizeInfo(NamedTuple):
  """The report of ``minimize`` (a pytree: under ``vmap`` every field gains the batch axis).

  Attributes:
    num_steps: int32 number of optimizer steps taken.
    num_fun_evals: int32 number of objective evaluations (line search trials included).
    num_grad_evals: int32 number of gradient evaluations.
    value: the objective at the solution (scalar statistics dtype).
    grad_norm: the Euclidean norm of the gradient at the solution (of the projected gradient
      ``P(x - g) - x`` when there are bounds).
    converged: whether ``grad_norm <= tol``.
    reason: int32 ``StopReason`` code; ``stop_reason_message`` renders it.
    aux: the auxiliary output of ``fun`` at the solution (``has_aux=True``), else None.
  """

  num_steps: jax.Array
  num_fun_evals: jax.Array
  num_grad_evals: jax.Array
  value: jax.Array
  grad_norm: jax.Array
  converged: jax.Array
  reason: jax.Array
  aux: Any = None


def _last(tx: Any) -> Any:
  while isinstance(tx, Chain) and tx.transforms:
    tx = tx.transforms[-1]
  return tx


def _reuses_search(tx: Any, state: Any) -> bool:
  """Whether the state's value and gradient are those at ``params + updates``: the last
  transformation is a line search that stores both (or L-BFGS-B)."""
  last = _last(tx)
  if isinstance(last, LBFGSB) or isinstance(last, ScaleByZoomLinesearch):
    pass
  elif isinstance(last, ScaleByBacktrackingLinesearch) and last.store_grad:
    pass
  else:
    return False
  values, grads = _find_fields(state, "value"), _find_fields(state, "grad")
  return len(values) == 1 and len(grads) == 1 and grads[0] is not None


class _Carry(NamedTuple):
  params: Any
  state: Any
  value: jax.Array
  grad: Any
  grad_norm: jax.Array
  step: jax.Array
  fun_evals: jax.Array
  grad_evals: jax.Array
  failures: jax.Array  # line searches in a row that failed
  stalled: jax.Array  # steps in a row without progress (line-search transformations)
  best_norm: jax.Array  # the smallest gradient norm so far


_STALL_STEPS = 10


def _default_tol(stat: Any) -> float:
  return 1e-8 if np.dtype(stat) == np.float64 else 1e-5


def _find_nonfinite(tree: Any) -> str | None:
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    if not np.all(np.isfinite(np.asarray(leaf))):
      return key_path_str(path)
  return None


def minimize(
    fun: Callable[..., Any],
    x0: Params,
    tx: GradientTransformation | None = None,
    *,
    args: tuple = (),
    tol: float | None = None,
    max_steps: int = 1000,
    has_aux: bool = False,
    bounds: tuple[Any, Any] | None = None,
    callback: Callable[[Any], None] | None = None,
    callback_every: int = 1,
) -> tuple[Any, MinimizeInfo]:
  """Minimises ``fun`` from ``x0`` with a steadax transformation, in one jitted while loop.

  Each step calls ``tx.update(grad, state, params, value=value, grad=grad, value_fn=f)`` and
  applies the updates, until the gradient norm is at most ``tol``, ``max_steps`` steps are done,
  the line search cannot decrease the objective (or 10 steps in a row lower neither the objective
  nor the smallest gradient norm: the precision floor), or the objective or gradient is not
  finite. With
  ``bounds`` the default optimizer is ``lbfgsb``, ``x0`` is projected onto the box, and the
  convergence test uses the projected gradient ``P(x - g) - x``; another ``tx`` with bounds becomes
  a projected method (its iterates are projected onto the box after every step).

  The loop is compiled once per ``fun`` (a static argument: pass the same function object, not a
  new lambda per call), ``tx`` structure and input types; ``tol``, ``max_steps``, ``args``, the
  bounds and the transformation's hyperparameters are traced, so new values do not recompile. It
  can be called inside ``jit`` and ``vmap`` (multi-start: ``jax.vmap(lambda x: minimize(f, x))``).

  Args:
    fun: the objective ``fun(params, *args)``, a real scalar (``(scalar, aux)`` with ``has_aux``).
    x0: the starting parameters (any pytree of floating arrays, mixed dtypes allowed).
    tx: a steadax transformation; None for ``lbfgs()`` (``lbfgsb`` with ``bounds``).
    args: extra positional arguments of ``fun`` (data), traced.
    tol: tolerance on the Euclidean norm of the (projected) gradient; None for 1e-5, or 1e-8 when
      the statistics dtype (the widest floating dtype of ``x0``) is float64.
    max_steps: the most optimizer steps.
    has_aux: ``fun`` returns ``(value, aux)``; ``aux`` at the solution is ``info.aux`` (from one
      more evaluation, not counted).
    bounds: ``(lower, upper)``, each None, a scalar, or a tree like ``x0`` of scalars or arrays
      (infinities allowed).
    callback: a host function called every ``callback_every`` steps with a ``MinimizeInfo`` of the
      current step (through ``jax.debug.callback``; without it nothing is traced).
    callback_every: the callback's period in steps.

  Returns:
    ``(params, info)``: the solution (in ``x0``'s structure and dtypes) and a ``MinimizeInfo``.

  Raises:
    TypeError: ``fun`` does not return a real scalar.
    ValueError: bounds that do not match ``x0`` or with ``lower > upper`` (naming the path), or,
      when called outside ``jit``/``vmap``, a non-finite value or gradient at ``x0`` (under
      tracing that is reported as ``StopReason.NONFINITE`` after 0 steps).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> def rosenbrock(x): return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
    >>> x, info = steadax.minimize(rosenbrock, jnp.zeros(2))
    >>> [round(float(v), 3) for v in x], bool(info.converged)
    ([1.0, 1.0], True)
    >>> steadax.stop_reason_message(info.reason)
    'converged: the gradient norm is at most the tolerance'
  """
  owner = "minimize"
  if not callable(fun):
    raise TypeError(f"{owner}: `fun` must be callable, got {type(fun).__name__}.")
  if not isinstance(args, tuple):
    raise TypeError(f"{owner}: `args` must be a tuple of extra arguments of fun, got {type(args).__name__}.")
  if not jax.tree_util.tree_leaves(x0):
    raise ValueError(f"{owner}: `x0` has no array leaves.")
  for path, leaf in jax.tree_util.tree_flatten_with_path(x0)[0]:
    dtype = jnp.result_type(leaf)
    if not jnp.issubdtype(dtype, jnp.floating):
      raise TypeError(f"{owner}: `x0` at {key_path_str(path)} has dtype {np.dtype(dtype).name}; "
                      "minimize needs real floating parameters.")
  x0 = jax.tree_util.tree_map(lambda x: x if isinstance(x, jax.Array) else jnp.asarray(x), x0)
  if isinstance(callback_every, bool) or not isinstance(callback_every, int) or callback_every < 1:
    raise ValueError(f"{owner}: callback_every must be an int >= 1, got {callback_every!r}.")
  lower = upper = None
  if bounds is not None:
    if not (isinstance(bounds, (tuple, list)) and len(bounds) == 2):
      raise ValueError(f"{owner}: `bounds` must be a pair (lower, upper), got {type(bounds).__name__}.")
    lower, upper = bounds
    _bounds.check_bounds(owner, lower, upper, x0)
    if tx is None:
      tx = lbfgsb(lower, upper)
    elif isinstance(tx, LBFGSB):
      tx = tx.replace(lower=lower, upper=upper)
  elif tx is None:
    tx = lbfgs()
  if not isinstance(tx, GradientTransformationExtraArgs):
    tx = _with_extras(tx)
  if bounds is None and isinstance(tx, LBFGSB):
    lower, upper = tx.lower, tx.upper
    _bounds.check_bounds(owner, lower, upper, x0)
  bounded = bounds is not None or isinstance(tx, LBFGSB)
  stat = scalar_stat_dtype(x0)
  tol = _default_tol(stat) if tol is None else tol
  # numpy scalars, not jnp: no eager conversion programs per call.
  tol_arg = tol if isinstance(tol, jax.Array) else np.asarray(tol, stat)
  steps_arg = max_steps if isinstance(max_steps, jax.Array) else np.asarray(max_steps, np.int32)
  params, info = _run(fun, tx, x0, args, tol_arg, steps_arg, (lower, upper) if bounded else None,
                      has_aux, callback, callback_every)
  if info.reason.ndim == 0 and not isinstance(info.reason, jax.core.Tracer):
    if int(info.reason) == StopReason.NONFINITE and int(info.num_steps) == 0:
      value, grad = jax.value_and_grad(lambda p: _scalar(owner, fun, p, args, has_aux, stat))(
          _bounds.project(owner, x0, lower, upper) if bounded else x0)
      where = "value" if not np.isfinite(np.asarray(value)) else f"gradient at {_find_nonfinite(grad)}"
      raise ValueError(f"{owner}: the objective's {where} is not finite at the starting point "
                       f"(value {float(value)}).")
  return params, info


def _with_extras(tx: Any) -> Any:
  """A foreign ``(init, update)`` pair (an Optax transformation) as a steadax one: its ``update``
  gets ``value``/``grad``/``value_fn`` when it takes keyword extras (Optax's line searches), else
  they are dropped."""
  init, update = tx
  try:
    takes_extras = any(p.kind is inspect.Parameter.VAR_KEYWORD
                       for p in inspect.signature(update).parameters.values())
  except (TypeError, ValueError):
    takes_extras = False
  if takes_extras:
    return GradientTransformationExtraArgs(init, update)  # pyright: ignore[reportCallIssue]
  return with_extra_args_support(tx)


def _scalar(owner, fun, params, args, has_aux, stat):
  out = fun(params, *args)
  if isinstance(out, tuple) and not has_aux:
    raise TypeError(f"{owner}: `fun` returned a tuple of {len(out)}; pass has_aux=True for a "
                    "function returning (value, aux).")
  if has_aux and not (isinstance(out, (tuple, list)) and len(out) == 2):
    raise TypeError(f"{owner}: with has_aux=True, `fun` must return a pair (value, aux), got "
                    f"{type(out).__name__}.")
  value = jnp.asarray(out[0] if has_aux else out)
  if value.shape != () or not jnp.issubdtype(value.dtype, jnp.floating):
    raise TypeError(
        f"{owner}: `fun` must return a real floating scalar{' as its first output' if has_aux else ''}, "
        f"got shape {value.shape} and dtype {value.dtype}.")
  return value.astype(stat)


def _norm(tree: Any, stat: Any) -> jax.Array:
  return jnp.sqrt(real_vdot(tree, tree, stat))


@functools.partial(jax.jit, static_argnames=("fun", "has_aux", "callback", "callback_every"))
def _run(fun, tx, x0, args, tol, max_steps, bounds, has_aux, callback, callback_every):
  owner = "minimize"
  stat = scalar_stat_dtype(x0)
  tol, max_steps = jnp.asarray(tol).astype(stat), jnp.asarray(max_steps).astype(jnp.int32)
  value_fn = lambda p: _scalar(owner, fun, p, args, has_aux, stat)  # noqa: E731
  value_and_grad = jax.value_and_grad(value_fn)
  bounded = bounds is not None
  lower, upper = bounds if bounded else (None, None)
  if bounded:
    flat_lower, flat_upper = _bounds.flat_bounds(owner, lower, upper, x0, stat)

  def project(p):
    return _bounds.project(owner, p, lower, upper) if bounded else p

  def grad_norm(p, g):
    if not bounded:
      return _norm(g, stat)
    pg = _bounds.projected_gradient(_bounds.flatten(p, stat), _bounds.flatten(g, stat), flat_lower,
                                    flat_upper)
    return jnp.sqrt(jnp.sum(pg * pg))

  def evaluate(p):
    value, grad = value_and_grad(p)
    return value, cast_like(grad, p)

  x0 = project(x0)
  state = tx.init(x0)
  reuse = _reuses_search(tx, state) and (isinstance(_last(tx), LBFGSB) or not bounded)
  searches = _find_fields(state, "num_linesearch_steps")
  retries = bool(searches)
  value, grad = evaluate(x0)
  norm = grad_norm(x0, grad)
  one = jnp.ones([], jnp.int32)

  # Only a second failed search in a row stops a transformation that retries (L-BFGS-B's own
  # rule: it clears its memory after a failed search and retries from the gradient; for lbfgs the
  # retry starts from the fallback step the failed search took, which at float32's floor often
  # still lands on the minimiser).
  failures_to_stop = 2 if retries else 1

  def reason(c: _Carry) -> jax.Array:
    # The stop reason is a function of the carry, evaluated by the loop's condition and once at
    # the end rather than stored: one fused select per step instead of a stored code and its
    # updates (on small problems a step costs a few microseconds, so each scalar op counts).
    code = lambda r: jnp.asarray(int(r), jnp.int32)  # noqa: E731
    failed = (c.failures >= failures_to_stop) | (c.stalled >= _STALL_STEPS)
    return jnp.where(
        ~(jnp.isfinite(c.value) & jnp.isfinite(c.grad_norm)), code(StopReason.NONFINITE),
        jnp.where(c.grad_norm <= tol, code(StopReason.CONVERGED),
                  jnp.where(failed, code(StopReason.LINESEARCH_FAILED),
                            jnp.where(c.step >= max_steps, code(StopReason.MAX_STEPS), code(0)))))

  zero = jnp.zeros([], jnp.int32)
  start = _Carry(x0, state, value, grad, norm, zero, one, one, zero, zero, norm)

  def body(c: _Carry) -> _Carry:
    updates, state = tx.update(c.grad, c.state, c.params, value=c.value, grad=c.grad,
                               value_fn=value_fn)
    params = project(apply_updates(c.params, updates))
    search_evals = sum((s.astype(jnp.int32) for s in searches_of(state)), zero)
    if reuse:
      value = _find_fields(state, "value")[0].astype(stat)
      grad = cast_like(_find_fields(state, "grad")[0], c.grad)
      fun_evals, grad_evals = c.fun_evals + search_evals, c.grad_evals + search_evals
    else:
      value, grad = evaluate(params)
      backtracking_values = search_evals  # trials of a search that stores no gradient
      fun_evals, grad_evals = c.fun_evals + one + backtracking_values, c.grad_evals + one
    norm = grad_norm(params, grad)
    # A search that missed one of its conditions (sufficient decrease, or the curvature condition
    # when it gave up after its last trial) and did not lower the objective by more than its
    # rounding: no progress is possible from here (at the precision floor a search returns the
    # same value again and again).
    missed = jnp.zeros([], bool)
    for name in ("decrease_error", "curvature_error"):
      for err in _find_fields(state, name):
        missed = missed | (err > 0)
    decreased = c.value - value > jnp.finfo(stat).eps * jnp.abs(c.value)
    failed = missed & ~decreased
    # A search can also succeed without decreasing (Hager-Zhang's approximate Wolfe condition
    # accepts a value within its rounding). That is progress while the gradient keeps shrinking
    # (in float32 a decrease can be below the value's resolution), but at the precision floor it
    # repeats forever: _STALL_STEPS steps in a row that neither decrease the value nor reach a
    # new smallest gradient norm stop the run too.
    improved = decreased | (norm < c.best_norm)
    stalled = jnp.where(improved, zero, c.stalled + one) if searches else zero
    failures = jnp.where(failed, c.failures + one, zero)
    step = c.step + one
    new = _Carry(params, state, value, grad, norm, step, fun_evals, grad_evals, failures, stalled,
                 jnp.minimum(norm, c.best_norm))
    if callback is not None:
      code = reason(new)
      jax.lax.cond((step % callback_every == 0) | (code != 0),
                   lambda: jax.debug.callback(callback, _info(new, code, None)), lambda: None)
    return new

  def searches_of(state):
    return _find_fields(state, "num_linesearch_steps") if searches else []

  final = jax.lax.while_loop(lambda c: reason(c) == 0, body, start)
  aux = fun(final.params, *args)[1] if has_aux else None
  return final.params, _info(final, reason(final), aux)


def _info(c: _Carry, reason: jax.Array, aux: Any) -> MinimizeInfo:
  return MinimizeInfo(num_steps=c.step, num_fun_evals=c.fun_evals, num_grad_evals=c.grad_evals,
                      value=c.value, grad_norm=c.grad_norm,
                      converged=reason == int(StopReason.CONVERGED), reason=reason, aux=aux)
