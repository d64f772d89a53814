"""unitwise_norm/clip, adaptive_grad_clip, per-example clipping, keep_params_nonnegative."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax

X64 = bool(jax.config.jax_enable_x64)


def _close(a, b, rtol=1e-5, atol=1e-6):
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=rtol, atol=atol)


@pytest.mark.parametrize("shape, axis", [
    ((), None), ((5,), None), ((1, 5), None), ((3, 4), None), ((2, 3, 4), None), ((2, 2, 3, 4), None),
    ((2, 2, 2, 3, 4), None), ((3, 4), 1), ((2, 3, 4), (0, 2)), ((0, 3), None),
])
def test_unitwise_norm_agrees_with_optax(shape, axis):
  x = jnp.asarray(np.random.default_rng(0).normal(size=shape), jnp.float32)
  ours = steadax.transforms.unitwise_norm(x, axis=axis)
  assert ours.shape == x.shape and ours.dtype == jnp.float32
  _close(ours, optax.transforms.unitwise_norm(x, axis=axis))


def test_unitwise_norm_low_precision_and_complex():
  x = jnp.full((1000,), 0.01, jnp.bfloat16)
  # Summed in float32: 1000 * 1e-4 is not lost to bfloat16 accumulation.
  np.testing.assert_allclose(float(steadax.transforms.unitwise_norm(x)[0]), np.sqrt(1000) * 0.01, rtol=1e-2)
  assert steadax.transforms.unitwise_norm(x).dtype == jnp.bfloat16
  c = jnp.array([3 + 4j, 0j], jnp.complex64)
  out = steadax.transforms.unitwise_norm(c)
  assert out.dtype == jnp.float32 and float(out[0]) == pytest.approx(5.0)
  with pytest.raises(ValueError, match="unitwise_norm: no default unit for a parameter of shape"):
    steadax.transforms.unitwise_norm(jnp.ones((2,) * 6))


def test_unitwise_clip_agrees_with_optax_and_checks_shapes():
  g = jnp.array([[3.0, 0.1], [4.0, 0.2]])
  norm = steadax.transforms.unitwise_norm(g)
  max_norm = jnp.full(g.shape, 1.0)
  ours = steadax.transforms.unitwise_clip(norm, max_norm, g)
  _close(ours, optax.transforms.unitwise_clip(norm, max_norm, g))
  with pytest.raises(ValueError, match="unitwise_clip: the arguments must have one shape"):
    steadax.transforms.unitwise_clip(norm, jnp.ones(2), g)


def test_adaptive_grad_clip_agrees_with_optax_and_keeps_dtypes():
  params = {"w": jnp.array([[0.5, -1.0], [0.0, 0.0]], jnp.float32), "b": jnp.array([0.1, 0.0], jnp.float32),
            "k": jnp.ones((2, 2, 1, 2), jnp.float32)}
  grads = {"w": jnp.array([[3.0, 0.01], [4.0, 0.02]]), "b": jnp.array([1.0, 1.0]), "k": jnp.full((2, 2, 1, 2), 0.5)}
  for clipping in (0.01, 1.0, 100.0):
    ours = steadax.adaptive_grad_clip(clipping)
    theirs = optax.adaptive_grad_clip(clipping)
    with jax.numpy_dtype_promotion("standard"):
      expected = theirs.update(grads, theirs.init(params), params)[0]
    _close(ours.update(grads, ours.init(params), params)[0], expected)
  tx = steadax.adaptive_grad_clip(0.1, axis=-1)
  low = jax.tree_util.tree_map(lambda x: x.astype(jnp.bfloat16), params)
  updates, state = tx.update(grads, tx.init(low), low)
  assert all(u.dtype == jnp.bfloat16 for u in jax.tree_util.tree_leaves(updates))
  assert state == steadax.EmptyState()
  with pytest.raises(ValueError, match="adaptive_grad_clip: update needs `params`"):
    tx.update(grads, state)
  with pytest.raises(ValueError, match=r"at \['x'\]: adaptive_grad_clip: no default unit"):
    steadax.adaptive_grad_clip(0.1).update({"x": jnp.ones((1, 2) * 3)}, steadax.EmptyState(),
                                           {"x": jnp.ones((1, 2) * 3)})


def _per_example_grads():
  rng = np.random.default_rng(1)
  return {"a": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32),
          "b": jnp.asarray(rng.normal(size=(4, 2, 2)), jnp.float32)}


@pytest.mark.parametrize("clip", [0.0, 0.5, 2.0, 100.0])
def test_per_example_global_norm_clip_agrees_with_optax(clip):
  grads = _per_example_grads()
  summed, count = steadax.per_example_global_norm_clip(grads, clip)
  ref_summed, ref_count = optax.per_example_global_norm_clip(grads, clip)
  _close(summed, ref_summed)
  assert int(count) == int(ref_count)
  assert count.dtype == jnp.int32  # also under x64, where Optax's count is int64


@pytest.mark.parametrize("uniform", [True, False])
def test_per_example_layer_norm_clip_agrees_with_optax(uniform):
  grads = _per_example_grads()
  summed, counts = steadax.per_example_layer_norm_clip(grads, 1.5, uniform)
  with jax.numpy_dtype_promotion("standard"):
    ref_summed, ref_counts = optax.per_example_layer_norm_clip(grads, 1.5, uniform)
  _close(summed, ref_summed)
  assert jax.tree_util.tree_map(int, counts) == jax.tree_util.tree_map(int, ref_counts)
  assert all(c.dtype == jnp.int32 for c in jax.tree_util.tree_leaves(counts))


def test_per_example_clip_mixed_precision_and_errors():
  grads = {"a": jnp.ones((3, 2), jnp.bfloat16), "c": jnp.ones((3, 1), jnp.complex64)}
  summed, count = jax.jit(steadax.per_example_global_norm_clip)(grads, 1.0)
  assert summed["a"].dtype == jnp.bfloat16 and summed["c"].dtype == jnp.complex64
  # Each example has norm sqrt(3): scaled by 1 / sqrt(3), three of them summed.
  np.testing.assert_allclose(np.asarray(summed["a"], np.float32), np.full(2, 3 / np.sqrt(3)), rtol=1e-2)
  assert int(count) == 3
  with pytest.raises(ValueError, match="per_example_global_norm_clip: every array of `grads` needs"):
    steadax.per_example_global_norm_clip({"a": jnp.ones((3, 2)), "b": jnp.ones((2,))}, 1.0)
  with pytest.raises(ValueError, match="per_example_layer_norm_clip: every array"):
    steadax.per_example_layer_norm_clip({"a": jnp.ones(())}, 1.0)


def test_keep_params_nonnegative_agrees_with_optax():
  params = {"a": jnp.array([1.0, 0.5, -0.5, 0.0]), "n": None}
  updates = {"a": jnp.array([-2.0, -0.25, 0.1, 0.3]), "n": None}
  ours, theirs = steadax.keep_params_nonnegative(), optax.keep_params_nonnegative()
  out, state = ours.update(updates, ours.init(params), params)
  assert state == steadax.NonNegativeParamsState()
  _close(out, theirs.update(updates, theirs.init(params), params)[0])
  new = steadax.apply_updates(params, out)
  assert np.all(np.asarray(new["a"]) >= 0)
  low = {"a": params["a"].astype(jnp.bfloat16), "n": None}
  assert ours.update(updates, ours.init(low), low)[0]["a"].dtype == jnp.bfloat16
  with pytest.raises(ValueError, match="keep_params_nonnegative: update needs `params`"):
    ours.update(updates, state)
  c = {"c": jnp.ones(1, jnp.complex64)}
  with pytest.raises(TypeError, match=r"\['c'\] is complex"):
    ours.update(c, state, c)
