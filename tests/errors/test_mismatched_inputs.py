"""Each mistake gets its own error (issue 35 §3): a gradient of another shape than its parameter,
and a mask or label function returning a tree that does not match the parameters.

Everything here is decided at trace time from shapes and tree structures, so the update checks run
under ``jax.eval_shape``: nothing is compiled.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest

import steadax
from steadax._core._leafwise import leafwise, tree_reduce

_PARAMS = {"w": jnp.ones(2), "b": jnp.ones(3)}

# Shapes that broadcast against the parameter's (2,): the maths would run and return another
# shape, so before the shape check this was the optimizer's ContractError.
_BROADCASTING = [(4, 2), (1,), (), (3, 1)]


def _update_types(tx, grads, params):
  state = jax.eval_shape(tx.init, _PARAMS)
  return jax.eval_shape(lambda g, s, p: tx.update(g, s, p), grads, state, params)


@pytest.mark.parametrize("shape", _BROADCASTING, ids=str)
@pytest.mark.parametrize("with_params", [True, False], ids=["params", "no params"])
@pytest.mark.parametrize("name, make", [
    ("adam", lambda: steadax.adam(1e-3)),
    ("adamw", lambda: steadax.adamw(1e-3)),
    ("sgd momentum", lambda: steadax.sgd(0.1, momentum=0.9)),
    ("lion", lambda: steadax.lion(1e-4)),
    ("rmsprop", lambda: steadax.rmsprop(1e-3)),
    ("prodigy", lambda: steadax.contrib.prodigy()),
    ("MultiSteps", lambda: steadax.MultiSteps(steadax.adam(1e-3), 2)),
])
def test_a_gradient_of_another_shape_is_the_callers_mismatch(name, make, with_params, shape):
  grads = {"w": jax.ShapeDtypeStruct(shape, jnp.float32), "b": jax.ShapeDtypeStruct((3,), jnp.float32)}
  params = _PARAMS if with_params else None
  with pytest.raises(steadax.InputMismatchError) as info:
    _update_types(make(), grads, params)
  message = str(info.value)
  # The gradient's shape and the one it should have, at the parameter's path; never the
  # optimizer's contract.
  assert f"at ['w'], the updates (gradients) have shape {shape}" in message, message
  assert re.search(r"(the params|state\.\w+) \(2,\)", message), message
  assert not isinstance(info.value, steadax.ContractError)
  # Optax's types for a gradient that does not fit (JAX raises TypeError or ValueError there).
  assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)


def test_the_message_for_the_issues_example():
  tx = steadax.adam(1e-3)
  state = tx.init({"w": jnp.ones(2)})
  with pytest.raises(steadax.InputMismatchError, match=re.escape(
      "chain > scale_by_adam: at ['w'], the updates (gradients) have shape (4, 2), state.mu (2,).")):
    jax.eval_shape(tx.update, {"w": jnp.ones((4, 2))}, state)
  with pytest.raises(steadax.InputMismatchError, match=re.escape(
      "chain > scale_by_adam: at ['w'], the updates (gradients) have shape (4, 2), the params (2,).")):
    jax.eval_shape(tx.update, {"w": jnp.ones((4, 2))}, state, {"w": jnp.ones(2)})


def test_the_per_leaf_primitives_check_shapes_before_the_leaf_function():
  ran = []

  def leaf(k, g, *rest):
    ran.append(g.shape)
    return g

  with pytest.raises(steadax.InputMismatchError, match=re.escape(
      "mine: at ['w'], the updates (gradients) have shape (4, 2), the params (2,).")):
    leafwise("mine", leaf, {"w": jnp.ones((4, 2))}, params={"w": jnp.ones(2)})
  with pytest.raises(steadax.InputMismatchError, match=re.escape(
      "mine: at ['w'], the trees summed have shapes (2,), (4, 2).")):
    tree_reduce(lambda k, a, b: jnp.sum(a * b), jnp.float32, {"w": jnp.ones(2)}, {"w": jnp.ones((4, 2))},
                owner="mine")
  assert ran == []


_GOOD_SHAPES = {"w": jnp.ones(2), "b": {"c": jnp.ones(3)}}


@pytest.mark.parametrize("name, build", [
    ("masked, mask function", lambda m: steadax.masked(steadax.sgd(1.0), lambda p: m)),
    ("masked, mask tree", lambda m: steadax.masked(steadax.sgd(1.0), m)),
    ("adamw, mask function", lambda m: steadax.adamw(1e-3, mask=lambda p: m)),
    ("add_decayed_weights, mask function", lambda m: steadax.add_decayed_weights(1e-4, lambda p: m)),
    ("partition, label function", lambda m: steadax.partition(
        {True: steadax.sgd(1.0), False: steadax.set_to_zero()}, lambda p: m)),
    ("multi_transform, label function", lambda m: steadax.multi_transform(
        {True: steadax.sgd(1.0), False: steadax.set_to_zero()}, lambda p: m)),
    ("selective_transform, freeze mask", lambda m: steadax.selective_transform(
        steadax.sgd(1.0), freeze_mask=lambda p: m)),
])
@pytest.mark.parametrize("mask, detail", [
    ({"w": True, "b": [True]}, "at ['b']: it has a list of 1 entry there, the parameters a dict with keys 'c'."),
    ({"w": True, "b": (True, False)},
     "at ['b']: it has a tuple of 2 entries there, the parameters a dict with keys 'c'."),
    ([True, False], "at <root>: it has a list of 2 entries there, the parameters a dict with keys 'b', 'w'."),
    ({"w": {"x": True}, "b": True}, "at ['w']: it has a dict with keys 'x' there, the parameters an array of shape (2,)."),
    ({"w": True}, "at <root>: no entry for 'b'."),
], ids=["list for a dict", "tuple for a dict", "list at the root", "dict for an array", "missing key"])
def test_a_mask_or_labels_of_the_wrong_tree_name_the_path(name, build, mask, detail):
  tx = build(mask)
  with pytest.raises(ValueError) as info:
    jax.eval_shape(tx.init, _GOOD_SHAPES)
  message = str(info.value)
  assert message.endswith(detail), message
  assert "does not match the parameters" in message
  # A function's result is said to be one; JAX's own wording never shows through.
  assert ("the tree `" in message) == ("function" in name or "freeze mask" in name), message
  assert "pytree" not in message and "tree_map" not in message, message
