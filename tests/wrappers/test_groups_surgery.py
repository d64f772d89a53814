"""groups (path patterns), dotted_path, reset_partition_state, state_get / state_set."""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.core import FrozenDict

import steadax

X64 = bool(jax.config.jax_enable_x64)


def _params():
  return {
      "encoder": {
          "layers": [
              {"w": jnp.array([[0.5, -1.0], [0.2, 0.3]], jnp.float32), "bias": jnp.array([0.1, -0.2], jnp.float32)},
              {"w": jnp.array([[0.4, 0.1], [-0.6, 1.0]], jnp.float32), "bias": jnp.array([0.3, 0.0], jnp.float32)},
          ],
          "layer_norm": {"scale": jnp.array([1.0, 0.5], jnp.bfloat16)},
      },
      "head": jnp.array([0.3, -0.7, 1.1], jnp.float32),
  }


PATTERNS = {"*.bias|*norm*": 0.0, "*": 0.1}


def _groups(lr=0.1):
  return steadax.groups({k: steadax.adamw(lr, weight_decay=wd) for k, wd in PATTERNS.items()})


class _Pair(NamedTuple):
  first: jax.Array
  second: jax.Array


class _Linear(eqx.Module):
  weight: jax.Array
  bias: jax.Array


def test_dotted_path_rendering():
  tree = {
      "dict": {"key": 1.0},
      "ints": {3: 2.0},
      "list": [3.0, (4.0,)],
      "pair": _Pair(5.0, 6.0),
      "module": _Linear(jnp.ones(1), jnp.ones(1)),
      "frozen": FrozenDict({"x": 7.0}),
  }
  paths = sorted(steadax.dotted_path(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0])
  assert paths == sorted([
      "dict.key", "ints.3", "list.0", "list.1.0", "pair.first", "pair.second",
      "module.weight", "module.bias", "frozen.x",
  ])
  assert steadax.dotted_path(()) == ""


def test_group_labels_first_match_wins():
  labels = steadax.group_labels(_groups(), _params())
  assert labels["encoder"]["layers"][1]["bias"] == "*.bias|*norm*"
  assert labels["encoder"]["layer_norm"]["scale"] == "*.bias|*norm*"
  assert labels["encoder"]["layers"][0]["w"] == "*" and labels["head"] == "*"
  # Order matters: the catch-all first takes everything.
  swapped = steadax.group_labels(["*", "*.bias"], _params())
  assert set(jax.tree_util.tree_leaves(swapped)) == {"*"}
  # A lone array has the empty path, which "*" matches.
  assert steadax.group_labels(["*"], jnp.ones(2)) == "*"


def test_unmatched_parameter_names_its_path():
  tx = steadax.groups({"*.bias": steadax.sgd(0.1), "encoder.*": steadax.sgd(0.1)})
  with pytest.raises(ValueError, match=r"groups: the parameter 'head' \(at \['head'\]\) matches no group"):
    tx.init(_params())
  with pytest.raises(ValueError, match="empty alternative"):
    steadax.groups({"*.bias|": steadax.sgd(0.1)})
  with pytest.raises(TypeError, match="pattern strings"):
    steadax.groups({1: steadax.sgd(0.1)})


def test_groups_agree_with_optax_partition():
  params = _params()
  labels = steadax.group_labels(_groups(), params)
  ours, theirs = _groups(), optax.partition(
      {k: optax.adamw(0.1, weight_decay=wd) for k, wd in PATTERNS.items()}, labels)
  p1, p2 = params, params
  s1 = ours.init(p1)
  with jax.numpy_dtype_promotion("standard"):
    s2 = theirs.init(p2)
  step = jax.jit(ours.update)
  for _ in range(3):
    u1, s1 = step(p1, s1, p1)
    p1 = steadax.apply_updates(p1, u1)
    with jax.numpy_dtype_promotion("standard"):
      u2, s2 = theirs.update(p2, s2, p2)
      p2 = optax.apply_updates(p2, u2)
  for a, b in zip(jax.tree_util.tree_leaves(p1), jax.tree_util.tree_leaves(p2)):
    assert a.dtype == b.dtype
    # Optax rounds bfloat16 moments differently in the last bit.
    atol = 1e-2 if a.dtype == jnp.bfloat16 else 2e-5
    np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), rtol=1e-5, atol=atol)
  # No weight decay on biases and norms: with a zero gradient their update is exactly zero.
  zero_grads = jax.tree_util.tree_map(jnp.zeros_like, params)
  u, _ = _groups().update(zero_grads, _groups().init(params), params)
  assert np.all(np.asarray(u["encoder"]["layers"][0]["bias"]) == 0)
  assert np.all(np.asarray(u["head"]) != 0)


def test_reset_partition_state_resets_one_group_jitted():
  params = _params()
  tx = steadax.chain(steadax.clip_by_global_norm(1.0), _groups())
  state = tx.init(params)
  step = jax.jit(tx.update)
  for _ in range(2):
    _, state = step(params, state, params)
  reset = jax.jit(lambda s, p: steadax.reset_partition_state(tx, s, p, "*"))(state, params)
  assert jax.tree_util.tree_structure(reset) == jax.tree_util.tree_structure(state)
  for a, b in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(reset)):
    assert (a.dtype, a.shape) == (b.dtype, b.shape)
  catch_all, biases = reset[1].inner_states["*"], reset[1].inner_states["*.bias|*norm*"]
  assert int(catch_all.inner_state[0].count) == 0
  assert np.all(np.asarray(catch_all.inner_state[0].mu["head"]) == 0)
  assert int(biases.inner_state[0].count) == 2
  assert np.all(np.asarray(biases.inner_state[0].mu["encoder"]["layers"][0]["bias"]) != 0)
  # The reset state goes back into the same compiled step.
  step(params, reset, params)
  assert step._cache_size() == 1
  with pytest.raises(KeyError, match=r"no partition of the state has the label .*nope"):
    steadax.reset_partition_state(tx, state, params, "nope")
  with pytest.raises(ValueError, match="does not have the structure"):
    steadax.reset_partition_state(tx, state[1], params, "*")


def test_state_get_and_set_by_name_and_label():
  params = _params()
  lr = steadax.inject_hyperparams(steadax.adam)
  tx = steadax.groups({"*.bias|*norm*": lr(learning_rate=0.01), "*": lr(learning_rate=0.1, b1=0.8)})
  state = tx.init(params)
  assert float(steadax.state_get(state, "learning_rate", label="*")) == pytest.approx(0.1)
  assert float(steadax.state_get(state, "b1", label="*")) == pytest.approx(0.8)
  mixed = steadax.groups({"*.bias|*norm*": steadax.adam(0.01), "*": lr(learning_rate=0.1)}).init(params)
  assert float(steadax.state_get(mixed, "learning_rate")) == pytest.approx(0.1)  # one group has it
  with pytest.raises(KeyError, match="2 entries are named .*learning_rate"):
    steadax.state_get(state, "learning_rate")
  with pytest.raises(KeyError, match="no entry is named .*nope"):
    steadax.state_get(state, "nope")
  assert steadax.state_get(state, "nope", default=None) is None
  mu = steadax.state_get(state, "mu", label="*")
  assert isinstance(mu["encoder"]["layers"][0]["bias"], steadax.MaskedNode)

  step = jax.jit(tx.update)
  _, state = step(params, state, params)
  # A float64 value under x64, a Python float otherwise: the entry stays float32.
  value = np.float64(0.5) if X64 else 0.5
  new_state = steadax.state_set(state, "learning_rate", value, label="*")
  for a, b in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(new_state)):
    assert (a.dtype, a.shape, bool(b.aval.weak_type)) == (b.dtype, b.shape, False)
  assert float(steadax.state_get(new_state, "learning_rate", label="*")) == 0.5
  assert float(steadax.state_get(new_state, "learning_rate", label="*.bias|*norm*")) == pytest.approx(0.01)
  step(params, new_state, params)
  assert step._cache_size() == 1
  everywhere = steadax.state_set(state, "learning_rate", 0.2)
  assert all(float(v) == pytest.approx(0.2) for _, v in steadax.tree.get_all_with_path(everywhere, "learning_rate"))
  with pytest.raises(ValueError, match=r"has shape \(\), the new value \(2,\)"):
    steadax.state_set(state, "learning_rate", jnp.ones(2), label="*")
  with pytest.raises(KeyError, match="no entry is named .*lr"):
    steadax.state_set(state, "lr", 0.1)


def test_state_set_keeps_subtree_types():
  params = _params()
  tx = _groups()
  state = tx.init(params)
  mu = steadax.state_get(state, "mu", label="*")
  ones = jax.tree_util.tree_map(lambda x: np.ones(x.shape, np.float64), mu)
  new_state = steadax.state_set(state, "mu", ones, label="*")
  new_mu = steadax.state_get(new_state, "mu", label="*")
  assert jax.tree_util.tree_structure(new_mu) == jax.tree_util.tree_structure(mu)
  for a, b in zip(jax.tree_util.tree_leaves(mu), jax.tree_util.tree_leaves(new_mu)):
    assert a.dtype == b.dtype and np.all(np.asarray(b, np.float32) == 1)
