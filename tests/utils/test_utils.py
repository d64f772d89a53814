"""scale_gradient and multi_normal: against Optax, dtypes, jit, errors."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.stats

import steadax

X64 = bool(jax.config.jax_enable_x64)


@contextlib.contextmanager
def optax_rules():
  with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
    yield


TREE = {"a": jnp.array([1.0, -2.0], jnp.float32), "b": jnp.array([0.5], jnp.bfloat16)}


def weighted_sum(tree):
  return jnp.sum(tree["a"] ** 2) + 3 * jnp.sum(tree["b"].astype(jnp.float32))


@pytest.mark.parametrize("scale", [0.5, -2.0, 0.0, 1.0])
def test_scale_gradient_scales_only_the_backward_pass(scale):
  forward = steadax.scale_gradient(TREE, scale)
  for key in TREE:
    np.testing.assert_array_equal(np.asarray(forward[key], np.float32), np.asarray(TREE[key], np.float32))
  grads = jax.grad(lambda t: weighted_sum(steadax.scale_gradient(t, scale)))(TREE)
  plain = jax.grad(weighted_sum)(TREE)
  for key in TREE:
    assert grads[key].dtype == TREE[key].dtype
    np.testing.assert_allclose(np.asarray(grads[key], np.float32), scale * np.asarray(plain[key], np.float32))
  with optax_rules():
    theirs = jax.grad(lambda t: jnp.sum(optax.scale_gradient(t, scale) ** 2))(TREE["a"])
  ours = jax.grad(lambda t: jnp.sum(steadax.scale_gradient(t, scale) ** 2))(TREE["a"])
  np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs))


def test_scale_gradient_with_a_traced_scale_and_integer_leaves():
  tree = {"x": jnp.array([2.0], jnp.float32), "n": jnp.array([3], jnp.int32)}

  @jax.jit
  def grad_at(scale):
    return jax.grad(lambda t: jnp.sum(steadax.scale_gradient(t, scale)["x"] ** 3), allow_int=True)(tree)["x"]

  np.testing.assert_allclose(np.asarray(grad_at(jnp.float32(0.25))), [3.0])
  np.testing.assert_allclose(np.asarray(grad_at(jnp.float32(1.0))), [12.0])
  # No gradient reaches the scale.
  d_scale = jax.grad(lambda s: jnp.sum(steadax.scale_gradient(tree["x"], s)))(jnp.float32(0.5))
  assert float(d_scale) == 0.0


@pytest.mark.parametrize("scale, error, match", [
    (jnp.ones(2), ValueError, "scale_gradient: `scale` must be a scalar"),
    (1j, TypeError, "scale_gradient: `scale` must be real"),
    ("2", TypeError, "scale_gradient: `scale` must be a real scalar"),
])
def test_scale_gradient_errors(scale, error, match):
  with pytest.raises(error, match=match):
    steadax.scale_gradient(TREE, scale)


def test_multi_normal_samples_match_optax_and_log_prob_matches_scipy():
  dtype = jnp.float64 if X64 else jnp.float32  # Optax draws in the default float dtype
  loc, log_scale = jnp.array([0.0, 1.0, -2.0], dtype), jnp.array([0.0, 0.5, -1.0], dtype)
  ours = steadax.multi_normal(loc, log_scale)
  with optax_rules():
    theirs = optax.multi_normal(loc, log_scale)
    key = jax.random.PRNGKey(3)
    expected = theirs.sample((4,), key)
    expected_log_prob = theirs.log_prob(expected)
  sample = ours.sample((4,), key)
  assert sample.shape == (4, 3) and sample.dtype == dtype
  np.testing.assert_allclose(np.asarray(sample), np.asarray(expected), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(ours.log_prob(sample)), np.asarray(expected_log_prob), rtol=1e-5)
  reference = scipy.stats.norm.logpdf(np.asarray(sample, np.float64), np.asarray(loc), np.exp(np.asarray(log_scale)))
  np.testing.assert_allclose(np.asarray(ours.log_prob(sample)), reference.sum(axis=-1), rtol=1e-5)
  assert ours.log_scale is log_scale or np.array_equal(ours.log_scale, log_scale)
  assert [np.asarray(p).tolist() for p in ours.params] == [loc.tolist(), log_scale.tolist()]


def test_multi_normal_broadcasting_dtypes_and_jit():
  dist = steadax.multi_normal(jnp.zeros((2, 3), jnp.bfloat16), jnp.zeros(3, jnp.bfloat16))
  samples = dist.sample((1000,), jax.random.PRNGKey(0))
  assert samples.shape == (1000, 2, 3) and samples.dtype == jnp.bfloat16
  np.testing.assert_allclose(float(jnp.std(samples.astype(jnp.float32))), 1.0, atol=0.05)
  log_prob = dist.log_prob(jnp.zeros((5, 2, 3), jnp.bfloat16))
  assert log_prob.shape == (5,) and log_prob.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(log_prob, np.float32), -6 * 0.5 * np.log(2 * np.pi), rtol=1e-2)
  jitted = jax.jit(lambda d, k: d.sample((2,), k))(dist, jax.random.PRNGKey(1))
  np.testing.assert_array_equal(np.asarray(jitted, np.float32),
                                np.asarray(dist.sample((2,), jax.random.PRNGKey(1)), np.float32))
  # The score-function gradient flows to both parameters.
  loc, log_scale = jnp.zeros(2, jnp.float32), jnp.zeros(2, jnp.float32)
  x = jnp.array([1.0, -1.0], jnp.float32)
  grads = jax.grad(lambda l, s: steadax.multi_normal(l, s).log_prob(x), argnums=(0, 1))(loc, log_scale)
  np.testing.assert_allclose(np.asarray(grads[0]), [1.0, -1.0])
  np.testing.assert_allclose(np.asarray(grads[1]), [0.0, 0.0], atol=1e-7)


@pytest.mark.parametrize("call, error, match", [
    (lambda: steadax.multi_normal(jnp.zeros(2), jnp.zeros(3)), ValueError, "multi_normal: Incompatible shapes for broadcasting: `loc`"),
    (lambda: steadax.multi_normal(None, jnp.zeros(3)), TypeError, "multi_normal: `loc` must be an array"),
    (lambda: steadax.multi_normal(jnp.zeros(2), jnp.zeros(2)).log_prob(jnp.zeros(3)), ValueError,
     r"log_prob: `x` must end with the event shape \(2,\)"),
    (lambda: steadax.multi_normal(jnp.zeros(2), jnp.zeros(2)).sample((-1,), jax.random.PRNGKey(0)), ValueError,
     "sample: `shape` must be a sequence of non-negative ints"),
])
def test_multi_normal_errors(call, error, match):
  with pytest.raises(error, match=match):
    call()
