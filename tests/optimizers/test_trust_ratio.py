"""lamb and lars: per-layer step lengths from the trust ratio, masks, validation."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import steadax


def test_lamb_step_length_is_learning_rate_times_parameter_norm():
  opt = steadax.lamb(0.01, weight_decay=0.1)
  p = {"w": jnp.asarray([[3.0, 4.0], [1.0, 2.0]]), "b": jnp.asarray([0.5, -0.5])}
  g = {"w": jnp.asarray([[0.1, -3.0], [2.0, 0.01]]), "b": jnp.asarray([1.0, 1.0])}
  u, _ = opt.update(g, opt.init(p), p)
  for k in p:
    np.testing.assert_allclose(np.linalg.norm(np.asarray(u[k])), 0.01 * np.linalg.norm(np.asarray(p[k])),
                               rtol=1e-5)


def test_lars_trust_ratio_and_masks():
  lr, tc, wd = 0.5, 0.01, 0.1
  mask = {"w": True, "b": False}
  opt = steadax.lars(lr, weight_decay=wd, weight_decay_mask=mask, trust_coefficient=tc,
                     trust_ratio_mask=mask, momentum=0.9)
  p = {"w": jnp.asarray([3.0, 4.0]), "b": jnp.asarray([1.0, 1.0])}
  g = {"w": jnp.asarray([1.0, 0.0]), "b": jnp.asarray([2.0, -2.0])}
  state = opt.init(p)
  u, state = opt.update(g, state, p)
  decayed = np.asarray([1.0, 0.0]) + wd * np.asarray([3.0, 4.0])
  expected_w = -lr * tc * 5.0 * decayed / np.linalg.norm(decayed)
  np.testing.assert_allclose(np.asarray(u["w"]), expected_w, rtol=1e-5)
  np.testing.assert_allclose(np.asarray(u["b"]), -lr * np.asarray([2.0, -2.0]), rtol=1e-6)  # masked out
  u2, _ = opt.update(g, state, p)
  np.testing.assert_allclose(np.asarray(u2["b"]), 1.9 * np.asarray(u["b"]), rtol=1e-6)  # momentum 0.9


def test_lars_state_structure_matches_optax():
  state = steadax.lars(0.1).init({"w": jnp.ones(2)})
  assert [type(s).__name__ for s in state] == ["MaskedState", "MaskedState", "EmptyState", "TraceState"]


@pytest.mark.parametrize("call, message", [
    (lambda: steadax.lamb(0.1, b1=1.0), "lamb: b1"),
    (lambda: steadax.lamb(0.1, weight_decay=-0.1), "lamb: weight_decay"),
    (lambda: steadax.lars(0.1, momentum=-0.1), "lars: momentum"),
    (lambda: steadax.lars(0.1, trust_coefficient=-1.0), "lars: trust_coefficient"),
    (lambda: steadax.lars(0.1, eps=-1.0), "lars: eps"),
])
def test_bad_hyperparameters_raise(call, message):
  with pytest.raises(ValueError, match=message):
    call()
