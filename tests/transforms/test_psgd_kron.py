"""scale_by_psgd_kron: the preconditioner whitens gradient noise; factor layout, the update
probability, the key in the state, triangularity, the trust region, errors."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax

_RNG = np.random.default_rng(0)
# Gradient noise G = L Z R^T of a 3x4 parameter: Cov(vec G) = (L L^T) (x) (R R^T), condition ~5e4.
_L = jnp.asarray(_RNG.normal(size=(3, 3)) * np.array([[3.0], [1.0], [0.2]]), jnp.float32)
_R = jnp.asarray(_RNG.normal(size=(4, 4)) * np.array([[0.1], [1.0], [2.0], [0.5]]), jnp.float32)
_SIGMA = np.kron(np.asarray(_L @ _L.T, np.float64), np.asarray(_R @ _R.T, np.float64))


@functools.partial(jax.jit, static_argnums=(3,))
def _feed_noise(tx, state, key, steps):
  """``steps`` updates with fresh noise gradients; the parameters sit at the quadratic's minimum,
  so the gradient is pure noise."""
  def body(s, k):
    g = _L @ jax.random.normal(k, (3, 4), jnp.float32) @ _R.T
    _, s = tx.update(g, s)
    return s, None

  state, _ = jax.lax.scan(body, state, jax.random.split(key, steps))
  return state


def _kron_preconditioner(factors):
  mats = [np.asarray(q, np.float64) for q in factors]
  mats = [q.T @ q if q.ndim == 2 else np.diag(q * q) for q in mats]
  return functools.reduce(np.kron, mats)


def test_preconditioner_whitens_kronecker_gradient_noise():
  tx = steadax.scale_by_psgd_kron(b1=0.0, preconditioner_update_probability=1.0, key=jax.random.key(1))
  state = _feed_noise(tx, tx.init(jnp.zeros((3, 4), jnp.float32)), jax.random.key(2), 1000)
  q1, q2 = state.preconditioner
  assert q1.shape == (3, 3) and q2.shape == (4, 4)
  whitened = np.linalg.eigvalsh(_kron_preconditioner(state.preconditioner) @ _SIGMA @ _kron_preconditioner(
      state.preconditioner))
  raw = np.linalg.eigvalsh(_SIGMA)  # the initial preconditioner is the identity
  assert raw[-1] / raw[0] > 1e4
  # Cov(P g) = P Sigma P ~ I: the condition number drops from 5e4 to a few (sampling noise of the
  # one-sample fit at preconditioner_lr=0.1 keeps it from 1).
  assert whitened[-1] / whitened[0] < 10, whitened
  assert 0.4 < np.exp(np.mean(np.log(whitened))) < 2.5, whitened


def test_diagonal_factor_whitens_each_coordinate():
  scales = jnp.asarray([0.05, 1.0, 20.0], jnp.float32)
  tx = steadax.scale_by_psgd_kron(b1=0.0, preconditioner_update_probability=1.0)

  @jax.jit
  def run(state):
    def body(s, k):
      return tx.update(scales * jax.random.normal(k, (3,), jnp.float32), s)[1], None
    return jax.lax.scan(body, state, jax.random.split(jax.random.key(0), 1500))[0]

  (q,) = run(tx.init(jnp.zeros(3, jnp.float32))).preconditioner
  assert q.shape == (3,)  # vectors get a diagonal factor by default
  # P = diag(q^2) ~ Sigma^{-1/2} = 1 / scales: P_ii scales_i ~ 1 across a 400x range of scales.
  np.testing.assert_allclose(np.asarray(q * q * scales), 1.0, rtol=0.35)


def test_factor_layout_follows_size_and_rank_limits():
  params = {"mat": jnp.zeros((5, 1, 3)), "vec": jnp.zeros(4), "scalar": jnp.zeros([]), "big": jnp.zeros((2, 9))}
  state = steadax.scale_by_psgd_kron(max_size_triangular=8).init(params)
  shapes = jax.tree.map(lambda q: q.shape, state.preconditioner)
  assert shapes["mat"] == ((5, 5), (1,), (3, 3))  # a size-1 dimension is diagonal
  assert shapes["vec"] == ((4,),) and shapes["scalar"] == ((1,),)
  assert shapes["big"] == ((2, 2), (9,))  # above max_size_triangular: diagonal
  dense_vectors = steadax.scale_by_psgd_kron(min_ndim_triangular=1).init(params)
  assert dense_vectors.preconditioner["vec"][0].shape == (4, 4)
  scaled = steadax.scale_by_psgd_kron(preconditioner_init_scale=4.0).init(params)
  q1, _, q3 = scaled.preconditioner["mat"]
  np.testing.assert_allclose(np.asarray(q1), 4.0 ** (1 / 3) * np.eye(5), rtol=1e-6)  # spread over factors


def test_factors_stay_upper_triangular_and_keep_their_dtypes():
  params = {"w": jnp.zeros((3, 4), jnp.bfloat16)}
  tx = steadax.scale_by_psgd_kron(preconditioner_update_probability=1.0, preconditioner_dtype=jnp.float32)
  state = tx.init(params)
  grads = {"w": jnp.asarray(_RNG.normal(size=(3, 4)), jnp.bfloat16)}
  update = jax.jit(tx.update)
  for _ in range(3):
    updates, state = update(grads, state, params)
  for q in state.preconditioner["w"]:
    assert q.dtype == jnp.float32
    np.testing.assert_array_equal(np.tril(np.asarray(q), -1), 0.0)
    assert not np.allclose(np.asarray(q), np.eye(q.shape[0]))  # it was fitted
  assert updates["w"].dtype == jnp.bfloat16 and state.mu["w"].dtype == jnp.bfloat16


def test_update_probability_zero_keeps_the_identity_and_returns_clipped_momentum():
  tx = steadax.scale_by_psgd_kron(b1=0.0, preconditioner_update_probability=0.0)
  g = jnp.asarray([[0.3, -1.5], [0.1, 0.2]])
  state = tx.init(g)
  updates, state = tx.update(g, state)
  for q in state.preconditioner:
    np.testing.assert_array_equal(np.asarray(q), np.eye(2))
  # P = I: the update is g through the trust region (its RMS, 0.77, is below 1; entries are
  # clipped to [-1, 1]).
  np.testing.assert_allclose(np.asarray(updates), np.clip(np.asarray(g), -1, 1), rtol=1e-6)


def test_trust_region_bounds_rms_and_entries():
  tx = steadax.scale_by_psgd_kron(b1=0.0, preconditioner_update_probability=0.0)
  g = {"a": jnp.full((2, 2), 3.0), "b": jnp.asarray([0.5, 40.0])}
  updates, _ = tx.update(g, tx.init(g))
  leaves = np.concatenate([np.ravel(u) for u in jax.tree.leaves(updates)])
  assert np.sqrt(np.mean(leaves**2)) <= 1.0 + 1e-6 and np.max(np.abs(leaves)) <= 1.0


def test_key_in_state_keeps_its_dtype_and_makes_runs_reproducible():
  params = jnp.zeros((3, 2))
  g = jnp.asarray(_RNG.normal(size=(3, 2)), jnp.float32)

  def run(key):
    tx = steadax.scale_by_psgd_kron(preconditioner_update_probability=0.5, key=key)
    state = tx.init(params)
    outs = []
    update = jax.jit(tx.update)
    for _ in range(4):
      u, new_state = update(g, state)
      assert new_state.rng_key.dtype == state.rng_key.dtype and new_state.rng_key.shape == ()
      state = new_state
      outs.append(np.asarray(u))
    return np.stack(outs), state

  a, state_a = run(jax.random.key(5))
  b, _ = run(5)  # an integer seed is the same key
  c, _ = run(jax.random.key(6))
  np.testing.assert_array_equal(a, b)
  assert not np.array_equal(a, c)
  assert jnp.issubdtype(state_a.rng_key.dtype, jax.dtypes.prng_key)


def test_complex_parameters_get_complex_dense_factors():
  p = jnp.asarray(_RNG.normal(size=(2, 3)) + 1j * _RNG.normal(size=(2, 3)), jnp.complex64)
  tx = steadax.scale_by_psgd_kron(preconditioner_update_probability=1.0)
  state = tx.init(p)
  update = jax.jit(tx.update)
  for _ in range(3):
    u, state = update(p, state)
  q1, q2 = state.preconditioner
  assert q1.dtype == jnp.complex64 and u.dtype == jnp.complex64
  np.testing.assert_array_equal(np.tril(np.asarray(q1), -1), 0)
  assert np.all(np.isfinite(np.asarray(u)))


def test_eval_shape_init_matches_init():
  params = {"w": jnp.zeros((3, 4)), "b": jnp.zeros(4, jnp.bfloat16)}
  tx = steadax.scale_by_psgd_kron()
  concrete = jax.tree.map(lambda a: (a.shape, a.dtype), tx.init(params))
  abstract = jax.tree.map(lambda a: (a.shape, a.dtype), jax.eval_shape(tx.init, params))
  assert concrete == abstract


def test_default_update_probability_anneals():
  sched = steadax.psgd_update_probability()
  values = [float(sched(jnp.asarray(n, jnp.int32))) for n in (0, 500, 1500, 10_000)]
  np.testing.assert_allclose(values, [1.0, 1.0, np.exp(-1.0), 0.03], rtol=1e-5)


@pytest.mark.parametrize("kwargs", [{"max_prob": 1.5}, {"min_prob": -0.1}, {"decay": -1.0}])
def test_update_probability_checks_its_fields(kwargs):
  name = next(iter(kwargs))
  with pytest.raises(ValueError, match=f"psgd_update_probability: {name}"):
    steadax.psgd_update_probability(**kwargs)
  with pytest.raises(ValueError, match=name):
    steadax.psgd_update_probability().replace(**kwargs)


@pytest.mark.parametrize("kwargs, argument", [
    ({"b1": 1.0}, "b1"), ({"preconditioner_update_probability": 1.5}, "preconditioner_update_probability"),
    ({"preconditioner_lr": 0.0}, "preconditioner_lr"), ({"max_size_triangular": -1}, "max_size_triangular"),
    ({"key": "seed"}, "key"),
])
def test_invalid_arguments_name_the_argument(kwargs, argument):
  with pytest.raises((ValueError, TypeError), match=f"scale_by_psgd_kron: {argument}"):
    steadax.scale_by_psgd_kron(**kwargs)


@pytest.mark.parametrize("changes, argument", [
    ({"b1": 1.0}, "b1"), ({"preconditioner_lr": 0.0}, "preconditioner_lr"),
    ({"min_ndim_triangular": -1}, "min_ndim_triangular"), ({"key": "seed"}, "key"),
])
def test_replace_validates_like_the_factory(changes, argument):
  with pytest.raises((ValueError, TypeError), match=f"scale_by_psgd_kron: {argument}"):
    steadax.scale_by_psgd_kron().replace(**changes)


@pytest.mark.skipif(not jax.config.jax_enable_x64, reason="float64 factors exist only under x64")
def test_balancing_float64_factors_keeps_their_product_to_float64_precision():
  """The rescaling factors of two float64 Kronecker factors multiply to 1 in float64 (they were
  computed from float32 norms, so the preconditioner drifted by ~1e-7 at every balance)."""
  from steadax.transforms._psgd_kron import _balance

  rng = np.random.default_rng(0)
  q1 = jnp.asarray(rng.normal(size=(3, 3)) * 7.3, jnp.float64)
  q2 = jnp.asarray(rng.normal(size=(4, 4)) * 0.011, jnp.float64)
  b1, b2 = _balance((q1, q2), jnp.asarray(True))
  assert b1.dtype == b2.dtype == jnp.float64
  product = (b1[0, 0] / q1[0, 0]) * (b2[0, 0] / q2[0, 0])
  assert abs(float(product) - 1.0) < 1e-13
  np.testing.assert_allclose(float(jnp.max(jnp.abs(b1))), float(jnp.max(jnp.abs(b2))), rtol=1e-13)
