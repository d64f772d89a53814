"""normalize_by_update_norm against Optax, its dtype rules and errors; Optax's empty-state aliases."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax

UPDATES = {"a": jnp.array([3.0, 0.0], jnp.float32), "b": jnp.array([[4.0]], jnp.bfloat16)}


@pytest.mark.parametrize("kwargs", [{}, {"scale_factor": -0.5}, {"eps": 0.0}, {"scale_factor": 2.0, "eps": 1.0}])
def test_agrees_with_optax(kwargs):
  tx = steadax.normalize_by_update_norm(**kwargs)
  updates = jax.tree.map(lambda u: u.astype(jnp.float32), UPDATES)
  ours, state = tx.update(updates, tx.init(updates))
  with jax.numpy_dtype_promotion("standard"):
    reference = optax.normalize_by_update_norm(**kwargs)
    theirs, _ = reference.update(updates, reference.init(updates))
  assert state == steadax.EmptyState()
  for key in updates:
    np.testing.assert_allclose(np.asarray(ours[key]), np.asarray(theirs[key]), rtol=1e-6)


def test_mixed_precision_norm_is_exact_and_dtypes_are_kept():
  tx = steadax.normalize_by_update_norm(eps=0.0)
  out, _ = tx.update(UPDATES, tx.init(UPDATES))
  assert out["a"].dtype == jnp.float32 and out["b"].dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(out["a"]), [0.6, 0.0], rtol=1e-6)
  np.testing.assert_allclose(float(out["b"][0, 0]), 0.8, rtol=1e-2)
  zeros, _ = tx.update(jax.tree.map(jnp.zeros_like, UPDATES), tx.init(UPDATES))
  assert all(np.all(np.asarray(z, np.float32) == 0) for z in jax.tree.leaves(zeros))


def test_hyperparameters_are_leaves():
  traces = []

  @jax.jit
  def apply(tx, updates):
    traces.append(None)
    return tx.update(updates, tx.init(updates))[0]

  for factor in (1.0, 2.0, -3.0):
    out = apply(steadax.normalize_by_update_norm(scale_factor=factor, eps=0.0), UPDATES)
    np.testing.assert_allclose(np.asarray(out["a"]), [0.6 * factor, 0.0], rtol=1e-6)
  assert len(traces) == 1


@pytest.mark.parametrize("kwargs, error, match", [
    ({"eps": -1.0}, ValueError, r"normalize_by_update_norm: eps must lie in \[0.0, inf\]"),
    ({"scale_factor": jnp.ones(2)}, ValueError, "normalize_by_update_norm: scale_factor must be a scalar"),
    ({"scale_factor": "1"}, TypeError, "normalize_by_update_norm: scale_factor must be a number"),
])
def test_bad_arguments(kwargs, error, match):
  with pytest.raises(error, match=match):
    steadax.normalize_by_update_norm(**kwargs)


@pytest.mark.parametrize("name, factory", [
    ("ClipState", lambda: steadax.clip(1.0)),
    ("ClipByGlobalNormState", lambda: steadax.clip_by_global_norm(1.0)),
    ("ScaleByTrustRatioState", lambda: steadax.scale_by_trust_ratio()),
    ("AdaptiveGradClipState", lambda: steadax.adaptive_grad_clip(0.1)),
])
def test_empty_state_aliases_name_the_states(name, factory):
  # Optax spells these states as aliases of EmptyState; so does steadax.
  assert getattr(optax, name) is optax.EmptyState
  assert getattr(steadax, name) is steadax.EmptyState
  assert factory().init({"w": jnp.ones(2)}) == getattr(steadax, name)()


def test_mask_or_fn_alias():
  assert steadax.MaskOrFn is not None
  weight_decay_mask: steadax.MaskOrFn = lambda params: jax.tree.map(lambda p: p.ndim > 1, params)  # noqa: E731
  tx = steadax.adamw(0.1, mask=weight_decay_mask)
  assert tx.init({"w": jnp.ones((2, 2)), "b": jnp.ones(2)}) is not None
