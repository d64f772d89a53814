"""_core._tree.cond: the known branch eagerly (no program compiled per eager step), lax.cond when traced."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from steadax._core._tree import cond


@pytest.mark.x32_only
def test_cond_calls_only_the_taken_branch_eagerly_and_traces_both_under_jit():
  calls = []

  def up(x):
    calls.append("up")
    return x + 1

  def down(x):
    calls.append("down")
    return x - 1

  x = jnp.asarray(1, jnp.int32)
  assert int(cond(jnp.asarray(True), up, down, x)) == 2 and calls == ["up"]
  calls.clear()
  assert int(cond(jnp.asarray(False), up, down, x)) == 0 and calls == ["down"]
  calls.clear()
  assert int(jax.jit(lambda p: cond(p, up, down, x))(jnp.asarray(False))) == 0
  assert sorted(calls) == ["down", "up"]  # lax.cond traced both branches
