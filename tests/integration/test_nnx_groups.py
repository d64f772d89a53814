"""Path-labelled groups, partitions and masks inside Flax NNX's ``nnx.Optimizer`` (issue 11).

``nnx.Optimizer`` calls ``tx.init`` on a state of ``Param`` variables (key paths ``l1.bias.value``)
and ``tx.update`` on their plain arrays (``l1.bias``). Labels and masks must come out the same in
both calls; a label function that labels them differently gets an error naming the path.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import steadax

_X = jnp.linspace(-1.0, 1.0, 15, dtype=jnp.float32).reshape(5, 3)
_Y = jnp.sum(_X, axis=1, keepdims=True) * 0.5 + 0.25


class _Model(nnx.Module):
  def __init__(self, rngs):
    self.l1 = nnx.Linear(3, 4, rngs=rngs)
    self.l2 = nnx.Linear(4, 1, rngs=rngs)

  def __call__(self, x):
    return self.l2(jnp.tanh(self.l1(x)))


def _is_bias(path) -> bool:
  return steadax.dotted_path(path).endswith("bias")


def _path_labels(tree):
  return jax.tree_util.tree_map_with_path(lambda p, _: "frozen" if _is_bias(p) else "train", tree)


def _bias_mask(tree):
  return jax.tree_util.tree_map_with_path(lambda p, _: _is_bias(p), tree)


# Each freezes the biases by path and trains the kernels with Adam.
TXS = {
    "groups": lambda: steadax.groups({"*.bias": steadax.set_to_zero(), "*": steadax.adam(0.05)}),
    "partition": lambda: steadax.partition(
        {"frozen": steadax.set_to_zero(), "train": steadax.adam(0.05)}, _path_labels),
    "masked": lambda: steadax.chain(steadax.adam(0.05), steadax.masked(steadax.set_to_zero(), _bias_mask)),
}


def _train(tx, steps=4):
  model = _Model(nnx.Rngs(0))
  before = jax.tree.map(jnp.copy, nnx.state(model, nnx.Param))
  optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)

  @nnx.jit
  def step(model, optimizer):
    loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(_X) - _Y) ** 2))(model)
    optimizer.update(model, grads)
    return loss

  losses = [float(step(model, optimizer)) for _ in range(steps)]
  return model, before, losses


@pytest.mark.x32_only
@pytest.mark.parametrize("name", sorted(TXS))
def test_path_labels_inside_nnx_optimizer(name):
  model, before, losses = _train(TXS[name]())
  assert losses[-1] < losses[0]
  for layer in ("l1", "l2"):
    np.testing.assert_array_equal(getattr(model, layer).bias[...], before[layer]["bias"][...])
    assert not np.array_equal(getattr(model, layer).kernel[...], before[layer]["kernel"][...])


@pytest.mark.x32_only
def test_group_labels_of_an_nnx_state_render_without_value():
  model = _Model(nnx.Rngs(0))
  labels = steadax.group_labels(["*.bias", "*"], nnx.state(model, nnx.Param))
  flat = {steadax.dotted_path(p): v for p, v in jax.tree_util.tree_flatten_with_path(labels)[0]}
  assert flat == {"l1.bias": "*.bias", "l1.kernel": "*", "l2.bias": "*.bias", "l2.kernel": "*"}


@pytest.mark.x32_only
def test_labels_that_differ_between_init_and_update_name_the_path():
  calls = []

  def labels(tree):  # labels "b" as "a" the first time only
    calls.append(None)
    return {"w": "a", "b": "a" if len(calls) == 1 else "b"}

  tx = steadax.partition({"a": steadax.adam(1e-3), "b": steadax.sgd(0.1)}, labels)
  params = {"w": jnp.ones(2), "b": jnp.ones(1)}
  state = tx.init(params)
  with pytest.raises(steadax.InputMismatchError) as info:
    tx.update(params, state, params)
  message = str(info.value)
  assert message.startswith("partition: the state of label 'a' does not fit the parameters"), message
  assert "only in state.mu: ['b']" in message
  assert "Labels at update: ['b'] -> 'b', ['w'] -> 'a'." in message
