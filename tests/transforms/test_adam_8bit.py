"""scale_by_adam_8bit: the dynamic maps, nearest-code block quantization, state layout (small
tensors in full precision, padding to whole blocks), agreement with float32 Adam, errors."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax
from steadax.transforms._adam_8bit import _dequantize, _quantize


@pytest.mark.parametrize("signed", [True, False])
def test_dynamic_maps_cover_seven_decades_with_finer_steps_near_the_maximum(signed):
  table = steadax.dynamic_quantization_map(signed).astype(np.float64)
  assert table.shape == (256,) and np.all(np.diff(table) > 0)
  assert table[-1] == 1.0 and 0.0 in table
  assert (table.min() < 0) == signed
  positive = table[table > 0]
  assert 1e-7 < positive.min() < 1e-6  # seven decades below 1
  # Relative spacing (step / value) shrinks towards the top: about 1/64 per step near 1 when
  # signed, 1/128 when unsigned (the spare sign bit doubles the resolution).
  top = positive[positive > 0.1]
  rel_step = np.max(np.diff(top) / top[1:])
  assert rel_step < (0.14 if signed else 0.07)
  if signed:
    np.testing.assert_array_equal(np.sort(-table[table < 0]), positive[:-1])  # symmetric but for 1


def test_quantization_picks_the_nearest_code_of_each_block():
  rng = np.random.default_rng(0)
  x = (rng.normal(size=1000) * np.exp(rng.uniform(-6, 2, 1000))).astype(np.float32)
  block = 64
  blocks = -(-x.size // block)
  for signed, values in ((True, x), (False, np.abs(x))):
    q = _quantize(jnp.asarray(values), blocks, block, signed)
    assert q.codes.dtype == jnp.uint8 and q.codes.shape == (blocks, block) and q.scale.dtype == jnp.float32
    back = np.asarray(_dequantize(q, values.size, signed, jnp.float32), np.float64)
    padded = np.pad(values, (0, blocks * block - values.size)).reshape(blocks, block).astype(np.float64)
    absmax = np.abs(padded).max(axis=1)
    np.testing.assert_array_equal(np.asarray(q.scale), absmax.astype(np.float32))
    table = steadax.dynamic_quantization_map(signed).astype(np.float64)
    normalized = padded / absmax[:, None]
    best = table[np.argmin(np.abs(normalized[..., None] - table), axis=-1)] * absmax[:, None]
    np.testing.assert_allclose(back, best.reshape(-1)[: values.size], rtol=1e-6, atol=1e-30)
    # The relative error of an element at least a tenth of its block's maximum stays below ~7% (half
    # a step of the map in the top decade).
    big = np.abs(padded.reshape(-1)[: values.size]) > 0.1 * np.repeat(absmax, block)[: values.size]
    rel = np.abs(back - values.astype(np.float64))[big] / np.abs(values[big])
    assert rel.max() < 0.08


def test_state_layout_small_tensors_in_full_precision_large_ones_quantized():
  params = {"small": jnp.zeros((8, 8), jnp.bfloat16), "large": jnp.zeros((50, 100)), "odd": jnp.zeros(4097),
            "complex": jnp.zeros(5000, jnp.complex64)}
  tx = steadax.scale_by_adam_8bit()
  state = tx.init(params)
  assert state.mu["small"].dtype == jnp.float32 and state.mu["small"].shape == (8, 8)  # below 4096
  assert isinstance(state.mu["large"], steadax.BlockQuantized)
  assert state.mu["large"].codes.shape == (20, 256) and state.nu["large"].scale.shape == (20,)
  assert state.mu["odd"].codes.shape == (17, 256)  # 4097 values padded to 17 whole blocks
  assert state.mu["complex"].codes.shape == (40, 256)  # 10000 real and imaginary parts
  assert state.nu["complex"].codes.shape == (20, 256)  # |g|^2 is real
  abstract = jax.eval_shape(tx.init, params)
  shapes = lambda t: jax.tree.map(lambda a: (a.shape, a.dtype), t)
  assert shapes(abstract) == shapes(state)
  updates, new_state = jax.jit(tx.update)(jax.tree.map(jnp.ones_like, params), state, params)
  assert shapes(new_state) == shapes(state)
  assert updates["small"].dtype == jnp.bfloat16 and updates["complex"].dtype == jnp.complex64


def test_small_tensors_follow_adam_exactly():
  g = jnp.asarray(np.random.default_rng(2).normal(size=(10, 10)), jnp.float32)
  ours, adam = steadax.scale_by_adam_8bit(), steadax.scale_by_adam()
  so, sa = ours.init(g), adam.init(g)
  for k in range(3):
    uo, so = ours.update(g * (k + 1), so)
    ua, sa = adam.update(g * (k + 1), sa)
    np.testing.assert_array_equal(np.asarray(uo), np.asarray(ua))


_N = 5000
_GRAD_SCALES = jnp.asarray(np.exp(np.random.default_rng(0).uniform(-4, 1, _N)), jnp.float32)


@functools.partial(jax.jit, static_argnums=(2,))
def _noisy_run(tx, key, steps):
  p = jnp.zeros(_N, jnp.float32)

  def body(carry, t):
    p, s = carry
    g = _GRAD_SCALES * (0.3 + jax.random.normal(jax.random.fold_in(key, t), (_N,), jnp.float32))
    u, s = tx.update(g, s)
    return (p + 1e-2 * u, s), u

  (p, s), updates = jax.lax.scan(body, (p, tx.init(p)), jnp.arange(steps, dtype=jnp.int32))
  return p, updates, s


def test_quantized_adam_tracks_float32_adam():
  key = jax.random.key(0)
  p_ref, u_ref, _ = _noisy_run(steadax.scale_by_adam(), key, 300)
  p_8, u_8, state = _noisy_run(steadax.scale_by_adam_8bit(), key, 300)
  assert isinstance(state.mu, steadax.BlockQuantized)
  update_error = np.mean(np.abs(np.asarray(u_8) - np.asarray(u_ref))) / np.mean(np.abs(np.asarray(u_ref)))
  path_error = np.mean(np.abs(np.asarray(p_8 - p_ref))) / np.mean(np.abs(np.asarray(p_ref)))
  assert update_error < 0.15 and path_error < 0.1, (update_error, path_error)
  # The padding of the last block (5000 = 19 * 256 + 136) decodes to zero after 300 updates.
  np.testing.assert_array_equal(
      np.asarray(_dequantize(state.nu, 20 * 256, False, jnp.float32))[_N:], 0.0)


def test_complex_quantized_moments_track_complex_adam():
  rng = np.random.default_rng(3)
  g = jnp.asarray(rng.normal(size=64) + 1j * rng.normal(size=64), jnp.complex64)
  ours, adam = steadax.scale_by_adam_8bit(block_size=16, min_8bit_size=1), steadax.scale_by_adam()
  so, sa = ours.init(g), adam.init(g)
  ours_update, adam_update = jax.jit(ours.update), jax.jit(adam.update)
  for k in range(5):
    uo, so = ours_update(g * (1 + 0.1 * k), so)
    ua, sa = adam_update(g * (1 + 0.1 * k), sa)
  assert uo.dtype == jnp.complex64
  np.testing.assert_allclose(np.asarray(uo), np.asarray(ua), rtol=0.1, atol=0.05)


@pytest.mark.parametrize("kwargs, argument", [
    ({"block_size": 0}, "block_size"), ({"min_8bit_size": -1}, "min_8bit_size"), ({"block_size": 2.5}, "block_size"),
    ({"b1": 1.0}, "b1"),
])
def test_invalid_arguments_name_the_argument(kwargs, argument):
  with pytest.raises(ValueError, match=f"scale_by_adam_8bit: {argument}"):
    steadax.scale_by_adam_8bit(**kwargs)


def test_invalid_arguments_raise_from_the_class_and_replace_too():
  tx = steadax.scale_by_adam_8bit()
  with pytest.raises(ValueError, match="scale_by_adam_8bit: block_size"):
    tx.replace(block_size=0)
  with pytest.raises(ValueError, match="scale_by_adam_8bit: eps"):
    tx.replace(eps=-1.0)
