"""clip, clip_by_global_norm and clip_by_block_rms."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax

# steadax.global_norm warns when called, as Optax 0.2.8's does; these tests check its values.
pytestmark = pytest.mark.filterwarnings("ignore:steadax.global_norm is deprecated:DeprecationWarning")


def _tree_norm(tree):
  return np.sqrt(sum(np.sum(np.abs(np.asarray(x, np.complex128)) ** 2) for x in jax.tree_util.tree_leaves(tree)))


@jax.jit
def _clip_global(tx, updates):
  return tx.update(updates, tx.init(updates))[0]


@pytest.mark.parametrize("seed", range(4))
def test_global_norm_clipping_bounds_the_norm_and_keeps_the_direction(seed):
  rng = np.random.default_rng(seed)
  scale = [0.01, 0.3, 3.0, 100.0][seed]
  tree = {"a": jnp.asarray(rng.normal(size=(3, 2)) * scale, jnp.float32),
          "b": jnp.asarray(rng.normal(size=4) * scale, jnp.bfloat16),
          "c": jnp.asarray(rng.normal(size=2) * scale, jnp.float32)}
  max_norm = 1.0
  out = _clip_global(steadax.clip_by_global_norm(max_norm), tree)
  norm_in, norm_out = _tree_norm(tree), _tree_norm(out)
  assert jax.tree_util.tree_map(lambda x: x.dtype, out) == jax.tree_util.tree_map(lambda x: x.dtype, tree)
  if norm_in <= max_norm:
    for k in tree:
      np.testing.assert_array_equal(np.asarray(out[k]), np.asarray(tree[k]))
  else:
    assert norm_out <= max_norm * (1 + 4e-3)  # bfloat16 rounding of the rescaled leaf
    np.testing.assert_allclose(norm_out, max_norm, rtol=4e-3)
    for k in tree:
      np.testing.assert_allclose(np.asarray(out[k], np.float32), np.asarray(tree[k], np.float32) * max_norm / norm_in,
                                 rtol=1e-2, atol=1e-6)


def test_global_norm_is_taken_over_the_mixed_tree_in_float32():
  # 1000 bfloat16 entries of 1 and one float32 entry: a bfloat16 norm would be off by ~0.4%.
  tree = {"b": jnp.ones(1000, jnp.bfloat16), "f": jnp.asarray([30.0], jnp.float32)}
  out = _clip_global(steadax.clip_by_global_norm(1.0), tree)
  expected = 30.0 / np.sqrt(1000.0 + 900.0)
  np.testing.assert_allclose(float(out["f"][0]), expected, rtol=1e-6)


def test_global_norm_clipping_of_zeros_and_its_gradient_are_finite():
  tx = steadax.clip_by_global_norm(0.0)
  zeros = {"a": jnp.zeros(3)}
  out = tx.update(zeros, tx.init(zeros))[0]
  np.testing.assert_array_equal(np.asarray(out["a"]), 0.0)
  grad = jax.grad(lambda x: jnp.sum(steadax.clip_by_global_norm(1.0).update(x, ())[0]))(jnp.zeros(3))
  np.testing.assert_array_equal(np.asarray(grad), 1.0)  # below the bound, clipping is the identity
  np.testing.assert_array_equal(np.asarray(jax.grad(steadax.global_norm)(jnp.zeros(2))), 0.0)
  np.testing.assert_allclose(np.asarray(jax.grad(steadax.global_norm)(jnp.asarray([3.0, 4.0]))), [0.6, 0.8])


def test_global_norm_of_a_nan_tree_is_nan_and_its_second_derivative_is_the_norms():
  # The zero-norm rule is in the derivative only (``safe_sqrt``): a NaN gradient gives a NaN norm,
  # so clipping it gives NaN everywhere, as Optax's does (a guard in the value reported 0 and left
  # the other leaves unclipped).
  tree = {"a": jnp.asarray([jnp.nan, 1.0]), "b": jnp.asarray([3.0])}
  tx = steadax.clip_by_global_norm(1.0)
  out = tx.update(tree, tx.init(tree))[0]
  assert np.isnan(float(steadax.tree.norm(tree))) and np.isnan(float(steadax._core._tree.l2_norm(tree)))
  assert all(np.isnan(np.asarray(x)).all() for x in jax.tree.leaves(out))
  x = jnp.asarray([3.0, 4.0])
  hessian = jax.hessian(steadax._core._tree.l2_norm)(x)
  np.testing.assert_allclose(np.asarray(hessian), (np.eye(2) - np.outer(x, x) / 25.0) / 5.0, rtol=1e-6)


def test_max_norm_is_a_leaf_not_a_recompile():
  traces = []

  @jax.jit
  def run(tx, u):
    traces.append(1)
    return tx.update(u, tx.init(u))[0]

  u = jnp.asarray([3.0, 4.0])
  np.testing.assert_allclose(np.asarray(run(steadax.clip_by_global_norm(1.0), u)), [0.6, 0.8], rtol=1e-6)
  np.testing.assert_allclose(np.asarray(run(steadax.clip_by_global_norm(2.5), u)), [1.5, 2.0], rtol=1e-6)
  assert len(traces) == 1


def test_clip_is_elementwise_and_bounds_complex_moduli():
  tx = steadax.clip(1.0)
  u = {"r": jnp.asarray([-3.0, 0.25, 7.0], jnp.float16), "c": jnp.asarray([3 + 4j, 0.1 - 0.2j], jnp.complex64)}
  out, _ = tx.update(u, tx.init(u))
  np.testing.assert_array_equal(np.asarray(out["r"], np.float32), [-1.0, 0.25, 1.0])
  assert out["r"].dtype == jnp.float16
  np.testing.assert_allclose(np.asarray(out["c"]), [0.6 + 0.8j, 0.1 - 0.2j], rtol=1e-6)


def test_clip_by_block_rms_bounds_each_leaf():
  tx = steadax.clip_by_block_rms(0.5)
  u = {"big": jnp.asarray([3.0, -4.0]), "small": jnp.asarray([0.1, 0.2]), "empty": jnp.zeros((0, 2)),
       "c": jnp.asarray([2j, 2.0], jnp.complex64)}
  out, _ = tx.update(u, tx.init(u))
  rms = lambda x: np.sqrt(np.mean(np.abs(np.asarray(x)) ** 2))
  np.testing.assert_allclose(rms(out["big"]), 0.5, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(out["big"]), np.asarray(u["big"]) * 0.5 / rms(u["big"]), rtol=1e-6)
  np.testing.assert_array_equal(np.asarray(out["small"]), np.asarray(u["small"]))
  np.testing.assert_allclose(rms(out["c"]), 0.5, rtol=1e-6)
  assert out["empty"].shape == (0, 2)


@pytest.mark.parametrize("call, error, message", [
    (lambda: steadax.clip_by_global_norm(-1.0), ValueError, "clip_by_global_norm: max_norm"),
    (lambda: steadax.clip_by_global_norm(jnp.ones(2)), ValueError, "clip_by_global_norm: max_norm must be a scalar"),
    (lambda: steadax.clip(-0.5), ValueError, "clip: max_delta"),
    (lambda: steadax.clip(lambda c: 1.0), TypeError, "clip: max_delta must be a number"),
    (lambda: steadax.clip_by_block_rms(0.0), ValueError, "clip_by_block_rms: threshold"),
])
def test_bad_arguments_raise(call, error, message):
  with pytest.raises(error, match=message):
    call()


def test_clip_by_global_norm_ignores_float0_gradients_of_integer_parameters():
  # jax.grad(allow_int=True) gives float0 for an integer parameter (a step count in a TrainState):
  # it holds no numbers, so it adds nothing to the norm (it crashed global_norm).
  tx = steadax.clip_by_global_norm(1.0)
  params = {"w": jnp.zeros(2, jnp.float32), "step": jnp.asarray(3, jnp.int32)}
  grads = {"w": jnp.array([3.0, 4.0], jnp.float32), "step": np.zeros((), jax.dtypes.float0)}
  updates, _ = tx.update(grads, tx.init(params), params)
  np.testing.assert_allclose(updates["w"], [0.6, 0.8], rtol=1e-6)
  assert float(steadax.global_norm(grads)) == 5.0
