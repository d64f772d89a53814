"""steadax.second_order: against Optax and against the full Hessian; dtypes, jit, errors."""

from __future__ import annotations

import contextlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

from steadax import second_order as S


@contextlib.contextmanager
def optax_rules():
  # Optax 0.2.8 deprecates these functions (removal in 0.2.9): its warning is expected here. Its
  # hessian_diag builds a default-float identity, float64 under x64, and fails for float32 parameters
  # (jvp tangent dtype): the reference runs with x64 off.
  with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"), jax.enable_x64(False), \
       warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    yield


def loss(params, inputs, targets):
  hidden = jnp.tanh(inputs @ params["w"] + params["b"][None, :])
  return jnp.sum((hidden - targets) ** 2) + jnp.sum(params["w"] ** 4)


RNG = np.random.default_rng(0)
PARAMS = {"w": jnp.asarray(RNG.normal(size=(3, 2)), jnp.float32), "b": jnp.asarray(RNG.normal(size=2), jnp.float32)}
INPUTS = jnp.asarray(RNG.normal(size=(5, 3)), jnp.float32)
TARGETS = jnp.asarray(RNG.normal(size=(5, 2)), jnp.float32)
V = jnp.asarray(RNG.normal(size=8), jnp.float32)


def full_hessian():
  flat, unravel = ravel_pytree(PARAMS)
  return jax.hessian(lambda f: loss(unravel(f), INPUTS, TARGETS))(flat)


def test_hvp_matches_optax_and_the_full_hessian():
  ours = S.hvp(loss, V, PARAMS, INPUTS, TARGETS)
  with optax_rules():
    theirs = optax.second_order.hvp(loss, V, PARAMS, INPUTS, TARGETS)
  assert jax.tree_util.tree_structure(ours) == jax.tree_util.tree_structure(PARAMS)
  for key in PARAMS:
    np.testing.assert_allclose(np.asarray(ours[key]), np.asarray(theirs[key]), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(ravel_pytree(ours)[0]), np.asarray(full_hessian() @ V), rtol=1e-4, atol=1e-4)


def test_hessian_diag_matches_optax_and_the_full_hessian():
  ours = S.hessian_diag(loss, PARAMS, INPUTS, TARGETS)
  with optax_rules():
    theirs = optax.second_order.hessian_diag(loss, PARAMS, INPUTS, TARGETS)
  assert ours.shape == (8,) and ours.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(ours), np.diag(np.asarray(full_hessian())), rtol=1e-4, atol=1e-4)


def test_fisher_diag_is_the_squared_gradient_and_matches_optax():
  ours = S.fisher_diag(loss, PARAMS, INPUTS, TARGETS)
  with optax_rules():
    theirs = optax.second_order.fisher_diag(loss, PARAMS, INPUTS, TARGETS)
  grad = ravel_pytree(jax.grad(loss)(PARAMS, INPUTS, TARGETS))[0]
  np.testing.assert_allclose(np.asarray(ours), np.asarray(grad) ** 2, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-6)


def test_low_precision_parameters_keep_their_dtypes():
  low = {"w": PARAMS["w"].astype(jnp.bfloat16), "b": PARAMS["b"]}

  def mixed_loss(params, inputs, targets):
    return loss({"w": params["w"].astype(jnp.float32), "b": params["b"]}, inputs, targets)

  hv = S.hvp(mixed_loss, V, low, INPUTS, TARGETS)
  assert hv["w"].dtype == jnp.bfloat16 and hv["b"].dtype == jnp.float32
  # The flat vectors take the promoted dtype of the parameters, as ravel_pytree does.
  assert S.hessian_diag(mixed_loss, low, INPUTS, TARGETS).dtype == jnp.float32
  only_low = {"w": low["w"]}
  diag = S.hessian_diag(lambda p, x, y: mixed_loss({**p, "b": PARAMS["b"]}, x, y), only_low, INPUTS, TARGETS)
  assert diag.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(diag, np.float32), np.diag(np.asarray(full_hessian()))[2:], rtol=5e-2, atol=5e-2)
  fisher = S.fisher_diag(lambda p, x, y: mixed_loss({**p, "b": PARAMS["b"]}, x, y), only_low, INPUTS, TARGETS)
  assert fisher.dtype == jnp.bfloat16


def test_jit():
  diag = jax.jit(S.hessian_diag, static_argnums=0)(loss, PARAMS, INPUTS, TARGETS)
  np.testing.assert_allclose(np.asarray(diag), np.asarray(S.hessian_diag(loss, PARAMS, INPUTS, TARGETS)), rtol=1e-5, atol=1e-6)
  hv = jax.jit(S.hvp, static_argnums=0)(loss, V, PARAMS, INPUTS, TARGETS)
  np.testing.assert_allclose(np.asarray(hv["w"]), np.asarray(S.hvp(loss, V, PARAMS, INPUTS, TARGETS)["w"]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("call, error, match", [
    (lambda: S.hvp(loss, jnp.ones(7), PARAMS, INPUTS, TARGETS), ValueError, "hvp: `v` must be a flat vector of the 8"),
    (lambda: S.hvp(None, V, PARAMS, INPUTS, TARGETS), TypeError, "hvp: `loss` must be a callable"),
    (lambda: S.hessian_diag(loss, {"w": jnp.ones(2, jnp.int32)}, INPUTS, TARGETS), TypeError,
     r"hessian_diag: `params` at \['w'\] has dtype int32"),
    (lambda: S.fisher_diag(3, PARAMS, INPUTS, TARGETS), TypeError, "fisher_diag: `negative_log_likelihood` must be a callable"),
])
def test_bad_arguments(call, error, match):
  with pytest.raises(error, match=match):
    call()
