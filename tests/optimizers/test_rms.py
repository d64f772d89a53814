"""rmsprop and adagrad: chain structure (Optax's), variants, validation."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import steadax


@pytest.mark.parametrize("kwargs, first_state, last_state", [
    ({}, steadax.ScaleByRmsState, steadax.EmptyState),
    (dict(bias_correction=True), steadax.ScaleByRmsWithCountState, steadax.EmptyState),
    (dict(centered=True, momentum=0.9), steadax.ScaleByRStdDevState, steadax.TraceState),
    (dict(centered=True, bias_correction=True), steadax.ScaleByRStdDevWithCountState, steadax.EmptyState),
])
def test_rmsprop_state_structure(kwargs, first_state, last_state):
  state = steadax.rmsprop(0.1, **kwargs).init({"w": jnp.zeros(2)})
  assert len(state) == 3
  assert type(state[0]) is first_state and type(state[2]) is last_state


def test_rmsprop_momentum_follows_the_learning_rate():
  # Optax's order: the momentum accumulates already-scaled steps, u_t = -lr * r_t + m * u_{t-1}.
  decay, lr, m = 0.5, 0.1, 0.9
  opt = steadax.rmsprop(lr, decay=decay, eps=0.0, momentum=m)
  p = jnp.zeros(1)
  state = opt.init(p)
  nu, trace = 0.0, 0.0
  for g in (2.0, -1.0, 0.5):
    u, state = opt.update(jnp.asarray([g]), state, p)
    nu = decay * nu + (1 - decay) * g * g
    trace = -lr * g / np.sqrt(nu) + m * trace
    np.testing.assert_allclose(float(u[0]), trace, rtol=1e-6)


def test_nesterov_changes_the_step():
  g, p = jnp.asarray([1.0]), jnp.zeros(1)
  plain, nesterov = steadax.rmsprop(0.1, momentum=0.9), steadax.rmsprop(0.1, momentum=0.9, nesterov=True)
  u_plain = plain.update(g, plain.init(p), p)[0]
  u_nesterov = nesterov.update(g, nesterov.init(p), p)[0]
  np.testing.assert_allclose(float(u_nesterov[0]), 1.9 * float(u_plain[0]), rtol=1e-6)


def test_adagrad_steps_shrink_like_one_over_sqrt_t():
  opt = steadax.adagrad(1.0, initial_accumulator_value=0.0, eps=0.0)
  p = jnp.zeros(1)
  state = opt.init(p)
  for t in range(1, 5):
    u, state = opt.update(jnp.ones(1), state, p)
    np.testing.assert_allclose(float(u[0]), -1.0 / np.sqrt(t), rtol=1e-6)


@pytest.mark.parametrize("call, message", [
    (lambda: steadax.rmsprop(0.1, momentum=1.5), "rmsprop: momentum"),
    (lambda: steadax.rmsprop(0.1, decay=-0.1), "rmsprop: decay"),
    (lambda: steadax.rmsprop(0.1, centered=True, eps=-1.0), "rmsprop: eps"),
    (lambda: steadax.rmsprop(float("inf")), "rmsprop: learning_rate"),
    (lambda: steadax.adagrad(0.1, initial_accumulator_value=-0.1), "adagrad: initial_accumulator_value"),
])
def test_bad_hyperparameters_raise(call, message):
  with pytest.raises(ValueError, match=message):
    call()
