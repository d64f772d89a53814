"""Transforms that Optax's own tests (tools/optax_tests.py) found different, fixed to match."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

import steadax


def test_add_decayed_weights_with_no_updates_returns_none():
  params = (jnp.ones(2, jnp.float32), {"a": jnp.ones(2, jnp.float32), "b": jnp.ones(2, jnp.float32)})
  tx = steadax.add_decayed_weights(0.1)
  assert tx.update(None, tx.init(params), params) == (None, steadax.EmptyState())
  assert tx.update(None, 0, params) == (None, 0)  # Optax's test passes the state 0
  scheduled = steadax.add_decayed_weights(lambda count: 0.1)
  updates, state = scheduled.update(None, scheduled.init(params), params)
  assert updates is None and int(state.count) == 1


def test_lion_mode_is_checked_when_built():
  # Deliberate (docs/migrating.md): Optax raises at the first update.
  with pytest.raises(ValueError, match="scale_by_lion: mode must be one of"):
    steadax.scale_by_lion(mode="invalid_mode")
