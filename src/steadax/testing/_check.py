"""``check_transformation``: the type-stability contract checked on any transformation.

The checks are those of the project's own conformance suite (tests/conformance), which calls this
function. Every check that only concerns types (structure, shapes, dtypes, weak types, carry
invariance of ``lax.scan``/``lax.cond``/``lax.while_loop``, retracing) is a trace-time fact: it is
traced with ``jax.eval_shape``, which costs no XLA compilation. Only the ``finite`` check compiles,
one step, which it runs ``steps`` times.
"""

import contextlib
from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.experimental  # older JAX's x64 contexts (_x64)
import jax.numpy as jnp
import numpy as np

from .._core._interface import (
    _FunctionTransformation,
    _FunctionTransformationExtraArgs,
    _function_owner,
)
from .._core._transformation import Transformation
from .._core._updates import apply_updates
from .._core._config import is_strict, strict_mode
from .._core._contract import collect_drift
from .._core._module import Module
from .._core._policy import key_path_str
from ._compare import non_finite, type_differences, type_signature, update_type_differences, weak_leaves
from ._report import ConformanceReport, Violation, path_in_message, violation_from_exception
from .._core._interface import GradientTransformation
from .._core._types import Params, Updates

__all__ = ["CHECKS", "check_transformation", "default_grads", "perturb_hyperparameters"]

CHECKS = ("init", "abstract_init", "update", "eager", "jit", "recompile", "scan", "cond",
          "while_loop", "finite")
# The checks that look at types only: they also run in the secondary configurations (the other x64
# mode, mixed-precision parameters, gradients in another dtype).
_TYPE_CHECKS = ("init", "abstract_init", "update", "jit", "scan", "cond", "while_loop")
_FORMS = ("scan", "cond", "while_loop")
# After a failed update check, these would fail the same way (the contract raises at the first
# step): they are skipped with this reason instead of repeating the update check's violations.
_AFTER_UPDATE = ("eager", "jit", "recompile", "scan", "cond", "while_loop", "finite")


# --- Inputs --------------------------------------------------------------------------------------

def default_grads(params: Params) -> Any:
  """The gradient of ``sum 0.5 |x - 0.1|^2`` at ``params``, in each parameter's dtype.

  Args:
    params: a tree of arrays.

  Returns:
    ``x - 0.1`` for every floating or complex leaf (zeros for integer and boolean leaves).

  Example:
    >>> import jax.numpy as jnp
    >>> from steadax.testing import default_grads
    >>> default_grads({"w": jnp.ones(2, jnp.bfloat16)})["w"]
    Array([0.898438, 0.898438], dtype=bfloat16)
  """
  def grad(x):
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jnp.inexact):
      return x - jnp.asarray(0.1, x.dtype)
    return jnp.zeros_like(x)

  return jax.tree_util.tree_map(grad, params)


def perturb_hyperparameters(tx: GradientTransformation, factor: float = 0.9) -> Any:
  """The same transformation with every floating hyperparameter leaf multiplied by ``factor``.

  New values of the same types: a steadax transformation must not be traced again for them.

  Args:
    tx: a transformation (any pytree).
    factor: the multiplier.

  Returns:
    A transformation of the same structure.

  Example:
    >>> import steadax
    >>> from steadax.testing import perturb_hyperparameters
    >>> float(perturb_hyperparameters(steadax.scale(2.0)).step_size)
    1.8
  """
  def change(x):
    if isinstance(x, float):
      return x * factor
    dtype = getattr(x, "dtype", None)
    if dtype is not None and hasattr(x, "shape") and jnp.issubdtype(dtype, jnp.inexact):
      if getattr(x, "weak_type", False):  # a hyperparameter as steadax stores a number: stays weak
        return x * factor
      return (x * factor).astype(dtype)
    return x

  return jax.tree_util.tree_map(change, tx)


def _has_float_leaves(tx: Any) -> bool:
  for leaf in jax.tree_util.tree_leaves(tx):
    dtype = jnp.result_type(leaf) if isinstance(leaf, float) else getattr(leaf, "dtype", None)
    if dtype is not None and jnp.issubdtype(dtype, jnp.inexact):
      return True
  return False


def _float_dtypes(x64: bool) -> list[np.dtype]:
  dtypes = [np.dtype(jnp.bfloat16), np.dtype(jnp.float16), np.dtype(jnp.float32)]
  return dtypes + [np.dtype(jnp.float64)] if x64 else dtypes


def _is_real_float(x: Any) -> bool:
  dtype = getattr(x, "dtype", None)
  return dtype is not None and jnp.issubdtype(dtype, jnp.floating)


def _mixed_params(params: Any, x64: bool) -> Any:
  """``params`` with its floating leaves cycled through bfloat16, float16, float32 (float64)."""
  dtypes = _float_dtypes(x64)
  leaves, treedef = jax.tree_util.tree_flatten(params)
  count = 0
  mixed = []
  for leaf in leaves:
    if _is_real_float(leaf):
      leaf = jnp.asarray(leaf).astype(dtypes[count % len(dtypes)])
      count += 1
    mixed.append(leaf)
  return jax.tree_util.tree_unflatten(treedef, mixed)


def _other_dtype(dtype: Any) -> np.dtype:
  """A gradient dtype different from a parameter's: float32 for 16-bit floats, else bfloat16."""
  return np.dtype(jnp.float32) if np.dtype(dtype).itemsize <= 2 else np.dtype(jnp.bfloat16)


@contextlib.contextmanager
def _x64(value: bool):
  """JAX's x64 flag for this thread (the process-wide flag is left alone): the flag is part of
  every trace and compilation cache key, so programs of both modes never mix."""
  state: Any = getattr(jax, "enable_x64", None)
  if value == bool(jax.config.read("jax_enable_x64")):
    yield  # the mode in force: no context (nothing about the traces or caches changes)
  elif callable(state):
    context: Any = state(value)
    with context:
      yield
  else:  # older JAX: jax.experimental's contexts
    legacy: Any = jax.experimental
    with (legacy.enable_x64() if value else legacy.disable_x64()):
      yield


# --- One configuration -----------------------------------------------------------------------------

class _Config:
  """The checks of one configuration (an x64 mode and a way of typing the parameters)."""

  def __init__(self, run: "_Run", label: str, params: Any, grads_fn: Callable, checks: tuple[str, ...]):
    self.run = run
    self.tx = run.tx
    self.label = label
    self.params = params
    self.grads_fn = grads_fn
    self.checks = checks

  # Reporting.
  def fail(self, check: str, problems: list[tuple[str, str]]) -> bool:
    for path, message in problems:
      self.run.violations.append(Violation(check, path, message, self.label))
    return bool(problems)

  def record(self, check: str, problems: list[tuple[str, str]]) -> bool:
    """Record ``check``'s problems (or its pass); True when it passed."""
    if not self.fail(check, problems):
      self.run.passed.append((check, self.label))
      return True
    return False

  def error(self, check: str, error: BaseException) -> None:
    self.run.violations.append(violation_from_exception(check, self.label, error))

  def skip(self, check: str, reason: str) -> None:
    self.run.skipped.append((check, self.label, reason))

  # The step.
  def feed(self, params: Any) -> tuple[Any, dict]:
    grads = self.grads_fn(params)
    extra = self.run.extra_fn(params, grads) if self.run.extra_fn is not None else {}
    return grads, extra

  def step(self, tx: Any, params: Any, state: Any) -> tuple[Any, Any]:
    grads, extra = self.feed(params)
    return tx.update(grads, state, params, **extra)

  def raw_update(self, params: Any, state: Any) -> tuple[Any, Any, Any]:
    """The transformation's own update, before the contract's checks and casts (a steadax
    transformation's ``update_fn``, a function pair's update function), with its incoming updates."""
    grads, extra = self.feed(params)
    tx = self.tx
    if isinstance(tx, (Transformation, _FunctionTransformationExtraArgs)):
      updates, state = tx.update_fn(grads, state, params, **extra)
    elif isinstance(tx, _FunctionTransformation):
      updates, state = tx.update_fn(grads, state, params)
    else:
      updates, state = tx.update(grads, state, params, **extra)
    return grads, updates, state

  def execute(self) -> None:
    wanted = self.checks
    params = self.params
    # Init: concrete where a check runs on values, else traced.
    state = None
    if any(c in wanted for c in ("init", "eager", "finite")):
      try:
        state = self.tx.init(params)
      except Exception as e:  # pylint: disable=broad-except
        self.error("init", e)
        for check in wanted:
          if check != "init":
            self.skip(check, "init failed")
        return
      if "init" in wanted:
        self.record("init", weak_leaves(state, "fresh state"))
    if "abstract_init" in wanted or state is None:
      try:
        abstract = jax.eval_shape(self.tx.init, params)
      except Exception as e:  # pylint: disable=broad-except
        self.error("abstract_init", e)
        for check in wanted:
          if check not in ("init", "abstract_init"):
            self.skip(check, "init from abstract values failed")
        return
      if "abstract_init" in wanted:
        problems = (type_differences(state, abstract, "init from jax.eval_shape") if state is not None
                    else weak_leaves(abstract, "fresh state (from jax.eval_shape)"))
        self.record("abstract_init", problems)
      if state is None:
        state = abstract

    if "update" in wanted and not self.check_update(params, state):
      for check in wanted:
        if check in _AFTER_UPDATE:
          self.skip(check, "the update check failed in this configuration (its violations are "
                           "listed above)")
      return
    if "eager" in wanted:
      self.check_eager(params, state)
    if "jit" in wanted or "recompile" in wanted:
      self.check_jit(params, state)
    forms = [f for f in _FORMS if f in wanted]
    if forms:
      self.check_forms(forms, params, state)
    if "finite" in wanted:
      self.check_finite(params, state)

  def check_update(self, params: Any, state: Any) -> bool:
    # The contract of each inner transformation (a chain's members, a wrapper's inner) records its
    # dtype drift instead of raising at the first leaf: every drifting leaf of every inner
    # transformation is listed, with the path in that transformation's own state or updates.
    drifts: list = []
    try:
      with collect_drift() as drifts:
        grads, updates, new_state = jax.eval_shape(self.raw_update, params, state)
    except Exception as e:  # pylint: disable=broad-except
      self.fail("update", [(path_in_message(str(d)), str(d)) for d in drifts])
      self.error("update", e)
      return False
    problems = [(path_in_message(str(d)), str(d)) for d in drifts]
    problems += type_differences(state, new_state, "state after one update")
    if isinstance(self.tx, Transformation) and self.tx.updates_follow_params:
      # A steadax transformation writes each update in its parameter's dtype itself; a function
      # pair's updates are cast by the contract (checked on the result by jit and the forms).
      problems += update_type_differences(params, updates, "update (before the contract)", incoming=grads)
    return self.record("update", problems)

  def check_eager(self, params: Any, state: Any) -> None:
    try:
      updates, new_state = self.step(self.tx, params, state)
    except Exception as e:  # pylint: disable=broad-except
      self.error("eager", e)
      return
    self.record("eager", type_differences(state, new_state, "state after an un-jitted update")
                + update_type_differences(params, updates, "updates of an un-jitted update"))

  def check_jit(self, params: Any, state: Any) -> None:
    traces = []
    is_module = isinstance(self.tx, Module)

    def step(tx, params, state):
      traces.append(1)
      updates, state = self.step(tx, params, state)
      return apply_updates(params, updates), state, updates

    # Retracing and the types a jitted step returns are trace-time facts: the calls go through the
    # jitted function's own trace cache (the one a real call uses) with jax.eval_shape.
    if is_module:
      jitted = jax.jit(step)
      changed = self.run.changed if self.run.changed is not None else perturb_hyperparameters(self.tx)
      calls = [(lambda p, s, t=t: jax.eval_shape(jitted, t, p, s)) for t in (self.tx, changed, self.tx)]
    else:  # the transformation cannot be an argument (an Optax NamedTuple of closures)
      jitted = jax.jit(lambda p, s: step(self.tx, p, s))
      calls = [lambda p, s: jax.eval_shape(jitted, p, s)] * 3
    problems = []
    p, s = params, state
    try:
      for i, call in enumerate(calls):
        p, s, u = call(p, s)
        problems += type_differences(state, s, f"state after jitted step {i + 1}")
        problems += type_differences(params, p, f"params after jitted step {i + 1}")
        problems += update_type_differences(params, u, f"updates of jitted step {i + 1}")
        if problems:
          break
    except Exception as e:  # pylint: disable=broad-except
      if "jit" in self.checks:
        self.error("jit", e)
      if "recompile" in self.checks:
        self.skip("recompile", "the jitted step failed")
      return
    if "jit" in self.checks:
      self.record("jit", problems)
    if "recompile" not in self.checks:
      return
    if not is_module:
      self.skip("recompile", "not a steadax Module: its hyperparameters are not pytree leaves "
                             "(a new value is a new transformation, hence a new program)")
    elif self.run.changed is None and not _has_float_leaves(self.tx):
      self.skip("recompile", "no floating hyperparameter leaves to change")
    elif problems:
      self.skip("recompile", "the jitted step changed types (a retrace would follow from that)")
    else:
      self.record("recompile", [] if len(traces) == 1 else [
          ("", f"the jitted step was traced {len(traces)} times for new hyperparameter values "
               "(a hyperparameter is static or changes type: each new value compiles a new "
               "program)")])

  def forms_fn(self, forms: list[str]) -> Callable:
    """``fn(tx, params, state, pred) -> {form: results}`` with the step inside each form."""
    steps = self.run.steps

    def fn(tx, params, state, pred):
      results = {}
      if "scan" in forms:
        def scan_body(carry, _):
          p, s = carry
          u, s = self.step(tx, p, s)
          return (apply_updates(p, u), s), u

        (p, s), us = jax.lax.scan(scan_body, (params, state), None, length=steps)
        results["scan"] = (p, s, jax.tree_util.tree_map(lambda u: u[-1], us))
      if "cond" in forms:
        def skip():
          return jax.tree_util.tree_map(jnp.zeros_like, params), state

        # ``pred`` is traced: both branches are traced and must return the same types.
        u, s = jax.lax.cond(pred, lambda: self.step(tx, params, state), skip)
        results["cond"] = (None, s, u)
      if "while_loop" in forms:
        def body(carry):
          i, p, s = carry
          u, s = self.step(tx, p, s)
          return i + jnp.asarray(1, jnp.int32), apply_updates(p, u), s

        _, p, s = jax.lax.while_loop(lambda c: c[0] < jnp.asarray(min(steps, 2), jnp.int32), body,
                                     (jnp.asarray(0, jnp.int32), params, state))
        results["while_loop"] = (p, s, None)
      return results

    return fn

  def check_forms(self, forms: list[str], params: Any, state: Any) -> None:
    # One traced program for all forms; a failure is attributed by tracing each form alone.
    tx_arg = self.tx if isinstance(self.tx, Module) else None

    def trace(selected):
      fn = self.forms_fn(selected)
      if tx_arg is None:
        return jax.eval_shape(lambda p, s, b: fn(self.tx, p, s, b), params, state, jnp.asarray(True))
      return jax.eval_shape(fn, tx_arg, params, state, jnp.asarray(True))

    try:
      results = trace(forms)
    except Exception:  # pylint: disable=broad-except
      results = {}
      for form in forms:
        try:
          results.update(trace([form]))
        except Exception as e:  # pylint: disable=broad-except
          self.error(form, e)
    for form in forms:
      if form not in results:
        continue
      p, s, u = results[form]
      what = {"scan": f"after {self.run.steps} steps of lax.scan", "cond": "after lax.cond",
              "while_loop": f"after {min(self.run.steps, 2)} steps of lax.while_loop"}[form]
      problems = type_differences(state, s, f"state {what}")
      if p is not None:
        problems += type_differences(params, p, f"params {what}")
      if u is not None:
        problems += update_type_differences(params, u, f"updates {what}")
      self.record(form, problems)

  def check_finite(self, params: Any, state: Any) -> None:
    # One compiled step run ``steps`` times: after step 1 its values are those the forms' lax.cond
    # computes, after 2 the while_loop's, after the last the scan's.
    def one(tx, params, state):
      updates, state = self.step(tx, params, state)
      return apply_updates(params, updates), state

    if isinstance(self.tx, Module):
      jitted = jax.jit(one)
      call = lambda p, s: jitted(self.tx, p, s)
    else:
      jitted = jax.jit(lambda p, s: one(self.tx, p, s))
      call = jitted
    problems = []
    p, s = params, state
    try:
      for i in range(self.run.steps):
        p, s = call(p, s)
        problems += type_differences(state, s, f"state after compiled step {i + 1}")
        problems += type_differences(params, p, f"params after compiled step {i + 1}")
        problems += non_finite(s, f"state after compiled step {i + 1}")
        problems += non_finite(p, f"params after compiled step {i + 1}")
        if problems:
          break
    except Exception as e:  # pylint: disable=broad-except
      self.error("finite", e)
      return
    self.record("finite", problems)


class _Run:
  def __init__(self, tx: Any, extra_fn: Callable | None, steps: int, changed: Any):
    self.tx = tx
    self.changed = changed
    self.extra_fn = extra_fn
    self.steps = steps
    self.violations: list[Violation] = []
    self.passed: list[tuple[str, str]] = []
    self.skipped: list[tuple[str, str, str]] = []


def _name_of(tx: Any) -> str:
  if isinstance(tx, Transformation):
    return tx.owner
  if isinstance(tx, (_FunctionTransformation, _FunctionTransformationExtraArgs)):
    return _function_owner(tx)
  update = getattr(tx, "update", None)
  qualname = getattr(update, "__qualname__", "")
  return qualname.split(".<locals>")[0] if qualname else type(tx).__name__


def _strong_params(params: Any) -> Any:
  """Weakly typed parameter leaves (``jnp.asarray(1.0)``, Python floats) as strong arrays: a weak
  parameter becomes strong after its first update, which would retrace every jitted step."""
  def strong(x):
    if isinstance(x, (bool, int, float, complex)):
      return jnp.asarray(x).astype(jnp.result_type(x))
    if getattr(getattr(x, "aval", None), "weak_type", False):
      return x.astype(x.dtype)
    return x

  return jax.tree_util.tree_map(strong, params)


def _grads_function(grads: Any) -> Callable:
  if grads is None:
    return default_grads
  if callable(grads):
    return grads
  fixed = grads

  def given(params):
    # A fixed gradient tree, cast to each parameter's dtype when the configuration retyped them.
    return jax.tree_util.tree_map(
        lambda g, p: jnp.asarray(g).astype(p.dtype) if _is_real_float(p) and _is_real_float(g) else g,
        fixed, params)

  return given


def _retyped_grads(grads_fn: Callable) -> Callable:
  def other(params):
    return jax.tree_util.tree_map(
        lambda g, p: g.astype(_other_dtype(p.dtype)) if _is_real_float(p) and _is_real_float(g) else g,
        grads_fn(params), params)

  return other


def check_transformation(
    tx: GradientTransformation,
    params: Params,
    *,
    grads: Updates | None = None,
    extra_args: dict | Callable[[Any, Any], dict] | None = None,
    checks: Iterable[str] | None = None,
    steps: int = 3,
    x64: str = "both",
    mixed_precision: bool = True,
    new_hyperparameters: GradientTransformation | None = None,
    strict: bool = True,
    name: str | None = None,
    raise_on_failure: bool = False,
) -> ConformanceReport:
  """Check a transformation against steadax's type-stability contract and report every violation.

  The checks (``CHECKS``; each reports the tree path of every leaf it finds at fault):

  * ``init``: ``tx.init(params)`` runs and gives strongly typed arrays only.
  * ``abstract_init``: ``jax.eval_shape(tx.init, params)`` works and gives the same types.
  * ``update``: one update keeps the state's exact structure, shapes, dtypes and strong types;
    a steadax ``Transformation`` writes each update in its parameter's dtype itself. This looks at
    the transformation's own update, before steadax's contract checks or casts it, and the
    contract of each member of a chain or wrapper records its drift instead of raising, so every
    drifting leaf of every member is listed, not only the first. When it fails, the checks below
    (which would fail the same way) are skipped.
  * ``eager``: one un-jitted update on the concrete state keeps the types.
  * ``jit``: a jitted step keeps the types of the state, the params and the updates (each update
    in its parameter's dtype) over three calls.
  * ``recompile``: for a steadax ``Module``, new hyperparameter values reuse the jitted step's
    trace (trace count 1): ``new_hyperparameters``, or ``tx`` with every floating leaf scaled by 0.9.
  * ``scan``, ``cond``, ``while_loop``: the step inside ``lax.scan`` (``steps`` steps), both
    branches of ``lax.cond`` (the update, or zero updates and the unchanged state) and
    ``lax.while_loop`` (2 steps), which reject any carry whose type changes.
  * ``finite``: ``steps`` steps of one compiled step keep every type and give finite state and
    parameters (for finite inputs).

  The type checks run in several configurations: the parameters as given and, with
  ``mixed_precision``, with their floating leaves cycled through bfloat16, float16, float32 (and
  float64 under x64), and with gradients in a dtype other than the parameters' (bfloat16 for 32/64-bit
  parameters, float32 for 16-bit ones): the state must not follow the gradients' dtype. With
  ``x64="both"`` all of that runs again with JAX's x64 flag flipped, in this process, through JAX's
  thread-local ``jax.enable_x64`` context: a subprocess could not receive an arbitrary
  transformation (closures do not pickle), and the flag is part of every trace and cache key, so
  programs of the two modes never mix. Values and retracing (``eager``, ``recompile``, ``finite``)
  are checked in the first configuration only.

  Everything but ``finite`` (one compiled step) is traced with ``jax.eval_shape``: no XLA
  compilation.

  Args:
    tx: the transformation: a steadax transformation, a ``GradientTransformation(init, update)``
      pair, an Optax transformation or any object with ``init`` and ``update``.
    params: a tree of (concrete) parameters, the tree the checks start from. Weakly typed leaves
      (``jnp.asarray(1.0)``) are made strong first, as a training loop's first update makes them.
    grads: the gradients fed to every update: None for the gradient of ``sum 0.5 |x - 0.1|^2`` (in
      each parameter's dtype, see ``default_grads``), a function ``params -> grads``, or a fixed tree.
    extra_args: keyword extras for ``update`` (``value``, ``value_fn`` ...): a dict, or
      ``fn(params, grads) -> dict`` called inside each step.
    checks: the names of the checks to run (default: all).
    steps: steps of ``lax.scan`` and of the ``finite`` check.
    x64: ``"both"`` (also check with x64 flipped) or ``"current"`` (the process's mode only).
    mixed_precision: also check the mixed-precision and other-gradient-dtype configurations.
    new_hyperparameters: the same transformation built with other hyperparameter values (say
      ``my_optimizer(learning_rate=0.2)``), for the ``recompile`` check; it also catches a
      hyperparameter held as static data, which scaling the leaves of ``tx`` cannot change.
    strict: run inside ``steadax.strict_mode(strict)`` (steadax's contract raises on dtype drift
      instead of casting it back; the violation names the transformation and path).
    name: the name the report uses (default: the transformation's).
    raise_on_failure: raise a ``ConformanceError`` (an AssertionError with the report as its
      message) when any check fails.

  Returns:
    A ``ConformanceReport``: ``report.ok``, ``report.violations`` (check, configuration, tree path,
    message), and a readable ``str(report)``.

  Raises:
    ConformanceError: with ``raise_on_failure=True``, when a check fails.
    ValueError: an unknown check name, ``x64`` value or a ``steps`` below 1.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> from steadax.testing import check_transformation
    >>> params = {"w": jnp.ones((2, 3)), "b": jnp.zeros(3)}
    >>> report = check_transformation(steadax.adam(1e-3), params)
    >>> report.ok
    True
  """
  selected = tuple(CHECKS if checks is None else checks)
  unknown = [c for c in selected if c not in CHECKS]
  if unknown:
    raise ValueError(f"check_transformation: unknown checks {unknown}; the checks are {list(CHECKS)}.")
  if x64 not in ("both", "current"):
    raise ValueError(f"check_transformation: x64 must be 'both' or 'current', got {x64!r}.")
  if not isinstance(steps, int) or steps < 1:
    raise ValueError(f"check_transformation: steps must be a positive int, got {steps!r}.")
  if not (callable(getattr(tx, "init", None)) and callable(getattr(tx, "update", None))):
    hint = " (a factory: call it, e.g. `adam(1e-3)`)" if callable(tx) else ""
    raise TypeError(f"check_transformation: tx must have `init` and `update`, got {tx!r}{hint}.")
  if extra_args is None or callable(extra_args):
    extra_fn = extra_args
  else:
    fixed_extra = dict(extra_args)
    extra_fn = lambda params, grads: fixed_extra

  run = _Run(tx, extra_fn, steps, new_hyperparameters)
  params = _strong_params(params)
  grads_fn = _grads_function(grads)
  type_checks = tuple(c for c in selected if c in _TYPE_CHECKS)
  here = bool(jax.config.read("jax_enable_x64"))
  modes = [here] + ([not here] if x64 == "both" else [])
  with strict_mode(strict) if is_strict() != strict else contextlib.nullcontext():
    for mode in modes:
      mode_label = "x64 on" if mode else "x64 off"
      with _x64(mode):
        configs = [(mode_label, params, grads_fn, selected if mode == here else type_checks)]
        if mixed_precision:
          mixed = _mixed_params(params, mode)
          if type_signature(mixed) != type_signature(params):
            configs.append((f"{mode_label}, mixed-precision params", mixed, grads_fn, type_checks))
          if any(_is_real_float(x) for x in jax.tree_util.tree_leaves(params)):
            configs.append((f"{mode_label}, gradients in another dtype", params,
                            _retyped_grads(grads_fn), type_checks))
        for label, config_params, config_grads, config_checks in configs:
          if config_checks:
            _Config(run, label, config_params, config_grads, config_checks).execute()

  report = ConformanceReport(name or _name_of(tx), tuple(run.violations), tuple(run.passed),
                             tuple(run.skipped))
  if raise_on_failure:
    report.raise_if_failed()
  return report
