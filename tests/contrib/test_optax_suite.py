"""contrib behaviours that Optax's own tests (tools/optax_tests.py) see as different (deliberate)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import steadax


def test_sophia_holds_a_typed_prng_key():
  # Deliberate (docs/migrating.md): Optax's Hutchinson state holds a raw uint32[2] key.
  state = steadax.contrib.sophia(1e-3).init(jnp.ones(3, jnp.float32))
  key = state[0].hessian_fn_state.key
  assert jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) and key.shape == ()
