"""Utility errors in Optax's words (tools/optax_tests.py)."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

import steadax


def test_multi_normal_error_says_incompatible_shapes_for_broadcasting():
  with pytest.raises(ValueError, match="Incompatible shapes for broadcasting"):
    steadax.multi_normal(jnp.zeros((2, 4), jnp.float32), jnp.zeros((3, 4), jnp.float32))
