"""scale_by_adam_lowmem: stochastic rounding is unbiased, lands on a neighbour, and makes bfloat16
Adam track float32 Adam where round-to-nearest stalls."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax
from steadax.transforms._lowmem import dither_bits, stochastic_round

X64 = bool(jax.config.jax_enable_x64)


def _neighbours(x: np.ndarray, dtype) -> tuple[np.ndarray, np.ndarray]:
  """The representable values of ``dtype`` just below and above each ``x`` (computed in numpy)."""
  nearest = np.asarray(jnp.asarray(x).astype(dtype)).astype(np.float64)
  up = np.asarray(jnp.nextafter(jnp.asarray(nearest, dtype), jnp.asarray(np.inf, dtype))).astype(np.float64)
  down = np.asarray(jnp.nextafter(jnp.asarray(nearest, dtype), jnp.asarray(-np.inf, dtype))).astype(np.float64)
  low = np.where(nearest <= x, nearest, down)
  high = np.where(nearest <= x, np.where(nearest == x, nearest, up), nearest)
  return low, high


@functools.partial(jax.jit, static_argnums=(1, 2))
def _many_roundings(x, dtype, draws):
  return jax.vmap(lambda c: stochastic_round(x, dtype, dither_bits(x.shape, c, 12345)))(
      jnp.arange(draws, dtype=jnp.int32))


@pytest.mark.parametrize("source, target", [
    (jnp.float32, jnp.bfloat16),   # the bit-trick path
    (jnp.float32, jnp.float16),    # the general (nextafter) path
])
def test_stochastic_rounding_is_unbiased_and_lands_on_a_neighbour(source, target):
  rng = np.random.default_rng(0)
  x64 = np.concatenate([rng.uniform(-3, 3, 200), rng.uniform(1e-3, 2e-3, 50) * rng.choice([-1, 1], 50)])
  x = jnp.asarray(x64, source)
  exact = np.asarray(x).astype(np.float64)
  draws = 4000
  rounded = np.asarray(_many_roundings(x, np.dtype(target), draws)).astype(np.float64)
  low, high = _neighbours(exact, np.dtype(target))
  assert np.all((rounded == low) | (rounded == high))
  p = np.where(high > low, (exact - low) / np.where(high > low, high - low, 1.0), 0.0)
  mean = rounded.mean(axis=0)
  # Each draw is low + (high - low) Bernoulli(p): the mean's standard error is gap sqrt(p(1-p)/draws).
  stderr = (high - low) * np.sqrt(np.maximum(p * (1 - p), 1e-12) / draws)
  z = np.abs(mean - exact) / np.maximum(stderr, 1e-30)
  assert np.max(z) < 5.0, np.max(z)
  # Round-to-nearest is biased by up to half a gap; the stochastic mean is far closer on average.
  nearest = np.asarray(x.astype(target)).astype(np.float64)
  assert np.mean(np.abs(mean - exact)) < 0.1 * np.mean(np.abs(nearest - exact))


@pytest.mark.skipif(not X64, reason="float64 sources exist only under x64")
def test_stochastic_rounding_from_float64():
  x = jnp.asarray(np.linspace(1.0, 1.01, 50), jnp.float64)
  rounded = np.asarray(_many_roundings(x, np.dtype(jnp.bfloat16), 3000)).astype(np.float64)
  gap = 2.0**-7
  np.testing.assert_allclose(rounded.mean(axis=0), np.asarray(x), atol=5 * 0.5 * gap / np.sqrt(3000))


def test_public_transform_stores_an_unbiased_first_moment():
  # With b1 = 0 the stored first moment is the rounded gradient itself.
  g = jnp.asarray([1.0 + 2.0**-10, -3.0 - 2.0**-9, 0.1], jnp.float32)
  tx = steadax.scale_by_adam_lowmem(b1=0.0)

  @jax.jit
  def run(state):
    def body(s, _):
      s = tx.update(g, s)[1]
      return s, s.mu
    return jax.lax.scan(body, state, None, length=2000)[1]

  mus = np.asarray(run(tx.init(g))).astype(np.float64)
  assert len(np.unique(mus[:, 0])) == 2  # it rounds both ways
  np.testing.assert_allclose(mus.mean(axis=0), np.asarray(g), rtol=2e-4)
  nearest = np.asarray(g.astype(jnp.bfloat16)).astype(np.float64)
  assert np.abs(nearest[0] - float(g[0])) > 5e-4  # nearest rounding of the same value is off


_SCALES = jnp.asarray(np.geomspace(1e-3, 1.0, 64), jnp.float32)


@functools.partial(jax.jit, static_argnums=(2,))
def _trajectory(tx, key, steps):
  p = jnp.zeros(64, jnp.float32)

  def body(carry, t):
    p, s = carry
    noise = jax.random.normal(jax.random.fold_in(key, t), (64,), jnp.float32)
    # Gradients shrink 100x after 200 steps: Adam's second moment must decay by ~1e-3 per step,
    # below half a bfloat16 ulp (2^-9), so a round-to-nearest moment cannot follow.
    g = _SCALES * (1.0 + 0.5 * noise) * jnp.where(t < 200, 1.0, 0.01)
    u, s = tx.update(g, s)
    return (p + 1e-3 * u, s), None

  (p, s), _ = jax.lax.scan(body, (p, tx.init(p)), jnp.arange(steps, dtype=jnp.int32))
  return p, s


def test_bfloat16_stochastic_adam_tracks_float32_adam_where_nearest_stalls():
  key = jax.random.key(0)
  reference, ref_state = _trajectory(steadax.scale_by_adam(), key, 3000)
  errors = {}
  for rounding in ("nearest", "stochastic"):
    params, state = _trajectory(steadax.scale_by_adam_lowmem(rounding=rounding), key, 3000)
    assert state.nu.dtype == jnp.bfloat16
    errors[rounding] = np.mean(np.abs(np.asarray(params) - np.asarray(reference)) / np.abs(np.asarray(reference)))
    nu_error = np.mean(np.abs(np.asarray(state.nu, np.float64) / np.asarray(ref_state.nu) - 1))
    errors[rounding + "_nu"] = nu_error
  assert errors["nearest_nu"] > 1.0  # the stalled second moment is off by more than 100%
  assert errors["stochastic_nu"] < 0.2
  assert errors["stochastic"] < 0.05 and errors["stochastic"] < errors["nearest"] / 5, errors


def test_nearest_rounding_is_scale_by_adam_with_narrow_moments():
  g = jnp.asarray([[0.3, -1.7], [2e-3, 5.0]])
  low = steadax.scale_by_adam_lowmem(rounding="nearest")
  adam = steadax.scale_by_adam(mu_dtype=jnp.bfloat16, nu_dtype=jnp.bfloat16)
  sl, sa = low.init(g), adam.init(g)
  for k in range(5):
    ul, sl = low.update(g * (k - 2), sl)
    ua, sa = adam.update(g * (k - 2), sa)
    np.testing.assert_array_equal(np.asarray(ul), np.asarray(ua))
  np.testing.assert_array_equal(np.asarray(sl.nu, np.float32), np.asarray(sa.nu, np.float32))


def test_seed_and_determinism():
  g = jnp.asarray(np.random.default_rng(1).normal(size=40), jnp.float32)

  def state_after(seed):
    tx = steadax.scale_by_adam_lowmem(seed=seed)
    state = tx.init(g)
    for _ in range(3):
      state = tx.update(g, state)[1]
    return np.asarray(state.mu, np.float32)

  np.testing.assert_array_equal(state_after(0), state_after(0))
  assert not np.array_equal(state_after(0), state_after(1))


def test_state_is_adams_state_with_narrow_leaves_and_eval_shape_init():
  params = {"w": jnp.zeros((2, 3)), "c": jnp.zeros(2, jnp.complex64), "h": jnp.zeros(2, jnp.float16)}
  tx = steadax.scale_by_adam_lowmem()
  state = tx.init(params)
  assert isinstance(state, steadax.ScaleByAdamState)
  assert state.mu["w"].dtype == jnp.bfloat16 and state.nu["c"].dtype == jnp.bfloat16
  assert state.mu["c"].dtype == jnp.complex64  # a complex first moment stays complex
  abstract = jax.eval_shape(tx.init, params)
  assert jax.tree.map(lambda a: (a.shape, a.dtype), abstract) == jax.tree.map(lambda a: (a.shape, a.dtype), state)
  updates, _ = tx.update(params, state, params)
  assert updates["h"].dtype == jnp.float16 and updates["c"].dtype == jnp.complex64


@pytest.mark.parametrize("kwargs, argument, error", [
    ({"rounding": "up"}, "rounding", ValueError), ({"seed": 1.5}, "seed", TypeError),
    ({"mu_dtype": jnp.int8}, "mu_dtype", TypeError), ({"b2": 1.0}, "b2", ValueError),
])
def test_invalid_arguments_name_the_argument(kwargs, argument, error):
  with pytest.raises(error, match=f"scale_by_adam_lowmem: {argument}"):
    steadax.scale_by_adam_lowmem(**kwargs)


def test_invalid_arguments_raise_from_the_class_and_replace_too():
  tx = steadax.scale_by_adam_lowmem()
  with pytest.raises(ValueError, match="scale_by_adam_lowmem: b1"):
    tx.replace(b1=1.0)
  with pytest.raises(ValueError, match="scale_by_adam_lowmem: rounding"):
    tx.replace(rounding="up")
  with pytest.raises(TypeError, match="scale_by_adam_lowmem: nu_dtype"):
    type(tx)(nu_dtype=jnp.int32)


def test_leaves_with_different_moment_dtypes_round_to_their_own_dtype():
  # mu_dtype=None: the bfloat16 leaf keeps bfloat16 moments (rounded stochastically), the float32
  # leaf float32 ones (exact); each leaf gets the dither it gets alone (salted by its index).
  g = jnp.asarray(np.linspace(0.01, 1.0, 64) * (1 + 1e-3 * np.arange(64)), jnp.float32)
  tx = steadax.scale_by_adam_lowmem(mu_dtype=None, nu_dtype=None, seed=3)
  params = {"a": jnp.zeros(64, jnp.bfloat16), "b": jnp.zeros(64, jnp.float32)}
  _, mixed = tx.update({"a": g.astype(jnp.bfloat16), "b": g}, tx.init(params), params)
  alone_params = {"a": params["a"]}
  _, alone = tx.update({"a": g.astype(jnp.bfloat16)}, tx.init(alone_params), alone_params)
  assert mixed.mu["a"].dtype == jnp.bfloat16 and mixed.mu["b"].dtype == jnp.float32
  np.testing.assert_array_equal(np.asarray(mixed.mu["a"], np.float32), np.asarray(alone.mu["a"], np.float32))
  adam = steadax.scale_by_adam()
  _, exact = adam.update(g, adam.init(g))
  np.testing.assert_array_equal(np.asarray(mixed.mu["b"]), np.asarray(exact.mu))
  np.testing.assert_array_equal(np.asarray(mixed.nu["b"]), np.asarray(exact.nu))
  # The narrow leaf was rounded stochastically: some elements differ from round-to-nearest.
  nearest = np.asarray((0.1 * g.astype(jnp.bfloat16).astype(jnp.float32)).astype(jnp.bfloat16), np.float32)
  assert np.any(np.asarray(mixed.mu["a"], np.float32) != nearest)
