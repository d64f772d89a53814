"""scale_by_lion: the sign of the interpolation, the momentum recurrence, modes, dtypes, errors."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import steadax


def test_hard_mode_is_the_sign_of_the_interpolation_and_momentum_uses_b2():
  b1, b2 = 0.9, 0.5
  tx = steadax.scale_by_lion(b1, b2)
  state = tx.init(jnp.zeros(3))
  m = np.zeros(3)
  for g in ([1.0, -2.0, 0.5], [-0.05, 0.1, -4.0], [0.2, 0.2, 0.2]):
    g = np.asarray(g, np.float32)
    u, state = tx.update(jnp.asarray(g), state)
    np.testing.assert_array_equal(np.asarray(u), np.sign((1 - b1) * g + b1 * m))
    m = b2 * m + (1 - b2) * g
    np.testing.assert_allclose(np.asarray(state.mu), m, rtol=1e-6)
  assert int(state.count) == 3


def test_smooth_and_refined_modes():
  g = jnp.asarray([0.5, -4.0, 20.0])
  smooth = steadax.scale_by_lion(b1=0.0, mode="smooth", smooth_beta=2.0)
  refined = steadax.scale_by_lion(b1=0.0, mode="refined")
  np.testing.assert_allclose(np.asarray(smooth.update(g, smooth.init(g))[0]), np.tanh(2.0 * np.asarray(g)), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(refined.update(g, refined.init(g))[0]), [0.5, -1.0, 1.0])


def test_mu_dtype_and_complex_parameters():
  tx = steadax.scale_by_lion(mu_dtype=jnp.bfloat16)
  p = {"c": jnp.asarray([3 + 4j, -1j], jnp.complex64), "r": jnp.ones(2, jnp.float16)}
  state = tx.init(p)
  assert state.mu["r"].dtype == jnp.bfloat16
  assert state.mu["c"].dtype == jnp.complex64  # a real mu_dtype keeps a complex momentum complex
  u, new_state = tx.update(p, state, p)
  assert u["r"].dtype == jnp.float16 and new_state.mu["r"].dtype == jnp.bfloat16
  np.testing.assert_allclose(np.abs(np.asarray(u["c"])), 1.0, rtol=1e-6)  # the complex sign has modulus 1


@pytest.mark.parametrize("call, error, message", [
    (lambda: steadax.scale_by_lion(mode="soft"), ValueError, "scale_by_lion: mode"),
    (lambda: steadax.scale_by_lion(b1=1.2), ValueError, "scale_by_lion: b1"),
    (lambda: steadax.scale_by_lion(b2=-0.1), ValueError, "scale_by_lion: b2"),
])
def test_bad_arguments_raise(call, error, message):
  with pytest.raises(error, match=message):
    call()
