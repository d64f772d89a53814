"""fuse as the libraries built on Optax use it: Flax NNX's Optimizer and an Equinox filter loop."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import steadax

pytestmark = pytest.mark.x32_only  # how the clients call init/update does not depend on x64


def test_nnx_optimizer_trains_with_a_fused_adamw_like_the_unfused_one():
  # NNX calls init on a state of Param variables and update on plain arrays: the layout must
  # see the same leaves in both calls.
  class Model(nnx.Module):
    def __init__(self, rngs):
      self.l1 = nnx.Linear(4, 8, rngs=rngs)
      self.l2 = nnx.Linear(8, 1, rngs=rngs)

    def __call__(self, x):
      return self.l2(jax.nn.relu(self.l1(x)))

  x = jnp.linspace(-1.0, 1.0, 32, dtype=jnp.float32).reshape(8, 4)
  y = jnp.sum(x, axis=1, keepdims=True)

  def train(tx):
    model = Model(nnx.Rngs(0))
    opt = nnx.Optimizer(model, tx, wrt=nnx.Param)

    @nnx.jit
    def step(model, opt):
      loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
      opt.update(model, grads)
      return loss

    return [float(step(model, opt)) for _ in range(4)], opt

  plain, _ = train(steadax.adamw(1e-2))
  fused, opt = train(steadax.fuse(steadax.adamw(1e-2)))
  np.testing.assert_allclose(fused, plain, rtol=1e-5)
  assert fused[-1] < fused[0]
  assert "float32: 4 leaves" in repr(opt.opt_state.layout)


def test_equinox_filter_jit_and_partition_over_a_fused_state():
  model = eqx.nn.MLP(3, 2, 8, 2, key=jax.random.PRNGKey(0))
  params, static = eqx.partition(model, eqx.is_inexact_array)
  tx = steadax.fuse(steadax.chain(steadax.clip_by_global_norm(1.0), steadax.adam(1e-2)))
  state = tx.init(params)
  x = jnp.ones((5, 3), jnp.float32)

  @eqx.filter_jit
  def step(params, state):
    loss, grads = eqx.filter_value_and_grad(
        lambda p: jnp.mean(jax.vmap(eqx.combine(p, static))(x) ** 2))(params)
    updates, state = tx.update(grads, state, params)
    return eqx.apply_updates(params, updates), state, loss

  losses = []
  for _ in range(3):
    params, new_state, loss = step(params, state)
    assert jax.tree_util.tree_structure(new_state) == jax.tree_util.tree_structure(state)
    state = new_state
    losses.append(float(loss))
  assert losses[-1] < losses[0]
  # The transformation itself is a pytree eqx can partition (no arrays in a fused layout).
  dynamic, _ = eqx.partition(state, eqx.is_array)
  assert len(jax.tree_util.tree_leaves(dynamic)) == 1 + 2 * 1  # count, mu and nu buffers
