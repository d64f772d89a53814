"""skip_spikes: a spike is skipped and counted, normal steps are not, the state is type-stable."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax

X64 = bool(jax.config.jax_enable_x64)

LOSSES = [1.0, 1.2, 0.9, 1.1, 1.0, 9.0, 1.05, 0.95, 1.0, 1.1]
SPIKE = 5


def _run(tx, losses, params, grads_fn=lambda i, p: jax.tree_util.tree_map(jnp.ones_like, p)):
  state = tx.init(params)
  step = jax.jit(lambda g, s, p, v: tx.update(g, s, p, value=v))
  records = []
  for i, loss in enumerate(losses):
    u, state = step(grads_fn(i, params), state, params, jnp.asarray(loss, jnp.float32))
    records.append((u, state))
  return records


def _moved(u):
  return any(np.any(np.asarray(x, np.float32) != 0) for x in jax.tree_util.tree_leaves(u))


def test_a_loss_spike_is_skipped_and_counted_normal_steps_are_not():
  params = {"w": jnp.ones(2, jnp.float32)}
  tx = steadax.skip_spikes(steadax.adam(0.1), factor=2.0, warmup_steps=3)
  records = _run(tx, LOSSES, params)
  for i, (u, s) in enumerate(records):
    assert _moved(u) == (i != SPIKE), f"step {i}"
    assert bool(s.last_skipped) == (i == SPIKE)
    assert int(s.total_skips) == int(i >= SPIKE)
    assert int(s.consecutive_skips) == int(i == SPIKE)
  s = records[-1][1]
  assert int(s.count) == len(LOSSES) - 1  # the spike did not enter the statistics
  assert 0.9 < float(s.mean) < 1.2
  # The inner optimizer saw every step but the spike.
  assert int(s.inner_state[0].count) == len(LOSSES) - 1


def test_statistics_are_the_exponentially_weighted_mean_and_variance():
  decay = 0.8
  tx = steadax.skip_spikes(steadax.sgd(0.1), decay=decay, warmup_steps=100)
  s = _run(tx, LOSSES[:4], jnp.zeros(1, jnp.float32))[-1][1]
  # Reference: direct weighted sums, weights (1 - decay) decay^(n-1-j), the first weight decay^(n-1).
  x = np.asarray(LOSSES[:4], np.float64)
  n = len(x)
  w = np.array([decay ** (n - 1)] + [(1 - decay) * decay ** (n - 1 - j) for j in range(1, n)])
  mean = np.sum(w * x)
  var = np.sum(w * (x - mean) ** 2)
  np.testing.assert_allclose(float(s.mean), mean, rtol=1e-5)
  np.testing.assert_allclose(float(s.variance), var, rtol=1e-4)


def test_mean_plus_std_mode_and_non_finite_losses():
  tx = steadax.skip_spikes(steadax.sgd(0.1), factor=1.0, num_std=3.0, warmup_steps=3)
  losses = [-2.0, -2.1, -1.9, -2.05, -1.5, float("nan"), -2.0]
  records = _run(tx, losses, jnp.zeros(1, jnp.float32))
  skipped = [bool(s.last_skipped) for _, s in records]
  # -1.5 is far above mean + 3 std of the negative losses; NaN is always skipped.
  assert skipped == [False, False, False, False, True, True, False]
  assert np.isfinite(float(records[-1][1].mean))


def test_a_lasting_level_change_is_followed_after_max_consecutive_skips():
  tx = steadax.skip_spikes(steadax.sgd(0.1), decay=0.5, warmup_steps=2, max_consecutive_skips=2)
  records = _run(tx, [1.0, 1.0, 1.0, 5.0, 5.0, 5.0, 5.0, 5.0], jnp.zeros(1, jnp.float32))
  skipped = [bool(s.last_skipped) for _, s in records]
  # Two skips, then the third 5.0 is accepted and moves the mean to 3: 5.0 is no longer a spike.
  assert skipped == [False, False, False, True, True, False, False, False]
  assert int(records[-1][1].total_skips) == 2 and int(records[-1][1].consecutive_skips) == 0


def test_grad_norm_mode_needs_no_value():
  tx = steadax.skip_spikes(steadax.sgd(0.1), factor=3.0, warmup_steps=2, watch="grad_norm")
  params = jnp.zeros(2, jnp.float32)
  state = tx.init(params)
  step = jax.jit(tx.update)
  skipped = []
  for scale in (1.0, 1.1, 0.9, 50.0, 1.0):
    _, state = step(jnp.full(2, scale, jnp.float32), state, params)
    skipped.append(bool(state.last_skipped))
  assert skipped == [False, False, False, True, False]


def test_errors_name_the_function_and_argument():
  tx = steadax.skip_spikes(steadax.sgd(0.1))
  with pytest.raises(ValueError, match="skip_spikes: watch='value' needs the loss"):
    tx.update(jnp.ones(1), tx.init(jnp.zeros(1)), jnp.zeros(1))
  with pytest.raises(ValueError, match="skip_spikes: watch"):
    steadax.skip_spikes(steadax.sgd(0.1), watch="loss")
  with pytest.raises(ValueError, match="skip_spikes: decay"):
    steadax.skip_spikes(steadax.sgd(0.1), decay=1.0)


def test_state_is_type_stable_in_lax_scan_with_mixed_precision():
  params = {"h": jnp.ones(3, jnp.bfloat16), "f": jnp.ones(2, jnp.float32)}
  if X64:
    params["d"] = jnp.ones(2, jnp.float64)
  tx = steadax.skip_spikes(steadax.adamw(0.1), warmup_steps=1)
  state = tx.init(params)
  stat = jnp.float64 if X64 else jnp.float32
  assert state.mean.dtype == stat and state.count.dtype == jnp.int32
  losses = jnp.asarray([1.0, 1.0, 20.0, 1.0], jnp.float32)

  def body(carry, loss):
    p, s = carry
    u, s = tx.update(jax.tree_util.tree_map(jnp.ones_like, p), s, p, value=loss)
    return (steadax.apply_updates(p, u), s), s.last_skipped

  (p, s), skipped = jax.jit(lambda p, s: jax.lax.scan(body, (p, s), losses))(params, state)
  assert skipped.tolist() == [False, False, True, False]
  for a, b in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(s)):
    assert (a.shape, a.dtype) == (b.shape, b.dtype)
  assert jax.tree_util.tree_structure(s) == jax.tree_util.tree_structure(state)
  assert all(p[k].dtype == params[k].dtype for k in params)
  # Hyperparameters are leaves: new values do not recompile.
  assert {2.0, 0.0, 0.99} <= set(x for x in jax.tree_util.tree_leaves(tx) if isinstance(x, float))
