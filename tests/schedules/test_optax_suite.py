"""Schedules and inject_hyperparams cases that Optax's own tests (tools/optax_tests.py) found
different, fixed to match."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax


def test_step_counts_past_int32_do_not_overflow():
  # A Python int past int32 met the int32 count and overflowed; Optax computes in float.
  cases = [
      (steadax.cosine_decay_schedule(1000.0, int(1e10)), optax.cosine_decay_schedule(1000.0, int(1e10))),
      (steadax.exponential_decay(1.0, int(1e10), 0.5), optax.exponential_decay(1.0, int(1e10), 0.5)),
      (steadax.warmup_cosine_decay_schedule(0.0, 1.0, 100, int(1e10)),
       optax.warmup_cosine_decay_schedule(0.0, 1.0, 100, int(1e10))),
  ]
  for ours, theirs in cases:
    with jax.numpy_dtype_promotion("standard"):
      expected = float(theirs(int(1e9)))
    np.testing.assert_allclose(float(ours(int(1e9))), expected, rtol=1e-6)
    np.testing.assert_allclose(float(ours(jnp.asarray(int(1e9), jnp.int32))), expected, rtol=1e-6)
  # A Python step count past int32 is taken as a float too.
  np.testing.assert_allclose(float(steadax.linear_schedule(0.0, 1.0, int(1e10))(int(5e9))), 0.5)


def test_inject_hyperparams_holds_a_typed_prng_key():
  params = {"a": jnp.ones(3, jnp.float32)}
  ours = steadax.inject_hyperparams(steadax.noisy_sgd)(learning_rate=0.1, key=jax.random.key(17))
  state = ours.init(params)
  assert jax.dtypes.issubdtype(state.hyperparams["key"].dtype, jax.dtypes.prng_key)
  updates, new_state = jax.jit(ours.update)(params, state)
  assert new_state.hyperparams["key"].dtype == state.hyperparams["key"].dtype
  with jax.numpy_dtype_promotion("standard"):
    theirs = optax.inject_hyperparams(optax.noisy_sgd)(learning_rate=0.1, key=jax.random.key(17))
    expected, _ = theirs.update(params, theirs.init(params))
  np.testing.assert_allclose(np.asarray(updates["a"]), np.asarray(expected["a"]), rtol=1e-6)
  state.hyperparams["key"] = jnp.zeros([], jnp.float32)
  with pytest.raises(TypeError, match="PRNG key"):
    ours.update(params, state)


class _TotalState(NamedTuple):
  total: jax.Array


class _RunningTotal:
  """A user's stateful schedule whose update turns its int32 state into a float."""

  def init(self):
    return _TotalState(jnp.zeros([], jnp.int32))

  def update(self, state, **extra_args):
    with jax.numpy_dtype_promotion("standard"):  # int32 + float32 -> float32, as in Optax's test
      return _TotalState(state.total + extra_args["addendum"])

  def __call__(self, state, **extra_args):
    return state.total


def test_a_stateful_schedule_whose_state_turns_float_is_named_not_truncated():
  # Optax lets the state become float32 (the learning rate is then 0.3); cast back to int32 it
  # was silently 0. steadax keeps the state's types: the drift is an error naming the schedule.
  tx = steadax.inject_hyperparams(steadax.scale)(step_size=_RunningTotal())
  params = jnp.ones(2, jnp.float32)
  state = tx.init(params)
  with steadax.strict_mode(False):
    with pytest.raises(steadax.ContractError, match=r"schedule for 'step_size' at \.total.*int32 to float32"):
      tx.update(params, state, params, addendum=jnp.asarray(0.3, jnp.float32))
