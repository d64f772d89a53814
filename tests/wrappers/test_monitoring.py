"""snapshot, monitor and measure_with_ema: Optax's values, a state of one type at every step."""

from __future__ import annotations

import jax
import pytest
import jax.numpy as jnp
import numpy as np
import optax

import steadax

# steadax.global_norm warns when called, as Optax 0.2.8's does; these tests check its values.
pytestmark = pytest.mark.filterwarnings("ignore:steadax.global_norm is deprecated:DeprecationWarning")


def _types(tree):
  return jax.tree_util.tree_structure(tree), [
      (x.shape, x.dtype, getattr(x, "weak_type", False)) for x in jax.tree_util.tree_leaves(tree)]


def _grad(p):
  return p * jnp.asarray(2.0, p.dtype)


def _ours():
  return steadax.chain(
      steadax.sgd(0.1, momentum=0.9),
      steadax.monitor({
          "norm": steadax.global_norm,
          "clipped_ema": steadax.measure_with_ema(lambda u: steadax.global_norm(u) > 0.5, decay=0.9),
      }),
      steadax.snapshot("after", steadax.global_norm),
      steadax.clip_by_global_norm(0.5),
  )


def _theirs():
  return optax.chain(
      optax.sgd(0.1, momentum=0.9),
      optax.monitor({
          "norm": optax.tree.norm,
          "clipped_ema": optax.measure_with_ema(lambda u: optax.tree.norm(u) > 0.5, decay=0.9),
      }),
      optax.snapshot("after", optax.tree.norm),
      optax.clip_by_global_norm(0.5),
  )


def test_state_fields_match_optax():
  assert steadax.MonitorState._fields == optax.MonitorState._fields
  assert steadax.SnapshotState._fields == optax.SnapshotState._fields


def test_measurements_agree_with_optax():
  ours, theirs = _ours(), _theirs()
  p1 = p2 = jnp.array([1.0, 2.0, 3.0], jnp.float32)
  s1 = ours.init(p1)
  with jax.numpy_dtype_promotion("standard"):
    s2 = theirs.init(p2)
  for _ in range(3):
    u1, s1 = ours.update(_grad(p1), s1, p1)
    p1 = steadax.apply_updates(p1, u1)
    with jax.numpy_dtype_promotion("standard"):
      u2, s2 = theirs.update(_grad(p2), s2, p2)
      p2 = optax.apply_updates(p2, u2)
    for name in ("norm", "clipped_ema"):
      np.testing.assert_allclose(s1[1].measurements[name], s2[1].measurements[name], rtol=1e-5)
    np.testing.assert_allclose(s1[2].measurement["after"], s2[2].measurement["after"], rtol=1e-5)
  np.testing.assert_allclose(p1, p2, rtol=1e-5)


def test_state_has_one_type_from_init_on_and_scans():
  # Optax's monitor starts from an empty dict and its bool EMA turns into a weak float: neither
  # can be a lax.scan carry. Here init already has the final types.
  tx = _ours()
  params = {"h": jnp.ones(3, jnp.bfloat16), "f": jnp.linspace(0.0, 1.0, 2, dtype=jnp.float32)}
  state = tx.init(params)
  measurements = state[1].measurements
  assert measurements["norm"].dtype == jnp.float32 and measurements["clipped_ema"].dtype == jnp.float32
  assert state[1].measure_states[1][1].ema.dtype == jnp.float32  # a frequency, not a bool

  def body(carry, _):
    p, s = carry
    u, s = tx.update(jax.tree_util.tree_map(_grad, p), s, p)
    return (steadax.apply_updates(p, u), s), None

  (p, s), _ = jax.jit(lambda p, s: jax.lax.scan(body, (p, s), None, length=3))(params, state)
  assert _types(s) == _types(state)
  assert 0.0 < float(s[1].measurements["clipped_ema"]) <= 1.0


def test_snapshot_keeps_init_types_and_measure_with_ema_outputs_the_measurement():
  tx = steadax.snapshot("first", lambda u: u[0])
  state = tx.init(jnp.ones(2, jnp.bfloat16))
  _, new = tx.update(jnp.array([3.0, 4.0], jnp.bfloat16), state)
  assert new.measurement["first"].dtype == jnp.bfloat16 and float(new.measurement["first"]) == 3.0
  ema = steadax.measure_with_ema(lambda u: {"sum": jnp.sum(u), "max": jnp.max(u)}, decay=0.5, debias=False)
  state = ema.init(jnp.zeros(2))
  out, state = ema.update(jnp.array([1.0, 3.0]), state)
  np.testing.assert_allclose(out["sum"], 2.0)  # (1 - 0.5) * 4
  np.testing.assert_allclose(out["max"], 1.5)
