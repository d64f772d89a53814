"""steadax.testing.check_transformation: each check passes on conforming transformations and reports
the check, configuration and tree path of a deliberately broken one."""

from __future__ import annotations

import typing

import jax
import jax.numpy as jnp
import optax
import pytest

import steadax
from steadax import testing

PARAMS = {"w": jnp.ones((2, 3), jnp.float32), "b": jnp.zeros(3, jnp.float32)}
# Only the process's x64 mode and the parameters as given unless a test is about the others.
QUICK = dict(x64="current", mixed_precision=False)


def _momentum_pair(state_follows_grads: bool):
  """A user's momentum written as a function pair; optionally with the classic mistake of letting
  the state take the gradients' dtype."""
  def init(params):
    return {"mu": jax.tree_util.tree_map(jnp.zeros_like, params)}

  def update(grads, state, params=None):
    def moment(m, g):
      if state_follows_grads:
        return jnp.asarray(0.9, g.dtype) * m.astype(g.dtype) + g
      return jnp.asarray(0.9, m.dtype) * m + g.astype(m.dtype)

    mu = jax.tree_util.tree_map(moment, state["mu"], grads)
    return jax.tree_util.tree_map(lambda m: -0.1 * m, mu), {"mu": mu}

  return steadax.GradientTransformation(init, update)


class _CountState(typing.NamedTuple):
  count: jax.Array


class _Counter(steadax.Transformation):
  """Counts steps; ``wide`` adds the default integer (int64 under x64) to an int32 counter."""

  learning_rate: float = steadax.hyper_field(0.1)
  wide: bool = steadax.static_field(False)

  def init_fn(self, params):
    return _CountState(jnp.zeros([], jnp.int32))

  def update_fn(self, updates, state, params=None, **extra):
    one = jnp.ones([], jax.dtypes.canonicalize_dtype(jnp.int64) if self.wide else jnp.int32)
    count = state.count.astype(one.dtype) + one
    step = jnp.asarray(self.learning_rate, jnp.float32)
    # Each update in its parameter's dtype, as the contract asks of a Transformation.
    updates = jax.tree_util.tree_map(lambda g, p: (-step * g.astype(jnp.float32)).astype(p.dtype),
                                     updates, params)
    return updates, _CountState(count)


class _StaticRate(steadax.Transformation):
  """A learning rate held as static data: every new value is a new program."""

  learning_rate: float = steadax.static_field(0.1)

  def update_fn(self, updates, state, params=None, **extra):
    return jax.tree_util.tree_map(lambda g, p: (g * jnp.asarray(-self.learning_rate, g.dtype)).astype(p.dtype),
                                  updates, params), state


def test_a_steadax_optimizer_conforms_in_every_configuration():
  report = testing.check_transformation(steadax.adamw(1e-2, weight_decay=1e-3), PARAMS)
  assert report.ok, str(report)
  configs = {config for _, config in report.passed}
  assert {"x64 off", "x64 on", "x64 off, mixed-precision params", "x64 on, mixed-precision params",
          "x64 off, gradients in another dtype", "x64 on, gradients in another dtype"} == configs
  assert {check for check, _ in report.passed} == set(testing.CHECKS)
  assert str(report).startswith("chain: conforms (")


def test_state_following_the_gradient_dtype_is_reported_leaf_by_leaf():
  assert testing.check_transformation(_momentum_pair(False), PARAMS, x64="current").ok
  report = testing.check_transformation(_momentum_pair(True), PARAMS, x64="current")
  assert report.failed_checks() == ["update"]
  mode = "x64 on" if jax.config.jax_enable_x64 else "x64 off"
  found = {(v.config, v.path, v.message) for v in report.violations}
  assert found == {(f"{mode}, gradients in another dtype", p,
                    "state after one update: dtype changed from float32 to bfloat16")
                   for p in ("['mu']['b']", "['mu']['w']")}
  text = str(report)
  assert "['mu']['w']: state after one update: dtype changed from float32 to bfloat16" in text
  assert "skipped jit, scan, cond, while_loop" in text


def test_every_drifting_leaf_of_every_inner_transformation_is_reported():
  # Inside a chain the members go through steadax's contract, which in strict mode raises at the
  # first drifting leaf; the update check collects them all instead: both momentum leaves, and the
  # float16 updates of a later member.
  def half_updates(grads, state, params=None):
    return jax.tree_util.tree_map(lambda g: g.astype(jnp.float16), grads), state

  to_half = steadax.GradientTransformation(lambda p: steadax.EmptyState(), half_updates)
  tx = steadax.chain(_momentum_pair(True), steadax.scale(1.0), to_half)
  report = testing.check_transformation(tx, PARAMS, checks=("update",), x64="current")
  assert report.failed_checks() == ["update"]
  mode = "x64 on" if jax.config.jax_enable_x64 else "x64 off"
  found = {(v.config, v.path) for v in report.violations}
  leaves = ("['mu']['b']", "['mu']['w']")
  assert {(f"{mode}, gradients in another dtype", p) for p in leaves} <= found
  assert {(mode, "['b']"), (mode, "['w']")} <= found
  text = str(report)
  for leaf in ("b", "w"):
    assert f"state leaf at ['mu']['{leaf}'] changed dtype from float32 to bfloat16" in text
    assert f"update at ['{leaf}'] came back as float16" in text


@pytest.mark.x32_only
def test_a_counter_that_widens_under_x64_fails_only_with_x64_on():
  report = testing.check_transformation(_Counter(), PARAMS, x64="both")
  assert report.ok, str(report)
  report = testing.check_transformation(_Counter(wide=True), PARAMS, x64="both")
  assert report.failed_checks() == ["update"]
  assert {v.config for v in report.violations} == {
      "x64 on", "x64 on, mixed-precision params", "x64 on, gradients in another dtype"}
  assert {v.path for v in report.violations} == {".count"}
  assert "dtype changed from int32 to int64" in report.violations[0].message


def test_scan_and_cond_reject_a_drifting_carry_on_their_own():
  # Without the update check, the forms themselves find the drift (the contract raises in strict
  # mode, naming the path; lax.scan would reject the carry).
  report = testing.check_transformation(_momentum_pair(True), PARAMS, checks=("scan", "cond", "while_loop"),
                                        x64="current", mixed_precision=True)
  assert set(report.failed_checks()) == {"scan", "cond", "while_loop"}
  assert all(v.config.endswith("gradients in another dtype") for v in report.violations)
  assert {v.path for v in report.violations} <= {"['mu']['b']", "['mu']['w']"}


def test_a_hyperparameter_held_as_static_data_recompiles():
  changed = _StaticRate(0.2)
  report = testing.check_transformation(_StaticRate(0.1), PARAMS, checks=("jit", "recompile"),
                                        new_hyperparameters=changed, **QUICK)
  assert report.failed_checks() == ["recompile"]
  assert "traced 2 times" in report.violations[0].message
  ok = testing.check_transformation(_Counter(0.1), PARAMS, checks=("jit", "recompile"),
                                    new_hyperparameters=_Counter(0.2), **QUICK)
  assert ok.ok and ("recompile", "x64 off" if not jax.config.jax_enable_x64 else "x64 on") in ok.passed


def test_non_finite_values_name_their_path():
  def update(grads, state, params=None):
    return {"w": grads["w"] / jnp.zeros_like(grads["w"]), "b": grads["b"]}, state

  tx = steadax.GradientTransformation(lambda p: steadax.EmptyState(), update)
  report = testing.check_transformation(tx, PARAMS, checks=("finite",), **QUICK)
  assert [(v.check, v.path) for v in report.violations] == [("finite", "['w']")]
  assert "params after compiled step 1: non-finite values" in report.violations[0].message


def test_init_that_needs_concrete_values_fails_abstract_init():
  def init(params):
    scale = float(jnp.sum(params["w"]))  # a concrete value: fails under jax.eval_shape
    return {"scale": jnp.asarray(scale, jnp.float32)}

  tx = steadax.GradientTransformation(init, lambda g, s, p=None: (g, s))
  report = testing.check_transformation(tx, PARAMS, checks=("init", "abstract_init"), **QUICK)
  assert report.failed_checks() == ["abstract_init"]
  assert report.violations[0].message.startswith("raised ConcretizationTypeError")


def test_weak_state_leaves_and_shape_changes_of_a_plain_pair():
  # A plain (init, update) NamedTuple that steadax's contract does not wrap: the checker itself
  # finds the weak leaf and the shape change.
  class Pair(typing.NamedTuple):
    init: typing.Callable
    update: typing.Callable

  weak = Pair(lambda p: {"t": jnp.asarray(0.0)}, lambda g, s, p=None: (g, s))
  report = testing.check_transformation(weak, PARAMS, checks=("init",), **QUICK)
  assert [(v.check, v.path) for v in report.violations] == [("init", "['t']")]
  grows = Pair(lambda p: {"t": jnp.zeros(1)}, lambda g, s, p=None: (g, {"t": jnp.zeros(2)}))
  report = testing.check_transformation(grows, PARAMS, checks=("update",), **QUICK)
  assert [(v.path, v.message) for v in report.violations] == [
      ("['t']", "state after one update: shape changed from (1,) to (2,)")]


def test_python_control_flow_on_values_passes_eagerly_but_fails_under_jit():
  def update(grads, state, params=None):
    if float(jnp.sum(grads["w"])) > 0:  # concrete values only
      return grads, state
    return jax.tree_util.tree_map(jnp.zeros_like, grads), state

  tx = steadax.GradientTransformation(lambda p: steadax.EmptyState(), update)
  report = testing.check_transformation(tx, PARAMS, checks=("eager", "jit"), **QUICK)
  assert report.failed_checks() == ["jit"]
  assert report.violations[0].message.startswith("raised ConcretizationTypeError")


def test_an_optax_transformation_is_checked_too():
  report = testing.check_transformation(optax.sgd(0.1, momentum=0.9), PARAMS,
                                        checks=("init", "update", "scan", "recompile"), **QUICK)
  assert report.ok, str(report)
  assert [s[0] for s in report.skipped] == ["recompile"]


def test_raise_on_failure_and_arguments():
  with pytest.raises(testing.ConformanceError, match=r"\['mu'\]\['w'\]: state after one update"):
    testing.check_transformation(_momentum_pair(True), PARAMS, raise_on_failure=True, x64="current",
                                 checks=("update",))
  with pytest.raises(ValueError, match="unknown checks"):
    testing.check_transformation(steadax.sgd(0.1), PARAMS, checks=("scna",))
  with pytest.raises(TypeError, match="a factory: call it"):
    testing.check_transformation(steadax.adam, PARAMS)
  with pytest.raises(TypeError, match="ambiguous"):
    bool(testing.check_transformation(steadax.sgd(0.1), PARAMS, checks=("init",), **QUICK))


@testing.parametrize_transformations({"sgd": lambda: steadax.sgd(0.1), "lion": steadax.lion(1e-4)})
def test_parametrize_helper_builds_each_case(tx):
  assert isinstance(tx, steadax.GradientTransformation)
  testing.check_transformation(tx, PARAMS, checks=("update",), raise_on_failure=True, **QUICK)
