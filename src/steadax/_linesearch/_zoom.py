"""Zoom line search: a step size satisfying the strong Wolfe conditions.

Two phases (Nocedal & Wright, "Numerical Optimization", 2nd ed., Alg. 3.5 and 3.6): grow the trial
step until it brackets an acceptable one, then shrink the bracket by safeguarded cubic, quadratic or
bisection interpolation until the trial satisfies both conditions. Near a minimiser the Armijo test
is replaced, as in Hager & Zhang (2006, Eq. 23), by the approximate Wolfe condition, which still
discriminates where ``f`` only changes at machine precision.

Each iteration evaluates the objective once, in the branch of a ``lax.cond`` on the phase (so
``value_fn`` is traced twice per ``update``, once per phase, as in Optax's search).
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._docs import shared_args
from .._core._transformation import Transformation
from .._core._checks import check_nonnegative, check_positive, check_range
from .._core._module import hyper_field, static_field
from .._core._policy import hyper, safe_increment, scalar_stat_dtype, zero_count
from .._core._roles import COUNTER, OTHER, SCALAR, accumulator, state_roles
from .._core._tree import cast_like, zeros_like
from ._common import (
    add_scaled,
    as_stat,
    check_extra_args,
    check_same_structure,
    conj_tree,
    descent_value_and_grad,
    errors_to_inf,
    print_if,
    real_vdot,
    scale_tree,
    value_fn_kwargs,
)
from .._core._types import Params

__all__ = ["ZoomLinesearchInfo", "ScaleByZoomLinesearchState", "scale_by_zoom_linesearch"]

# What ``verbose=True`` prints is what Optax 0.2.8 prints (users and Optax's notebooks read it),
# with two corrections (docs/linesearch.md): the report of a capped search gets the line break
# Optax's lacks before FLAG_INTERVAL_NOT_FOUND, and the advice to enable x64 for a step below
# float32's machine epsilon is not given when the search already runs in float64. Under
# steadax.as_optax, ``optax._src.linesearch.FLAG_*`` are these strings.
FLAG_INTERVAL_NOT_FOUND = ("No interval satisfying curvature condition. "
                           "Consider increasing maximal possible stepsize of the linesearch.")
FLAG_INTERVAL_TOO_SMALL = "Length of searched interval has been reduced below threshold."
FLAG_CURVATURE_COND_NOT_SATISFIED = ("Returning stepsize with sufficient decrease "
                                     "but curvature condition not satisfied.")
FLAG_NO_STEPSIZE_FOUND = "Linesearch failed, no stepsize satisfying sufficient decrease found."
FLAG_NOT_A_DESCENT_DIRECTION = ("The linesearch failed because the provided direction "
                                "is not a descent direction. ")
_REPORT = ("INFO: optax.scale_by_zoom_linesearch:\n"
           "Value at current params: {value_init}\n"
           "Slope along update direction: {slope_init}\n"
           "Stepsize reached: {stepsize}\n"
           "Decrease Error: {decrease_error}\n"
           "Curvature Error: {curvature_error}")


@state_roles(num_linesearch_steps=COUNTER, decrease_error=SCALAR, curvature_error=SCALAR)
class ZoomLinesearchInfo(NamedTuple):
  """Diagnostics of the last zoom search.

  Attributes:
    num_linesearch_steps: int32 number of objective evaluations of the last search.
    decrease_error: how much the last trial step misses the sufficient decrease condition (0 when
      it holds; a positive value after a failed search, whose returned step is then the best one
      with sufficient decrease, if any).
    curvature_error: how much the last trial step misses the curvature condition (0 when it holds).
  """

  num_linesearch_steps: jax.Array
  decrease_error: jax.Array
  curvature_error: jax.Array


@state_roles(learning_rate=SCALAR, value=SCALAR, grad=accumulator(), info=OTHER)  # info: its own record
class ScaleByZoomLinesearchState(NamedTuple):
  """State of ``scale_by_zoom_linesearch`` (Optax's field names).

  Attributes:
    learning_rate: the step size found by the last search.
    value: the objective at the returned step (reused by ``value_and_grad_from_state``).
    grad: the gradient there, in JAX's convention (as from ``jax.value_and_grad``).
    info: ``ZoomLinesearchInfo``.
  """

  learning_rate: jax.Array
  value: jax.Array
  grad: Params
  info: ZoomLinesearchInfo


# The bracket's scalars, carried by the search loop as one array (``_Search.bracket``). On small
# problems a trial costs XLA CPU as much in kernel launches and loop-carry copies as in arithmetic:
# every carried scalar that a phase's branch reads is copied out of the branch into the carry, and
# every carried scalar the trial writes is a kernel of its own that recomputes the shared terms
# (the value, the slope, the Wolfe errors). As one array, the ten are one copy per trial; and a
# trial reads nothing else of the last one (in phase 1 the last trial is the bracket's ``high``
# end), so the step, value, slope and errors it writes are computed once and stored as they are.
# Measured with ``minimize`` on 2-d Rosenbrock (36 L-BFGS steps, 48 trials): 15 scalar copies per
# trial became 2, and the time per step went from 1.07x Optax's jitted loop to 0.93x.
_BRACKET = ("low", "value_low", "slope_low", "high", "value_high", "slope_high", "cubic_ref",
            "value_cubic_ref", "safe_stepsize", "safe_value")


def _bracket_field(name: str) -> property:
  """``_Search``'s read of one ``_BRACKET`` scalar, at its place in ``_BRACKET``."""
  index = _BRACKET.index(name)
  return property(lambda self: self.bracket[index])


@state_roles(count=COUNTER, stepsize=SCALAR, value=SCALAR, grad=accumulator(), slope=SCALAR,
             decrease_error=SCALAR, curvature_error=SCALAR, interval_found=OTHER, done=OTHER,
             failed=OTHER, bracket=OTHER, safe_grad=accumulator())  # bracket: _BRACKET's SCALARs
class _Search(NamedTuple):
  """The carry of the search loop. ``bracket`` holds ``_BRACKET``'s scalars, read as properties:
  ``low``/``high`` bound the bracket with f(low) <= f(high) (not low < high); ``cubic_ref`` is
  the third point of the cubic model; ``safe_*`` is the best step seen with sufficient decrease,
  returned if the curvature condition cannot be met. Build one with ``_search``."""

  count: jax.Array
  stepsize: jax.Array
  value: jax.Array
  grad: Any
  slope: jax.Array
  decrease_error: jax.Array
  curvature_error: jax.Array
  interval_found: jax.Array
  done: jax.Array
  failed: jax.Array
  bracket: jax.Array
  safe_grad: Any

  low = _bracket_field("low")
  value_low = _bracket_field("value_low")
  slope_low = _bracket_field("slope_low")
  high = _bracket_field("high")
  value_high = _bracket_field("value_high")
  slope_high = _bracket_field("slope_high")
  cubic_ref = _bracket_field("cubic_ref")
  value_cubic_ref = _bracket_field("value_cubic_ref")
  safe_stepsize = _bracket_field("safe_stepsize")
  safe_value = _bracket_field("safe_value")


def _search(**fields: Any) -> _Search:
  """A ``_Search`` from all its fields, the ``_BRACKET`` scalars given by name."""
  bracket = jnp.stack([fields.pop(name) for name in _BRACKET])
  return _Search(bracket=bracket, **fields)


def _cubic_minimizer(a, fa, slope_a, b, fb, c, fc):
  """The local minimiser of the cubic through (a, fa), (b, fb), (c, fc) with slope ``slope_a`` at
  a (Nocedal & Wright, Eq. 3.59); NaN or inf when it does not exist (callers check the range)."""
  db, dc = b - a, c - a
  rb = fb - fa - slope_a * db
  rc = fc - fa - slope_a * dc
  denom = (db * dc) ** 2 * (db - dc)
  cubic = (dc**2 * rb - db**2 * rc) / denom
  quadratic = (db**3 * rc - dc**3 * rb) / denom
  radical = quadratic**2 - 3 * cubic * slope_a
  return a + (jnp.sqrt(radical) - quadratic) / (3 * cubic)


def _quadratic_minimizer(a, fa, slope_a, b, fb):
  """The minimiser of the quadratic through (a, fa), (b, fb) with slope ``slope_a`` at a
  (Nocedal & Wright, Eq. 3.57)."""
  db = b - a
  curvature = (fb - fa - slope_a * db) / db**2
  return a - slope_a / (2 * curvature)


def _where(pred, new, old):
  return jax.tree_util.tree_map(lambda n, o: jnp.where(pred, n, o), new, old)


class ScaleByZoomLinesearch(Transformation):
  requires_float = True  # as the backtracking search: steps and gradients need floating params
  name = "scale_by_zoom_linesearch"
  State = ScaleByZoomLinesearchState
  max_linesearch_steps: Any = hyper_field()
  max_learning_rate: Any = hyper_field(None)
  tol: Any = hyper_field(0.0)
  increase_factor: Any = hyper_field(2.0)
  slope_rtol: Any = hyper_field(0.0001)
  curv_rtol: Any = hyper_field(0.9)
  approx_dec_rtol: Any = hyper_field(1e-06)
  stepsize_precision: Any = hyper_field(1e-05)
  initial_guess_strategy: str = static_field(default="keep")
  verbose: bool = static_field(default=False)

  def init_fn(self, params):
    stat = scalar_stat_dtype(params)
    inf = jnp.full([], jnp.inf, stat)
    return ScaleByZoomLinesearchState(
        learning_rate=jnp.ones([], stat),
        value=inf,
        grad=zeros_like(params),
        info=ZoomLinesearchInfo(num_linesearch_steps=zero_count(), decrease_error=inf,
                                curvature_error=inf),
    )

  def update_fn(self, updates, state, params=None, *, value=None, grad=None, value_fn=None,
                **extra_args):
    check_extra_args(self.owner, params, value, grad, value_fn)
    assert value_fn is not None  # check_extra_args raised otherwise
    check_same_structure(self.owner, "grad", grad, updates)
    stat = state.learning_rate.dtype
    value_init = as_stat(self.owner, "value", value, stat)
    grad_init = cast_like(grad, state.grad)
    slope_init = real_vdot(updates, grad_init, stat)
    evaluate = descent_value_and_grad(value_fn, value_fn_kwargs(value_fn, extra_args), stat,
                                      state.grad)

    h = lambda x: hyper(x, stat)  # noqa: E731
    tol, grow, c1, c2 = h(self.tol), h(self.increase_factor), h(self.slope_rtol), h(self.curv_rtol)
    precision = h(self.stepsize_precision)
    max_steps = hyper(self.max_linesearch_steps, jnp.int32)
    if self.initial_guess_strategy == "one":
      guess = jnp.ones([], stat)
    else:
      guess = state.learning_rate
    zero, inf = jnp.zeros([], stat), jnp.full([], jnp.inf, stat)

    def decrease_error(stepsize, value, slope):
      armijo = value - value_init - c1 * stepsize * slope_init  # N&W Eq. 3.6a
      if self.approx_dec_rtol is not None:
        # Hager & Zhang Eq. 23, used only once f is within approx_dec_rtol * |f(w)| of f(w)
        # (their Eq. 26-27 with one iterate): Armijo cannot resolve smaller decreases.
        approx = jnp.maximum(slope - (2 * c1 - 1) * slope_init,
                             value - value_init - h(self.approx_dec_rtol) * jnp.abs(value_init))
        armijo = jnp.minimum(armijo, approx)
      return errors_to_inf(armijo)

    def curvature_error(slope):
      return errors_to_inf(jnp.abs(slope) - c2 * jnp.abs(slope_init))  # N&W Eq. 3.7b

    def grow_step(s: _Search) -> tuple[jax.Array, jax.Array]:
      # Phase 1 (Alg. 3.5): the first trial is the guess, then it grows geometrically.
      grown = jnp.where(s.count == 0, guess, grow * s.high)  # s.high: the last trial
      if self.max_learning_rate is None:
        return grown, jnp.zeros([], bool)
      cap = h(self.max_learning_rate)
      return jnp.minimum(grown, cap), grown >= cap

    def zoom_step(s: _Search) -> jax.Array:
      # Phase 2 (Alg. 3.6): interpolate inside the bracket, falling back from the cubic model to
      # the quadratic one to bisection when the minimiser lies too close to an end (scipy's
      # safeguards: 20% and 10% of the bracket).
      left, right = jnp.minimum(s.low, s.high), jnp.maximum(s.low, s.high)
      width = right - left
      cubic = _cubic_minimizer(s.low, s.value_low, s.slope_low, s.high, s.value_high, s.cubic_ref,
                               s.value_cubic_ref)
      quadratic = _quadratic_minimizer(s.low, s.value_low, s.slope_low, s.high, s.value_high)
      cubic_ok = (cubic > left + 0.2 * width) & (cubic < right - 0.2 * width)
      quadratic_ok = (quadratic > left + 0.1 * width) & (quadratic < right - 0.1 * width)
      return jnp.where(cubic_ok, cubic, jnp.where(quadratic_ok, quadratic, (s.low + s.high) / 2))

    def trial(s: _Search, zoom: bool) -> _Search:
      """One trial of the phase ``zoom`` says: its step, the evaluation, the new bracket."""
      if zoom:
        stepsize, reached_cap = zoom_step(s), jnp.zeros([], bool)
      else:
        stepsize, reached_cap = grow_step(s)
      value, grad = evaluate(add_scaled(params, stepsize, updates))
      slope = real_vdot(updates, grad, stat)
      dec_err = decrease_error(stepsize, value, slope)
      curv_err = curvature_error(slope)
      done = jnp.maximum(dec_err, curv_err) <= tol
      sufficient = dec_err <= tol
      new = (stepsize, value, slope)
      low = (s.low, s.value_low, s.slope_low)
      high = (s.high, s.value_high, s.slope_high)
      if zoom:
        # The trial replaces the end that keeps a minimiser inside the bracket.
        trial_is_high = (dec_err > 0) | (value >= s.value_low)
        low_is_high = (slope * (s.high - s.low) >= 0) & ~trial_is_high
        new_high = _where(trial_is_high, new, _where(low_is_high, low, high))
        new_low = _where(trial_is_high, low, new)
        new_ref = _where(trial_is_high | low_is_high, high[:2], low[:2])
        keep_safe = sufficient & (value < s.safe_value)
        found = jnp.ones([], bool)
        # A bracket narrower than stepsize_precision ends the zoom if some step had sufficient
        # decrease; otherwise it goes on (very steep objectives need tiny steps).
        too_narrow = (jnp.abs(s.high - s.low) <= precision) & jnp.where(
            keep_safe, stepsize > 0, s.safe_stepsize > 0)
      else:
        # A trial without sufficient decrease, or no better than the last one, closes the bracket
        # above; an ascending slope closes it with the trial as its low end.
        # In this phase the bracket's high end is the last trial (or the start, before the first).
        last = high
        high_is_trial = (dec_err > 0) | ((value >= s.value_high) & (s.count > 0))
        low_is_trial = (slope >= 0) & ~high_is_trial
        new_low, new_high = _where(low_is_trial, (new, last), (last, new))
        new_ref = new_low[:2]
        found = high_is_trial | low_is_trial | done
        if self.verbose:
          print_if(reached_cap & ~found,
                   f"{_REPORT}\n{FLAG_INTERVAL_NOT_FOUND}\n{FLAG_CURVATURE_COND_NOT_SATISFIED}",
                   value_init=value_init, slope_init=slope_init, stepsize=stepsize,
                   decrease_error=dec_err, curvature_error=curv_err)
        done = done | (reached_cap & ~found)  # capped: the cap satisfies Armijo, take it
        keep_safe = sufficient
        too_narrow = jnp.zeros([], bool)
      safe_stepsize, safe_value, safe_grad = _where(
          keep_safe, (stepsize, value, grad), (s.safe_stepsize, s.safe_value, s.safe_grad))
      failed = ((safe_increment(s.count) >= max_steps) | too_narrow) & ~done
      return _search(
          count=safe_increment(s.count), stepsize=stepsize, value=value, grad=grad, slope=slope,
          decrease_error=dec_err, curvature_error=curv_err,
          interval_found=found, done=done, failed=failed,
          low=new_low[0], value_low=new_low[1], slope_low=new_low[2],
          high=new_high[0], value_high=new_high[1], slope_high=new_high[2],
          cubic_ref=new_ref[0], value_cubic_ref=new_ref[1],
          safe_stepsize=safe_stepsize, safe_value=safe_value, safe_grad=safe_grad,
      )

    def body(s: _Search) -> _Search:
      # One lax.cond on the phase per trial, each branch with its own evaluation, as Optax's search
      # does. Both phases side by side, merged by jnp.where around one evaluation, made XLA fuse
      # the scalar logic of both into every output of the carry (2.7x the scalar instructions of
      # one phase), and two conds around a shared evaluation were still about 4% slower per L-BFGS
      # step on small problems. The price is that value_fn is traced in both branches. Under vmap
      # the cond becomes a select of both.
      return jax.lax.cond(s.interval_found, lambda: trial(s, zoom=True),
                          lambda: trial(s, zoom=False))

    false = jnp.zeros([], bool)
    start = _search(
        count=zero_count(), stepsize=zero, value=value_init, grad=grad_init, slope=slope_init,
        decrease_error=inf, curvature_error=inf, interval_found=false, done=false, failed=false,
        low=zero, value_low=value_init, slope_low=slope_init,
        high=zero, value_high=value_init, slope_high=slope_init,
        cubic_ref=zero, value_cubic_ref=value_init,
        safe_stepsize=zero, safe_value=value_init, safe_grad=grad_init,
    )
    final = jax.lax.while_loop(lambda s: ~(s.done | s.failed), body, start)
    # On failure return the best step with sufficient decrease, or no step if the last trial left
    # the domain (its value is inf/NaN). Failing ends the loop, so this is decided once, after it.
    fall_back = final.failed & ((final.safe_stepsize > 0) | jnp.isinf(final.decrease_error))
    stepsize, value, grad = _where(fall_back, (final.safe_stepsize, final.safe_value, final.safe_grad),
                                   (final.stepsize, final.value, final.grad))

    if self.verbose:
      jax.lax.cond(final.failed, lambda: _print_failure(final, value_init, slope_init, precision),
                   lambda: None)
    new_state = ScaleByZoomLinesearchState(
        learning_rate=stepsize,
        value=value,
        grad=conj_tree(grad),
        info=ZoomLinesearchInfo(final.count, final.decrease_error, final.curvature_error),
    )
    return scale_tree(self.owner, stepsize, updates), new_state


def _print_failure(final: _Search, value_init: jax.Array, slope_init: jax.Array,
                   precision: jax.Array) -> None:
  """The diagnosis of a failed search (``verbose=True``), in Optax's words: the last trial, then
  the step returned and, when no step had sufficient decrease, the likely causes."""
  jax.debug.print(_REPORT, value_init=value_init, slope_init=slope_init, stepsize=final.stepsize,
                  decrease_error=final.decrease_error, curvature_error=final.curvature_error,
                  ordered=True)
  interval_length = jnp.abs(final.low - final.high)
  print_if(interval_length <= precision, FLAG_INTERVAL_TOO_SMALL + " Interval length: {length}.",
           length=interval_length)
  safe = final.safe_stepsize > 0
  print_if(safe, FLAG_CURVATURE_COND_NOT_SATISFIED
           + " Stepsize ensuring sufficient decrease: {safe_stepsize}.",
           safe_stepsize=final.safe_stepsize)
  print_if(~safe, FLAG_NO_STEPSIZE_FOUND)
  descent = slope_init < 0
  print_if(~safe & ~descent, FLAG_NOT_A_DESCENT_DIRECTION
           + "The slope (={slope_init}) at stepsize=0 should be negative", slope_init=slope_init)
  print_if(~safe & descent, "Consider augmenting the maximal number of linesearch iterations.")
  if final.stepsize.dtype != jnp.float64:  # in float64, advice to switch to x64 would be wrong
    eps = jnp.asarray(jnp.finfo(jnp.float32).eps)
    print_if(~safe & descent & (final.stepsize < eps),
             "Computed stepsize (={stepsize}) is below machine precision (={eps}), consider "
             "passing to higher precision like x64, using "
             "jax.config.update('jax_enable_x64', True).", stepsize=final.stepsize, eps=eps)
  print_if(~safe & descent & (jnp.abs(slope_init) > 1e16),
           "Very large absolute slope at stepsize=0. (|slope|={abs_slope_init}). The objective is "
           "badly conditioned. Consider reparameterizing objective (e.g., normalizing parameters) "
           "or finding a better guess for the initial parameters for the solver.",
           abs_slope_init=jnp.abs(slope_init))
  outside_domain = jnp.isinf(final.decrease_error)
  print_if(~safe & outside_domain, "Cannot even make a step without getting Inf or Nan. "
           "The linesearch won't make a step and the optimizer is stuck.")
  print_if(~safe & ~outside_domain, "Making an unsafe step, not decreasing enough the objective. "
           "Convergence of the solver is compromised as it does not reduce values.")


@shared_args
def scale_by_zoom_linesearch(
    max_linesearch_steps: ArrayLike,
    max_learning_rate: ArrayLike | None = None,
    tol: ArrayLike = 0.0,
    increase_factor: ArrayLike = 2.0,
    slope_rtol: ArrayLike = 1e-4,
    curv_rtol: ArrayLike = 0.9,
    approx_dec_rtol: ArrayLike | None = 1e-6,
    stepsize_precision: ArrayLike = 1e-5,
    initial_guess_strategy: str = "keep",
    verbose: bool = False,
) -> Transformation:
  """Scales the updates by a step size satisfying the strong Wolfe conditions.

  Finds ``eta`` with sufficient decrease ``f(w + eta u) <= f(w) + slope_rtol eta <u, g>`` and small
  curvature ``|<grad f(w + eta u), u>| <= curv_rtol |<u, g>|`` (up to ``tol``), where ``g`` is the
  gradient at ``w``: it grows the step until an acceptable one is bracketed, then zooms in by
  interpolation. Near a minimiser, where ``f`` changes by less than ``approx_dec_rtol |f(w)|``, the
  decrease test becomes Hager and Zhang's approximate Wolfe condition
  ``<grad f(w + eta u), u> <= (2 slope_rtol - 1) <u, g>``. If the search fails it returns the best
  step with sufficient decrease found; if there is none, its last trial (as Optax does: a small
  step that lets the optimizer move on), or 0 if that trial's value is not finite.

  ``update`` needs the keyword arguments ``value``, ``grad`` (conjugated for complex parameters,
  like any gradient) and ``value_fn``; extras whose names ``value_fn`` accepts are passed on to it.
  The value and gradient at the returned step are stored for ``value_and_grad_from_state``. Scalar
  statistics use the state's dtype (the widest floating dtype among the params, at least
  float32); the step counter is int32 in both x64 modes.

  Args:
    max_linesearch_steps: the most objective evaluations per search.
    max_learning_rate: the largest step size tried, or None for no bound.
    tol: tolerance on both conditions.
    increase_factor: growth factor of the trial step while bracketing (positive; at or below 1
      the trials do not grow and a search that needs a longer step ends at ``max_linesearch_steps``,
      as in Optax).
    slope_rtol: the sufficient decrease constant ``c1``.
    curv_rtol: the curvature constant ``c2`` (``math.inf`` keeps only sufficient decrease).
    approx_dec_rtol: relative closeness to ``f(w)`` below which the approximate Wolfe condition
      is used, or None for Armijo only.
    stepsize_precision: a bracket narrower than this ends the search when some step already has
      sufficient decrease.
    initial_guess_strategy: ``"keep"`` starts from the previous step size (suits SGD), ``"one"``
      from 1 (suits quasi-Newton directions such as L-BFGS).
    verbose: print Optax's diagnosis when the search fails or stops at ``max_learning_rate``
      (docs/linesearch.md).

  Returns:
    A transformation with ``ScaleByZoomLinesearchState``.

  References:
    Nocedal & Wright, "Numerical Optimization" (2nd ed.), 2006, Alg. 3.5 and 3.6, Eq. 3.7;
    Hager & Zhang, "Algorithm 851: CG_DESCENT", ACM TOMS 32(1), 2006, Eq. 23.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> def f(w): return jnp.sum((w - 1.0) ** 2)
    >>> opt = steadax.chain(steadax.sgd(1.0), steadax.scale_by_zoom_linesearch(15))
    >>> w = jnp.zeros(3); state = opt.init(w)
    >>> value, grad = jax.value_and_grad(f)(w)
    >>> updates, state = opt.update(grad, state, w, value=value, grad=grad, value_fn=f)
    >>> round(float(state[-1].learning_rate), 4), float(f(steadax.apply_updates(w, updates)))
    (0.5, 0.0)
  """
  owner = "scale_by_zoom_linesearch"
  if initial_guess_strategy not in ("keep", "one"):
    raise ValueError(
        f"{owner}: initial_guess_strategy must be 'keep' or 'one', got {initial_guess_strategy!r}.")
  check_positive(owner, "max_linesearch_steps", max_linesearch_steps)
  if max_learning_rate is not None:
    check_positive(owner, "max_learning_rate", max_learning_rate)
  check_nonnegative(owner, "tol", tol)
  check_positive(owner, "increase_factor", increase_factor)  # as Optax: no bound at 1
  check_range(owner, "slope_rtol", slope_rtol, 0.0, 1.0, high_open=True)
  check_nonnegative(owner, "curv_rtol", curv_rtol)
  if approx_dec_rtol is not None:
    check_nonnegative(owner, "approx_dec_rtol", approx_dec_rtol)
  check_nonnegative(owner, "stepsize_precision", stepsize_precision)
  return ScaleByZoomLinesearch(
      max_linesearch_steps, max_learning_rate, tol, increase_factor, slope_rtol, curv_rtol,
      approx_dec_rtol, stepsize_precision, initial_guess_strategy=initial_guess_strategy,
      verbose=verbose)
