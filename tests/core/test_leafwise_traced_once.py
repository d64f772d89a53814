"""leafwise traces a leaf function once per leaf type (``Once``, ``_core/_reuse.py``): the calls it
saves, that a reused trace still computes each leaf from its own inputs and the current (traced)
hyperparameters, and that a leaf function reading per-leaf data from its closure is never reused."""

import jax
import jax.numpy as jnp
import numpy as np

import steadax
from steadax._core._leafwise import Scalars, leafwise


# The leaf functions record their calls through a module-level function: leafwise takes the
# functions a leaf function calls as code, while a list the leaf function itself captured and
# changed would make it trace every leaf (see test_per_leaf_data_in_a_closure_is_never_reused).
calls: list = []


def _called(shape):
  calls.append(shape)


def test_a_leaf_function_is_traced_once_per_leaf_type():
  calls.clear()

  def leaf(k, g, m):
    _called(g.shape)
    m = k.decay * m + g
    return k.lr * m, m

  grads = {f"w{i}": jnp.full((3, 2), float(i)) for i in range(6)} | {"b": jnp.ones(5)}
  moments = jax.tree_util.tree_map(jnp.ones_like, grads)

  @jax.jit
  def step(g, m, lr):
    return leafwise("t", leaf, g, m, scalars=Scalars(decay=0.5, lr=lr))

  out, new_m = step(grads, moments, jnp.float32(-0.1))
  # One direct trace per type met, one more for the reused trace of (3, 2): 3, not 7.
  assert sorted(calls) == [(3, 2), (3, 2), (5,)]
  calls.clear()
  eager_out, eager_m = leafwise("t", leaf, grads, moments, scalars=Scalars(decay=0.5, lr=-0.25))
  assert len(calls) == 7  # eagerly: every leaf runs the function (nothing is traced to reuse)
  traced_out, _ = step(grads, moments, jnp.float32(-0.25))  # a new traced lr: no retrace
  for name in grads:
    # Each reused leaf computed from its own gradient and moment, and the lr passed this call.
    np.testing.assert_array_equal(np.asarray(traced_out[name]), np.asarray(eager_out[name]))
    np.testing.assert_array_equal(np.asarray(new_m[name]), np.asarray(eager_m[name]))


def test_an_optimizer_on_repeated_shapes_equals_its_eager_steps():
  # Adam's traced bias corrections and an injected learning rate reach every reused leaf.
  params = {f"layer{i}": {"w": jnp.full((4, 4), 0.1 * i), "b": jnp.full(4, -0.2 * i)} for i in range(5)}
  tx = steadax.inject_hyperparams(steadax.adamw)(learning_rate=0.05, weight_decay=0.01)
  grads = jax.tree_util.tree_map(lambda p: jnp.sin(p + 1.0), params)
  state_jit = state_eager = tx.init(params)
  step = jax.jit(tx.update)
  for _ in range(3):
    u_jit, state_jit = step(grads, state_jit, params)
    u_eager, state_eager = tx.update(grads, state_eager, params)
    for a, b in zip(jax.tree_util.tree_leaves(u_jit), jax.tree_util.tree_leaves(u_eager)):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-9)


_SCALES = (1.0, 2.0, 3.0, 4.0)


def _counter_in_a_cell():
  i = -1

  def leaf(k, g):
    nonlocal i
    i += 1
    return g * _SCALES[i]

  return leaf


def _index_in_a_list():
  index = [-1]

  def leaf(k, g):
    index[0] += 1
    return g * _SCALES[index[0]]

  return leaf


def _iterator():
  scales = iter(_SCALES)
  return lambda k, g: g * next(scales)


_global_scales = iter(())


def _global_iterator(k, g):
  return g * next(_global_scales)


def test_per_leaf_data_in_a_closure_is_never_reused():
  """A leaf function reading per-leaf data from its closure (a counter it advances, a list it
  changes, an iterator, a global iterator) gets each leaf's own value: leafwise does not reuse
  the first leaf's trace for it (the reuse would give every later leaf of the same type the value
  read while tracing)."""
  global _global_scales
  grads = {f"w{i}": jnp.ones(2) for i in range(4)}
  for make in (_counter_in_a_cell, _index_in_a_list, _iterator, lambda: _global_iterator):
    _global_scales = iter(_SCALES)
    out = jax.jit(lambda g, fn=make(): leafwise("t", fn, g)[0])(grads)
    assert [float(out[f"w{i}"][0]) for i in range(4)] == list(_SCALES), make


def test_constants_in_a_closure_keep_the_reuse():
  """Captured configuration (numbers, a Module, a tuple, a dict of arrays, a helper closure) does
  not change between leaves: the later leaves are calls of one trace."""
  factor, config, table = 2.0, steadax.scale(3.0), {"w": jnp.ones(2)}
  helper = lambda x: x * factor  # noqa: E731

  def leaf(k, g):
    return helper(g) * config.step_size + table["w"] * 0.0

  grads = {f"w{i}": jnp.ones(2) for i in range(4)}
  jaxpr = str(jax.make_jaxpr(lambda g: leafwise("t", leaf, g)[0])(grads))
  assert jaxpr.count("jit[") == 3, jaxpr  # leaves 2, 3 and 4 call the trace of leaf 2
  out = jax.jit(lambda g: leafwise("t", leaf, g)[0])(grads)
  assert all(float(v[0]) == 6.0 for v in out.values())
