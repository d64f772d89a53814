"""Seed failure #4 (issue 4): lbfgs with the zoom line search inside lax.scan under x64."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

import steadax


def _loss(params):
  total = jnp.zeros([], jnp.float32)
  for x in jax.tree_util.tree_leaves(params):
    total = total + jnp.sum((x.astype(jnp.float32) - 0.5) ** 2)
  return total


def _signature(tree):
  return [(jax.tree_util.keystr(path), np.shape(leaf), np.dtype(leaf.dtype),
           bool(getattr(getattr(leaf, "aval", leaf), "weak_type", False)))
          for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]]


def _scan_states(module, params, steps=4):
  """The optimizer state after every step of a jitted lax.scan, stacked (one entry per step)."""
  opt = module.lbfgs()  # the default line search: zoom
  state = opt.init(params)

  def body(carry, _):
    p, s = carry
    value, grad = jax.value_and_grad(_loss)(p)
    updates, s = opt.update(grad, s, p, value=value, grad=grad, value_fn=_loss)
    return (module.apply_updates(p, updates), s), s

  (final_params, _), states = jax.jit(
      lambda p, s: jax.lax.scan(body, (p, s), None, length=steps))(params, state)
  return state, final_params, [jax.tree_util.tree_map(lambda x, i=i: x[i], states) for i in range(steps)]


def test_lbfgs_with_zoom_line_search_inside_lax_scan_under_x64_keeps_state_types_every_iteration():
  with jax.enable_x64(True):
    for params in (
        {"w": jnp.full(3, 2.0, jnp.float32), "b": jnp.full(2, -1.0, jnp.bfloat16)},
        {"w": jnp.full(3, 2.0, jnp.float32), "d": jnp.full(2, -1.0, jnp.float64)},
    ):
      state, final_params, per_step = _scan_states(steadax, params)
      expected = _signature(state)
      assert not [s for s in expected if s[3]], "weakly typed leaves at init"
      for i, s in enumerate(per_step):
        assert _signature(s) == expected, f"state types changed at iteration {i}"
      stat = jnp.float64 if "d" in params else jnp.float32  # widest param dtype, not the x64 flag
      info = state[-1].info
      assert info.num_linesearch_steps.dtype == jnp.int32
      assert state[0].count.dtype == jnp.int32
      assert info.decrease_error.dtype == info.curvature_error.dtype == stat
      assert state[-1].learning_rate.dtype == state[-1].value.dtype == state[0].weights_memory.dtype == stat
      assert _signature(final_params) == _signature(params)
      assert float(_loss(final_params)) < 1e-6 * float(_loss(params))  # and it still optimises
      assert all(int(s[-1].info.num_linesearch_steps) >= 1 for s in per_step)


def test_optax_reference_changes_its_line_search_state_types_under_x64():
  # Why the seed test exists: Optax 0.2.8 initialises the counter and errors as weakly typed
  # int64/float64 under x64 and returns them strongly typed, so the carry of a scan changes type.
  with jax.enable_x64(True), jax.numpy_dtype_promotion("standard"):
    state, _, per_step = _scan_states(optax, {"w": jnp.full(3, 2.0, jnp.float32)}, steps=2)
    assert _signature(per_step[0]) != _signature(state)
