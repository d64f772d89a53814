"""adafactor: the chain for each option set (Optax's structure), relative steps, validation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax


def _state_types(opt, params):
  return [type(s).__name__ for s in opt.init(params)]


def test_chain_follows_the_options():
  p = {"w": jnp.ones((4, 4)), "b": jnp.ones(4)}
  assert _state_types(steadax.adafactor(0.1), p) == [
      "FactoredState", "EmptyState", "EmptyState", "EmptyState", "EmptyState"]
  assert _state_types(steadax.adafactor(), p) == ["FactoredState", "EmptyState", "EmptyState", "EmptyState"]
  assert _state_types(steadax.adafactor(0.1, clipping_threshold=None, multiply_by_parameter_scale=False,
                                        momentum=0.9, weight_decay_rate=0.1,
                                        weight_decay_mask={"w": True, "b": False}), p) == [
      "FactoredState", "EmptyState", "EmaState", "MaskedState", "EmptyState"]


def test_dtype_momentum_and_factored_flag():
  p = {"w": jnp.ones((4, 6), jnp.bfloat16), "c": jnp.ones(3, jnp.complex64)}
  state = steadax.adafactor(0.1, momentum=0.9, dtype_momentum=jnp.bfloat16, min_dim_size_to_factor=4).init(p)
  factored, ema = state[0], state[4]
  assert ema.ema["w"].dtype == jnp.bfloat16 and ema.ema["c"].dtype == jnp.complex64
  assert factored.v_row["w"].shape == (4,) and factored.v["w"].shape == (1,)
  unfactored = steadax.adafactor(0.1, factored=False, min_dim_size_to_factor=4).init(p)[0]
  assert unfactored.v["w"].shape == (4, 6) and unfactored.v_row["w"].shape == (1,)


def test_relative_step_is_learning_rate_times_parameter_rms():
  # The first update of a constant gradient is its own rms (1); clipping at 1 leaves it, and the
  # parameter scale multiplies it by rms(p).
  opt = steadax.adafactor(0.1)
  p = jnp.asarray([3.0, -4.0])
  u, _ = opt.update(jnp.asarray([0.5, 0.5]), opt.init(p), p)
  np.testing.assert_allclose(np.asarray(u), -0.1 * np.sqrt(12.5), rtol=1e-5)


def test_update_clipping_bounds_the_block_rms():
  opt = steadax.adafactor(1.0, multiply_by_parameter_scale=False, clipping_threshold=0.5, factored=False)
  p = jnp.zeros(2)
  u, _ = jax.jit(opt.update)(jnp.asarray([1.0, -1.0]), opt.init(p), p)
  np.testing.assert_allclose(np.sqrt(np.mean(np.asarray(u) ** 2)), 0.5, rtol=1e-5)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(clipping_threshold=0.0), ValueError, "adafactor: clipping_threshold"),
    (dict(momentum=1.5), ValueError, "adafactor: momentum"),
    (dict(weight_decay_rate=-0.1), ValueError, "adafactor: weight_decay_rate"),
    (dict(decay_rate=-0.8), ValueError, "adafactor: decay_rate"),
    (dict(eps=-1.0), ValueError, "adafactor: eps"),
    (dict(min_dim_size_to_factor=1.5), TypeError, "min_dim_size_to_factor must be an int"),
])
def test_bad_hyperparameters_raise(kwargs, error, message):
  with pytest.raises(error, match=message):
    steadax.adafactor(0.1, **kwargs)
