"""Microbatching errors in Optax's words (tools/optax_tests.py)."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

import steadax


def test_indivisible_batch_error_says_divisible():
  fn = steadax.microbatching.microbatch(lambda x: jnp.sum(x, axis=0), 0, 3)
  with pytest.raises(ValueError, match="divisible"):
    fn(jnp.ones((8, 2), jnp.float32))
