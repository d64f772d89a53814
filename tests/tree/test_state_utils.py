"""get / get_all_with_path / set / map_params on steadax states and transformations, against Optax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax

PARAMS = {"w": jnp.zeros(2), "b": jnp.zeros(1)}
keystr = jax.tree_util.keystr


def paths(found):
  return [keystr(p) for p, _ in found]


def assert_same_tree(a, b):
  """Equal paths and leaves; the NamedTuple classes differ between the libraries, their names do not."""
  fa, fb = (jax.tree_util.tree_flatten_with_path(t)[0] for t in (a, b))
  assert [keystr(p) for p, _ in fa] == [keystr(p) for p, _ in fb]
  assert type(a).__name__ == type(b).__name__
  for (_, x), (_, y) in zip(fa, fb):
    if isinstance(x, (str, tuple)):
      assert x == y
    else:
      # Under x64 Optax keeps Python hyperparameters in float64, steadax in float32 (its policy).
      np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-7)


def both(build):
  """The same construction in steadax and in Optax, initialised on PARAMS."""
  with jax.numpy_dtype_promotion("standard"):
    theirs = build(optax).init(PARAMS)
  return build(steadax).init(PARAMS), theirs


STATES = {
    "adam": lambda lib: lib.adam(0.1),
    "inject_adam": lambda lib: lib.inject_hyperparams(lib.adam)(learning_rate=0.1),
    "chain": lambda lib: lib.chain(lib.trace(0.9), lib.scale_by_adam(), lib.scale_by_schedule(lambda c: 0.1)),
}


@pytest.mark.parametrize("state_name", sorted(STATES))
@pytest.mark.parametrize("key", ["count", "mu", "nu", "learning_rate", "trace", "ScaleByAdamState", "nothing"])
def test_get_all_with_path_finds_what_optax_finds(state_name, key):
  ours, theirs = both(STATES[state_name])
  found, expected = steadax.tree.get_all_with_path(ours, key), optax.tree.get_all_with_path(theirs, key)
  assert paths(found) == paths(expected)
  for (_, a), (_, b) in zip(found, expected):
    assert_same_tree(a, b)


def test_filtering_by_named_tuple_key_tells_equal_names_apart():
  state, _ = both(STATES["chain"])
  with pytest.raises(KeyError, match=r"get: found 2 values for 'count'"):
    steadax.tree.get(state, "count")
  only_adam = lambda path, value: isinstance(path[-1], steadax.tree_utils.NamedTupleKey) and (
      path[-1].tuple_name == "ScaleByAdamState")
  assert steadax.tree.get(state, "count", filtering=only_adam) is state[1].count
  assert steadax.tree.get(state, "missing", default="fallback") == "fallback"
  assert str(steadax.tree_utils.NamedTupleKey("ScaleByAdamState", "mu")) == "ScaleByAdamState.mu"


def test_set_replaces_hyperparameters_and_the_state_still_updates():
  tx = steadax.inject_hyperparams(steadax.adam)(learning_rate=0.1)
  state = tx.init(PARAMS)
  state = steadax.tree.set(state, learning_rate=jnp.asarray(0.01, jnp.float32))
  assert float(steadax.tree.get(state, "learning_rate")) == pytest.approx(0.01)
  grads = {"w": jnp.ones(2), "b": jnp.ones(1)}
  updates, new_state = tx.update(grads, state, PARAMS)   # strict contract: structure and dtypes kept
  np.testing.assert_allclose(updates["w"], -0.01 * np.ones(2), rtol=1e-4)
  assert float(steadax.tree.get(new_state, "learning_rate")) == pytest.approx(0.01)


def test_set_matches_optax_on_single_matches_and_with_filtering():
  ours, theirs = both(STATES["chain"])
  only_trace = lambda path, value: path[-1].tuple_name == "TraceState"
  new_ours = steadax.tree.set(ours, only_trace, trace={"w": jnp.ones(2), "b": jnp.ones(1)})
  with jax.numpy_dtype_promotion("standard"):
    new_theirs = optax.tree.set(theirs, only_trace, trace={"w": jnp.ones(2), "b": jnp.ones(1)})
  assert_same_tree(new_ours, new_theirs)
  replaced = steadax.tree.set(ours, ScaleByAdamState="whole record")
  assert replaced[1] == "whole record" and replaced[0] is ours[0]
  with pytest.raises(KeyError, match=r"set: found no value named 'absent'"):
    steadax.tree.set(ours, absent=1)
  with pytest.raises(KeyError, match="satisfying `filtering`"):
    steadax.tree.set(ours, lambda p, v: False, count=1)


def test_set_replaces_every_match_that_get_all_with_path_finds():
  # Optax 0.2.8 leaves the inner count of inject_hyperparams's state unchanged; steadax replaces it.
  state = steadax.inject_hyperparams(steadax.adam)(learning_rate=0.1).init(PARAMS)
  seven = jnp.asarray(7, jnp.int32)
  new = steadax.tree.set(state, count=seven)
  assert [int(v) for _, v in steadax.tree.get_all_with_path(new, "count")] == [7, 7]


def test_get_and_set_reach_hyperparameters_inside_transformations():
  tx = steadax.adam(0.1)
  assert paths(steadax.tree.get_all_with_path(tx, "learning_rate")) == [".transforms[1].learning_rate"]
  faster = steadax.tree.set(tx, learning_rate=0.5)
  assert steadax.tree.get(faster, "learning_rate") == 0.5
  assert steadax.tree.get(tx, "learning_rate") == 0.1      # a copy, the original is untouched
  # Same compiled step, new learning rate: the transformation is a pytree whose leaf changed.
  step = jax.jit(lambda t, g, s: t.update(g, s, PARAMS)[0])
  g = {"w": jnp.ones(2), "b": jnp.ones(1)}
  slow, fast = step(tx, g, tx.init(PARAMS)), step(faster, g, faster.init(PARAMS))
  np.testing.assert_allclose(fast["w"], 5 * slow["w"], rtol=1e-5)


@pytest.mark.parametrize("state_name", sorted(STATES))
def test_map_params_matches_optax(state_name):
  ours, theirs = both(STATES[state_name])
  with jax.numpy_dtype_promotion("standard"):
    tx_theirs = STATES[state_name](optax)
  shape_of = lambda x, spec: (x.shape, spec)
  specs = {"w": "row", "b": "bias"}
  mapped = steadax.tree_map_params(STATES[state_name](steadax), shape_of, ours, specs,
                                   transform_non_params=lambda _: "other")
  expected = optax.tree_map_params(tx_theirs, shape_of, theirs, specs,
                                   transform_non_params=lambda _: "other")
  assert_same_tree(mapped, expected)
  assert steadax.tree.get(mapped, "mu")["w"] == ((2,), "row")
  assert {v for _, v in steadax.tree.get_all_with_path(mapped, "count")} == {"other"}


def test_map_params_with_an_init_function_and_bad_arguments():
  tx = steadax.sgd(0.1, momentum=0.9)
  state = tx.init(PARAMS)
  doubled = steadax.tree.map_params(tx.init, lambda x: 2 * x + 1, state)
  np.testing.assert_array_equal(steadax.tree.get(doubled, "trace")["w"], np.ones(2))
  with pytest.raises(TypeError, match="tree_map_params: `initable`"):
    steadax.tree.map_params(3, lambda x: x, state)


def test_map_params_treats_fused_buffers_as_non_parameters():
  # fuse's buffers depend on the parameters' shapes, which the marker standing in for them does not
  # have: the marker's state has no buffers at all. They are flat buffers, not parameter-shaped
  # trees, so they go to transform_non_params; the unfused part of a chain maps as usual.
  tx = steadax.chain(steadax.trace(0.9), steadax.fuse(steadax.adam(0.1)))
  params = {"w": jnp.zeros(2, jnp.float32), "b": jnp.zeros(1, jnp.float32)}  # in both x64 modes
  state = tx.init(params)
  mapped = steadax.tree_map_params(tx, lambda x: ("param", x.shape), state,
                                   transform_non_params=lambda x: ("other", x.shape))
  assert mapped[0].trace == {"w": ("param", (2,)), "b": ("param", (1,))}
  fused_mu = mapped[1].inner_state[0].mu
  assert fused_mu == {"float32": ("other", (3,))}
  assert mapped[1].inner_state[0].count == ("other", ())


def test_map_params_names_where_the_state_does_not_match():
  state = steadax.chain(steadax.trace(0.9), steadax.adam(0.1)).init(PARAMS)
  with pytest.raises(ValueError, match=r"tree_map_params: `state` does not have the structure .* at \[1\]"):
    steadax.tree_map_params(steadax.chain(steadax.trace(0.9), steadax.sgd(0.1, momentum=0.9)),
                            lambda x: x, state)
  with pytest.raises(ValueError, match=r"tree_map_params: `state` does not have the structure .* at <root>: expected"):
    steadax.tree_map_params(steadax.adam(0.1), lambda x: x, jnp.zeros(2))
