"""The core: Module pytrees, GradientTransformation compatibility, chain, apply_updates."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax


def test_function_pair_is_a_gradient_transformation_and_unpacks():
  tx = steadax.GradientTransformation(lambda p: steadax.EmptyState(), lambda u, s, p=None: (u, s))
  assert isinstance(tx, steadax.GradientTransformation)
  assert not isinstance(tx, steadax.GradientTransformationExtraArgs)
  init, update = tx
  assert init(jnp.zeros(2)) == steadax.EmptyState()
  assert tx[0] is not None and len(tx) == 2
  # Extras are dropped for plain transformations, forwarded by with_extra_args_support.
  wrapped = steadax.with_extra_args_support(tx)
  assert isinstance(wrapped, steadax.GradientTransformationExtraArgs)
  out, _ = wrapped.update(jnp.ones(2), steadax.EmptyState(), None, value=1.0)
  np.testing.assert_array_equal(out, jnp.ones(2))


def test_function_pair_accepts_optax_keywords():
  # Optax's GradientTransformation is a NamedTuple: `GradientTransformation(init=..., update=...)`.
  for cls in (steadax.GradientTransformation, steadax.GradientTransformationExtraArgs):
    tx = cls(init=lambda p: steadax.EmptyState(), update=lambda u, s, p=None, **extra: (2 * u, s))
    assert isinstance(tx, cls)
    out, _ = tx.update(jnp.ones(2), tx.init(None))
    np.testing.assert_array_equal(out, 2 * jnp.ones(2))
  with pytest.raises(TypeError, match="GradientTransformation: `update` must be a callable"):
    steadax.GradientTransformation(init=lambda p: steadax.EmptyState())
  with pytest.raises(TypeError, match="unexpected arguments"):
    steadax.GradientTransformation(lambda p: (), lambda u, s, p=None: (u, s), other=1)


def test_extra_args_function_pair_receives_extras():
  seen = {}

  def update(u, s, p=None, **extra):
    seen.update(extra)
    return u, s

  tx = steadax.GradientTransformationExtraArgs(lambda p: steadax.EmptyState(), update)
  steadax.chain(steadax.identity(), tx).update(jnp.ones(1), ((), ()), None, value=3.0)
  assert seen == {"value": 3.0}


def test_library_transformations_are_extra_args_and_pytrees():
  tx = steadax.adam(0.1)
  assert isinstance(tx, steadax.GradientTransformationExtraArgs)
  leaves = jax.tree_util.tree_leaves(tx)
  assert 0.1 in leaves and 0.9 in leaves and 0.999 in leaves
  rebuilt = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(tx), leaves)
  assert jax.tree_util.tree_structure(rebuilt) == jax.tree_util.tree_structure(tx)


def test_static_fields_are_not_leaves_and_change_the_treedef():
  a, b = steadax.sgd(0.1, momentum=0.9, nesterov=False), steadax.sgd(0.1, momentum=0.9, nesterov=True)
  assert jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(b)
  assert not any(isinstance(x, bool) for x in jax.tree_util.tree_leaves(b))


def test_new_learning_rate_does_not_retrace():
  traces = []

  @jax.jit
  def step(tx, params, state):
    traces.append(None)
    updates, state = tx.update(params, state, params)
    return steadax.apply_updates(params, updates), state

  params = {"w": jnp.ones(3)}
  state = steadax.adam(0.1).init(params)
  results = []
  for lr in (0.1, 0.01, 0.3):
    p, _ = step(steadax.adam(lr), params, state)
    results.append(float(p["w"][0]))
  assert len(traces) == 1
  assert len(set(results)) == 3  # the learning rate really is a traced input


def test_schedule_callable_is_static():
  schedule = lambda c: 0.1 * jnp.ones([], jnp.float32)  # noqa: E731
  tx = steadax.sgd(schedule)
  assert schedule not in jax.tree_util.tree_leaves(tx)
  state = tx.init(jnp.zeros(2))
  assert state[1].count.dtype == jnp.int32


def test_chain_and_named_chain():
  tx = steadax.chain(steadax.scale(2.0), steadax.scale(-0.5))
  out, state = tx.update(jnp.ones(2), tx.init(jnp.zeros(2)))
  np.testing.assert_allclose(out, -jnp.ones(2))
  assert state == (steadax.EmptyState(), steadax.EmptyState())
  named = steadax.named_chain(("a", steadax.scale(3.0)), ("b", steadax.trace(0.5)))
  state = named.init(jnp.zeros(2))
  assert set(state) == {"a", "b"} and isinstance(state["b"], steadax.TraceState)
  with pytest.raises(ValueError, match="unique"):
    steadax.named_chain(("a", steadax.identity()), ("a", steadax.identity()))


def test_apply_updates_keeps_each_parameter_dtype_and_none():
  params = {"a": jnp.ones(2, jnp.bfloat16), "b": jnp.ones(2, jnp.float32), "c": None}
  updates = {"a": jnp.full(2, 0.5, jnp.float32), "b": jnp.full(2, 0.25, jnp.bfloat16), "c": None}
  out = steadax.apply_updates(params, updates)
  assert out["a"].dtype == jnp.bfloat16 and out["b"].dtype == jnp.float32 and out["c"] is None
  np.testing.assert_allclose(np.asarray(out["a"], np.float32), 1.5)


def test_incremental_and_periodic_update():
  new, old = jnp.ones(2, jnp.bfloat16), jnp.zeros(2, jnp.bfloat16)
  out = steadax.incremental_update(new, old, 0.25)
  assert out.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(out, np.float32), 0.25)
  np.testing.assert_array_equal(steadax.periodic_update(new, old, jnp.asarray(3), 2), old)
  np.testing.assert_array_equal(steadax.periodic_update(new, old, jnp.asarray(4), 2), new)


def test_stateless_helpers_pass_params():
  tx = steadax.stateless_with_tree_map(lambda g, p: g * p)
  out, _ = tx.update(jnp.full(2, 2.0), tx.init(None), jnp.full(2, 3.0))
  np.testing.assert_allclose(out, 6.0)
  tx = steadax.stateless(lambda u, p: jax.tree.map(lambda g: -g, u))
  np.testing.assert_allclose(tx.update(jnp.ones(1), tx.init(None))[0], -1.0)


def test_set_to_zero_and_identity_accept_integer_leaves():
  params = {"step": jnp.asarray(3, jnp.int32)}
  for tx in (steadax.set_to_zero(), steadax.identity()):
    tx.update(params, tx.init(params), params)


def test_safe_increment_saturates():
  top = jnp.asarray(np.iinfo(np.int32).max, jnp.int32)
  assert int(steadax.safe_increment(top)) == np.iinfo(np.int32).max
  assert steadax.safe_increment(jnp.asarray(1, jnp.int32)).dtype == jnp.int32
