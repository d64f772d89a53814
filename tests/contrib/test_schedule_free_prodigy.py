"""schedule_free and prodigy: what Optax gets wrong, steadax gets right."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax


def _quadratic_grad(p):
  return jax.tree_util.tree_map(lambda x: x * jnp.asarray(2, x.dtype), p)


def test_schedule_free_evaluates_the_schedule_from_count_zero():
  # Optax 0.2.8 starts step_count at 1 and skips the schedule's step-0 value (Optax PR 1744).
  seen = []
  sched = steadax.linear_schedule(0.0, 1.0, 10)
  opt = steadax.contrib.schedule_free(steadax.sgd(sched), learning_rate=sched)
  params = jnp.ones(3)
  state = opt.init(params)
  assert int(state.step_count) == 0
  updates, state = opt.update(_quadratic_grad(params), state, params)
  # lr(0) = 0: the base step is zero and the averaging weight is zero, so nothing moves.
  np.testing.assert_array_equal(updates, jnp.zeros(3))
  assert int(state.step_count) == 1 and float(state.max_lr) == 0.0
  updates, state = opt.update(_quadratic_grad(params), state, params)
  assert float(state.max_lr) == pytest.approx(0.1)
  assert np.all(np.asarray(updates) < 0)
  del seen


def test_schedule_free_eval_params_finds_the_state_inside_a_chain():
  opt = steadax.chain(steadax.clip(10.0), steadax.contrib.schedule_free_sgd(0.1))
  params = {"w": jnp.ones(2)}
  state = opt.init(params)
  for _ in range(3):
    updates, state = opt.update(_quadratic_grad(params), state, params)
    params = steadax.apply_updates(params, updates)
  x = steadax.contrib.schedule_free_eval_params(state, params)
  sf = state[1]
  expected = (params["w"] - (1 - 0.9) * sf.z["w"]) / 0.9
  np.testing.assert_allclose(x["w"], expected, rtol=1e-6)
  with pytest.raises(ValueError, match="holds no ScheduleFreeState"):
    steadax.contrib.schedule_free_eval_params(steadax.adam(0.1).init(params), params)


def test_schedule_free_bfloat16_scalars_are_float32_and_stable_in_cond():
  params = {"w": jnp.ones(4, jnp.bfloat16), "v": jnp.ones(2, jnp.float32)}
  opt = steadax.contrib.schedule_free_adamw(1e-2, warmup_steps=5)
  state = opt.init(params)
  assert state.max_lr.dtype == jnp.float32 and state.b1.dtype == jnp.float32
  assert state.z["w"].dtype == jnp.bfloat16

  @jax.jit
  def step(params, state, pred):
    return jax.lax.cond(pred, lambda: opt.update(_quadratic_grad(params), state, params),
                        lambda: (jax.tree_util.tree_map(jnp.zeros_like, params), state))

  updates, new_state = step(params, state, jnp.asarray(True))
  assert updates["w"].dtype == jnp.bfloat16
  assert jax.tree_util.tree_structure(new_state) == jax.tree_util.tree_structure(state)


def test_schedule_free_z_is_a_copy_for_donation():
  params = jnp.ones(3)
  state = steadax.contrib.schedule_free_sgd(0.1).init(params)
  assert state.z is not params
  assert state.z.unsafe_buffer_pointer() != params.unsafe_buffer_pointer()


@pytest.mark.parametrize("x64", [False, True])
def test_prodigy_keeps_float32_under_x64_inside_jit(x64):
  # Seed failure 3: Optax's prodigy promotes float32 state to float64 under jax_enable_x64.
  with jax.enable_x64(x64):
    params = {"w": jnp.ones(3, jnp.float32)}
    opt = steadax.contrib.prodigy()
    state = opt.init(params)

    @jax.jit
    def run(params, state):
      def body(carry, _):
        p, s = carry
        u, s = opt.update(_quadratic_grad(p), s, p)
        return (steadax.apply_updates(p, u), s), None
      return jax.lax.scan(body, (params, state), None, length=3)[0]

    new_params, new_state = run(params, state)
    for leaf in jax.tree_util.tree_leaves(new_state):
      assert leaf.dtype in (jnp.float32, jnp.int32), leaf.dtype
    assert new_params["w"].dtype == jnp.float32


def test_prodigy_mixed_tree_updates_follow_params():
  params = {"a": jnp.ones(3, jnp.bfloat16), "b": jnp.ones(2, jnp.float32)}
  opt = steadax.contrib.prodigy()
  state = opt.init(params)
  assert state.estim_lr.dtype == jnp.float32  # widest, not lowest (Optax picks bfloat16)
  updates, state = jax.jit(opt.update)(_quadratic_grad(params), state, params)
  assert updates["a"].dtype == jnp.bfloat16 and updates["b"].dtype == jnp.float32


def test_prodigy_estimate_grows_and_solves_a_quadratic():
  params = jnp.full(4, 3.0)
  opt = steadax.contrib.prodigy()
  state = opt.init(params)
  step = jax.jit(opt.update)
  for _ in range(200):
    updates, state = step(_quadratic_grad(params), state, params)
    params = steadax.apply_updates(params, updates)
  assert float(state.estim_lr) > 1e-3  # grew from 1e-6 by orders of magnitude
  assert float(jnp.max(jnp.abs(params))) < 0.5


def test_prodigy_rejects_bad_hyperparameters():
  with pytest.raises(ValueError, match="prodigy: betas\\[0\\]"):
    steadax.contrib.prodigy(betas=(1.0, 0.999))
  with pytest.raises(ValueError, match="prodigy: estim_lr0"):
    steadax.contrib.prodigy(estim_lr0=0.0)
