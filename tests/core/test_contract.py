"""The type-stability contract and the dtype policy."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax
from steadax._core._transformation import Transformation
from steadax._core._contract import collect_drift


class _CountState(NamedTuple):
  count: jax.Array


class _DriftingDtype(Transformation):
  name = "drifting_dtype"

  def init_fn(self, params):
    return _CountState(jnp.zeros([], jnp.int32))

  def update_fn(self, updates, state, params=None, **extra_args):
    return updates, _CountState(state.count.astype(jnp.float32) + 1.0)


class _DriftingShape(Transformation):
  name = "drifting_shape"

  def init_fn(self, params):
    return {"buf": jnp.zeros((2,))}

  def update_fn(self, updates, state, params=None, **extra_args):
    return updates, {"buf": jnp.zeros((3,))}


class _DriftingStructure(Transformation):
  name = "drifting_structure"

  def init_fn(self, params):
    return {"a": jnp.zeros(())}

  def update_fn(self, updates, state, params=None, **extra_args):
    return updates, {"a": jnp.zeros(()), "b": jnp.zeros(())}


class _WeakInit(Transformation):
  name = "weak_init"

  def init_fn(self, params):
    return _CountState(0)


def test_dtype_drift_raises_in_strict_mode_naming_transformation_and_path():
  tx = _DriftingDtype()
  with pytest.raises(steadax.ContractError, match=r"drifting_dtype: state leaf at .*count.* int32 to float32"):
    tx.update(jnp.ones(1), tx.init(jnp.ones(1)))


def test_collect_drift_records_every_drift_and_its_traces_never_serve_strict_calls():
  tx = steadax.chain(_DriftingDtype(), _DriftingDtype())
  params = jnp.ones(1)
  step = jax.jit(lambda state: tx.update(params, state)[1])
  state = tx.init(params)
  with collect_drift() as drifts:
    new_state = step(state)
  assert [str(d) for d in drifts] == [
      "drifting_dtype: state leaf at .count changed dtype from int32 to float32."] * 2
  assert jax.tree_util.tree_leaves(new_state)[0].dtype == jnp.int32  # cast back
  with pytest.raises(steadax.ContractError, match="int32 to float32"):
    step(state)  # the same avals, strict: traced again, not the cached cast-back program


def test_dtype_drift_is_cast_back_outside_strict_mode():
  tx = _DriftingDtype()
  with steadax.strict_mode(False):
    _, state = jax.jit(tx.update)(jnp.ones(1), tx.init(jnp.ones(1)))
  assert state.count.dtype == jnp.int32 and int(state.count) == 1


@pytest.mark.parametrize("strict", [True, False])
def test_shape_and_structure_drift_always_raise(strict):
  with steadax.strict_mode(strict):
    tx = _DriftingShape()
    with pytest.raises(steadax.ContractError, match=r"drifting_shape: .*\['buf'\].*\(2,\) to \(3,\)"):
      tx.update(jnp.ones(1), tx.init(jnp.ones(1)))
    tx = _DriftingStructure()
    with pytest.raises(steadax.ContractError, match=r"drifting_structure: state changed structure: unexpected \[\"\['b'\]\"\]"):
      tx.update(jnp.ones(1), tx.init(jnp.ones(1)))


def test_weak_typed_init_raises_in_strict_mode_and_is_fixed_otherwise():
  with pytest.raises(steadax.ContractError, match="weak_init: init produced a weakly typed state leaf"):
    _WeakInit().init(jnp.ones(1))
  with steadax.strict_mode(False):
    state = _WeakInit().init(jnp.ones(1))
  assert not state.count.weak_type


def test_mismatched_params_and_updates_trees_name_the_paths():
  tx = steadax.adamw(0.1)
  params = {"a": jnp.zeros(2), "b": jnp.zeros(2)}
  with pytest.raises(Exception, match="b"):
    tx.update({"a": jnp.zeros(2)}, tx.init(params), params)


@pytest.mark.parametrize("bad", [dict(b1=1.5), dict(b2=-0.1), dict(eps=-1.0)])
def test_bad_hyperparameters_raise(bad):
  with pytest.raises(ValueError, match="adam: "):
    steadax.adam(0.1, **bad)


def test_bad_learning_rate_raises():
  with pytest.raises(ValueError, match="learning_rate must be finite"):
    steadax.sgd(float("nan"))
  with pytest.raises(ValueError, match="learning_rate must be a scalar"):
    steadax.sgd(jnp.ones(3))


def test_updates_take_the_parameter_dtype():
  tx = steadax.adam(0.1)
  params = {"bf": jnp.ones(3, jnp.bfloat16), "f": jnp.ones(3, jnp.float32)}
  grads = {"bf": jnp.ones(3, jnp.float32), "f": jnp.ones(3, jnp.bfloat16)}
  updates, _ = tx.update(grads, tx.init(params), params)
  assert updates["bf"].dtype == jnp.bfloat16 and updates["f"].dtype == jnp.float32
  # Without params the updates keep the incoming dtypes.
  updates, _ = tx.update(grads, tx.init(params))
  assert updates["bf"].dtype == jnp.float32 and updates["f"].dtype == jnp.bfloat16


def test_contract_casts_compute_dtype_updates_to_the_parameter_dtype():
  # The check above goes through adam, whose leafwise already casts: it passes without the
  # contract's cast (tests/mutation/run.py, mutation h). Here only the contract can cast.
  tx = steadax.stateless(lambda u, p: jax.tree_util.tree_map(lambda x: x.astype(jnp.float32), u))
  params = {"bf": jnp.ones(3, jnp.bfloat16), "h": jnp.ones(3, jnp.float16)}
  updates, _ = tx.update(params, tx.init(params), params)
  assert updates["bf"].dtype == jnp.bfloat16 and updates["h"].dtype == jnp.float16


def test_leafwise_writes_updates_in_the_parameter_dtype():
  # ``update_fn`` is the transformation without the contract around it. Checked through
  # ``tx.update`` alone (as above), this could not fail: the contract casts every update to its
  # parameter's dtype anyway, so a leafwise that forgot its one cast would go unnoticed
  # (tests/mutation/run.py, mutation d).
  tx = steadax.scale_by_adam()
  params = {"bf": jnp.ones(3, jnp.bfloat16), "f": jnp.ones(3, jnp.float32)}
  grads = {"bf": jnp.ones(3, jnp.float32), "f": jnp.ones(3, jnp.bfloat16)}
  updates, state = tx.update_fn(grads, tx.init(params), params)
  assert updates["bf"].dtype == jnp.bfloat16 and updates["f"].dtype == jnp.float32
  assert state.mu["bf"].dtype == jnp.bfloat16 and state.nu["f"].dtype == jnp.float32
  updates, _ = tx.update_fn(grads, tx.init(params))
  assert updates["bf"].dtype == jnp.float32 and updates["f"].dtype == jnp.bfloat16


def test_float16_tiny_gradients_give_finite_adam_updates():
  params = jnp.zeros(4, jnp.float16)
  tx = steadax.adam(1e-3)
  grads = jnp.full(4, 1e-7, jnp.float16)
  state = tx.init(params)
  for _ in range(3):
    updates, state = jax.jit(tx.update)(grads, state, params)
    assert np.all(np.isfinite(np.asarray(updates, np.float32)))
  assert updates.dtype == jnp.float16


def test_counters_are_int32_under_x64_too():
  state = steadax.adam(0.1).init(jnp.zeros(2))
  assert state[0].count.dtype == jnp.int32


def test_hyperparameters_never_widen_state():
  # A float64-valued (or weak) learning rate array must not promote float32 state or updates.
  lr = np.float64(0.1)
  tx = steadax.adam(lr)
  params = jnp.zeros(2, jnp.float32)
  updates, state = jax.jit(tx.update)(jnp.ones(2, jnp.float32), tx.init(params), params)
  assert updates.dtype == jnp.float32 and state[0].mu.dtype == jnp.float32


def test_init_from_eval_shape_matches_concrete_init():
  params = {"w": jnp.ones((3, 2), jnp.bfloat16), "b": jnp.ones(2)}
  tx = steadax.adamw(0.1, mu_dtype=jnp.float32)
  abstract = jax.eval_shape(tx.init, params)
  concrete = tx.init(params)
  assert jax.tree_util.tree_structure(abstract) == jax.tree_util.tree_structure(concrete)
  for a, c in zip(jax.tree_util.tree_leaves(abstract), jax.tree_util.tree_leaves(concrete)):
    assert a.shape == c.shape and a.dtype == c.dtype


def test_complex_second_moment_is_real_and_first_moment_complex():
  state = steadax.adam(0.1, mu_dtype=jnp.bfloat16).init(jnp.zeros(2, jnp.complex64))
  assert state[0].nu.dtype == jnp.float32
  assert state[0].mu.dtype == jnp.complex64  # a real mu_dtype keeps the imaginary part
