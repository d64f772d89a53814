"""Shared machinery of the conformance tests: parameter trees, type comparisons, the forms program."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import steadax
from steadax import testing

X64 = bool(jax.config.jax_enable_x64)


def mixed_params(low_precision: bool = True) -> dict:
  """One tree with every kind of leaf the contract covers."""
  p = {
      "f32": jnp.linspace(-1.0, 1.0, 6, dtype=jnp.float32).reshape(3, 2),
      "scalar": jnp.asarray(0.5, jnp.float32),
      "zero": jnp.zeros((0, 3), jnp.float32),
      "none": None,
      "nested": {"row": jnp.asarray([[0.2, -0.4, 0.6]], jnp.float32)},
  }
  if low_precision:
    p["bf16"] = jnp.asarray([0.5, -0.25, 1.0, -2.0], jnp.bfloat16)
    p["f16"] = jnp.asarray([[0.3, -0.7], [1.5, 0.01]], jnp.float16)
  if X64:
    p["f64"] = jnp.asarray([0.9, -0.3, 0.2], jnp.float64)
  return p


def complex_params() -> dict:
  p = {"c64": jnp.asarray([1 + 1j, -0.5 + 0.25j, 0.3 - 2j], jnp.complex64)}
  if X64:
    p["c128"] = jnp.asarray([[0.5 - 0.5j, 1j]], jnp.complex128)
  return p


def _abs_sq(x):
  x = x.astype(steadax._core._policy.compute_dtype(x.dtype))
  return jnp.real(x * jnp.conj(x)) if jnp.iscomplexobj(x) else x * x


def matrix_loss(params):
  """``sum 0.5 |x - 0.1|^2`` over leaves, in float32 (the matrix only checks types and finiteness)."""
  total = jnp.zeros([], jnp.float32)
  for x in jax.tree_util.tree_leaves(params):
    shifted = x - jnp.asarray(0.1, x.dtype)
    total = total + (0.5 * jnp.sum(_abs_sq(shifted))).astype(jnp.float32)
  return total


def matrix_grads(params):
  """The gradient of ``matrix_loss`` written out (``x - 0.1`` in each leaf's dtype)."""
  return jax.tree_util.tree_map(lambda x: x - jnp.asarray(0.1, x.dtype), params)


def type_signature(tree):
  """(treedef, [(path, shape, dtype, weak_type)]) of a tree of arrays or abstract values."""
  return testing.type_signature(tree)


def assert_same_types(expected, got, what: str):
  problems = testing.type_differences(expected, got, what)
  assert not problems, "\n".join(f"{path}: {message}" for path, message in problems)


def assert_updates_follow_params(params, updates, what: str):
  problems = testing.update_type_differences(params, updates, what)
  assert not problems, "\n".join(f"{path}: {message}" for path, message in problems)


def assert_finite(tree, what: str):
  # Under x64 float64 leaves are checked as float64: a finite value above float32's range is finite;
  # 16-bit floats are read through numpy as float32.
  bad = []
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    if jnp.issubdtype(leaf.dtype, jnp.inexact):
      values = np.asarray(leaf)
      if values.dtype.itemsize <= 2 and not jnp.issubdtype(leaf.dtype, jnp.complexfloating):
        values = values.astype(np.float32)
      if not np.all(np.isfinite(values)):
        bad.append(jax.tree_util.keystr(path))
  assert not bad, "\n".join(f"{what}: non-finite values at {path}" for path in bad)


def _feed(entry, params, loss_fn, grads_fn):
  """The gradients and the entry's extra arguments at ``params``."""
  grads = grads_fn(params)
  extra = entry.extra_args(loss_fn, params, grads) if entry.extra_args else {}
  return grads, extra


def make_step(entry, loss_fn=matrix_loss, grads_fn=matrix_grads):
  """``step(tx, params, state) -> (updates, state)`` feeding the entry's extra arguments."""
  def step(tx, params, state):
    grads, extra = _feed(entry, params, loss_fn, grads_fn)
    return tx.update(grads, state, params, **extra)

  return step


def make_forms(entry, loss_fn=matrix_loss, grads_fn=matrix_grads):
  """``forms(tx, params, state, pred)``: one step under lax.scan (3 steps), lax.cond (both branches
  traced) and lax.while_loop (2 steps); returns ``(p_scan, s_scan, u_cond, s_cond, p_while, s_while)``.

  The types of a form's results, and its carry invariance (scan, cond and while_loop reject a carry or
  branch whose type changes), are trace-time facts: trace it with ``jax.eval_shape``. Each form
  compiles its own copy of the step, which would triple the XLA compilation that dominates the
  suite's time; the values the forms compute are checked with ``run_jitted_steps``."""
  step = make_step(entry, loss_fn, grads_fn)

  def forms(tx, params, state, pred):
    def scan_body(carry, _):
      p, s = carry
      u, s = step(tx, p, s)
      return (steadax.apply_updates(p, u), s), u

    (p_scan, s_scan), _ = jax.lax.scan(scan_body, (params, state), None, length=3)

    def skip():
      grads = grads_fn(params)
      return jax.tree_util.tree_map(lambda g, p: jnp.zeros_like(p), grads, params), state

    u_cond, s_cond = jax.lax.cond(pred, lambda: step(tx, params, state), skip)

    def while_body(carry):
      i, p, s = carry
      u, s = step(tx, p, s)
      return i + jnp.asarray(1, jnp.int32), steadax.apply_updates(p, u), s

    _, p_while, s_while = jax.lax.while_loop(
        lambda c: c[0] < jnp.asarray(2, jnp.int32), while_body,
        (jnp.asarray(0, jnp.int32), params, state))
    return p_scan, s_scan, u_cond, s_cond, p_while, s_while

  return forms


def run_jitted_steps(entry, tx, params, state, steps=3, loss_fn=matrix_loss, grads_fn=matrix_grads):
  """The params and state after each of ``steps`` steps of one jitted (compiled once) step: after step
  1 they are what the forms' lax.cond computes, after 2 what their while_loop computes, after 3 what
  their scan computes. Returns a list of ``(params, state)``, step 1 first."""
  step = make_step(entry, loss_fn, grads_fn)

  @jax.jit
  def one(tx, params, state):
    updates, state = step(tx, params, state)
    return steadax.apply_updates(params, updates), state

  trajectory = []
  for _ in range(steps):
    params, state = one(tx, params, state)
    trajectory.append((params, state))
  return trajectory


def perturb_hyperparameters(tx):
  """The same transformation with every floating leaf scaled by 0.9 (new values, same types)."""
  return testing.perturb_hyperparameters(tx)


def check_entry(entry, params, checks, steps=3, tx=None, name=None):
  """``steadax.testing.check_transformation`` on a registry entry (its extra arguments fed from
  ``matrix_loss``) in this process's x64 mode, on ``params`` as given; raises on any violation."""
  extra = None
  if entry.extra_args is not None:
    extra = lambda params, grads: entry.extra_args(matrix_loss, params, grads)
  return testing.check_transformation(
      entry.factory() if tx is None else tx, params, grads=matrix_grads, extra_args=extra,
      checks=checks, steps=steps, x64="current", mixed_precision=False, name=name or entry.name,
      raise_on_failure=True)
