"""steadax.tree algebra, reductions, casting and random trees: differential against Optax, dtype rules."""

from __future__ import annotations

import contextlib
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax

X64 = bool(jax.config.jax_enable_x64)


@contextlib.contextmanager
def optax_rules():
  """Optax relies on implicit promotion; the suite runs strict."""
  with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
    yield


def ref(fn, *args, **kwargs):
  with optax_rules():
    return fn(*args, **kwargs)


def tree_of(seed, dtype=jnp.float32):
  rng = np.random.default_rng(seed)
  return {
      "a": jnp.asarray(rng.normal(size=3), dtype),
      "b": (jnp.asarray(rng.normal(size=(2, 2)), dtype), jnp.asarray(rng.normal(), dtype)),
  }


def complex_tree(seed):
  rng = np.random.default_rng(seed)
  return {
      "c": jnp.asarray(rng.normal(size=3) + 1j * rng.normal(size=3), jnp.complex64),
      "r": jnp.asarray(rng.normal(size=2), jnp.float32),
  }


def assert_trees_close(actual, expected, rtol=1e-6, atol=1e-6):
  a_leaves, a_def = jax.tree_util.tree_flatten(actual)
  e_leaves, e_def = jax.tree_util.tree_flatten(expected)
  assert a_def == e_def, (a_def, e_def)
  for a, e in zip(a_leaves, e_leaves):
    np.testing.assert_allclose(np.asarray(a, np.complex128), np.asarray(e, np.complex128),
                               rtol=rtol, atol=atol)


X, Y, Z = tree_of(0), tree_of(1), tree_of(2)


# ------------------------------------------------------------------------------ surface and names


def test_every_optax_tree_name_exists_with_the_same_parameters():
  for module, ours in ((optax.tree, steadax.tree), (optax.tree_utils, steadax.tree_utils)):
    for name in dir(module):
      theirs = getattr(module, name)
      if name.startswith("_") or inspect.ismodule(theirs):
        continue
      assert hasattr(ours, name), f"{ours.__name__}.{name} is missing"
      if inspect.isfunction(theirs):
        p_theirs = list(inspect.signature(theirs).parameters.values())
        p_ours = list(inspect.signature(getattr(ours, name)).parameters.values())
        assert [(p.name, p.kind) for p in p_ours] == [(p.name, p.kind) for p in p_theirs], name
        for a, b in zip(p_ours, p_theirs):
          assert (a.default is inspect.Parameter.empty) == (b.default is inspect.Parameter.empty), name
  assert steadax.tree_utils.tree_add is steadax.tree.add
  for name in ("tree", "tree_utils", "assignment", "perturbations", "tree_map_params",
               "bias_correction", "update_moment", "update_moment_per_elem_norm",
               "update_infinity_moment"):
    assert hasattr(optax, name) and hasattr(steadax, name), name
  for module in ("assignment", "perturbations"):
    theirs = {n for n in dir(getattr(optax, module)) if not n.startswith("_")}
    assert theirs <= set(getattr(steadax, module).__all__), module
  assert steadax.tree_map_params is steadax.tree.map_params
  assert steadax.tree.update_moment is steadax.update_moment


# ------------------------------------------------------------------------------ elementwise


@pytest.mark.parametrize(
    "name, args",
    [
        ("add", (X, Y)),
        ("add", (X, Y, Z)),
        ("sub", (X, Y)),
        ("mul", (X, Y)),
        ("div", (X, Y)),
        ("scale", (0.3, X)),
        ("scale", (jnp.asarray(-2.0), X)),
        ("add_scale", (X, 0.7, Y)),
        ("where", (True, X, Y)),
        ("where", (jnp.asarray(False), X, Y)),
        ("clip", (X, -0.5, 0.25)),
        ("clip", (X, None, 0.1)),
        ("conj", (complex_tree(0),)),
        ("real", (complex_tree(0),)),
        ("batch_shape", (X, (2, 3))),
        ("zeros_like", (X,)),
        ("zeros_like", (X, jnp.bfloat16)),
        ("ones_like", (X,)),
        ("full_like", (X, 3.5)),
        ("full_like", (X, 2, jnp.int32)),
        ("cast", (X, jnp.bfloat16)),
        ("cast", (X, None)),
        ("cast_like", (X, tree_of(3, jnp.bfloat16))),
        ("update_moment", (X, Y, 0.9, 1)),
        ("update_moment", (X, Y, 0.9, 2)),
        ("update_moment_per_elem_norm", (X, jax.tree_util.tree_map(jnp.abs, Y), 0.99, 2)),
        ("update_moment_per_elem_norm", (complex_tree(1), jax.tree_util.tree_map(jnp.abs, complex_tree(2)), 0.9, 2)),
        ("update_infinity_moment", (X, jax.tree_util.tree_map(jnp.abs, Y), 0.9, 1e-3)),
        ("bias_correction", (X, 0.9, jnp.asarray(3, jnp.int32))),
        ("bias_correction", (X, 0.99, 2)),
    ],
)
def test_elementwise_matches_optax(name, args):
  ours = getattr(steadax.tree, name)(*args)
  theirs = ref(getattr(optax.tree, name), *args)
  # With Python hyperparameters under x64 Optax forms 1 - 0.99**2 in float64; steadax casts the
  # decay to the float32 moment's dtype first (the policy), a 2e-6 relative difference.
  rtol = 1e-5 if name == "bias_correction" and X64 else 1e-6
  assert_trees_close(ours, theirs, rtol=rtol)
  for a, b in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)):
    assert a.dtype == b.dtype and a.shape == b.shape, name


def test_none_leaves_are_kept():
  x = {"a": jnp.ones(2), "b": None}
  assert steadax.tree.add(x, x)["b"] is None
  assert steadax.tree.add_scale(x, 2.0, {"a": jnp.ones(2), "b": jnp.ones(1)})["b"] is None
  assert steadax.tree.update_moment(x, x, 0.5, 1)["b"] is None


def test_elementwise_keeps_bfloat16_and_promotes_mixed_leaves_explicitly():
  b16 = tree_of(0, jnp.bfloat16)
  for out in (steadax.tree.add(b16, b16), steadax.tree.sub(b16, b16), steadax.tree.mul(b16, b16),
              steadax.tree.div(b16, b16), steadax.tree.scale(jnp.asarray(0.5, jnp.float32), b16),
              steadax.tree.add_scale(b16, jnp.asarray(2.0), b16), steadax.tree.where(True, b16, b16),
              steadax.tree.clip(b16, jnp.asarray(-0.1), 0.1), steadax.tree.conj(b16),
              steadax.tree.real(b16)):
    assert {leaf.dtype for leaf in jax.tree_util.tree_leaves(out)} == {jnp.dtype(jnp.bfloat16)}
  # Mixed leaves (float32 with bfloat16) under strict promotion: JAX's standard result, float32.
  mixed = steadax.tree.add(X, b16)
  assert {leaf.dtype for leaf in jax.tree_util.tree_leaves(mixed)} == {jnp.dtype(jnp.float32)}
  assert_trees_close(mixed, ref(optax.tree.add, X, b16))
  # A complex scalar makes real leaves complex; integer trees divide to floats.
  assert steadax.tree.scale(1j, X)["a"].dtype == jnp.complex64
  assert jnp.issubdtype(steadax.tree.div({"a": jnp.arange(3)}, {"a": jnp.arange(1, 4)})["a"].dtype,
                        jnp.floating)


def test_bfloat16_sums_of_many_trees_round_once():
  # 256 + 1 + 1 is 258 exactly; rounding after each addition in bfloat16 would give 256.
  t = lambda v: {"a": jnp.asarray([v], jnp.bfloat16)}
  assert float(steadax.tree.add(t(256.0), t(1.0), t(1.0))["a"][0]) == 258.0


# ------------------------------------------------------------------------------ reductions


@pytest.mark.parametrize(
    "name, args, kwargs",
    [
        ("sum", (X,), {}),
        ("sum", (X,), {"associative_reduction": True}),
        ("max", (X,), {}),
        ("min", (X,), {}),
        ("norm", (X,), {}),
        ("norm", (X,), {"ord": 2, "squared": True}),
        ("norm", (X,), {"ord": 1}),
        ("norm", (X,), {"ord": 1, "squared": True}),
        ("norm", (X,), {"ord": jnp.inf}),
        ("norm", (X,), {"ord": "inf"}),
        ("norm", (complex_tree(0),), {}),
        ("norm", (complex_tree(0),), {"ord": "infinity"}),
        ("vdot", (X, Y), {}),
        ("vdot", (complex_tree(0), complex_tree(1)), {}),
        ("size", (X,), {}),
        ("allclose", (X, Y), {}),
        ("allclose", (X, X), {}),
        ("allclose", (X, jax.tree_util.tree_map(lambda v: v + 1e-3, X)), {"atol": 1e-2}),
        ("dtype", (X,), {}),
        ("dtype", ({"a": jnp.zeros(1, jnp.bfloat16), "b": jnp.zeros(1)},), {"mixed_dtype_handler": "promote"}),
        ("dtype", ({"a": jnp.zeros(1, jnp.bfloat16), "b": jnp.zeros(1)},), {"mixed_dtype_handler": "highest"}),
        ("dtype", ({"a": jnp.zeros(1, jnp.bfloat16), "b": jnp.zeros(1)},), {"mixed_dtype_handler": "lowest"}),
        ("dtype", ({"a": jnp.zeros(1, jnp.int32), "b": jnp.zeros(1, jnp.uint32)},), {"mixed_dtype_handler": "promote"}),
        ("dtype", ({"a": jnp.zeros(1, jnp.int32), "b": jnp.zeros(1, jnp.uint32)},), {"mixed_dtype_handler": "lowest"}),
        ("dtype", ({},), {}),
    ],
)
def test_reductions_match_optax(name, args, kwargs):
  try:
    theirs = ref(getattr(optax.tree, name), *args, **kwargs)
  except ValueError:
    # int32 and uint32 are unordered under x64 (they promote to int64): both libraries refuse.
    with pytest.raises(ValueError, match=name):
      getattr(steadax.tree, name)(*args, **kwargs)
    return
  ours = getattr(steadax.tree, name)(*args, **kwargs)
  if name == "dtype":
    assert ours == theirs
    return
  if name == "size":
    assert ours == theirs and isinstance(ours, int)
    return
  np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=2e-6, atol=1e-6)


def test_reductions_over_mixed_precision_trees_accumulate_in_float32():
  # Each leaf is exact in its own dtype; the total is not representable in bfloat16.
  tree = {"big": jnp.asarray([256.0], jnp.bfloat16), "small": jnp.asarray([1.0, 0.5], jnp.bfloat16),
          "f32": jnp.asarray([1e-3], jnp.float32)}
  exact = 256.0 + 1.5 + float(np.float32(1e-3))
  total = steadax.tree.sum(tree)
  assert total.dtype == jnp.float32
  np.testing.assert_allclose(float(total), exact, rtol=1e-7)
  b16 = {"big": tree["big"], "small": tree["small"]}
  assert float(steadax.tree.sum(b16)) == 257.5 and steadax.tree.sum(b16).dtype == jnp.float32
  assert float(steadax.tree.vdot(b16, b16)) == 256.0**2 + 1.25
  np.testing.assert_allclose(float(steadax.tree.norm(b16)), np.sqrt(256.0**2 + 1.25), rtol=1e-7)
  assert float(steadax.tree.norm(b16, ord=1)) == 257.5
  assert steadax.tree.max(b16).dtype == jnp.float32
  # Integer trees reduce exactly in integers.
  ints = {"a": jnp.arange(4, dtype=jnp.int32), "b": jnp.ones(2, bool)}
  assert int(steadax.tree.sum(ints)) == 8 and jnp.issubdtype(steadax.tree.sum(ints).dtype, jnp.integer)


@pytest.mark.skipif(not X64, reason="float64 leaves exist only with x64")
def test_reductions_keep_float64_when_present():
  tree = {"a": jnp.asarray([1.0 + 2**-40], jnp.float64), "b": jnp.asarray([1.0], jnp.bfloat16)}
  assert steadax.tree.sum(tree).dtype == jnp.float64
  assert float(steadax.tree.sum(tree)) == 2.0 + 2**-40
  assert steadax.tree.vdot(tree, tree).dtype == jnp.float64


@pytest.mark.skipif(not X64, reason="float64 leaves exist only with x64")
def test_max_min_without_elements_keep_the_reduction_dtype():
  # Regression: a float64 tree whose leaves are all zero-size gave a float32 -inf while the same
  # tree with elements gives a float64 maximum (the dtype depended on the leaves' sizes).
  empty = {"a": jnp.zeros((0,), jnp.float64), "b": jnp.zeros((2, 0), jnp.float32)}
  assert steadax.tree.max(empty).dtype == jnp.float64 and float(steadax.tree.max(empty)) == -np.inf
  assert steadax.tree.min(empty).dtype == jnp.float64 and float(steadax.tree.min(empty)) == np.inf
  full = {"a": jnp.ones((1,), jnp.float64), "b": jnp.zeros((2, 0), jnp.float32)}
  assert steadax.tree.max(full).dtype == steadax.tree.max(empty).dtype
  # An integer tree without elements has no integer infinity: the floating reduction dtype.
  assert steadax.tree.max({"a": jnp.zeros((0,), jnp.int32)}).dtype == jnp.float32


def test_empty_trees_and_zero_size_leaves():
  assert float(steadax.tree.sum({})) == 0.0
  assert float(steadax.tree.norm({})) == 0.0
  assert float(steadax.tree.norm({"a": jnp.zeros(0)}, ord="inf")) == 0.0
  assert float(steadax.tree.max({"a": jnp.zeros(0)})) == -np.inf
  assert float(steadax.tree.max({"a": jnp.zeros(0), "b": jnp.asarray([2.0])})) == 2.0
  assert float(steadax.tree.vdot({}, {})) == 0.0
  assert steadax.tree.size({}) == 0
  assert bool(steadax.tree.allclose({}, {}))


def test_reductions_are_jittable_and_differentiable():
  norm = jax.jit(steadax.tree.norm, static_argnames=("ord", "squared"))
  np.testing.assert_allclose(float(norm(X)), float(ref(optax.tree.norm, X)), rtol=1e-6)
  grad = jax.grad(lambda t: steadax.tree.vdot(t, Y))(X)
  assert_trees_close(grad, Y)
  assert bool(jax.jit(steadax.tree.allclose)(X, X))
  # Not only True: a jitted allclose that ignored its inputs would pass the line above.
  assert not bool(jax.jit(steadax.tree.allclose)(X, steadax.tree.add_scale(X, 1.0, X)))


# ------------------------------------------------------------------------------ random trees


def test_random_trees_match_optax_draws():
  key = jax.random.key(3)
  target = {"a": jnp.zeros(3), "b": jnp.zeros((2, 2), jnp.bfloat16)}
  assert_trees_close(steadax.tree.random_like(key, target), ref(optax.tree.random_like, key, target))
  ours = steadax.tree.random_like(key, target, sampler=jax.random.uniform, dtype=jnp.float32)
  theirs = ref(optax.tree.random_like, key, target, sampler=jax.random.uniform, dtype=jnp.float32)
  assert_trees_close(ours, theirs)
  keys = steadax.tree.split_key_like(key, target)
  assert_trees_close(steadax.tree.unwrap_random_key_data(keys),
                     optax.tree.unwrap_random_key_data(optax.tree.split_key_like(key, target)))
  assert steadax.tree.random_like(key, target)["b"].dtype == jnp.bfloat16


# ------------------------------------------------------------------------------ errors


def test_structure_mismatch_names_the_function_and_path():
  with pytest.raises(ValueError, match=r"add: `tree_y` .*missing \[\"\['b'\]"):
    steadax.tree.add({"a": jnp.ones(1), "b": jnp.ones(1)}, {"a": jnp.ones(1)})
  with pytest.raises(ValueError, match=r"vdot: .*unexpected"):
    steadax.tree.vdot({"a": jnp.ones(1)}, {"a": jnp.ones(1), "z": jnp.ones(1)})
  with pytest.raises((TypeError, ValueError), match=r"mul: at \['w'\]\[1\]"):
    steadax.tree.mul({"w": [jnp.ones(2), jnp.ones(2)]}, {"w": [jnp.ones(2), jnp.ones(3)]})
  with pytest.raises(ValueError, match=r"vdot: at \['w'\]: leaf shapes differ"):
    steadax.tree.vdot({"w": jnp.ones(2)}, {"w": jnp.ones((1, 2))})
  with pytest.raises(ValueError, match=r"dtype: .*\['b'\] has bfloat16"):
    steadax.tree.dtype({"a": jnp.zeros(1), "b": jnp.zeros(1, jnp.bfloat16)})
  with pytest.raises(ValueError, match="dtype: bfloat16 and float16 are not ordered"):
    steadax.tree.dtype({"a": jnp.zeros(1, jnp.bfloat16), "b": jnp.zeros(1, jnp.float16)}, "highest")
  with pytest.raises(ValueError, match="dtype: invalid `mixed_dtype_handler`"):
    steadax.tree.dtype(X, "widest")
  with pytest.raises(ValueError, match="norm: unsupported `ord`=3"):
    steadax.tree.norm(X, ord=3)
  with pytest.raises(TypeError, match="where: `condition` must be boolean"):
    steadax.tree.where(jnp.asarray(0.5), X, Y)
  with pytest.raises(TypeError, match="where: `condition` must be a boolean scalar or array"):
    steadax.tree.where({"a": True}, X, Y)
  with pytest.raises(TypeError, match="scale: `scalar` must be a scalar"):
    steadax.tree.scale("2", X)
  with pytest.raises(TypeError, match="max: complex leaves"):
    steadax.tree.max(complex_tree(0))
