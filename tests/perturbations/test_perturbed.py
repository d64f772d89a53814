"""make_perturbed_fun: convergence to the hard function, the Gumbel-softmax identity, Optax parity."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax

P = steadax.perturbations
X = jnp.asarray([0.2, 1.0, -0.5, 0.4], jnp.float32)
W = jnp.asarray([1.0, -2.0, 3.0, 0.5], jnp.float32)


def hard_argmax(x):
  return jax.nn.one_hot(jnp.argmax(x), x.shape[-1], dtype=x.dtype)


@jax.jit
def smoothed_argmax(sigma):
  """One compiled program for every sigma (a traced hyperparameter) shared by the tests below."""
  return P.make_perturbed_fun(hard_argmax, num_samples=3000, sigma=sigma)(jax.random.key(1), X)


def test_perturbed_argmax_converges_to_the_argmax_as_sigma_shrinks():
  target = np.asarray(hard_argmax(X))
  errors = [float(np.abs(np.asarray(smoothed_argmax(s)) - target).max()) for s in (1.0, 0.3, 0.02)]
  assert errors[0] > errors[1] > errors[2]
  # The argmax's margin is 0.6 = 30 sigma: no Gumbel draw crosses it.
  assert errors[2] == 0.0


def test_gumbel_smoothing_of_argmax_is_the_softmax():
  # Gumbel-max: argmax(x + sigma * g) is distributed as softmax(x / sigma).
  for sigma in (0.5, 1.0):
    estimate = np.asarray(smoothed_argmax(sigma))
    np.testing.assert_allclose(estimate, np.asarray(jax.nn.softmax(X / sigma)), atol=0.03)
    assert abs(estimate.sum() - 1.0) < 1e-5


def _loss(lib, noise, use_baseline, fun=hard_argmax, num_samples=300):
  smooth = lib.perturbations.make_perturbed_fun(fun, num_samples, 0.5, noise, use_baseline)
  return lambda x: jnp.vdot(smooth(jax.random.key(5), x), W)


@pytest.mark.parametrize("noise_name, use_baseline", [("Gumbel", True), ("Normal", False)])
def test_values_and_gradients_match_optax_with_the_same_key(noise_name, use_baseline):
  ours = _loss(steadax, getattr(P, noise_name)(), use_baseline)
  theirs = _loss(optax, getattr(optax.perturbations, noise_name)(), use_baseline)
  value, grad = jax.jit(jax.value_and_grad(ours))(X)
  with jax.numpy_dtype_promotion("standard"):
    ref_value, ref_grad = jax.jit(jax.value_and_grad(theirs))(X)
  np.testing.assert_allclose(float(value), float(ref_value), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(grad), np.asarray(ref_grad), rtol=1e-4, atol=1e-5)
  assert float(jnp.abs(grad).max()) > 0.0   # the smoothed argmax has a gradient, the hard one none


def test_pytree_inputs_and_outputs_match_optax():
  def fun(tree):
    return {"hard": hard_argmax(tree["u"] + tree["v"]), "sum": jnp.sum(tree["u"] * tree["v"])}

  x = {"u": X, "v": jnp.asarray([0.1, -0.3, 0.2, 0.0], jnp.float32)}
  def objective(lib):
    smooth = lib.perturbations.make_perturbed_fun(fun, 200, 0.3)
    return lambda t: jnp.vdot(smooth(jax.random.key(2), t)["hard"], W) + smooth(jax.random.key(2), t)["sum"]

  grad = jax.jit(jax.grad(objective(steadax)))(x)
  with jax.numpy_dtype_promotion("standard"):
    ref_grad = jax.jit(jax.grad(objective(optax)))(x)
  for k in x:
    np.testing.assert_allclose(np.asarray(grad[k]), np.asarray(ref_grad[k]), rtol=1e-4, atol=1e-5)


def test_dtypes_follow_the_function_output():
  smooth = jax.jit(P.make_perturbed_fun(hard_argmax, num_samples=64, sigma=0.1))
  out = smooth(jax.random.key(0), X.astype(jnp.bfloat16))
  assert out.dtype == jnp.bfloat16 and bool(jnp.all(jnp.isfinite(out)))
  as_int = jax.jit(P.make_perturbed_fun(jnp.argmax, num_samples=64, sigma=0.1))(jax.random.key(0), X)
  assert jnp.issubdtype(as_int.dtype, jnp.floating) and float(as_int) == 1.0


def test_noise_log_probs_and_argument_errors():
  z = jnp.asarray([-1.0, 0.0, 2.0])
  np.testing.assert_allclose(P.Normal().log_prob(z), -0.5 * np.asarray(z) ** 2)
  np.testing.assert_allclose(P.Gumbel().log_prob(z), -np.asarray(z) - np.exp(-np.asarray(z)), rtol=1e-6)
  assert P.Gumbel().sample(jax.random.key(0), (2, 3)).shape == (2, 3)
  with pytest.raises(ValueError, match="make_perturbed_fun: `num_samples`"):
    P.make_perturbed_fun(hard_argmax, num_samples=0)
  with pytest.raises(TypeError, match="make_perturbed_fun: `noise`"):
    P.make_perturbed_fun(hard_argmax, noise=object())
