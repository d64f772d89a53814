"""masked, partition / multi_transform, freeze, selective_transform: Optax agreement, masks, errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.core import FrozenDict

import steadax

X64 = bool(jax.config.jax_enable_x64)


def _params():
  p = {
      "dense": {"w": jnp.array([[0.5, -1.0], [0.25, 2.0]], jnp.float32), "b": jnp.array([0.1, -0.2], jnp.float32)},
      "norm": {"scale": jnp.array([1.0, 0.5, -0.5], jnp.bfloat16)},
      "head": jnp.array([0.3, -0.7, 1.1], jnp.float32),
  }
  if X64:
    p["f64"] = jnp.array([0.9, -0.3], jnp.float64)
  return p


def _grads(p, i):
  return jax.tree_util.tree_map(lambda x: (x * jnp.asarray(0.5, x.dtype) - 0.1 * (i + 1)).astype(x.dtype), p)


def _run(tx, mod, params, steps=3):
  state = tx.init(params)
  for i in range(steps):
    updates, state = tx.update(_grads(params, i), state, params)
    params = mod.apply_updates(params, updates)
  return params, state


def _assert_close(ours, theirs, atol=1e-6):
  a_leaves, a_def = jax.tree_util.tree_flatten(ours)
  b_leaves, b_def = jax.tree_util.tree_flatten(theirs)
  # Same layout (NamedTuple classes differ between the libraries, their names do not).
  assert str(a_def) == str(b_def), f"\n{a_def}\n{b_def}"
  for a, b in zip(a_leaves, b_leaves):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-5, atol=atol)


def _compare(make, atol=1e-6, params=None):
  params = _params() if params is None else params
  ours = _run(make(steadax), steadax, params)
  with jax.numpy_dtype_promotion("standard"):
    theirs = _run(make(optax), optax, params)
  _assert_close(ours[1], theirs[1], atol)
  # Optax casts some bfloat16 updates up; params compare in float64 either way.
  _assert_close(ours[0], theirs[0], max(atol, 1e-2 if any(
      x.dtype == jnp.bfloat16 for x in jax.tree_util.tree_leaves(params)) else atol))


def _ndim2(tree):
  return jax.tree_util.tree_map(lambda x: x.ndim == 2, tree)


def _label_fn(tree):
  return jax.tree_util.tree_map(lambda x: "adam" if x.ndim == 2 else "sgd", tree)


LABELS_PREFIX = {"dense": "adam", "norm": "sgd", "head": "sgd", **({"f64": "adam"} if X64 else {})}


@pytest.mark.parametrize("name, make", [
    ("masked_tree", lambda o: o.masked(o.adam(0.1), {"dense": {"w": True, "b": False}, "norm": False,
                                                      "head": True, **({"f64": True} if X64 else {})})),
    ("masked_prefix", lambda o: o.masked(o.adam(0.1), {"dense": True, "norm": False, "head": False,
                                                        **({"f64": True} if X64 else {})})),
    ("masked_callable", lambda o: o.masked(o.adam(0.1), _ndim2)),
    ("masked_single_bool", lambda o: o.masked(o.sgd(0.1), True)),
    ("partition_prefix", lambda o: o.partition({"adam": o.adam(0.1), "sgd": o.sgd(0.2)}, LABELS_PREFIX)),
    ("partition_callable_unused_label", lambda o: o.partition(
        {"adam": o.adam(0.1), "sgd": o.sgd(0.2), "unused": o.adamw(1.0)}, _label_fn)),
    ("multi_transform", lambda o: o.multi_transform({"adam": o.adam(0.1), "sgd": o.sgd(0.2)}, _label_fn)),
    ("freeze", lambda o: o.chain(o.freeze({"dense": {"w": True, "b": False}, "norm": True, "head": False,
                                            **({"f64": False} if X64 else {})}), o.sgd(0.1))),
    ("selective_transform", lambda o: o.selective_transform(
        o.adam(0.1), freeze_mask={"dense": False, "norm": True, "head": False, **({"f64": True} if X64 else {})})),
])
def test_agrees_with_optax(name, make):
  _compare(make)


def test_partition_state_layout_and_aliases():
  params = _params()
  tx = steadax.partition({"adam": steadax.adam(0.1), "sgd": steadax.sgd(0.1), "none": steadax.adam(0.1)}, _label_fn)
  state = tx.init(params)
  assert isinstance(state, steadax.PartitionState) and steadax.MultiTransformState is steadax.PartitionState
  assert sorted(state.inner_states) == ["adam", "none", "sgd"]
  mu = state.inner_states["adam"].inner_state[0].mu
  assert isinstance(mu["head"], steadax.MaskedNode) and mu["dense"]["w"].shape == (2, 2)
  # An unused label's state holds no parameter-sized leaf.
  assert all(np.size(x) <= 1 for x in jax.tree_util.tree_leaves(state.inner_states["none"]))
  assert steadax.transforms.partition is steadax.partition
  assert steadax.transforms.PartitionState is steadax.PartitionState


def test_missing_label_names_the_path():
  params = _params()
  labels = {**LABELS_PREFIX, "head": "lion"}
  tx = steadax.partition({"adam": steadax.adam(0.1), "sgd": steadax.sgd(0.1)}, labels)
  with pytest.raises(ValueError, match=r"partition: .*\['head'\].*'lion'.*'adam', 'sgd'"):
    tx.init(params)
  good = steadax.partition({"adam": steadax.adam(0.1), "sgd": steadax.sgd(0.1)}, LABELS_PREFIX)
  state = good.init(params)
  bad = steadax.partition({"adam": steadax.adam(0.1), "sgd": steadax.sgd(0.1)}, lambda t: {**LABELS_PREFIX, "head": 3})
  with pytest.raises(ValueError, match=r"\['head'\] have label 3"):
    bad.update(params, state, params)


def test_mask_key_mismatch_names_the_path():
  mask = {"dense": {"w": True}, "norm": False, "head": True, **({"f64": True} if X64 else {})}
  tx = steadax.masked(steadax.sgd(0.1), mask)
  with pytest.raises(ValueError, match=r"masked: `mask` does not match the parameters at \['dense'\]: no entry for 'b'"):
    tx.init(_params())


@pytest.mark.parametrize("params_frozen", [True, False])
def test_frozendict_and_dict_masks_interchange(params_frozen):
  params = {"a": {"w": jnp.ones(2)}, "b": jnp.ones(1)}
  mask = {"a": {"w": True}, "b": False}
  if params_frozen:
    params = FrozenDict(params)
  else:
    mask = FrozenDict(mask)
  for tx in (steadax.masked(steadax.scale(-2.0), mask),
             steadax.partition({True: steadax.scale(-2.0), False: steadax.identity()}, mask)):
    updates, _ = tx.update(params, tx.init(params), params)
    assert type(updates) is type(params)
    np.testing.assert_array_equal(updates["a"]["w"], -2 * np.ones(2))
    np.testing.assert_array_equal(updates["b"], np.ones(1))


def test_masked_extra_args_with_the_updates_structure_are_masked():
  seen = {}

  def record(updates, state, params=None, **extra):
    seen.update(extra)
    return updates, state

  inner = steadax.GradientTransformationExtraArgs(lambda p: steadax.EmptyState(), record)
  params = {"a": jnp.ones(1), "b": jnp.ones(2)}
  for flag in (False, True):
    tx = steadax.masked(inner, {"a": True, "b": False}, mask_compatible_extra_args=flag)
    tx.update(params, tx.init(params), params, grad=params, value=jnp.ones([]))
    assert isinstance(seen["grad"]["b"], steadax.MaskedNode) == flag
    assert seen["value"].shape == ()


def test_state_types_exact_with_mixed_precision_under_scan():
  params = {**_params(), "f16": jnp.array([0.2, -0.1], jnp.float16), "none": None}
  labels = lambda t: jax.tree_util.tree_map(lambda x: "adam" if x.dtype == jnp.float32 else "low", t)  # noqa: E731
  tx = steadax.chain(
      steadax.masked(steadax.scale_by_adam(mu_dtype=jnp.bfloat16), _ndim2),
      steadax.partition({"adam": steadax.adam(0.1), "low": steadax.sgd(0.1, momentum=0.9)}, labels),
  )
  state = tx.init(params)

  @jax.jit
  def run(params, state):
    def body(carry, _):
      p, s = carry
      u, s = tx.update(_grads(p, 0), s, p)
      return (steadax.apply_updates(p, u), s), u
    return jax.lax.scan(body, (params, state), None, length=3)

  (new_params, new_state), updates = run(params, state)
  for a, b in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(new_state)):
    assert (a.dtype, a.shape) == (b.dtype, b.shape)
    assert not b.aval.weak_type
  assert jax.tree_util.tree_structure(state) == jax.tree_util.tree_structure(new_state)
  for p, q in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(new_params)):
    assert p.dtype == q.dtype
    assert not np.array_equal(np.asarray(p, np.float32), np.asarray(q, np.float32))


def test_tree_map_params_sees_through_masked_and_partition():
  params = _params()
  tx = steadax.chain(steadax.masked(steadax.adam(0.1), _ndim2),
                     steadax.partition({"adam": steadax.adam(0.1), "sgd": steadax.sgd(0.1)}, LABELS_PREFIX))
  state = tx.init(params)
  shapes = steadax.tree.map_params(tx, lambda x: x.shape, state, transform_non_params=lambda _: None)
  mu = shapes[1].inner_states["adam"].inner_state[0].mu
  assert mu["dense"]["w"] == (2, 2) and mu["head"] == steadax.MaskedNode()
  assert shapes[1].inner_states["adam"].inner_state[0].count is None
  # With a tree of the parameters' structure (specs, say), masked-out leaves arrive as MaskedNode.
  specs = jax.tree_util.tree_map(lambda x: f"spec{x.ndim}", params)
  labelled = steadax.tree.map_params(
      tx, lambda x, spec: x if isinstance(x, steadax.MaskedNode) else spec, state, specs,
      is_leaf=lambda x: isinstance(x, steadax.MaskedNode))
  nu = labelled[0].inner_state[0].nu
  assert nu["dense"]["w"] == "spec2" and isinstance(nu["head"], steadax.MaskedNode)


def test_selective_transform_holds_no_state_for_frozen_parameters():
  params = _params()
  mask = {"dense": True, "norm": False, "head": True, **({"f64": False} if X64 else {})}
  tx = steadax.selective_transform(steadax.adam(0.1), freeze_mask=mask)
  state = tx.init(params)
  mu = state.inner_states["train"].inner_state[0].mu
  assert isinstance(mu["dense"], steadax.MaskedNode) and isinstance(mu["head"], steadax.MaskedNode)
  updates, _ = tx.update(_grads(params, 0), state, params)
  assert np.all(np.asarray(updates["dense"]["w"]) == 0)
  assert np.all(np.asarray(updates["norm"]["scale"], np.float32) != 0)
