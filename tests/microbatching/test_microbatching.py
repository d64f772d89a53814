"""steadax.microbatching: Optax agreement, row order, dtypes of the carries, early stopping."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax

M = steadax.microbatching
X64 = bool(jax.config.jax_enable_x64)
KINDS = ["SUM", "MEAN", "RUNNING_MEAN", "CONCAT"]


def test_namespace_matches_optax():
  public = {n for n in dir(optax.microbatching) if not n.startswith("_")}
  assert public <= set(dir(M))
  assert steadax.microbatch is M.microbatch


def _fun(x, y):
  return {"sum_rows": x * 2.0 + y[:, :1], "total": jnp.sum(x, axis=0)}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("real", [None, 2])
def test_microbatch_agrees_with_optax(kind, real):
  x = jnp.arange(12.0).reshape(6, 2)
  y = jnp.arange(18.0).reshape(6, 3) / 10
  ours = M.microbatch(_fun, (0, 1), 2, getattr(M.AccumulationType, kind), num_real_microbatches=real)(x, y)
  with jax.numpy_dtype_promotion("standard"):
    theirs = optax.microbatching.microbatch(
        _fun, (0, 1), 2, getattr(optax.microbatching.AccumulationType, kind), num_real_microbatches=real)(x, y)
  for a, b in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)):
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def test_concat_restores_row_order_and_full_batch_results():
  x = jnp.arange(8.0)
  out = M.microbatch(lambda v: (v * 10, jnp.sum(v)), 0, 2, (M.AccumulationType.CONCAT, M.AccumulationType.SUM))(x)
  np.testing.assert_array_equal(out[0], np.arange(8.0) * 10)
  assert float(out[1]) == 28.0
  mean = M.microbatch(lambda v: jnp.mean(v), 0, 4, M.AccumulationType.MEAN)(x)
  assert float(mean) == pytest.approx(3.5)


def test_keyword_batch_arguments_and_axes():
  f = lambda a, b=None: jnp.sum(a, axis=0) * jnp.sum(b)  # noqa: E731
  a, b = jnp.ones((4, 3)), jnp.ones((2, 4))
  out = jax.jit(M.microbatch(f, 0, 2, argnames="b", in_axes=(0, 1)))(a, b=b)
  # Each microbatch: 2 rows of a and 2 columns of b: sum(a rows) * 4, summed over 2 microbatches.
  np.testing.assert_allclose(out, np.full(3, 16.0))
  with pytest.raises(ValueError, match="batch size 4 is not divisible by microbatch_size"):
    M.microbatch(f, 0, 3, argnames="b", in_axes=(0, 1))(a, b=b)
  with pytest.raises(ValueError, match="one batch size"):
    M.microbatch(f, (0,), 2, argnames="b")(a, b=b)


def test_low_precision_sums_accumulate_wide_and_return_their_dtype():
  x = jnp.full((256, 1), 1.0 / 64, jnp.bfloat16)
  out = M.microbatch(lambda v: jnp.sum(v, axis=0), 0, 1, M.AccumulationType.SUM)(x)
  assert out.dtype == jnp.bfloat16
  # 256 / 64 = 4 exactly; a bfloat16 running sum stalls once the step falls below its resolution.
  assert float(out[0]) == 4.0
  for kind in ("MEAN", "RUNNING_MEAN"):
    mean = M.microbatch(lambda v: v[0], 0, 1, getattr(M.AccumulationType, kind))(x)
    assert mean.dtype == jnp.bfloat16 and float(mean[0]) == pytest.approx(1 / 64)
  with pytest.raises(ValueError, match="MEAN accumulator needs floating outputs"):
    M.microbatch(lambda v: v, 0, 1, M.AccumulationType.MEAN)(jnp.arange(4))


def test_traced_number_of_microbatches_does_not_recompile():
  f = M.microbatch(lambda v: jnp.sum(v), 0, 2, M.AccumulationType.RUNNING_MEAN)
  g = jax.jit(lambda v, n: M.microbatch(lambda w: jnp.sum(w), 0, 2, M.AccumulationType.RUNNING_MEAN,
                                        num_real_microbatches=n)(v))
  x = jnp.arange(8.0)
  assert float(g(x, 2)) == pytest.approx((0.0 + 4.0 + 1.0 + 5.0) / 2)  # rows (0, 4) and (1, 5)
  assert float(g(x, 4)) == pytest.approx(float(f(x)))
  assert g._cache_size() == 1


def test_custom_accumulator_in_a_tree():
  last = M.Accumulator(init=lambda s: jnp.zeros(s.shape, s.dtype), update=lambda c, v, i: v,
                       finalize=lambda c: c, aggregate=lambda v: v[-1])
  out = M.microbatch(lambda v: (v, v), 0, 1, (last, M.AccumulationType.SUM))(jnp.arange(3.0))
  np.testing.assert_array_equal(out[0], [2.0])
  np.testing.assert_array_equal(out[1], [3.0])
  with pytest.raises(ValueError, match="unknown accumulator"):
    M.microbatch(lambda v: v, 0, 1, "sum")(jnp.arange(3.0))


def test_micro_vmap_and_micro_grad_agree_with_optax():
  x = jnp.arange(6.0).reshape(6, 1)
  np.testing.assert_array_equal(M.micro_vmap(lambda v: v ** 2, microbatch_size=3)(x), x ** 2)
  total = M.micro_vmap(lambda v, w: v * w, in_axes=(0, None), microbatch_size=2,
                       accumulator=M.AccumulationType.SUM)(x, 2.0)
  np.testing.assert_allclose(total, [30.0])

  def loss(params, features, targets):
    return 0.5 * jnp.mean((features @ params - targets) ** 2)

  args = (jnp.zeros(1), jnp.ones((4, 1)), jnp.array([0.0, 2.0, 4.0, 6.0]))
  kw = dict(argnums=0, batch_argnums=(1, 2), transform_fn=lambda g: (g, g ** 2), metrics_fn=jnp.linalg.norm,
            microbatch_size=2)
  (grads, squares), aux = M.micro_grad(loss, accumulator=M.AccumulationType.MEAN, **kw)(*args)
  with jax.numpy_dtype_promotion("standard"):
    (ref_grads, ref_squares), ref_aux = optax.microbatching.micro_grad(
        loss, accumulator=optax.microbatching.AccumulationType.MEAN, **kw)(*args)
  np.testing.assert_allclose(grads, ref_grads)
  np.testing.assert_allclose(squares, ref_squares)
  np.testing.assert_allclose(aux.values, ref_aux.values)
  np.testing.assert_allclose(aux.metrics, ref_aux.metrics)
  assert aux.aux is None and type(aux).__name__ == "Aux"


def test_reshape_batch_axis_under_an_explicit_mesh():
  mesh = jax.make_mesh((1,), ("batch",), axis_types=(jax.sharding.AxisType.Explicit,))
  with jax.set_mesh(mesh):
    x = jax.device_put(jnp.arange(8.0).reshape(4, 2), jax.sharding.NamedSharding(mesh, jax.P("batch")))
    out = jax.jit(lambda v: M.reshape_batch_axis(v, 2))(x)
    assert out.shape == (2, 2, 2)
    assert tuple(jax.typeof(out).sharding.spec)[:2] == (None, "batch")
    np.testing.assert_array_equal(np.asarray(out)[:, 0, 0], [0.0, 2.0])  # column-major: rows 0 and 1
    summed = jax.jit(M.microbatch(lambda v: v * 2, 0, 2, M.AccumulationType.CONCAT))(x)
    np.testing.assert_array_equal(np.asarray(summed), np.arange(8.0).reshape(4, 2) * 2)
