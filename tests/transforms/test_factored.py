"""scale_by_factored_rms: static factoring, exactness on rank-1 squares, schedules, dtypes, errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax
from steadax.transforms._factored import factored_dims


def test_factoring_is_decided_from_shapes():
  tx = steadax.scale_by_factored_rms(min_dim_size_to_factor=4)
  params = {"m": jnp.zeros((4, 6)), "t": jnp.zeros((5, 2, 7)), "small": jnp.zeros((3, 8)),
            "v": jnp.zeros(9), "s": jnp.zeros(())}
  state = tx.init(params)
  shapes = {k: (state.v_row[k].shape, state.v_col[k].shape, state.v[k].shape) for k in params}
  # v_row drops the largest axis, v_col the second largest; unfactored leaves keep a full v.
  assert shapes["m"] == ((4,), (6,), (1,))
  assert shapes["t"] == ((5, 2), (2, 7), (1,))
  assert shapes["small"] == ((1,), (1,), (3, 8))
  assert shapes["v"] == ((1,), (1,), (9,))
  assert shapes["s"] == ((1,), (1,), ())
  assert factored_dims((4, 6), False, 1) is None
  assert factored_dims((0, 5), True, 0) is None  # a zero-size axis is never factored


@pytest.mark.parametrize("shape, outer", [
    ((3, 5), lambda a, b, c: np.outer(a[:3], b[:5])),
    ((6, 2), lambda a, b, c: np.outer(a[:6], b[:2])),
    ((2, 4, 6), lambda a, b, c: np.einsum("i,j,k->ijk", c[:2], a[:4], b[:6])),
])
def test_rank_one_squared_gradient_is_estimated_exactly(shape, outer):
  rng = np.random.default_rng(0)
  a, b = rng.uniform(0.5, 2.0, 8), rng.uniform(0.5, 2.0, 8) * rng.choice([-1, 1], 8)
  c = np.array([1.0, -3.0])  # the third, unfactored axis: each slice is factored on its own
  g = outer(a, b, c).astype(np.float32)
  tx = steadax.scale_by_factored_rms(min_dim_size_to_factor=2, epsilon=0.0)
  u, state = tx.update(jnp.asarray(g), tx.init(jnp.zeros(shape)))
  # At the first step the decay is 0, so the estimate is |g|^2 itself and the update is sign(g).
  np.testing.assert_allclose(np.asarray(u), np.sign(g), rtol=1e-5)
  assert state.v.shape == (1,) and state.v_row.ndim == len(shape) - 1


def test_unfactored_second_moment_and_custom_decay_schedule():
  calls = []

  def constant_decay(step, rate):
    calls.append(rate)
    return jnp.asarray(0.5, jnp.float32)

  tx = steadax.scale_by_factored_rms(factored=False, epsilon=0.0, decay_rate=0.3, decay_rate_fn=constant_decay)
  state = tx.init(jnp.zeros((2, 2)))
  v = np.zeros((2, 2))
  for g in (np.array([[1.0, -2.0], [0.5, 3.0]]), np.array([[2.0, 1.0], [-1.0, 0.5]])):
    u, state = tx.update(jnp.asarray(g, jnp.float32), state)
    v = 0.5 * v + 0.5 * g**2
    np.testing.assert_allclose(np.asarray(state.v), v, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(u), g / np.sqrt(v), rtol=1e-6)
  assert calls and all(r == 0.3 for r in calls)


def test_default_schedule_and_step_offset():
  g = jnp.asarray([[1.0, 2.0], [3.0, 4.0]])
  tx = steadax.scale_by_factored_rms(factored=False, epsilon=0.0, decay_rate=0.8)
  offset_tx = steadax.scale_by_factored_rms(factored=False, epsilon=0.0, decay_rate=0.8, step_offset=5)
  state = steadax.FactoredState(count=jnp.asarray(1, jnp.int32), v_row=jnp.zeros(1), v_col=jnp.zeros(1),
                                v=jnp.ones((2, 2)))
  _, new = tx.update(g, state)
  decay = 1 - 2.0**-0.8  # Adafactor's 1 - (t + 1)^-0.8 at count 1
  np.testing.assert_allclose(np.asarray(new.v), decay + (1 - decay) * np.asarray(g) ** 2, rtol=1e-6)
  # With an offset, count 6 behaves as count 1, and counts before the offset as count 0 (not NaN).
  _, shifted = offset_tx.update(g, state._replace(count=jnp.asarray(6, jnp.int32)))
  np.testing.assert_allclose(np.asarray(shifted.v), np.asarray(new.v), rtol=1e-6)
  u, early = offset_tx.update(g, state)
  np.testing.assert_allclose(np.asarray(early.v), np.asarray(g) ** 2, rtol=1e-6)
  assert np.all(np.isfinite(np.asarray(u)))


def test_low_precision_and_complex_statistics():
  tx = steadax.scale_by_factored_rms(min_dim_size_to_factor=2)
  p = {"c": jnp.ones((2, 3), jnp.complex64), "h": jnp.ones((3, 2), jnp.float16),
       "b": jnp.ones((3, 2), jnp.bfloat16), "z": jnp.zeros((0, 4))}
  state = tx.init(p)
  assert state.v_row["c"].dtype == jnp.float32 and state.v_col["c"].dtype == jnp.float32
  assert state.v_row["h"].dtype == jnp.float16 and state.v_col["b"].dtype == jnp.bfloat16
  g = {"c": jnp.full((2, 3), 1e-4 + 1e-4j, jnp.complex64), "h": jnp.full((3, 2), 1e-4, jnp.float16),
       "b": jnp.full((3, 2), 1e-4, jnp.bfloat16), "z": jnp.zeros((0, 4))}
  step = jax.jit(tx.update)
  for _ in range(2):
    u, state = step(g, state, p)
  assert u["c"].dtype == jnp.complex64 and u["h"].dtype == jnp.float16 and u["b"].dtype == jnp.bfloat16
  # A constant gradient is its own root mean square: every update is 1 (bfloat16 keeps float32's range).
  np.testing.assert_allclose(np.asarray(u["b"], np.float32), 1.0, rtol=2e-2)
  np.testing.assert_allclose(np.abs(np.asarray(u["c"])), 1.0, rtol=1e-5)
  # float16 squares of 1e-4 underflow when stored; the update, computed in float32, stays finite.
  assert np.all(np.isfinite(np.asarray(u["h"], np.float32)))


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(min_dim_size_to_factor=2.5), TypeError, "min_dim_size_to_factor must be an int"),
    (dict(min_dim_size_to_factor=-1), ValueError, "min_dim_size_to_factor must be >= 0"),
    (dict(epsilon=-1e-30), ValueError, "scale_by_factored_rms: epsilon"),
    (dict(decay_rate_fn=0.8), TypeError, "decay_rate_fn must be callable"),
])
def test_bad_arguments_raise(kwargs, error, message):
  with pytest.raises(error, match=message):
    steadax.scale_by_factored_rms(**kwargs)
