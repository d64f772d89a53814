"""steadax the way Equinox-based libraries (Optimistix's OptaxMinimiser) use Optax."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax


class _Minimiser(eqx.Module):
  """Optimistix-style: the optimizer is a field of a Module, the loop runs under filter_jit."""

  optim: steadax.GradientTransformation
  rtol: float

  def run(self, fn, y0, steps):
    state = self.optim.init(y0)

    def body(carry, _):
      y, s = carry
      g = jax.grad(fn)(y)
      u, s = self.optim.update(g, s, y)
      return (eqx.apply_updates(y, u), s), fn(y)

    (y, _), losses = jax.lax.scan(body, (y0, state), None, length=steps)
    return y, losses


def _loss(y):
  return jnp.sum((y["a"] - 1.0) ** 2) + jnp.sum((y["b"] + 2.0) ** 2)


OPTIMS = {
    "adam": lambda: steadax.adam(0.1),
    "chain_schedule": lambda: steadax.chain(
        steadax.clip_by_global_norm(10.0), steadax.sgd(steadax.exponential_decay(0.1, 10, 0.9))),
    "def_schedule": lambda: steadax.sgd(lambda count: 0.1 * jnp.ones([], jnp.float32)),
    "inject": lambda: steadax.inject_hyperparams(steadax.adam)(learning_rate=0.1),
    "multisteps": lambda: steadax.MultiSteps(steadax.adam(0.1), 2),
}


@pytest.mark.x32_only
@pytest.mark.parametrize("name", sorted(OPTIMS))
def test_optimizer_in_module_under_filter_jit_and_partition(name):
  minimiser = _Minimiser(OPTIMS[name](), 1e-3)
  y0 = {"a": jnp.zeros(3), "b": jnp.zeros(2)}
  dynamic, static = eqx.partition(minimiser, eqx.is_array)
  assert jax.tree_util.tree_structure(eqx.combine(dynamic, static)) == jax.tree_util.tree_structure(minimiser)

  @eqx.filter_jit
  def solve(m, y0):
    return m.run(_loss, y0, 40)

  y, losses = solve(minimiser, y0)
  assert float(losses[-1]) < 0.2 * float(losses[0])
  # The same Module through filter_jit again: cached, not retraced.
  y2, _ = solve(minimiser, y0)
  np.testing.assert_allclose(y["a"], y2["a"])


@pytest.mark.x32_only
def test_new_learning_rate_does_not_recompile_under_filter_jit():
  traces = []

  @eqx.filter_jit
  def step(tx, params):
    traces.append(None)
    return tx.update(params, tx.init(params), params)[0]

  params = jnp.ones(2)
  # Hyperparameters given as arrays are dynamic for filter_jit (Python floats are static to it).
  step(steadax.adam(jnp.asarray(0.1)), params)
  step(steadax.adam(jnp.asarray(0.2)), params)
  assert len(traces) == 1


@pytest.mark.x32_only
def test_closure_to_pytree_of_an_update():
  tx = steadax.adam(0.1)
  params = jnp.ones(2)
  state = tx.init(params)
  fn = eqx.filter_closure_convert(lambda g: tx.update(g, state, params)[0], params)
  np.testing.assert_allclose(fn(params), tx.update(params, state, params)[0])
