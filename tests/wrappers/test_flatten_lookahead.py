"""flatten and lookahead: Optax agreement, dtypes of mixed trees, LookaheadParams updates, forms."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax

from ..conformance import _harness as h

X64 = bool(jax.config.jax_enable_x64)


def _params():
  return {"w": jnp.array([[0.5, -1.0], [0.25, 2.0]], jnp.float32), "b": jnp.array([0.1, -0.2, 0.4], jnp.float32)}


def _grad(p):
  return jax.tree_util.tree_map(lambda x: x - jnp.asarray(0.1, x.dtype), p)


def test_flatten_agrees_with_optax_and_keeps_leaf_dtypes():
  params = {**_params(), "bf16": jnp.array([0.5, -0.25], jnp.bfloat16), "none": None}
  ours, theirs = steadax.flatten(steadax.adam(0.1)), optax.flatten(optax.adam(0.1))
  s1 = ours.init(params)
  with jax.numpy_dtype_promotion("standard"):
    s2 = theirs.init(params)
  assert s1[0].mu.shape == s2[0].mu.shape == (9,) and s1[0].mu.dtype == s2[0].mu.dtype == jnp.float32
  p1 = p2 = params
  for _ in range(3):
    u1, s1 = ours.update(_grad(p1), s1, p1)
    p1 = steadax.apply_updates(p1, u1)
    with jax.numpy_dtype_promotion("standard"):
      u2, s2 = theirs.update(_grad(p2), s2, p2)
      p2 = optax.apply_updates(p2, u2)
  assert u1["none"] is None and u1["bf16"].dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(s1[0].nu), np.asarray(s2[0].nu), rtol=1e-4)
  for key in ("w", "b", "bf16"):
    assert p1[key].dtype == params[key].dtype
    np.testing.assert_allclose(np.asarray(p1[key], np.float32), np.asarray(p2[key], np.float32),
                               rtol=1e-5, atol=1e-2 if key == "bf16" else 1e-6)


def test_flatten_empty_and_complex_trees():
  tx = steadax.flatten(steadax.sgd(0.1, momentum=0.9))
  state = tx.init({})
  assert state[0].trace.shape == (0,) and state[0].trace.dtype == jnp.float32
  params = {"c": jnp.array([1 + 1j], jnp.complex64), "r": jnp.array([0.5, 1.0], jnp.float32)}
  state = tx.init(params)
  assert state[0].trace.dtype == jnp.complex64
  updates, _ = tx.update(params, state, params)
  assert updates["r"].dtype == jnp.float32 and updates["c"].dtype == jnp.complex64
  np.testing.assert_allclose(np.asarray(updates["r"]), [-0.05, -0.1], rtol=1e-6)


def _lookahead_pair(reset):
  ours = steadax.lookahead(steadax.adam(0.1), sync_period=3, slow_step_size=0.5, reset_state=reset)
  theirs = optax.lookahead(optax.adam(0.1), sync_period=3, slow_step_size=0.5, reset_state=reset)
  return ours, theirs


@pytest.mark.parametrize("reset", [False, True])
def test_lookahead_agrees_with_optax(reset):
  ours, theirs = _lookahead_pair(reset)
  p1 = steadax.LookaheadParams.init_synced(_params())
  p2 = optax.LookaheadParams.init_synced(_params())
  s1 = ours.init(p1)
  with jax.numpy_dtype_promotion("standard"):
    s2 = theirs.init(p2)
  for _ in range(7):
    u1, s1 = ours.update(_grad(p1.fast), s1, p1)
    assert isinstance(u1, steadax.LookaheadParams)
    p1 = steadax.apply_updates(p1, u1)
    with jax.numpy_dtype_promotion("standard"):
      u2, s2 = theirs.update(_grad(p2.fast), s2, p2)
      p2 = optax.apply_updates(p2, u2)
  assert int(s1.steps_since_sync) == int(s2.steps_since_sync) == 1
  for a, b in zip(jax.tree_util.tree_leaves((p1, s1)), jax.tree_util.tree_leaves((p2, s2))):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-5, atol=1e-5)


def test_lookahead_syncs_slow_weights_every_period():
  tx = steadax.lookahead(steadax.sgd(1.0), sync_period=2, slow_step_size=0.5)
  params = steadax.LookaheadParams.init_synced({"x": jnp.array([4.0])})
  state = tx.init(params)
  seen = []
  for _ in range(4):
    updates, state = tx.update({"x": jnp.array([1.0])}, state, params)
    params = steadax.apply_updates(params, updates)
    seen.append((float(params.fast["x"][0]), float(params.slow["x"][0])))
  # Fast: 3, then 2 -> slow moves half way from 4 to 2 = 3 and fast jumps there; again from 3.
  assert seen == [(3.0, 4.0), (3.0, 3.0), (2.0, 3.0), (2.0, 2.0)]


def test_lookahead_mixed_precision_forms_and_donation():
  base = h.mixed_params(low_precision=True)
  params = steadax.LookaheadParams.init_synced(base)
  slow_buffers = [x.unsafe_buffer_pointer() for x in jax.tree_util.tree_leaves(params.slow)]
  fast_buffers = [x.unsafe_buffer_pointer() for x in jax.tree_util.tree_leaves(params.fast)]
  assert not set(slow_buffers) & set(fast_buffers)
  for inner in (steadax.adam(0.1, mu_dtype=jnp.bfloat16), steadax.sgd(0.1, momentum=0.9)):
    tx = steadax.lookahead(inner, sync_period=2, slow_step_size=0.5, reset_state=True)
    state = tx.init(params)

    @jax.jit
    def run(tx, params, state, pred):
      def body(carry, _):
        p, s = carry
        u, s = tx.update(h.matrix_grads(p.fast), s, p)
        return (steadax.apply_updates(p, u), s), u
      (p, s), us = jax.lax.scan(body, (params, state), None, length=3)
      u_cond, s_cond = jax.lax.cond(pred, lambda: tx.update(h.matrix_grads(params.fast), state, params),
                                    lambda: (jax.tree_util.tree_map(jnp.zeros_like, params), state))
      return p, s, u_cond, s_cond

    p, s, u, s_cond = run(tx, params, state, jnp.asarray(True))
    h.assert_same_types(state, s, "lookahead state after scan")
    h.assert_same_types(state, s_cond, "lookahead state after cond")
    h.assert_same_types(params, p, "lookahead params after scan")
    h.assert_updates_follow_params(params.fast, u.fast, "lookahead fast updates")
    h.assert_updates_follow_params(params.slow, u.slow, "lookahead slow updates")
    h.assert_finite(p, "lookahead params")
    assert int(s.steps_since_sync) == 1


def test_lookahead_errors():
  with pytest.raises(ValueError, match="lookahead: sync_period"):
    steadax.lookahead(steadax.sgd(0.1), sync_period=0, slow_step_size=0.5)
  tx = steadax.lookahead(steadax.sgd(0.1), sync_period=2, slow_step_size=0.5)
  params = _params()
  state = tx.init(params)  # plain parameters initialise the fast state
  with pytest.raises(ValueError, match=r"lookahead: update needs params=LookaheadParams"):
    tx.update(params, state, params)


# Every registered optimizer as lookahead's fast optimizer (the composition matrix of issue 4;
# lookahead's LookaheadParams do not fit tests/conformance/test_composition.py's plain trees).
from ..conformance.registry import all_entries, entry_ids  # noqa: E402

_ENTRIES = all_entries()


# Traced with jax.eval_shape like the composition matrix: type stability is a trace-time property,
# and an XLA compilation per registry entry would cost more than the rest of this file.
@pytest.mark.parametrize("entry", _ENTRIES, ids=entry_ids(_ENTRIES))
def test_every_entry_inside_lookahead(entry):
  base = h.mixed_params(entry.low_precision_ok)
  params = steadax.LookaheadParams.init_synced(base)
  tx = steadax.lookahead(entry.factory(), sync_period=2, slow_step_size=0.5)
  state = tx.init(params)

  def run(tx, params, state):
    def body(carry, _):
      p, s = carry
      grads = h.matrix_grads(p.fast)
      extra = entry.extra_args(h.matrix_loss, p.fast, grads) if entry.extra_args else {}
      u, s = tx.update(grads, s, p, **extra)
      return (steadax.apply_updates(p, u), s), u
    (p, s), us = jax.lax.scan(body, (params, state), None, length=3)
    return p, s, jax.tree_util.tree_map(lambda u: u[-1], us)

  p, s, u = jax.eval_shape(run, tx, params, state)
  h.assert_same_types(state, s, f"{entry.name} inside lookahead: state")
  h.assert_same_types(params, p, f"{entry.name} inside lookahead: params")
  h.assert_updates_follow_params(base, u.fast, f"{entry.name} inside lookahead: fast updates")
  h.assert_updates_follow_params(base, u.slow, f"{entry.name} inside lookahead: slow updates")
