"""One compilation for any learning rate: hyperparameter leaves are built as one kind of leaf.

A jitted step taking the transformation as an argument is keyed on each leaf's kind (Python
number, numpy scalar, jax array; weak or strong); ``Module`` stores every concrete scalar that
declares a Python number's dtype as that number and flattens it as the weakly typed array of the
number, so all the ways of writing a float32 learning rate share one program under ``jax.jit``
and ``eqx.filter_jit``, in both x64 modes (this file runs in both passes of make test).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax

# Every way of writing "the learning rate 1e-3 (or 2e-3), float32" a user is likely to use.
_SPELLINGS = [
    1e-3,
    np.float32(1e-3),
    jnp.float32(2e-3),
    jnp.array(1e-3),  # weakly typed
    jnp.asarray(2e-3, jnp.float32),  # strong
    np.float64(1e-3),  # a Python float subclass (np.logspace's elements)
    np.asarray(3e-3, np.float32),
]


def _trace_counting_step():
  traces = []

  @jax.jit
  def step(tx, state, params):
    traces.append(1)
    updates, state = tx.update(params, state, params)
    return steadax.apply_updates(params, updates), state

  return step, traces


def test_every_spelling_of_a_float32_hyperparameter_compiles_the_step_once():
  step, traces = _trace_counting_step()
  params = {"w": jnp.ones(3)}
  state = steadax.adamw(1e-3).init(params)
  for lr in _SPELLINGS:
    for b1 in (0.9, jnp.float32(0.8)):
      params, state = step(steadax.adamw(lr, b1=b1, weight_decay=np.float32(1e-4)), state, params)
  assert len(traces) == 1, f"the step was traced {len(traces)} times"


def test_schedule_arguments_compile_once():
  step, traces = _trace_counting_step()
  params = jnp.ones(2)
  schedule = lambda peak: steadax.warmup_cosine_decay_schedule(0.0, peak, 2, 10)  # noqa: E731
  state = steadax.adam(schedule(1e-3)).init(params)
  for peak in (1e-3, jnp.float32(2e-3), np.float32(3e-3), jnp.array(4e-3)):
    params, state = step(steadax.adam(schedule(peak)), state, params)
  assert len(traces) == 1, f"the step was traced {len(traces)} times"


def test_one_kind_of_leaf_and_declared_dtypes_are_kept():
  # Every spelling is stored as the Python number it stands for (exactly: what a closure computes
  # with) and flattened as the weakly typed array of that number, JAX's own type of a Python
  # number (float32, float64 under x64), which eqx.filter_jit traces (it holds numbers static).
  for lr in _SPELLINGS:
    tx = steadax.scale_by_learning_rate(lr)
    assert type(tx.learning_rate) is float and tx.learning_rate == float(np.asarray(lr))
    (leaf,) = jax.tree_util.tree_leaves(tx)
    assert isinstance(leaf, jax.Array) and leaf.weak_type and leaf.shape == ()
    assert leaf.dtype == jnp.asarray(1.0).dtype and float(leaf) == float(jnp.asarray(tx.learning_rate))
  assert type(jax.tree_util.tree_leaves(steadax.scale(np.int32(3)))[0]) is int  # counts stay ints
  assert repr(steadax.scale_by_learning_rate(jnp.float32(0.5))) == (
      "ScaleByLearningRate(learning_rate=0.5, flip_sign=True)")
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


def test_equinox_filter_jit_traces_every_spelling_once():
  eqx = pytest.importorskip("equinox")
  traces = []

  @eqx.filter_jit
  def step(tx, state, params):
    traces.append(1)
    updates, state = tx.update(params, state, params)
    return steadax.apply_updates(params, updates), state

  params = jnp.ones(2)
  state = steadax.sgd(1e-3).init(params)
  for lr in _SPELLINGS:
    params, state = step(steadax.sgd(lr), state, params)
  assert len(traces) == 1, f"the step was traced {len(traces)} times"
