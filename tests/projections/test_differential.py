"""steadax.projections against Optax (values and Jacobians), dtype rules, jit/vmap, argument errors."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax
from steadax import projections as P

X64 = bool(jax.config.jax_enable_x64)
NAMES = [n for n in dir(optax.projections) if not n.startswith("_")]


@contextlib.contextmanager
def optax_rules():
  """Optax relies on implicit promotion and rank broadcasting; the suite runs strict.

  Optax's simplex and l1 projections are not x64-safe for float32 trees (their integer and Python
  constants promote to float64 and break its lax.cond and custom JVP), so the reference always runs
  with x64 off; steadax keeps float32 in both modes and is compared with it.
  """
  with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"), jax.enable_x64(False):
    yield


def ref(fn, *args):
  with optax_rules():
    return fn(*args)


def tree_of(seed, dtype=jnp.float32):
  rng = np.random.default_rng(seed)
  return {"w": jnp.asarray(rng.normal(size=(3, 2)), dtype), "b": jnp.asarray(rng.normal(size=4), dtype)}


def assert_trees_close(ours, theirs, tol):
  flat_ours = jax.tree_util.tree_flatten_with_path(ours)[0]
  flat_theirs = dict(jax.tree_util.tree_flatten_with_path(theirs)[0])
  assert len(flat_ours) == len(flat_theirs)
  for path, a in flat_ours:
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(flat_theirs[path], np.float64),
                               rtol=tol, atol=tol, err_msg=jax.tree_util.keystr(path))


X, A = tree_of(0), tree_of(1)
BOUNDS = ({"w": -0.2, "b": 0.0}, {"w": 0.5, "b": 0.3})

# (name, args after the tree): every function of optax.projections, inside and outside its set.
CASES = [
    ("projection_non_negative", ()),
    ("projection_box", BOUNDS),
    ("projection_hypercube", ()),
    ("projection_hypercube", (0.3,)),
    ("projection_simplex", ()),
    ("projection_simplex", (0.7,)),
    ("projection_simplex", (20.0,)),
    ("projection_l1_sphere", ()),
    ("projection_l1_sphere", (9.0,)),
    ("projection_l1_ball", ()),
    ("projection_l1_ball", (100.0,)),
    ("projection_l2_sphere", ()),
    ("projection_l2_sphere", (9.0,)),
    ("projection_l2_ball", ()),
    ("projection_l2_ball", (100.0,)),
    ("projection_linf_ball", ()),
    ("projection_linf_ball", (0.4,)),
    ("projection_vector", (A,)),
    ("projection_hyperplane", (A, 0.3)),
    ("projection_halfspace", (A, 0.3)),
    ("projection_halfspace", (A, 100.0)),
]


def test_every_optax_projection_is_covered():
  assert set(NAMES) == {name for name, _ in CASES}
  assert set(NAMES) <= set(P.__all__)


@pytest.mark.parametrize("name, args", CASES, ids=[f"{n}{i}" for i, (n, _) in enumerate(CASES)])
def test_agrees_with_optax(name, args):
  x = X if name != "projection_hypercube" else X["w"]
  ours = getattr(P, name)(x, *args)
  theirs = ref(getattr(optax.projections, name), x, *args)
  assert jax.tree_util.tree_structure(ours) == jax.tree_util.tree_structure(theirs)
  assert_trees_close(ours, theirs, 1e-6)
  for leaf in jax.tree_util.tree_leaves(ours):
    assert leaf.dtype == jnp.float32


@pytest.mark.parametrize("name", ["projection_simplex", "projection_l1_sphere", "projection_l1_ball",
                                  "projection_l2_sphere", "projection_l2_ball", "projection_linf_ball"])
def test_jacobians_agree_with_optax(name):
  v = X["b"]
  s = np.float32(0.8)
  ours = jax.jacobian(lambda v, s: getattr(P, name)(v, s), argnums=(0, 1))(v, s)
  with optax_rules():
    theirs = jax.jacobian(lambda v, s: getattr(optax.projections, name)(v, s), argnums=(0, 1))(v, s)
  assert_trees_close(ours, theirs, 1e-5)


@pytest.mark.parametrize("name", ["projection_vector", "projection_hyperplane", "projection_halfspace"])
def test_jacobians_of_affine_projections_agree_with_optax(name):
  extra = () if name == "projection_vector" else (np.float32(0.3),)
  ours = jax.jacobian(lambda x, a: getattr(P, name)(x, a, *extra), argnums=(0, 1))(X["b"], A["b"])
  with optax_rules():
    theirs = jax.jacobian(lambda x, a: getattr(optax.projections, name)(x, a, *extra), argnums=(0, 1))(
        X["b"], A["b"])
  assert_trees_close(ours, theirs, 1e-5)


def test_box_with_scalar_bounds_on_a_tree():
  # Optax's projection_box rejects scalar bounds for a tree (a tree_map prefix error); steadax
  # broadcasts them, as its docstring promises.
  ours = P.projection_box(X, -0.1, 0.2)
  expected = jax.tree.map(lambda x: np.clip(np.asarray(x), -0.1, 0.2), X)
  assert_trees_close(ours, expected, 0)
  assert_trees_close(P.projection_hypercube(X), jax.tree.map(lambda x: np.clip(np.asarray(x), 0, 1), X), 0)


def test_l1_sphere_of_a_point_with_zeros_lies_on_the_sphere():
  # Deliberate difference: Optax multiplies by sign(x), which drops the mass the simplex projection
  # gives to zero entries; steadax gives zeros the sign +1 (an equally close point).
  x = jnp.array([0.0, 0.1, -0.2, 0.0], jnp.float32)
  p = P.projection_l1_sphere(x, 2.0)
  np.testing.assert_allclose(float(jnp.sum(jnp.abs(p))), 2.0, rtol=1e-6)
  theirs = ref(optax.projections.projection_l1_sphere, x, 2.0)
  assert float(jnp.sum(jnp.abs(theirs))) < 1.9
  # And it is a nearest point: no point of the sphere (random signs times a scaled Dirichlet draw)
  # is closer to x.
  rng = np.random.default_rng(0)
  others = rng.choice([-1.0, 1.0], size=(2000, 4)) * rng.dirichlet(np.ones(4), size=2000) * 2.0
  distance = float(jnp.linalg.norm(p - x))
  assert distance <= np.min(np.linalg.norm(others - np.asarray(x), axis=1)) + 1e-6


MIXED = {"f32": jnp.array([0.3, -1.2, 2.0], jnp.float32), "bf16": jnp.array([1.5, -0.5], jnp.bfloat16),
         "f16": jnp.array([[0.25, -2.0]], jnp.float16)}


@pytest.mark.parametrize("name, args", [
    ("projection_non_negative", ()), ("projection_box", (-0.5, 0.5)), ("projection_hypercube", ()),
    ("projection_simplex", ()), ("projection_l1_sphere", ()), ("projection_l1_ball", ()),
    ("projection_l2_sphere", ()), ("projection_l2_ball", ()), ("projection_linf_ball", ()),
    ("projection_vector", (MIXED,)), ("projection_hyperplane", (MIXED, 0.5)),
    ("projection_halfspace", (MIXED, 0.5)),
])
def test_mixed_precision_trees_keep_their_dtypes(name, args):
  out = getattr(P, name)(MIXED, *args)
  assert {k: v.dtype for k, v in out.items()} == {k: v.dtype for k, v in MIXED.items()}
  # The low-precision leaves are rounded once from a float32 computation.
  wide = getattr(P, name)(jax.tree.map(lambda x: x.astype(jnp.float32), MIXED),
                          *jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), args))
  for key in MIXED:
    np.testing.assert_allclose(np.asarray(out[key], np.float32), np.asarray(wide[key]),
                               rtol=1e-2, atol=1e-2, err_msg=key)


def test_integer_and_python_leaves():
  ints = jnp.array([3, -1, 2], jnp.int32)
  assert P.projection_non_negative(ints).dtype == jnp.int32
  assert P.projection_box(ints, 0, 2).dtype == jnp.int32
  np.testing.assert_array_equal(P.projection_box(ints, 0, 2), [2, 0, 2])
  default_float = jnp.float64 if X64 else jnp.float32
  assert P.projection_box(ints, 0.0, 1.5).dtype == default_float
  simplex = P.projection_simplex({"a": ints, "b": 0.5})
  assert simplex["a"].dtype == default_float
  np.testing.assert_allclose(float(steadax.tree.sum(simplex)), 1.0, rtol=1e-6)


def test_jit_vmap_and_traced_scale():
  batch = jnp.asarray(np.random.default_rng(3).normal(size=(5, 4)), jnp.float32)
  out = jax.jit(jax.vmap(P.projection_simplex, in_axes=(0, None)))(batch, jnp.float32(2.0))
  np.testing.assert_allclose(np.asarray(out.sum(axis=1)), 2.0, rtol=1e-5)
  for i in range(5):
    np.testing.assert_allclose(out[i], P.projection_simplex(batch[i], 2.0), rtol=1e-6, atol=1e-7)
  scales = jnp.array([0.5, 1.0, 3.0], jnp.float32)
  balls = jax.vmap(lambda s: P.projection_l2_ball(batch[0], s))(scales)
  np.testing.assert_allclose(np.linalg.norm(np.asarray(balls), axis=1), [0.5, 1.0, min(3.0, float(jnp.linalg.norm(batch[0])))],
                             rtol=1e-5)


def test_empty_and_zero_size_trees():
  assert P.projection_simplex({}) == {}
  empty = P.projection_l1_ball({"a": jnp.zeros((0,))})
  assert empty["a"].shape == (0,)
  assert P.projection_l2_ball({"a": jnp.zeros((0, 2)), "b": jnp.array([3.0, 4.0])})["a"].shape == (0, 2)


@pytest.mark.parametrize("call, error, match", [
    (lambda: P.projection_simplex({"w": jnp.array([1j])}), TypeError, r"projection_simplex: `tree` at \['w'\] is complex"),
    (lambda: P.projection_simplex(X, -1.0), ValueError, "projection_simplex: `scale` must be non-negative"),
    (lambda: P.projection_l2_ball(X, jnp.ones(2)), ValueError, "projection_l2_ball: `scale` must be a scalar"),
    (lambda: P.projection_l1_ball(X, "1"), TypeError, "projection_l1_ball: `scale` must be a real scalar"),
    (lambda: P.projection_vector(X, {"w": A["w"]}), ValueError, r"projection_vector: `a` does not have the structure"),
    (lambda: P.projection_hyperplane(X, {"w": A["w"], "b": A["b"][:2]}, 0.0), ValueError,
     r"projection_hyperplane: `a` at \['b'\] has shape \(2,\)"),
    (lambda: P.projection_halfspace({"w": jnp.array([1j])}, {"w": jnp.array([1j])}, 0.0), TypeError,
     "projection_halfspace: `x` at"),
    (lambda: P.projection_hyperplane(X, A, 1j), TypeError, "projection_hyperplane: `b` is complex"),
    (lambda: P.projection_box(X, 1.0, 0.0), ValueError, r"projection_box: `lower` exceeds `upper` at \['b'\]"),
    (lambda: P.projection_box(X, jnp.zeros(5), 1.0), ValueError, r"projection_box: `lower` at \['b'\] has shape \(5,\)"),
    (lambda: P.projection_box(X, {"w": 0.0}, 1.0), ValueError, "projection_box: `lower` does not have the structure"),
    (lambda: P.projection_hypercube(X, -1.0), ValueError, "projection_hypercube: the lower bound 0 exceeds `scale`"),
    (lambda: P.projection_non_negative({"w": "a"}), TypeError, r"projection_non_negative: `tree` at \['w'\] is not an array"),
])
def test_bad_arguments_raise_naming_function_argument_and_path(call, error, match):
  with pytest.raises(error, match=match):
    call()
