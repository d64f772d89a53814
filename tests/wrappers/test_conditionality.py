"""apply_if_finite, zero_nans, conditionally_transform and conditionally_mask."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax


def _close(a, b, rtol=1e-4, atol=2e-5):
  # Leaf by leaf: the state classes are steadax's and Optax's namesakes, not the same types.
  la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
  assert len(la) == len(lb)
  for x, y in zip(la, lb):
    np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=rtol, atol=atol)


def test_state_fields_match_optax():
  for ours, theirs in ((steadax.ApplyIfFiniteState, optax.ApplyIfFiniteState),
                       (steadax.ZeroNansState, optax.ZeroNansState),
                       (steadax.ConditionallyMaskState, optax.ConditionallyMaskState),
                       (steadax.ConditionallyTransformState, optax.ConditionallyTransformState)):
    assert ours._fields == theirs._fields


# finite (F) or not (N) gradients, in order; max_consecutive_errors = 2.
PATTERN = "FNNFNNNNFN"


def _pattern_grads(i):
  g = jnp.array([1.0, -0.5], jnp.float32) * (1.0 + 0.1 * i)
  return g.at[0].set(jnp.inf if i % 2 else jnp.nan) if PATTERN[i] == "N" else g


def test_apply_if_finite_counts_consecutive_errors_and_resets():
  tx = steadax.apply_if_finite(steadax.adam(0.1), max_consecutive_errors=2)
  ref = optax.apply_if_finite(optax.adam(0.1), max_consecutive_errors=2)
  params = jnp.zeros(2, jnp.float32)
  state = tx.init(params)
  with jax.numpy_dtype_promotion("standard"):
    ref_state = ref.init(params)
  step, ref_step = jax.jit(tx.update), jax.jit(ref.update)
  consecutive, total, expected = 0, 0, []
  for i, kind in enumerate(PATTERN):
    consecutive = 0 if kind == "F" else consecutive + 1
    total += kind == "N"
    old_inner = state.inner_state
    updates, state = step(_pattern_grads(i), state, params)
    with jax.numpy_dtype_promotion("standard"):
      ref_updates, ref_state = ref_step(_pattern_grads(i), ref_state, params)
    assert int(state.notfinite_count) == consecutive, f"step {i}"
    assert int(state.total_notfinite) == total, f"step {i}"
    assert bool(state.last_finite) == (kind == "F"), f"step {i}"
    applied = kind == "F" or consecutive > 2
    expected.append(applied)
    if not applied:
      np.testing.assert_array_equal(updates, np.zeros(2))
      jax.tree_util.tree_map(np.testing.assert_array_equal, state.inner_state, old_inner)
    else:
      assert int(state.inner_state[0].count) == int(old_inner[0].count) + 1, f"step {i}"
    for field in ("notfinite_count", "last_finite", "total_notfinite"):
      assert int(getattr(state, field)) == int(getattr(ref_state, field)), (field, i)
    if kind == "F":
      _close(updates, ref_updates)
  # The third error in a row (index 6) is the first given up on; the counter resets at index 8.
  assert expected == [True, False, False, True, False, False, True, True, True, False]
  for field in ("notfinite_count", "total_notfinite"):
    assert getattr(state, field).dtype == jnp.int32
  assert state.last_finite.dtype == jnp.bool_


def test_apply_if_finite_checks_every_leaf_in_one_kernel_as_optax_does():
  # The finiteness test is one stacked reduction, which XLA fuses into one kernel for all leaves
  # (a chain of per-leaf maxima compiled to a kernel per leaf: 100 extra kernels on 100 leaves).
  params = {f"p{i}": jnp.zeros((3 + i,), jnp.float32) for i in range(6)}

  def fusions(lib):
    tx = lib.apply_if_finite(lib.sgd(0.1), 2)
    with jax.numpy_dtype_promotion("standard" if lib is optax else "strict"):
      text = jax.jit(tx.update).lower(params, tx.init(params), params).compile().as_text()
    return len(re.findall(r" fusion\(", text[text.index("ENTRY"):]))

  assert fusions(steadax) <= fusions(optax)


def test_apply_if_finite_threshold_is_a_leaf_and_validated():
  tx = steadax.apply_if_finite(steadax.sgd(0.1), 3)
  assert 3 in jax.tree_util.tree_leaves(tx)
  with pytest.raises(ValueError, match="apply_if_finite: max_consecutive_errors"):
    steadax.apply_if_finite(steadax.sgd(0.1), -1)


def test_zero_nans_zeroes_nans_keeps_infs_and_records_bools():
  tx = steadax.zero_nans()
  params = {"a": jnp.zeros(3, jnp.bfloat16), "b": jnp.zeros(2, jnp.float32)}
  state = tx.init(params)
  assert all(x.dtype == jnp.bool_ and x.shape == () for x in jax.tree_util.tree_leaves(state))
  grads = {"a": jnp.array([1.0, jnp.nan, jnp.inf], jnp.bfloat16), "b": jnp.ones(2, jnp.float32)}
  updates, state = jax.jit(tx.update)(grads, state, params)
  np.testing.assert_array_equal(np.asarray(updates["a"], np.float32), [1.0, 0.0, np.inf])
  assert updates["a"].dtype == jnp.bfloat16
  assert bool(state.found_nan["a"]) and not bool(state.found_nan["b"])
  assert state.found_nan["a"].dtype == jnp.bool_
  ref = optax.zero_nans()
  ref_updates, ref_state = ref.update(grads, ref.init(params))
  jax.tree_util.tree_map(np.testing.assert_array_equal, state.found_nan, ref_state.found_nan)
  jax.tree_util.tree_map(np.testing.assert_array_equal, updates, ref_updates)


def test_conditionally_transform_and_mask_agree_with_optax():
  every_other = lambda step: step % 2 == 0
  for ours, theirs in (
      (steadax.conditionally_transform(steadax.adam(0.1), every_other),
       optax.conditionally_transform(optax.adam(0.1), every_other)),
      (steadax.conditionally_mask(steadax.adam(0.1), every_other),
       optax.conditionally_mask(optax.adam(0.1), every_other)),
  ):
    params = jnp.array([0.5, -1.0], jnp.float32)
    s1 = ours.init(params)
    with jax.numpy_dtype_promotion("standard"):
      s2 = theirs.init(params)
    step = jax.jit(ours.update)
    for i in range(4):
      g = params * (1.0 + i)
      u1, s1 = step(g, s1, params)
      with jax.numpy_dtype_promotion("standard"):
        u2, s2 = theirs.update(g, s2, params)
      _close(u1, u2)
      _close(s1, s2)
    assert int(s1.step) == 4 and s1.step.dtype == jnp.int32


def test_conditional_branches_agree_for_float32_grads_of_bfloat16_params():
  # The pass-through branch returns the incoming float32 gradient; the inner one returns bfloat16.
  params = {"h": jnp.ones(3, jnp.bfloat16)}
  grads = {"h": jnp.ones(3, jnp.float32)}
  for tx in (steadax.conditionally_transform(steadax.adam(0.1), lambda s: s > 0),
             steadax.conditionally_mask(steadax.adam(0.1), lambda s: s > 0)):
    state = tx.init(params)

    def body(carry, _, tx=tx):
      p, s = carry
      u, s = tx.update(grads, s, p)
      return (steadax.apply_updates(p, u), s), u["h"].dtype == jnp.bfloat16

    (p, s), _ = jax.jit(lambda p, s: jax.lax.scan(body, (p, s), None, length=3))(params, state)
    assert p["h"].dtype == jnp.bfloat16 and int(s.inner_state[0].count) == 2


def test_conditionally_transform_forwards_extra_args():
  tx = steadax.conditionally_transform(
      steadax.scale(2.0), lambda step, value: value < 1.0, forward_extra_args=True)
  state = tx.init(jnp.zeros(1))
  u, state = tx.update(jnp.ones(1), state, value=jnp.asarray(0.5))
  np.testing.assert_array_equal(u, [2.0])
  u, state = tx.update(jnp.ones(1), state, value=jnp.asarray(5.0))
  np.testing.assert_array_equal(u, [1.0])


def test_bad_predicate_raises_with_the_argument_name():
  tx = steadax.conditionally_mask(steadax.sgd(0.1), lambda step: step)
  with pytest.raises(ValueError, match="conditionally_mask: `should_transform_fn` must return a boolean"):
    tx.update(jnp.ones(1), tx.init(jnp.zeros(1)))
