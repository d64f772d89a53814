"""scale_by_rms, scale_by_stddev and scale_by_rss: the recurrences, state variants, dtypes, errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax

GRADS = [np.array([0.5, -2.0, 0.0], np.float32), np.array([1.5, 1.0, 0.0], np.float32),
         np.array([-0.25, 3.0, 0.0], np.float32)]


def _run(tx, grads, params=None):
  state = tx.init(jnp.zeros(3) if params is None else params)
  outs = []
  for g in grads:
    u, state = tx.update(jnp.asarray(g), state)
    outs.append(np.asarray(u))
  return outs, state


@pytest.mark.parametrize("eps_in_sqrt", [True, False])
@pytest.mark.parametrize("bias_correction", [True, False])
def test_scale_by_rms_follows_its_recurrence(eps_in_sqrt, bias_correction):
  decay, eps, init = 0.8, 1e-3, 0.25
  outs, state = _run(steadax.scale_by_rms(decay, eps, init, eps_in_sqrt, bias_correction), GRADS)
  nu = np.full(3, init, np.float64)
  for t, (g, out) in enumerate(zip(GRADS, outs), start=1):
    nu = decay * nu + (1 - decay) * g.astype(np.float64) ** 2
    nu_hat = nu / (1 - decay**t) if bias_correction else nu
    denom = np.sqrt(nu_hat + eps) if eps_in_sqrt else np.sqrt(nu_hat) + eps
    np.testing.assert_allclose(out, g / denom, rtol=1e-5)
  if bias_correction:
    assert isinstance(state, steadax.ScaleByRmsWithCountState) and int(state.count) == 3
  else:
    assert type(state) is steadax.ScaleByRmsState


def test_bias_corrected_rms_equals_adam_without_momentum():
  rms = steadax.scale_by_rms(0.99, 1e-6, eps_in_sqrt=False, bias_correction=True)
  adam = steadax.scale_by_adam(b1=0.0, b2=0.99, eps=1e-6)
  ours, _ = _run(rms, GRADS)
  ref, _ = _run(adam, GRADS)
  for a, b in zip(ours, ref):
    np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("bias_correction", [True, False])
def test_scale_by_stddev_divides_by_the_running_standard_deviation(bias_correction):
  decay, eps = 0.7, 1e-4
  outs, state = _run(steadax.scale_by_stddev(decay, eps, 0.5, bias_correction=bias_correction), GRADS)
  mu, nu = np.zeros(3), np.full(3, 0.5)
  for t, (g, out) in enumerate(zip(GRADS, outs), start=1):
    mu = decay * mu + (1 - decay) * g
    nu = decay * nu + (1 - decay) * g.astype(np.float64) ** 2
    c = 1 - decay**t if bias_correction else 1.0
    np.testing.assert_allclose(out, g / np.sqrt(nu / c - (mu / c) ** 2 + eps), rtol=1e-4)
  expected = steadax.ScaleByRStdDevWithCountState if bias_correction else steadax.ScaleByRStdDevState
  assert type(state) is expected


def test_stddev_variance_rounded_negative_gives_no_nan():
  tx = steadax.scale_by_stddev(decay=0.9, eps=1e-8)
  p = jnp.ones(2, jnp.bfloat16)
  # Moments whose bfloat16 rounding makes nu < mu^2, as can happen after many steps.
  state = steadax.ScaleByRStdDevState(mu=jnp.asarray([1.0, -3.0], jnp.bfloat16),
                                      nu=jnp.asarray([0.99, 8.9], jnp.bfloat16))
  u, new_state = tx.update(jnp.asarray([1.0, -3.0], jnp.bfloat16), state, p)
  assert u.dtype == jnp.bfloat16 and new_state.nu.dtype == jnp.bfloat16
  assert np.all(np.isfinite(np.asarray(u, np.float32)))


def test_scale_by_rss_accumulates_and_leaves_zero_sums_at_zero():
  outs, state = _run(steadax.scale_by_rss(initial_accumulator_value=0.0, eps=0.0), GRADS)
  total = np.zeros(3)
  for g, out in zip(GRADS, outs):
    total += g.astype(np.float64) ** 2
    expected = np.where(total > 0, g / np.sqrt(np.where(total > 0, total, 1.0)), 0.0)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
  assert np.all(np.isfinite(outs[-1]))
  np.testing.assert_allclose(np.asarray(state.sum_of_squares), total, rtol=1e-6)


@pytest.mark.parametrize("factory", [
    lambda: steadax.scale_by_rms(initial_scale=0.5),
    lambda: steadax.scale_by_stddev(initial_scale=0.5, bias_correction=True),
    lambda: steadax.scale_by_rss(initial_accumulator_value=0.5),
])
def test_second_moments_of_complex_parameters_are_real(factory):
  tx = factory()
  p = {"c": jnp.asarray([1 + 1j, 2 - 1j], jnp.complex64), "r": jnp.asarray([1.0], jnp.bfloat16)}
  state = tx.init(p)
  second = state.nu if hasattr(state, "nu") else state.sum_of_squares
  assert second["c"].dtype == jnp.float32 and second["r"].dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(second["c"]), 0.5)
  g = {"c": jnp.asarray([3 + 4j, 0j], jnp.complex64), "r": jnp.asarray([1.0], jnp.bfloat16)}
  u, new_state = jax.jit(tx.update)(g, state, p)
  assert u["c"].dtype == jnp.complex64 and u["r"].dtype == jnp.bfloat16
  # A real positive scaling keeps each complex update's phase.
  np.testing.assert_allclose(np.angle(np.asarray(u["c"][0])), np.angle(3 + 4j), rtol=1e-6)


def test_traced_initial_scale_under_jit():
  tx = steadax.scale_by_rms(initial_scale=0.25)
  state = jax.jit(lambda t: t.init(jnp.zeros(2, jnp.float32)))(tx)
  assert state.nu.dtype == jnp.float32 and not state.nu.aval.weak_type
  np.testing.assert_allclose(np.asarray(state.nu), 0.25)


@pytest.mark.parametrize("call, message", [
    (lambda: steadax.scale_by_rms(decay=1.5), "scale_by_rms: decay"),
    (lambda: steadax.scale_by_rms(eps=-1.0), "scale_by_rms: eps"),
    (lambda: steadax.scale_by_stddev(initial_scale=-0.1), "scale_by_stddev: initial_scale"),
    (lambda: steadax.scale_by_rss(initial_accumulator_value=-1.0), "scale_by_rss: initial_accumulator_value"),
    (lambda: steadax.scale_by_rss(eps=float("nan")), "scale_by_rss: eps"),
])
def test_bad_hyperparameters_raise(call, message):
  with pytest.raises(ValueError, match=message):
    call()
