"""What the line searches share: argument checks, real inner products, steps along a direction.

Conventions (one place, so every line search and L-BFGS agree):

* Scalar statistics (values, slopes, step sizes, errors) have the dtype of the state's
  ``learning_rate``, fixed at init by ``scalar_stat_dtype(params)``; counters are int32.
* Complex parameters are treated as pairs of reals. ``updates`` and the ``grad`` extra argument are
  in the convention every optimizer uses for complex parameters, ``conj(jax.grad(f))`` (the
  direction of steepest ascent in the real sense), and slopes are real inner products
  ``Re<u, g> = sum(Re u Re g + Im u Im g)``. Gradients stored in a state for
  ``value_and_grad_from_state`` are what ``jax.value_and_grad`` returns, so that function is a
  drop-in replacement for it.
"""

import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._leafwise import Scalars, leafwise
from .._core._policy import cast, compute_dtype, hyper
from .._core._tree import cast_like, tree_map

__all__ = ["value_and_grad_from_state"]


def check_extra_args(owner: str, params: Any, value: Any, grad: Any, value_fn: Any) -> None:
  """Raise a TypeError naming the first missing argument a line search needs."""
  if params is None:
    raise TypeError(f"{owner}: update() needs `params` (the line search evaluates value_fn near them).")
  for name, arg, what in (
      ("value", value, "the objective's value at `params`"),
      ("grad", grad, "the objective's gradient at `params`"),
      ("value_fn", value_fn, "the objective, called as value_fn(params, **extra_args)"),
  ):
    if arg is None:
      raise TypeError(
          f"{owner}: update() needs the keyword argument `{name}` ({what}); pass "
          "update(updates, state, params, value=value, grad=grad, value_fn=value_fn).")
  if not callable(value_fn):
    raise TypeError(f"{owner}: `value_fn` must be callable, got {type(value_fn).__name__}.")


def check_same_structure(owner: str, name: str, tree: Any, reference: Any) -> None:
  got = jax.tree_util.tree_structure(tree)
  expected = jax.tree_util.tree_structure(reference)
  if got != expected:
    raise ValueError(f"{owner}: `{name}` has structure {got}, expected that of the updates {expected}.")


def value_fn_kwargs(value_fn: Callable, extra_args: dict[str, Any]) -> dict[str, Any]:
  """The extras ``value_fn`` accepts by name (data batches ...); chains pass others, ignored here."""
  if not extra_args:
    return {}
  try:
    parameters = inspect.signature(value_fn).parameters
  except (TypeError, ValueError):
    return {}
  names = {
      n for n, p in parameters.items()
      if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
  }
  return {k: v for k, v in extra_args.items() if k in names}


def as_stat(owner: str, name: str, value: Any, dtype: Any) -> jax.Array:
  """A scalar objective value as a strong real scalar of the statistics dtype."""
  value = jnp.asarray(value)
  if value.size != 1:
    raise ValueError(f"{owner}: `{name}` must be a scalar, got shape {value.shape}.")
  value = jnp.reshape(value, ())
  if jnp.iscomplexobj(value):
    value = jnp.real(value)
  return value.astype(dtype)  # the user's objective, whatever its dtype, in the statistics dtype


def real_vdot(a: Any, b: Any, dtype: Any) -> jax.Array:
  """``Re<a, b>`` summed over all leaves, accumulated in ``dtype`` (complex leaves as real pairs)."""
  total = jnp.zeros([], dtype)
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    cdt = compute_dtype(x.dtype, y.dtype)
    x, y = cast(x, cdt), cast(y, cdt)
    # Re(sum(conj(x) y)) = sum(Re x Re y + Im x Im y), as a product and a sum rather than a dot:
    # a reduction over sharded axes is a partial sum and an all-reduce whatever the layout, where
    # a contraction of sharded axes has no defined result sharding under explicit mesh axes.
    product = jnp.real(x) * jnp.real(y) + jnp.imag(x) * jnp.imag(y) if jnp.iscomplexobj(x) else x * y
    # A whole-tree reduction: each leaf's product joins the total in the statistics dtype.
    total = total + jnp.sum(product).astype(dtype)
  return total


def add_scaled(params: Any, stepsize: jax.Array, direction: Any) -> Any:
  """``params + stepsize * direction`` in at least float32, each leaf back in its parameter's dtype.

  Trial parameters, not updates, so not through ``leafwise`` (whose integer leaves get a zero
  update): an integer parameter keeps its value here. The sum is rounded once, to the parameter's
  dtype (the cast back below).
  """
  def leaf(p, d):
    cdt = compute_dtype(p.dtype, d.dtype)
    return (cast(p, cdt) + hyper(stepsize, cdt) * cast(d, cdt)).astype(p.dtype)

  return tree_map(leaf, params, direction)


def scale_tree(owner: str, stepsize: jax.Array, tree: Any) -> Any:
  """``stepsize * tree`` (the line search's output updates), each leaf in its own dtype."""
  (out,) = leafwise(owner, lambda k, d: k.stepsize * d, tree,
                    scalars=Scalars(stepsize=stepsize))
  return out


def conj_tree(tree: Any) -> Any:
  """Complex conjugate of the complex leaves (real leaves unchanged)."""
  return tree_map(lambda x: jnp.conj(x) if jnp.iscomplexobj(x) else x, tree)


def descent_value_and_grad(value_fn: Callable, fn_kwargs: dict[str, Any], stat: Any,
                           grad_like: Any) -> Callable[[Any], tuple[jax.Array, Any]]:
  """``params -> (value, conj(jax.grad))``: the value in ``stat``, the gradient in the dtypes of
  ``grad_like`` and in the convention of the ``grad`` extra argument."""
  value_and_grad = jax.value_and_grad(lambda p: value_fn(p, **fn_kwargs))

  def evaluate(params):
    value, grad = value_and_grad(params)
    return as_stat("value_fn", "value_fn(params)", value, stat), cast_like(conj_tree(grad), grad_like)

  return evaluate


def errors_to_inf(error: jax.Array) -> jax.Array:
  """Only violations count (clip at 0); NaN means the step left the domain: report +inf."""
  error = jnp.maximum(error, jnp.zeros_like(error))
  return jnp.where(jnp.isnan(error), jnp.full_like(error, jnp.inf), error)


def print_if(condition: jax.Array, message: str, **values: Any) -> None:
  """``jax.debug.print`` only when ``condition`` holds (used by ``verbose=True``)."""
  jax.lax.cond(condition, lambda: jax.debug.print(message, ordered=True, **values), lambda: None)


def _is_namedtuple(x: Any) -> bool:
  return isinstance(x, tuple) and hasattr(x, "_fields")


def _find_fields(state: Any, name: str) -> list[Any]:
  """Values of every NamedTuple field called ``name`` in a nested state."""
  found: list[Any] = []

  def visit(node: Any) -> None:
    if _is_namedtuple(node):
      for field_name, child in zip(node._fields, node):
        if field_name == name:
          found.append(child)
        else:
          visit(child)
    elif isinstance(node, (tuple, list)):
      for child in node:
        visit(child)
    elif isinstance(node, dict):
      for child in node.values():
        visit(child)

  visit(state)
  return found


def value_and_grad_from_state(value_fn: Callable[..., ArrayLike]) -> Callable[..., tuple[jax.Array, Any]]:
  """``jax.value_and_grad(value_fn)`` that reuses the value and gradient a line search stored.

  A line search evaluates the objective (and its gradient) at the parameters it returns; for a
  deterministic objective the next step can start from them instead of evaluating again. The
  returned function takes ``(params, *args, state=opt_state, **kwargs)``, finds the one ``value``
  and ``grad`` field in the (possibly nested) optimizer state, and returns them when the value is
  finite; otherwise (the first step, whose stored value is +inf) it calls
  ``jax.value_and_grad(value_fn)(params, *args, **kwargs)``, cast to the stored dtypes. Both
  branches run under ``lax.cond``, so it can be used inside ``jit``, ``scan`` and ``while_loop``.

  Args:
    value_fn: the objective, a real scalar function of the parameters (and extra arguments).

  Returns:
    A function ``(params, *args, state, **kwargs) -> (value, grad)``; ``grad`` is in JAX's
    convention, as from ``jax.value_and_grad`` (conjugate it for complex parameters before passing
    it to an optimizer, as for any gradient).

  Raises:
    ValueError: (when called) the state has no ``value``/``grad`` field, several of them, or a
      ``grad`` of None (a backtracking line search built without ``store_grad=True``).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> def f(x): return jnp.sum(x ** 2)
    >>> opt = steadax.lbfgs()
    >>> params = jnp.array([1.0, 2.0, 3.0])
    >>> state = opt.init(params)
    >>> value_and_grad = steadax.value_and_grad_from_state(f)
    >>> for _ in range(3):
    ...   value, grad = value_and_grad(params, state=state)
    ...   updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=f)
    ...   params = steadax.apply_updates(params, updates)
    >>> float(f(params)) < 1e-10
    True

  References:
    Nocedal & Wright, "Numerical Optimization" (2nd ed.), 2006, Sec. 3.5: the values and
    gradients a line search computes at the accepted step start the next iteration.
  """
  owner = "value_and_grad_from_state"

  def value_and_grad(params: Any, *fn_args: Any, state: Any, **fn_kwargs: Any):
    values = _find_fields(state, "value")
    grads = _find_fields(state, "grad")
    for name, found in (("value", values), ("grad", grads)):
      if not found:
        raise ValueError(
            f"{owner}: the state has no `{name}` field; use it with a transformation that stores "
            "the value and gradient (scale_by_zoom_linesearch, lbfgs, or "
            "scale_by_backtracking_linesearch(store_grad=True)).")
      if len(found) > 1:
        raise ValueError(f"{owner}: the state has {len(found)} `{name}` fields; expected exactly one.")
    value, grad = values[0], grads[0]
    if grad is None:
      raise ValueError(
          f"{owner}: the state's `grad` is None; build scale_by_backtracking_linesearch with "
          "store_grad=True to store it.")
    value = jnp.asarray(value)

    def stored(p, args, kwargs):
      return value, grad

    def fresh(p, args, kwargs):
      new_value, new_grad = jax.value_and_grad(value_fn)(p, *args, **kwargs)
      return as_stat(owner, "value_fn(params)", new_value, value.dtype), cast_like(new_grad, grad)

    return jax.lax.cond(jnp.isfinite(value), stored, fresh, params, fn_args, fn_kwargs)

  return value_and_grad

