"""One compilation for any learning rate: hyperparameter leaves are built as one kind of leaf.

A jitted step taking the transformation as an argument is keyed on each leaf's kind (Python
number, numpy scalar, jax array; weak or strong); ``Module`` stores every concrete scalar that
declares a Python number's dtype as that number (Python and numpy numbers) or as its weakly typed
jax array (jax arrays), so the spellings of a float32 learning rate share one program per kind, in
both x64 modes (this file runs in both passes of make test).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax

# The ways of writing "the learning rate 1e-3 (or 2e-3), float32" a user is likely to use: Python
# and numpy numbers are stored as Python numbers, jax arrays as weakly typed jax arrays.
_NUMBERS = [1e-3, np.float32(1e-3), np.float64(1e-3), np.asarray(3e-3, np.float32)]
_ARRAYS = [jnp.float32(2e-3), jnp.array(1e-3), jnp.asarray(2e-3, jnp.float32)]


def _trace_counting_step():
  traces = []

  @jax.jit
  def step(tx, state, params):
    traces.append(1)
    updates, state = tx.update(params, state, params)
    return steadax.apply_updates(params, updates), state

  return step, traces


def test_every_spelling_of_a_float32_hyperparameter_compiles_the_step_once():
  # Once for the numbers, once for the arrays (a Python number and a jax array are two kinds of
  # jit argument; each is kept what it is: Flax NNX takes numbers, eqx.filter_jit traces arrays).
  for spellings in (_NUMBERS, _ARRAYS):
    step, traces = _trace_counting_step()
    params = {"w": jnp.ones(3)}
    state = steadax.adamw(1e-3).init(params)
    for lr in spellings:
      for b1 in (0.9, np.float32(0.8)):
        params, state = step(steadax.adamw(lr, b1=b1, weight_decay=np.float32(1e-4)), state, params)
    assert len(traces) == 1, f"the step was traced {len(traces)} times for {spellings}"


def test_schedule_arguments_compile_once():
  step, traces = _trace_counting_step()
  params = jnp.ones(2)
  schedule = lambda peak: steadax.warmup_cosine_decay_schedule(0.0, peak, 2, 10)  # noqa: E731
  state = steadax.adam(schedule(1e-3)).init(params)
  for peak in (1e-3, 3e-3, 4e-3):
    params, state = step(steadax.adam(schedule(peak)), state, params)
  assert len(traces) == 1, f"the step was traced {len(traces)} times"
  # A numpy or jax float32 is one second kind: a schedule keeps its arguments as given, since
  # Optax's value is weakly typed for a Python float and float32 for these
  # (tests/schedules/test_value_types.py).
  for peak in (np.float32(3e-3), jnp.float32(4e-3)):
    params, state = step(steadax.adam(schedule(peak)), state, params)
  assert len(traces) == 2, f"the step was traced {len(traces)} times"


def test_two_kinds_of_leaf_and_declared_dtypes_are_kept():
  for lr in _NUMBERS:  # the number, exactly
    leaf = steadax.scale_by_learning_rate(lr).learning_rate
    assert type(leaf) is float and leaf == float(np.asarray(lr))
  for lr in _ARRAYS:  # the weakly typed array of the number (JAX's type of a Python number)
    leaf = steadax.scale_by_learning_rate(lr).learning_rate
    assert isinstance(leaf, jax.Array) and leaf.weak_type and leaf.shape == ()
    assert float(leaf) == float(jnp.asarray(float(lr)))
  assert type(jax.tree_util.tree_leaves(steadax.scale(np.int32(3)))[0]) is int
  # A value declaring another dtype (bfloat16; float64 under x64) is a different program on
  # purpose: schedules and injected hyperparameters compute in it. It is kept as given.
  kept = jax.tree_util.tree_leaves(steadax.scale_by_learning_rate(jnp.asarray(1e-3, jnp.bfloat16)))[0]
  assert kept.dtype == jnp.bfloat16 and not kept.weak_type
  # Arrays with a shape (a swept configuration) and tracers are left alone.
  swept = steadax.sweep(steadax.sgd, learning_rate=[1e-3, 1e-2])
  assert any(np.shape(leaf) == (2,) for leaf in jax.tree_util.tree_leaves(swept))
  traced = jax.jit(lambda lr: jnp.asarray(isinstance(
      jax.tree_util.tree_leaves(steadax.scale_by_learning_rate(lr))[0], jax.core.Tracer)))
  assert bool(traced(jnp.float32(1e-3)))


def test_equinox_filter_jit_traces_every_array_spelling_once():
  eqx = pytest.importorskip("equinox")
  traces = []

  @eqx.filter_jit
  def step(tx, state, params):
    traces.append(1)
    updates, state = tx.update(params, state, params)
    return steadax.apply_updates(params, updates), state

  params = jnp.ones(2)
  state = steadax.sgd(1e-3).init(params)
  for lr in _ARRAYS:
    params, state = step(steadax.sgd(lr), state, params)
  assert len(traces) == 1, f"the step was traced {len(traces)} times"
