"""Seed failures #1 and #2 of issue 4 (MultiSteps around stateful inner optimizers), as regressions.

#1 warmup_constant_schedule -> adamw -> schedule_free -> MultiSteps, bfloat16 parameters, jitted:
   every branch of MultiSteps' conditional returns identical types; parameters stay bfloat16.
#2 chain(zero_nans(), sgd) inside MultiSteps: the boolean NaN-mask state stays boolean; no NaN
   reaches the parameters.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import steadax

X64 = bool(jax.config.jax_enable_x64)


def _leaf_types(tree):
  return jax.tree_util.tree_structure(tree), [
      (x.shape, np.dtype(x.dtype), bool(getattr(x, "weak_type", False)))
      for x in jax.tree_util.tree_leaves(tree)]


def _cond_branch_types(closed_jaxpr):
  """For every ``cond`` in the program (nested ones included): its branches' output types."""
  found = []

  def walk(jaxpr):
    for eqn in jaxpr.eqns:
      if eqn.primitive.name == "cond":
        found.append([tuple((v.aval.shape, v.aval.dtype, v.aval.weak_type) for v in b.jaxpr.outvars)
                      for b in eqn.params["branches"]])
      for param in eqn.params.values():
        for item in param if isinstance(param, (tuple, list)) else (param,):
          inner = getattr(item, "jaxpr", None)
          if inner is not None and hasattr(inner, "eqns"):
            walk(inner)
          elif hasattr(item, "eqns"):
            walk(item)

  walk(closed_jaxpr.jaxpr)
  return found


def _bf16_params():
  return {"w": jnp.asarray([[0.5, -1.0, 0.25], [1.5, 0.0, -0.75]], jnp.bfloat16),
          "b": jnp.asarray([0.1, -0.2, 0.3], jnp.bfloat16)}


def _grads(p):
  return jax.tree_util.tree_map(lambda x: x - jnp.asarray(0.2, x.dtype), p)


def test_seed_1_schedule_free_adamw_inside_multi_steps_with_bfloat16_params():
  schedule = steadax.warmup_constant_schedule(0.0, 1e-2, 4)
  inner = steadax.contrib.schedule_free(steadax.adamw(schedule, weight_decay=1e-4), schedule)
  opt = steadax.MultiSteps(inner, every_k_schedule=3)
  params = _bf16_params()
  state = opt.init(params)
  sf_state = state.inner_opt_state
  # Scalar statistics in float32 (Optax keeps them in bfloat16), accumulators float32.
  assert sf_state.weight_sum.dtype == jnp.float32 and sf_state.max_lr.dtype == jnp.float32
  assert all(x.dtype == jnp.float32 for x in jax.tree_util.tree_leaves(state.acc_grads))

  step = jax.jit(opt.update)
  # Both branches of every conditional (emit / hold) return identical types, weak types included.
  conds = _cond_branch_types(jax.make_jaxpr(opt.update)(_grads(params), state, params))
  assert conds, "MultiSteps should branch with lax.cond"
  for branches in conds:
    assert all(b == branches[0] for b in branches[1:]), branches

  p = params
  moved = []
  for i in range(9):
    updates, new_state = step(_grads(p), state, p)
    assert _leaf_types(new_state) == _leaf_types(state), f"state types changed at step {i}"
    assert all(u.dtype == jnp.bfloat16 for u in jax.tree_util.tree_leaves(updates))
    p = steadax.apply_updates(p, updates)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree_util.tree_leaves(p))
    moved.append(bool(opt.has_updated(new_state)))
    state = new_state
  assert moved == [False, False, True] * 3
  assert int(state.gradient_step) == 3 and int(state.inner_opt_state.step_count) == 3
  # Warm-up from 0: the first emitted step does not move, later ones do.
  assert not np.array_equal(np.asarray(p["w"], np.float32), np.asarray(params["w"], np.float32))
  assert all(np.all(np.isfinite(np.asarray(x, np.float32))) for x in jax.tree_util.tree_leaves(p))

  # The same under lax.scan (the strictest check of carry invariance).
  def body(carry, _):
    p, s = carry
    u, s = opt.update(_grads(p), s, p)
    return (steadax.apply_updates(p, u), s), None

  init_state = opt.init(params)
  (p_scan, s_scan), _ = jax.jit(lambda p, s: jax.lax.scan(body, (p, s), None, length=9))(params, init_state)
  assert _leaf_types(s_scan) == _leaf_types(init_state)
  jax.tree_util.tree_map(
      lambda a, b: np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32)),
      p_scan, p)


def test_seed_2_zero_nans_chain_inside_multi_steps_keeps_a_boolean_mask():
  opt = steadax.MultiSteps(steadax.chain(steadax.zero_nans(), steadax.sgd(0.1)), every_k_schedule=2)
  params = {"w": jnp.ones(3, jnp.bfloat16), "b": jnp.zeros(2, jnp.float32)}
  if X64:
    params["d"] = jnp.ones(2, jnp.float64)
  state = opt.init(params)
  mask = state.inner_opt_state[0].found_nan
  assert all(x.dtype == jnp.bool_ and x.shape == () for x in jax.tree_util.tree_leaves(mask))

  def grads_at(i, p):
    g = jax.tree_util.tree_map(jnp.ones_like, p)
    # A NaN in "w" during the second period only.
    nan = jnp.where(i == 2, jnp.nan, 0.0).astype(jnp.bfloat16)
    return {**g, "w": g["w"] + nan}

  def body(carry, i):
    p, s = carry
    u, s = opt.update(grads_at(i, p), s, p)
    return (steadax.apply_updates(p, u), s), s.inner_opt_state[0].found_nan["w"]

  (p, s), found = jax.jit(lambda p, s: jax.lax.scan(body, (p, s), jnp.arange(6)))(params, state)
  assert _leaf_types(s) == _leaf_types(state)
  assert s.inner_opt_state[0].found_nan["w"].dtype == jnp.bool_
  # found_nan changes only when the inner chain runs (every second step): True for the NaN period.
  assert found.tolist() == [False, False, False, True, True, False]
  for key in params:
    assert p[key].dtype == params[key].dtype
    assert np.all(np.isfinite(np.asarray(p[key], np.float32))), key
  # "w" moved in the first and third periods only (the NaN period's mean was zeroed); "b" in all three.
  np.testing.assert_allclose(np.asarray(p["w"], np.float32), 1.0 - 2 * 0.1, rtol=1e-2)
  np.testing.assert_allclose(np.asarray(p["b"], np.float32), -3 * 0.1, rtol=1e-5)
