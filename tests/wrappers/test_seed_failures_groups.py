"""Seed failure #5: parameter groups as ``masked(inject_hyperparams(adam)(...), mask_i)`` in a chain.

With Optax 0.2.8 the bfloat16 group's updates are NaN (the injected ``eps=1e-22`` is cast to the
group's dtype and the float32 updates come back instead of bfloat16). Every group must get finite,
non-zero updates in its parameters' dtype, identical to the same chain without injection.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import steadax

X64 = bool(jax.config.jax_enable_x64)


def _params():
  p = {
      "f32": jnp.array([[0.5, -1.0], [0.25, 2.0]], jnp.float32),
      "bf16": jnp.array([0.5, -0.25, 1.0], jnp.bfloat16),
      "f16": jnp.array([0.3, 0.0], jnp.float16),
  }
  if X64:
    p["f64"] = jnp.array([0.7, -0.1], jnp.float64)
  return p


def _chain(params, injected: bool):
  groups = []
  for i, key in enumerate(sorted(params)):
    # A different schedule per group, non-zero from the first step.
    schedule = steadax.linear_schedule(1e-2 * (i + 1), 1e-3, 10)
    if injected:
      inner = steadax.inject_hyperparams(steadax.adam)(learning_rate=schedule, eps=1e-22)
    else:
      inner = steadax.adam(schedule, eps=1e-22)
    groups.append(steadax.masked(inner, {k: k == key for k in params}))
  return steadax.chain(*groups)


def _run(tx, params, steps=4):
  def loss(p):
    # Zero gradient on one coordinate: exercises eps (a flushed eps would give 0/0).
    return sum(jnp.sum(jnp.square(x.astype(jnp.float32) - 0.1)) for x in jax.tree_util.tree_leaves(p))

  def body(carry, _):
    p, s = carry
    g = jax.grad(loss)(p)
    g = {**g, "f16": g["f16"].at[1].set(0)}
    u, s = tx.update(g, s, p)
    return (steadax.apply_updates(p, u), s), u

  state = tx.init(params)
  (params, new_state), updates = jax.jit(lambda p, s: jax.lax.scan(body, (p, s), None, length=steps))(
      params, state)
  return state, new_state, updates


def test_every_group_gets_nonzero_updates_identical_to_uninjected():
  params = _params()
  state, new_state, updates = _run(_chain(params, injected=True), params)
  _, _, reference = _run(_chain(params, injected=False), params)
  assert jax.tree_util.tree_structure(new_state) == jax.tree_util.tree_structure(state)
  for a, b in zip(jax.tree_util.tree_leaves(new_state), jax.tree_util.tree_leaves(state)):
    assert a.dtype == b.dtype and a.shape == b.shape
  for key in params:
    u, ref = updates[key], reference[key]
    assert u.dtype == params[key].dtype, f"{key}: updates in {u.dtype}"
    values = np.asarray(u.astype(jnp.float32))
    assert np.all(np.isfinite(values)), f"{key}: non-finite updates {values}"
    moving = values if key != "f16" else values[:, :1]  # its second coordinate has zero gradient
    assert np.all(moving != 0), f"{key}: zero updates {values}"
    # Injected hyperparameters are float32 leaves, so ``1 - b2`` is formed from float32 0.999 (as in
    # Optax's inject_hyperparams), where the uninjected adam uses Optax's exact constant: 1.3e-5
    # relative in the second moment, about 7e-6 in an update.
    np.testing.assert_allclose(values, np.asarray(ref.astype(jnp.float32)), rtol=2e-5, err_msg=key)


def test_injected_learning_rates_are_per_group():
  params = _params()
  tx = _chain(params, injected=True)
  state = tx.init(params)
  rates = [float(s.inner_state.hyperparams["learning_rate"]) for s in state]
  np.testing.assert_allclose(rates, [1e-2 * (i + 1) for i in range(len(params))], rtol=1e-6)
  step = jax.jit(lambda s: tx.update(jax.tree_util.tree_map(jnp.ones_like, params), s, params))
  _, s1 = step(state)
  _, s2 = step(s1)
  assert step._cache_size() == 1
  # The update at count 1 used each group's schedule at 1: 1e-2 (i + 1) + (1e-3 - 1e-2 (i + 1)) / 10.
  rates = [float(s.inner_state.hyperparams["learning_rate"]) for s in s2]
  expected = [1e-2 * (i + 1) + (1e-3 - 1e-2 * (i + 1)) / 10 for i in range(len(params))]
  np.testing.assert_allclose(rates, expected, rtol=1e-5)
