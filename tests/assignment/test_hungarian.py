"""The Hungarian algorithms against scipy.optimize.linear_sum_assignment (cost) and Optax (output)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy.optimize import linear_sum_assignment

import steadax

SOLVERS = {
    "hungarian_algorithm": (jax.jit(steadax.assignment.hungarian_algorithm),
                            optax.assignment.hungarian_algorithm),
    "base_hungarian_algorithm": (jax.jit(steadax.assignment.base_hungarian_algorithm),
                                 optax.assignment.base_hungarian_algorithm),
}
SHAPES = [(5, 5), (4, 7), (7, 4), (1, 3), (3, 1)]


def matrices(shape, seed):
  """Continuous, negative-heavy, and tie-heavy (few distinct integers) cost matrices."""
  rng = np.random.default_rng(seed)
  return {
      "normal": rng.normal(size=shape).astype(np.float32),
      "negative": (-np.abs(rng.normal(size=shape)) * 100).astype(np.float32),
      "ties": rng.integers(-2, 3, size=shape).astype(np.float32),
      "constant": np.full(shape, 3.0, np.float32),
  }


def check_valid(i, j, shape):
  k = min(shape)
  i, j = np.asarray(i), np.asarray(j)
  assert i.shape == j.shape == (k,)
  assert len(set(i.tolist())) == k and len(set(j.tolist())) == k
  assert i.min() >= 0 and i.max() < shape[0] and j.min() >= 0 and j.max() < shape[1]


@pytest.mark.parametrize("name", sorted(SOLVERS))
@pytest.mark.parametrize("shape", SHAPES)
def test_optimal_cost_equals_scipy(name, shape):
  solve, _ = SOLVERS[name]
  for seed in range(3):
    for kind, cost in matrices(shape, seed).items():
      i, j = solve(cost)
      check_valid(i, j, shape)
      rows, cols = linear_sum_assignment(cost)
      np.testing.assert_allclose(cost[np.asarray(i), np.asarray(j)].sum(), cost[rows, cols].sum(),
                                 rtol=1e-5, atol=1e-4, err_msg=f"{name} {shape} {kind} seed {seed}")


@pytest.mark.parametrize("name", sorted(SOLVERS))
@pytest.mark.parametrize("shape", SHAPES)
def test_same_assignment_and_order_as_optax_when_the_optimum_is_unique(name, shape):
  solve, reference = SOLVERS[name]
  cost = matrices(shape, 7)["normal"]    # continuous costs: the optimum is unique
  i, j = solve(cost)
  with jax.numpy_dtype_promotion("standard"):
    oi, oj = reference(jnp.asarray(cost))
  np.testing.assert_array_equal(i, oi)
  np.testing.assert_array_equal(j, oj)
  # JAX's default integer for both (Optax returns lax.top_k's int32 for one of them under x64).
  assert i.dtype == j.dtype == jax.dtypes.canonicalize_dtype(jnp.int_)


def test_base_returns_rows_in_increasing_order():
  solve, _ = SOLVERS["base_hungarian_algorithm"]
  for shape in [(6, 3), (3, 6)]:
    i, _ = solve(matrices(shape, 1)["normal"])
    assert np.all(np.diff(np.asarray(i)) > 0)


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_dtypes_empty_matrices_and_errors(name):
  fn = getattr(steadax.assignment, name)
  cost_int = np.array([[8, 4, 7], [5, 2, 3], [9, 6, 7], [9, 4, 8]])
  i, j = fn(cost_int)
  assert int(cost_int[np.asarray(i), np.asarray(j)].sum()) == 15
  cost_bf16 = jnp.asarray(matrices((4, 4), 2)["ties"], jnp.bfloat16)
  i, j = fn(cost_bf16)
  ref = np.asarray(cost_bf16, np.float32)
  rows, cols = linear_sum_assignment(ref)
  assert ref[np.asarray(i), np.asarray(j)].sum() == ref[rows, cols].sum()
  for shape in [(0, 3), (3, 0)]:
    i, j = fn(jnp.zeros(shape))
    assert i.shape == j.shape == (0,)
  with pytest.raises(ValueError, match=f"{name}: `cost_matrix` must be 2-D"):
    fn(jnp.zeros((2, 2, 2)))
  with pytest.raises(TypeError, match=f"{name}: `cost_matrix` must be real"):
    fn(jnp.zeros((2, 2), jnp.complex64))


def test_vmap_over_a_batch_of_problems():
  costs = np.stack([matrices((4, 4), s)["normal"] for s in range(3)])
  i, j = jax.vmap(steadax.assignment.hungarian_algorithm)(costs)
  for b in range(3):
    rows, cols = linear_sum_assignment(costs[b])
    np.testing.assert_allclose(costs[b][np.asarray(i[b]), np.asarray(j[b])].sum(),
                               costs[b][rows, cols].sum(), rtol=1e-6)
