"""Core v2 blocks (issue 8): hyperparameter checks live on the classes, and the update of a
transformation whose state is narrower than its parameters is not rounded through the state."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import steadax
from steadax.transforms._adaptive import ScaleByNovograd
from steadax.transforms._clipping import Clip
from steadax.transforms._rprop import ScaleByRprop


def test_novograd_update_not_rounded_through_a_bfloat16_momentum():
  # Regression: the update was the momentum after rounding to mu_dtype, so float32 parameters got
  # bfloat16-precision steps (relative error ~3e-3). At the first step m = g / ||g|| exactly.
  g = jnp.array([0.3, -1.7, 2.9, 0.123456], jnp.float32)
  tx = steadax.scale_by_novograd(eps=0.0, mu_dtype=jnp.bfloat16)
  p = jnp.zeros(4, jnp.float32)
  u, state = tx.update(g, tx.init(p), p)
  assert u.dtype == jnp.float32 and state.mu.dtype == jnp.bfloat16
  np.testing.assert_allclose(u, g / jnp.linalg.norm(g), rtol=1e-6)


@pytest.mark.parametrize("build", [
    lambda: Clip(-1.0),
    lambda: steadax.clip(-1.0).replace(max_delta=-1.0),
    lambda: steadax.clip_by_block_rms(1.0).replace(threshold=0.0),
    lambda: ScaleByNovograd(b1=1.0),
    lambda: steadax.scale_by_adadelta().replace(eps=0.0),
    lambda: steadax.scale_by_trust_ratio().replace(min_norm=-1.0),
    lambda: ScaleByRprop(0.1, min_step_size=2.0, max_step_size=1.0),
    lambda: steadax.scale_by_rprop(0.1).replace(eta_plus=0.5),
    lambda: steadax.scale_by_polyak().replace(variant="nope"),
    lambda: steadax.scale_by_factored_rms().replace(epsilon=-1.0),
    lambda: steadax.add_noise(0.1, 0.5, key=0).replace(eta=-1.0),
])
def test_checks_run_on_the_class_and_replace(build):
  with pytest.raises(ValueError):
    build()


def test_optimistic_coefficients_reject_schedules_on_replace():
  with pytest.raises(TypeError, match="alpha"):
    steadax.scale_by_optimistic_gradient().replace(alpha=lambda count: 1.0)
