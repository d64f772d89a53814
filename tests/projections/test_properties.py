"""Defining properties of the projections (hypothesis): the result lies in the set, projecting twice
changes nothing, and for convex sets the variational inequality <x - p, y - p> <= 0 holds for every
y in the set (which characterises the Euclidean projection)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from steadax import projections as P

SHAPES = {"a": (3,), "b": (2, 2), "c": ()}
SETTINGS = settings(max_examples=25, deadline=None, derandomize=True)
# No subnormals: XLA on CPU flushes them to zero (denormals-are-zero), so a subnormal input
# compares unequal to its own projection; that is the backend's arithmetic, not the projection's.
finite = st.floats(-50, 50, allow_nan=False, allow_infinity=False, allow_subnormal=False, width=32)
radius = st.floats(0.0625, 20.0, allow_nan=False, width=32)


def _numpy_trees():
  return st.fixed_dictionaries(
      {k: hnp.arrays(np.float32, shape, elements=finite) for k, shape in SHAPES.items()})


def trees():
  return _numpy_trees().map(lambda d: {k: jnp.asarray(v) for k, v in d.items()})


def complex_trees():
  return st.tuples(_numpy_trees(), _numpy_trees()).map(
      lambda pair: {k: jnp.asarray((pair[0][k] + 1j * pair[1][k]).astype(np.complex64)) for k in SHAPES})


def flat(tree) -> np.ndarray:
  return np.concatenate([np.ravel(np.asarray(tree[k], np.complex128)) for k in SHAPES])


def inner(x, y) -> float:
  return float(np.real(np.vdot(x, y)))


# One compiled program per projection (fixed shapes; the scale is traced).
JIT = {name: jax.jit(getattr(P, name)) for name in P.__all__}


def check_idempotent(name, p, *args, tol):
  again = JIT[name](p, *args)
  np.testing.assert_allclose(flat(again), flat(p), rtol=0, atol=tol)


def check_variational_inequality(x, p, ys, tol):
  for y in ys:
    assert inner(x - p, y - p) <= tol, (inner(x - p, y - p), tol)


BALLS = {  # name -> (membership residual, a point of the set built from a free vector)
    "projection_l2_ball": (lambda v, s: np.linalg.norm(v) - s,
                           lambda v, s: v * min(1.0, s / max(np.linalg.norm(v), 1e-30))),
    "projection_l1_ball": (lambda v, s: np.sum(np.abs(v)) - s,
                           lambda v, s: v * min(1.0, s / max(np.sum(np.abs(v)), 1e-30))),
    "projection_linf_ball": (lambda v, s: np.max(np.abs(v)) - s,
                             lambda v, s: v * min(1.0, s / max(np.max(np.abs(v)), 1e-30))),
}


@SETTINGS
@given(trees(), radius, st.sampled_from(sorted(BALLS)), st.integers(0, 2**31 - 1))
def test_balls(tree, scale, name, seed):
  residual, member = BALLS[name]
  p = JIT[name](tree, jnp.float32(scale))
  x, v = flat(tree), flat(p)
  tol = 1e-5 * (np.max(np.abs(x)) + scale + 1)
  assert residual(v, scale) <= tol
  if residual(x, scale) <= 0:
    np.testing.assert_allclose(v, x, rtol=0, atol=tol)
  check_idempotent(name, p, jnp.float32(scale), tol=tol)
  rng = np.random.default_rng(seed)
  ys = [member(rng.normal(size=x.size) * scale, scale) for _ in range(8)]
  check_variational_inequality(x, v, ys, tol * (np.linalg.norm(x) + scale))


@SETTINGS
@given(complex_trees(), radius, st.sampled_from(sorted(BALLS)), st.integers(0, 2**31 - 1))
def test_complex_balls(tree, scale, name, seed):
  residual, member = BALLS[name]
  p = JIT[name](tree, jnp.float32(scale))
  x, v = flat(tree), flat(p)
  tol = 1e-5 * (np.max(np.abs(x)) + scale + 1)
  assert residual(v, scale) <= tol
  rng = np.random.default_rng(seed)
  ys = [member((rng.normal(size=x.size) + 1j * rng.normal(size=x.size)) * scale, scale) for _ in range(8)]
  check_variational_inequality(x, v, ys, tol * (np.linalg.norm(x) + scale))


@SETTINGS
@given(trees(), radius, st.integers(0, 2**31 - 1))
def test_simplex(tree, scale, seed):
  p = JIT["projection_simplex"](tree, jnp.float32(scale))
  x, v = flat(tree).real, flat(p).real
  tol = 1e-5 * (np.max(np.abs(x)) + scale + 1)
  assert np.all(v >= 0)
  np.testing.assert_allclose(np.sum(v), scale, rtol=1e-5, atol=tol)
  check_idempotent("projection_simplex", p, jnp.float32(scale), tol=tol)
  rng = np.random.default_rng(seed)
  ys = [rng.dirichlet(np.ones(x.size)) * scale for _ in range(8)] + [np.eye(x.size)[i] * scale for i in range(x.size)]
  check_variational_inequality(x, v, ys, tol * (np.linalg.norm(x) + scale))


@SETTINGS
@given(st.one_of(trees(), complex_trees()), radius)
def test_spheres(tree, scale):
  x = flat(tree)
  if np.linalg.norm(x) == 0:
    return
  tol = 1e-5 * (np.max(np.abs(x)) + scale + 1)
  l2 = flat(JIT["projection_l2_sphere"](tree, jnp.float32(scale)))
  np.testing.assert_allclose(np.linalg.norm(l2), scale, rtol=1e-5)
  # The nearest point of the l2 sphere is the radial one: x, l2 and 0 are aligned.
  np.testing.assert_allclose(l2 * np.linalg.norm(x), x * scale, rtol=0, atol=tol * np.linalg.norm(x))
  l1 = JIT["projection_l1_sphere"](tree, jnp.float32(scale))
  np.testing.assert_allclose(np.sum(np.abs(flat(l1))), scale, rtol=1e-5, atol=tol)
  check_idempotent("projection_l1_sphere", l1, jnp.float32(scale), tol=tol)
  # The l1-sphere projection is no farther from x than the rescaled point.
  rescaled = x * scale / np.sum(np.abs(x))
  assert np.linalg.norm(flat(l1) - x) <= np.linalg.norm(rescaled - x) + tol


@SETTINGS
@given(trees(), trees(), trees(), st.floats(-20, 20, allow_subnormal=False, width=32))
def test_box_and_orthant(tree, low, width, seed_shift):
  upper = {k: low[k] + jnp.abs(width[k]) for k in SHAPES}
  p = JIT["projection_box"](tree, low, upper)
  for k in SHAPES:
    # low + |width| can still cancel to a subnormal bound, which the backend reads as zero.
    tiny = np.finfo(np.float32).tiny
    assert np.all(np.asarray(p[k]) >= np.asarray(low[k]) - tiny)
    assert np.all(np.asarray(p[k]) <= np.asarray(upper[k]) + tiny)
  check_idempotent("projection_box", p, low, upper, tol=0)
  # The box is a product of intervals: the projection is the closest point coordinate-wise.
  x, v = flat(tree).real, flat(p).real
  corner = flat(low).real
  check_variational_inequality(x, v, [corner, flat(upper).real], 1e-5 * (np.abs(x).max() + 1) ** 2)
  nonneg = JIT["projection_non_negative"](tree)
  assert all(np.all(np.asarray(nonneg[k]) >= 0) for k in SHAPES)
  np.testing.assert_array_equal(flat(nonneg).real, np.maximum(x, 0))
  del seed_shift


@SETTINGS
@given(trees(), trees(), st.floats(-20, 20, width=32))
def test_hyperplane_halfspace_and_vector(tree, normal, offset):
  a = flat(normal).real
  if np.linalg.norm(a) < 1e-2:
    return
  x = flat(tree).real
  tol = 1e-4 * (np.linalg.norm(x) + abs(offset) + 1) * np.linalg.norm(a)
  on_plane = flat(JIT["projection_hyperplane"](tree, normal, jnp.float32(offset))).real
  assert abs(inner(a, on_plane) - offset) <= tol
  # The correction is along the normal.
  residual = (on_plane - x) - a * inner(a, on_plane - x) / inner(a, a)
  assert np.linalg.norm(residual) <= tol
  half = flat(JIT["projection_halfspace"](tree, normal, jnp.float32(offset))).real
  assert inner(a, half) <= offset + tol
  if inner(a, x) <= offset:
    np.testing.assert_allclose(half, x, rtol=0, atol=tol)
  else:
    np.testing.assert_allclose(half, on_plane, rtol=0, atol=tol)
  line = flat(JIT["projection_vector"](tree, normal)).real
  assert abs(inner(x - line, a)) <= tol * (np.linalg.norm(x) + 1)
  np.testing.assert_allclose(line, a * inner(a, line) / inner(a, a), rtol=0, atol=tol)
