"""Property tests of the tree algebra (hypothesis): inverses, symmetry, homogeneity, distributivity."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import steadax

# Fixed shapes (one trace per function), random values; tolerances scale with the magnitudes.
SHAPES = {"a": (3,), "b": (2, 2), "c": ()}
SETTINGS = settings(max_examples=25, deadline=None, derandomize=True)
finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=32)


def _numpy_trees():
  return st.fixed_dictionaries(
      {k: hnp.arrays(np.float32, shape, elements=finite) for k, shape in SHAPES.items()}
  )


def real_trees():
  return _numpy_trees().map(lambda d: {k: jnp.asarray(v) for k, v in d.items()})


def complex_trees():
  return st.tuples(_numpy_trees(), _numpy_trees()).map(
      lambda pair: {k: jnp.asarray((pair[0][k] + 1j * pair[1][k]).astype(np.complex64)) for k in SHAPES}
  )


def scale_of(tree) -> float:
  return float(steadax.tree.norm(tree, ord="inf")) + 1.0


def assert_trees_close(x, y, atol):
  for k in SHAPES:
    np.testing.assert_allclose(np.asarray(x[k]), np.asarray(y[k]), rtol=0, atol=atol)


@SETTINGS
@given(real_trees(), real_trees())
def test_sub_undoes_add(x, y):
  # Rounding of x + y costs at most half an ulp of |x| + |y| per leaf.
  back = steadax.tree.sub(steadax.tree.add(x, y), y)
  assert_trees_close(back, x, atol=1e-6 * (scale_of(x) + scale_of(y)))
  zero = steadax.tree.sub(x, x)
  assert float(steadax.tree.norm(zero)) == 0.0


@SETTINGS
@given(real_trees(), real_trees())
def test_vdot_is_symmetric_and_matches_the_squared_norm(x, y):
  assert float(steadax.tree.vdot(x, y)) == float(steadax.tree.vdot(y, x))
  sq = float(steadax.tree.vdot(x, x))
  np.testing.assert_allclose(sq, float(steadax.tree.norm(x, squared=True)), rtol=1e-5, atol=1e-6)
  assert sq >= 0.0


@SETTINGS
@given(complex_trees(), complex_trees())
def test_complex_vdot_is_conjugate_symmetric(x, y):
  xy, yx = complex(steadax.tree.vdot(x, y)), complex(steadax.tree.vdot(y, x))
  tol = 1e-5 * scale_of(x) * scale_of(y) * steadax.tree.size(x)
  assert abs(xy - yx.conjugate()) <= tol
  xx = complex(steadax.tree.vdot(x, x))
  assert abs(xx.imag) <= tol and xx.real >= 0.0


@SETTINGS
@given(real_trees(), st.floats(-100, 100, allow_nan=False, width=32))
def test_norm_is_absolutely_homogeneous(x, a):
  for ord_ in (None, 1, "inf"):
    lhs = float(steadax.tree.norm(steadax.tree.scale(a, x), ord=ord_))
    rhs = abs(a) * float(steadax.tree.norm(x, ord=ord_))
    np.testing.assert_allclose(lhs, rhs, rtol=1e-5, atol=1e-30)


@SETTINGS
@given(complex_trees(), st.complex_numbers(max_magnitude=10, allow_nan=False, allow_infinity=False))
def test_complex_norm_is_absolutely_homogeneous(x, a):
  lhs = float(steadax.tree.norm(steadax.tree.scale(jnp.asarray(a, jnp.complex64), x)))
  rhs = abs(complex(np.complex64(a))) * float(steadax.tree.norm(x))
  np.testing.assert_allclose(lhs, rhs, rtol=1e-5, atol=1e-30)


@SETTINGS
@given(real_trees(), real_trees(), st.floats(-10, 10, allow_nan=False, width=32))
def test_scale_distributes_over_add_and_norm_is_subadditive(x, y, a):
  lhs = steadax.tree.scale(a, steadax.tree.add(x, y))
  rhs = steadax.tree.add(steadax.tree.scale(a, x), steadax.tree.scale(a, y))
  assert_trees_close(lhs, rhs, atol=2e-6 * (abs(a) + 1) * (scale_of(x) + scale_of(y)))
  np.testing.assert_array_less(
      float(steadax.tree.norm(steadax.tree.add(x, y))),
      float(steadax.tree.norm(x)) + float(steadax.tree.norm(y)) + 1e-5 * (scale_of(x) + scale_of(y)),
  )
  fused = steadax.tree.add_scale(x, a, y)
  assert_trees_close(fused, steadax.tree.add(x, steadax.tree.scale(a, y)),
                     atol=2e-6 * (abs(a) + 1) * (scale_of(x) + scale_of(y)))
