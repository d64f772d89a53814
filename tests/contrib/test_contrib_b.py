"""Contrib part B: acprop, ademamix, simplified_ademamix, adopt, madgrad, sophia (and Hutchinson's
estimator), sam, normalize, reduce_on_plateau, differentially_private_aggregate, dpsgd,
split_real_and_imaginary.

For each: mixed-precision trees and init from ``jax.eval_shape``, the defining property against an
independent float64 numpy computation (or an exact special case), the deliberate differences from
Optax 0.2.8 (each shown against Optax), and clear errors. The per-example optimizers (DP) do not fit
the registry's Entry format; they run through the conformance harness here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax
from tests.conformance import _harness as h
from tests.conformance.registry import Entry

X64 = bool(jax.config.jax_enable_x64)
contrib = steadax.contrib


def _loss(params):
  total = jnp.zeros([], jnp.float32)
  for x in jax.tree_util.tree_leaves(params):
    x = x.astype(jnp.complex64 if jnp.iscomplexobj(x) else jnp.float32)
    total = total + jnp.sum(jnp.abs(x - 0.25) ** 2).astype(jnp.float32)
  return total


def _grads(params):
  return jax.tree_util.tree_map(lambda x: (x - jnp.asarray(0.25, x.dtype)) * jnp.asarray(2, x.dtype), params)


def _grad_fn(p, i):
  return _grads(p)


FACTORIES = {
    "acprop": lambda: contrib.acprop(0.1),
    "ademamix": lambda: contrib.ademamix(0.05, mu_dtype=jnp.bfloat16),
    "simplified_ademamix": lambda: contrib.simplified_ademamix(0.01, b1=0.9),
    "adopt": lambda: contrib.adopt(0.1, nesterov=True),
    "madgrad": lambda: contrib.madgrad(0.05, weight_decay=0.01),
    "sophia": lambda: contrib.sophia(0.1, update_interval=2),
    "sam": lambda: contrib.sam(steadax.adam(0.1), steadax.chain(contrib.normalize(), steadax.sgd(0.05))),
    "sam_opaque": lambda: contrib.sam(steadax.sgd(0.1), steadax.sgd(0.05), sync_period=3, opaque_mode=True),
    "reduce_on_plateau": lambda: steadax.chain(steadax.sgd(0.1), contrib.reduce_on_plateau(patience=1)),
    "split_real_and_imaginary": lambda: contrib.split_real_and_imaginary(steadax.adam(0.1)),
}
EXTRAS = {"obj_fn": _loss, "grad_fn": _grad_fn}


def _types(tree):
  return (jax.tree_util.tree_structure(tree),
          [(np.shape(x), x.dtype) for x in jax.tree_util.tree_leaves(tree)])


def _mixed():
  return {"bf16": jnp.asarray([0.5, -1.0, 2.0], jnp.bfloat16), "f32": jnp.asarray([[1.0, -0.5]], jnp.float32),
          "f16": jnp.asarray([0.75], jnp.float16), "c64": jnp.asarray([1 - 1j], jnp.complex64)}


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_mixed_tree_scan_eval_shape_init_and_convergence(name):
  opt = FACTORIES[name]()
  params = _mixed()
  state = opt.init(params)
  assert _types(jax.eval_shape(opt.init, params)) == _types(state), f"{name}: init from eval_shape"

  def run(p, steps):
    def body(carry, _):
      p, s = carry
      u, s = opt.update(_grads(p), s, p, value=_loss(p), **EXTRAS)
      return (steadax.apply_updates(p, u), s), u

    return jax.lax.scan(body, (p, opt.init(p)), None, length=steps)

  (p, s), u = jax.jit(run, static_argnums=1)(params, 150)
  assert _types(s) == _types(state), f"{name}: state types changed in lax.scan"
  assert {k: v.dtype for k, v in u.items()} == {k: v.dtype for k, v in params.items()}
  assert float(_loss(p)) < 0.1 * float(_loss(params)), f"{name}: {float(_loss(params))} -> {float(_loss(p))}"


# ---- defining properties against float64 numpy ----------------------------------------------

G_SEQ = np.asarray([[0.5, -1.0], [0.3, -0.2], [-0.4, 0.6], [0.2, 0.1]])


def _updates(opt, grads=G_SEQ, params=None, **extra):
  p = jnp.zeros(grads.shape[1]) if params is None else params
  s = opt.init(p)
  out = []
  for g in grads:
    u, s = opt.update(jnp.asarray(g, jnp.float32), s, p, **extra)
    out.append(np.asarray(u, np.float64))
  return np.asarray(out), s


def test_acprop_divides_the_raw_gradient_by_the_previous_central_moment():
  b1, b2, eps = 0.8, 0.9, 1e-6
  got, _ = _updates(contrib.scale_by_acprop(b1, b2, eps, eps_root=0.0))
  m, s = np.zeros(2), np.zeros(2)
  for t, g in enumerate(G_SEQ):
    # The denominator is known before g arrives (asynchronous), 1 at the first step.
    denom = np.sqrt(s / (1 - b2**t)) if t else np.ones(2)
    np.testing.assert_allclose(got[t], g / (denom + eps), rtol=1e-5)
    s = b2 * s + (1 - b2) * (g - m) ** 2
    m = b1 * m + (1 - b1) * g


def test_ademamix_is_adam_plus_alpha_times_the_slow_ema():
  b1, b2, b3, alpha = 0.9, 0.99, 0.95, 3.0
  got, state = _updates(contrib.scale_by_ademamix(b1, b2, b3, alpha, eps=1e-8))
  adam, _ = _updates(steadax.scale_by_adam(b1, b2, eps=1e-8))
  m2, v = np.zeros(2), np.zeros(2)
  for t, g in enumerate(G_SEQ, start=1):
    m2 = b3 * m2 + (1 - b3) * g
    v = b2 * v + (1 - b2) * g**2
    denom = np.sqrt(v / (1 - b2**t)) + 1e-8
    np.testing.assert_allclose(got[t - 1], adam[t - 1] + alpha * m2 / denom, rtol=2e-5)
  assert int(state.count) == int(state.count_m2) == len(G_SEQ)


def test_ademamix_schedules_are_evaluated_at_the_count_before_the_update():
  seen = []

  def alpha(count):
    seen.append(count)
    return 2.0 * count.astype(jnp.float32)

  got, _ = _updates(contrib.scale_by_ademamix(b3=0.5, alpha=alpha), grads=G_SEQ[:2])
  adam, _ = _updates(steadax.scale_by_adam(), grads=G_SEQ[:2])
  np.testing.assert_allclose(got[0], adam[0], rtol=1e-5)  # alpha(0) = 0
  assert not np.allclose(got[1], adam[1])


def test_simplified_ademamix_undamped_momentum_plus_alpha_gradient():
  b1, b2, alpha = 0.9, 0.95, 2.0
  got, _ = _updates(contrib.scale_by_simplified_ademamix(b1, b2, alpha, eps=1e-8))
  m, n = np.zeros(2), np.zeros(2)
  for t, g in enumerate(G_SEQ, start=1):
    m = b1 * m + g
    n = b2 * n + (1 - b2) * g**2
    np.testing.assert_allclose(got[t - 1], (m + alpha * g) / (np.sqrt(n / (1 - b2**t)) + 1e-8), rtol=2e-5)


def test_adopt_normalises_by_the_previous_second_moment_then_averages():
  b1, b2, eps = 0.7, 0.9, 1e-6
  got, _ = _updates(contrib.scale_by_adopt(b1, b2, eps))
  np.testing.assert_array_equal(got[0], 0.0)  # step 0 only records v
  m, v = np.zeros(2), G_SEQ[0] ** 2
  for t, g in enumerate(G_SEQ[1:], start=1):
    m = b1 * m + (1 - b1) * np.clip(g / np.maximum(np.sqrt(v), eps), -(t**0.25), t**0.25)
    v = b2 * v + (1 - b2) * g**2
    np.testing.assert_allclose(got[t], m, rtol=1e-5)


def test_adopt_eps_zero_first_step_is_finite():
  # The first normalisation is g / max(sqrt(0), 0) = inf; Optax multiplies it by a zero weight (NaN).
  got, state = _updates(contrib.scale_by_adopt(eps=0.0, use_clipping=False))
  assert np.all(np.isfinite(got[0])) and np.all(np.isfinite(np.asarray(state.mu)))


def test_madgrad_is_momentumized_dual_averaging_with_a_cube_root():
  lr, c, eps = 0.1, 0.5, 1e-6
  x0 = np.asarray([1.0, -2.0])
  opt = contrib.scale_by_madgrad(lr, momentum=c, eps=eps)
  p = jnp.asarray(x0, jnp.float32)
  s = opt.init(p)
  x, acc_s, acc_v = x0.copy(), np.zeros(2), np.zeros(2)
  for k, g in enumerate(G_SEQ):
    u, s = opt.update(jnp.asarray(g, jnp.float32), s, p)
    lam = (lr + eps) * np.sqrt(k + 1)
    acc_s, acc_v = acc_s + lam * g, acc_v + lam * g**2
    z = x0 - acc_s / (np.cbrt(acc_v) + eps)
    x_new = (1 - c) * z + c * x
    np.testing.assert_allclose(np.asarray(u, np.float64), x_new - x, rtol=1e-4, atol=1e-6)
    p, x = steadax.apply_updates(p, u), x_new


def test_hutchinson_is_exact_for_a_diagonal_hessian_real_and_complex():
  est = contrib.hutchinson_estimator_diag_hessian(jax.random.key(1))
  params = {"x": jnp.asarray([1.0, 2.0], jnp.float32), "z": jnp.asarray([0.5 + 2j], jnp.complex64)}

  def loss(p):  # Hessian diag(2, 4) for x; for z: d2/dRe^2 = 6, d2/dIm^2 = 10
    z = p["z"]
    x_part = jnp.sum(jnp.asarray([1.0, 2.0], jnp.float32) * p["x"] ** 2)
    return x_part + jnp.sum(3 * jnp.real(z) ** 2 + 5 * jnp.imag(z) ** 2)

  d, _ = est.update(params, est.init(params), params, obj_fn=loss)
  np.testing.assert_allclose(np.asarray(d["x"]), [2.0, 4.0], rtol=1e-6)
  # The mean curvature of the real and imaginary parts (real, carried in the complex dtype).
  np.testing.assert_allclose(np.asarray(d["z"]), [8.0], rtol=1e-6)
  assert d["z"].dtype == jnp.complex64


def test_hutchinson_averages_to_the_diagonal_of_a_dense_hessian():
  a = np.asarray([[2.0, 0.5, -0.3], [0.5, 1.0, 0.2], [-0.3, 0.2, 3.0]], np.float32)
  est = contrib.hutchinson_estimator_diag_hessian(jax.random.key(7))
  p = jnp.ones(3, jnp.float32)

  def loss(x):
    return 0.5 * x @ jnp.asarray(a) @ x

  def body(s, _):
    d, s = est.update(p, s, p, obj_fn=loss)
    return s, d

  _, ds = jax.jit(lambda s: jax.lax.scan(body, s, None, length=2000))(est.init(p))
  # Each estimate is diag(A) plus a sum of +-off-diagonal terms with zero mean (|.| <= 0.8).
  np.testing.assert_allclose(np.asarray(ds).mean(0), np.diag(a), atol=0.05)


def test_hutchinson_on_a_mixed_tree_where_optax_fails():
  params = {"a": jnp.asarray([1.0, 2.0], jnp.bfloat16), "b": jnp.asarray([1.0], jnp.float32)}

  def loss(p):
    return jnp.sum(p["a"].astype(jnp.float32) ** 2) + 3 * jnp.sum(p["b"] ** 2)

  est = contrib.hutchinson_estimator_diag_hessian()
  d, _ = est.update(params, est.init(params), params, obj_fn=loss)
  assert d["a"].dtype == jnp.bfloat16 and d["b"].dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(d["a"], np.float32), [2.0, 2.0])
  np.testing.assert_allclose(np.asarray(d["b"]), [6.0])
  # Optax casts every random sign to the lowest dtype; jax.jvp rejects the float32 leaf's tangent.
  theirs = optax.contrib.hutchinson_estimator_diag_hessian()
  with pytest.raises(Exception), jax.numpy_dtype_promotion("standard"):
    theirs.update(params, theirs.init(params), params, obj_fn=loss)


def test_sophia_clips_and_refreshes_the_hessian_every_interval():
  opt = contrib.sophia(0.1, weight_decay=0.0, gamma=0.01, clip_threshold=0.5, update_interval=2)
  p = jnp.asarray([3.0, -2.0, 0.1])

  def loss(x):
    return jnp.sum(jnp.asarray([1.0, 4.0, 0.5]) * x**2)

  s = opt.init(p)
  nus = []
  for _ in range(5):
    u, s = opt.update(jax.grad(loss)(p), s, p, obj_fn=loss)
    assert float(jnp.max(jnp.abs(u))) <= 0.1 * 0.5 + 1e-7  # lr * clip_threshold
    nus.append(np.asarray(s[0].nu))
    p = steadax.apply_updates(p, u)
  # Refreshed after steps 0, 2, 4 (b2 EMA of the exact diagonal 2, 8, 1), kept after 1 and 3.
  np.testing.assert_allclose(nus[0], 0.01 * np.asarray([2.0, 8.0, 1.0]), rtol=1e-5)
  np.testing.assert_array_equal(nus[1], nus[0])
  assert np.all(nus[2] > nus[1])
  np.testing.assert_array_equal(nus[3], nus[2])


def _sam_pair(sync_period=2, **kwargs):
  return contrib.sam(steadax.sgd(0.1), steadax.chain(contrib.normalize(), steadax.sgd(0.5)),
                     sync_period=sync_period, **kwargs)


def test_sam_steps_from_the_outer_point_with_the_adversarial_gradient():
  x0 = jnp.asarray([1.0, -2.0])
  grad = lambda x: 2 * x  # noqa: E731
  opt = _sam_pair()
  s = opt.init(x0)
  u, s = opt.update(grad(x0), s, x0)
  x_adv = steadax.apply_updates(x0, u)
  g0 = np.asarray(grad(x0), np.float64)
  np.testing.assert_allclose(np.asarray(x_adv), np.asarray(x0) + 0.5 * g0 / np.linalg.norm(g0), rtol=1e-6)
  u, s = opt.update(grad(x_adv), s, x_adv)
  x1 = steadax.apply_updates(x_adv, u)
  np.testing.assert_allclose(np.asarray(x1), np.asarray(x0) - 0.1 * np.asarray(grad(x_adv)), rtol=1e-6)
  assert int(s.steps_since_sync) == 0
  # Opaque mode does the whole cycle in one call.
  opaque = _sam_pair(opaque_mode=True)
  u, s = opaque.update(grad(x0), opaque.init(x0), x0, grad_fn=lambda x, i: grad(x))
  np.testing.assert_allclose(np.asarray(steadax.apply_updates(x0, u)), np.asarray(x1), rtol=1e-6)
  assert s.cache is None


def test_sam_sync_period_one_is_the_outer_optimizer_unlike_optax():
  def run(opt, apply):
    x = jnp.asarray([1.0])
    s = opt.init(x)
    for _ in range(3):
      u, s = opt.update(2 * x, s, x)
      x = apply(x, u)
    return float(x[0])

  ours = run(contrib.sam(steadax.sgd(0.1), steadax.sgd(0.05), sync_period=1), steadax.apply_updates)
  assert ours == pytest.approx(0.8**3)  # plain SGD
  # Optax reads the cache of the previous step and goes 1 -> 0.8 -> 0.84 -> 0.632.
  with jax.numpy_dtype_promotion("standard"):
    theirs = run(optax.contrib.sam(optax.sgd(0.1), optax.sgd(0.05), sync_period=1), optax.apply_updates)
  assert theirs == pytest.approx(0.632)


def test_normalize_unit_norm_and_zero_stays_zero():
  tx = contrib.normalize()
  u, _ = tx.update({"a": jnp.asarray([3.0], jnp.bfloat16), "b": jnp.asarray([4.0])}, tx.init(None))
  assert u["a"].dtype == jnp.bfloat16
  np.testing.assert_allclose([float(u["a"][0]), float(u["b"][0])], [0.6, 0.8], rtol=1e-2)
  z, _ = tx.update(jnp.zeros(3), tx.init(None))
  np.testing.assert_array_equal(np.asarray(z), 0.0)  # Optax: 0 / 0 = NaN
  assert np.all(np.isnan(np.asarray(optax.contrib.normalize().update(jnp.zeros(3), optax.EmptyState())[0])))


def test_split_real_and_imaginary_runs_the_inner_optimizer_on_the_parts():
  z = jnp.asarray([1.0 + 2.0j, -0.5 + 0.1j], jnp.complex64)
  gz = jnp.asarray([0.3 - 1.0j, 2.0 + 0.5j], jnp.complex64)
  opt = contrib.split_real_and_imaginary(steadax.adam(0.1))
  u, s = opt.update(gz, opt.init(z), z)
  parts = jnp.stack([jnp.real(gz), jnp.imag(gz)])
  ref, _ = steadax.adam(0.1).update(parts, steadax.adam(0.1).init(parts))
  np.testing.assert_allclose(np.asarray(jnp.real(u)), np.asarray(ref[0]), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(jnp.imag(u)), np.asarray(ref[1]), rtol=1e-6)
  assert u.dtype == jnp.complex64 and s.inner_state[0].nu.real.dtype == jnp.float32


# ---- reduce_on_plateau --------------------------------------------------------------------------

def _scales(tx, values):
  s = tx.init(jnp.zeros(1))
  out = []
  for v in values:
    _, s = tx.update(jnp.ones(1), s, value=v)
    out.append(float(s.scale))
  return out


def test_reduce_on_plateau_reduces_on_a_negative_plateau_unlike_optax():
  patience = 3
  tx = contrib.reduce_on_plateau(factor=0.5, patience=patience)
  # -5 is the best at the first step; `patience` steps without improvement reduce the scale.
  assert _scales(tx, [-5.0] * (patience + 1)) == [1.0] * patience + [0.5]
  # Optax 0.2.8 (upstream PR 1767): its threshold 0.9999 * (-5) lies above -5, so "improves" forever.
  theirs = optax.contrib.reduce_on_plateau(factor=0.5, patience=patience)
  s = theirs.init(jnp.zeros(1))
  with jax.numpy_dtype_promotion("standard"):
    for _ in range(3 * patience):
      _, s = theirs.update(jnp.ones(1), s, value=jnp.asarray(-5.0))
  assert float(s.scale) == 1.0


def test_reduce_on_plateau_relative_margin_for_negative_and_positive_losses():
  tx = contrib.reduce_on_plateau(factor=0.5, patience=1, rtol=1e-2, atol=0.0)
  # Improvements larger than 1% of |best| count, smaller ones do not, for either sign.
  assert _scales(tx, [-100.0, -101.5, -103.0]) == [1.0, 1.0, 1.0]
  assert _scales(tx, [-100.0, -100.5]) == [1.0, 0.5]
  assert _scales(tx, [100.0, 98.5, 97.0]) == [1.0, 1.0, 1.0]
  assert _scales(tx, [100.0, 99.5]) == [1.0, 0.5]


def test_reduce_on_plateau_cooldown_min_scale_and_accumulation():
  tx = contrib.reduce_on_plateau(factor=0.5, patience=1, cooldown=2, min_scale=0.3)
  # reduce, 2 ignored, reduce (clamped at min_scale), 2 ignored, stays at min_scale.
  assert _scales(tx, [1.0] * 7) == pytest.approx([1.0, 0.5, 0.5, 0.5, 0.3, 0.3, 0.3])
  acc = contrib.reduce_on_plateau(factor=0.5, patience=1, accumulation_size=2)
  s = acc.init(jnp.zeros(1))
  _, s = acc.update(jnp.ones(1), s, value=4.0)
  assert int(s.count) == 1 and float(s.avg_value) == 4.0 and float(s.best_value) > 1e30
  _, s = acc.update(jnp.ones(1), s, value=2.0)
  assert int(s.count) == 0 and float(s.best_value) == 3.0  # the average of the window


def test_reduce_on_plateau_state_is_finite_and_typed_mixed_tree():
  params = {"a": jnp.ones(2, jnp.bfloat16), "b": jnp.ones(1, jnp.float32)}
  tx = contrib.reduce_on_plateau()
  state = tx.init(params)
  assert {x.dtype for x in (state.scale, state.best_value, state.avg_value)} == {np.dtype(jnp.float32)}
  assert np.isfinite(float(state.best_value))  # "no best yet" without +inf (Optax: +inf)
  u, s = tx.update(params, state, params, value=jnp.asarray(1.0, jnp.float64 if X64 else jnp.float32))
  assert _types(s) == _types(state) and u["a"].dtype == jnp.bfloat16


# ---- differential privacy: per-example gradients --------------------------------------------------

def _per_example(params):
  """Three examples per leaf: (x - 0.1), 2 (x - 0.1), -x, stacked on a new axis 0."""
  def leaf(x):
    shifted = x - jnp.asarray(0.1, x.dtype)
    return jnp.stack([shifted, shifted * jnp.asarray(2, x.dtype), -x])

  return jax.tree_util.tree_map(leaf, params)


DP_ENTRIES = [
    Entry("differentially_private_aggregate",
          lambda: contrib.differentially_private_aggregate(1.0, 0.5, key=jax.random.key(3))),
    Entry("dpsgd_momentum", lambda: contrib.dpsgd(0.1, 1.0, 0.5, seed=1, momentum=0.9, nesterov=True)),
]


@pytest.mark.parametrize("entry", DP_ENTRIES, ids=[e.name for e in DP_ENTRIES])
@pytest.mark.parametrize("kind", ["mixed", "complex"])
def test_dp_all_forms_with_per_example_gradients(entry, kind):
  params = h.mixed_params() if kind == "mixed" else h.complex_params()
  tx = entry.factory()
  state = tx.init(params)
  h.assert_same_types(jax.eval_shape(tx.init, params), state, f"{entry.name} init from eval_shape")
  # Types are traced (as in the conformance matrix); the values come from 3 compiled steps.
  p_scan, s_scan, u_cond, s_cond, p_while, s_while = jax.eval_shape(
      h.make_forms(entry, grads_fn=_per_example), tx, params, state, jnp.asarray(True))
  for what, s in (("scan", s_scan), ("cond", s_cond), ("while_loop", s_while)):
    h.assert_same_types(state, s, f"{entry.name} state after {what}")
  h.assert_updates_follow_params(params, u_cond, f"{entry.name} updates")
  steps = h.run_jitted_steps(entry, tx, params, state, grads_fn=_per_example)
  for p, k in ((p_scan, 3), (p_while, 2)):
    h.assert_same_types(params, p, f"{entry.name} params")
    h.assert_same_types(params, steps[k - 1][0], f"{entry.name} params after {k} jitted steps")
    h.assert_finite(steps[k - 1][0], f"{entry.name} params")
  # New hyperparameter values do not retrace (the jitted step's trace cache, traced abstractly).
  traces = []

  def step(tx, p, s):
    traces.append(1)
    return tx.update(_per_example(p), s, p)

  jitted = jax.jit(step)
  for t in (tx, h.perturb_hyperparameters(tx)):
    u, _ = jax.eval_shape(jitted, t, params, state)
  assert len(traces) == 1


def test_dp_aggregate_matches_optax_for_the_same_key():
  params = {"w": jnp.asarray([1.0, -1.5, 2.0]), "b": jnp.asarray([[0.8], [-0.6]])}
  grads = _per_example(params)
  ours = contrib.differentially_private_aggregate(1.0, 0.7, key=jax.random.key(5))
  theirs = optax.contrib.differentially_private_aggregate(1.0, 0.7, key=jax.random.key(5))
  s_ours, s_theirs = ours.init(params), theirs.init(params)
  for _ in range(3):  # the keys advance the same way
    u_ours, s_ours = ours.update(grads, s_ours, params)
    u_theirs, s_theirs = theirs.update(grads, s_theirs, params)
    for k in params:
      np.testing.assert_allclose(np.asarray(u_ours[k]), np.asarray(u_theirs[k]), rtol=1e-6, atol=1e-7)
  opt = contrib.dpsgd(0.1, 1.0, 0.7, seed=2, momentum=0.5)
  with pytest.warns(DeprecationWarning):  # Optax's dpsgd passes its own deprecated `seed`
    ref = optax.contrib.dpsgd(0.1, 1.0, 0.7, 2, momentum=0.5)
  u_ours, _ = opt.update(grads, opt.init(params), params)
  u_theirs, _ = ref.update(grads, ref.init(params), params)
  np.testing.assert_allclose(np.asarray(u_ours["w"]), np.asarray(u_theirs["w"]), rtol=1e-6, atol=1e-7)


def test_dp_aggregate_clips_each_example_and_adds_noise_of_the_right_size():
  clip, sigma, batch = 1.0, 2.0, 4
  params = jnp.zeros(2)
  grads = jnp.asarray([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0], [-6.0, 8.0]])
  clipped_mean = (np.asarray([0.6, 0.8]) + [0.3, 0.4] + [-0.6, 0.8]) / batch
  quiet = contrib.differentially_private_aggregate(clip, 0.0, key=0)
  np.testing.assert_allclose(np.asarray(quiet.update(grads, quiet.init(params))[0]), clipped_mean, rtol=1e-6)
  noisy = contrib.differentially_private_aggregate(clip, sigma, key=jax.random.key(0))

  def body(s, _):
    u, s = noisy.update(grads, s)
    return s, u

  _, us = jax.jit(lambda s: jax.lax.scan(body, s, None, length=4000))(noisy.init(params))
  noise = np.asarray(us, np.float64) - clipped_mean
  # Gaussian of standard deviation sigma * clip / batch = 0.5 per coordinate, independent over steps.
  np.testing.assert_allclose(noise.std(0), sigma * clip / batch, rtol=0.05)
  np.testing.assert_allclose(noise.mean(0), 0.0, atol=0.03)
  assert abs(np.corrcoef(noise[:-1, 0], noise[1:, 0])[0, 1]) < 0.05


def test_dp_key_forms_give_the_same_typed_state():
  a = contrib.differentially_private_aggregate(1.0, 1.0, key=7).init(jnp.zeros(1)).rng_key
  b = contrib.differentially_private_aggregate(1.0, 1.0, key=jax.random.key(7)).init(jnp.zeros(1)).rng_key
  c = contrib.differentially_private_aggregate(1.0, 1.0, key=jax.random.PRNGKey(7)).init(jnp.zeros(1)).rng_key
  assert a.dtype == b.dtype == c.dtype and jnp.issubdtype(a.dtype, jax.dtypes.prng_key)
  np.testing.assert_array_equal(jax.random.key_data(a), jax.random.key_data(c))
  with pytest.warns(UserWarning, match="key"):
    contrib.differentially_private_aggregate(1.0, 1.0)


# ---- errors ---------------------------------------------------------------------------------------

BAD = [
    (lambda: contrib.acprop(0.1, b1=1.0), ValueError, "acprop: b1"),
    (lambda: contrib.acprop("fast"), TypeError, "acprop: learning_rate"),
    (lambda: contrib.scale_by_acprop(eps=-1.0), ValueError, "scale_by_acprop: eps"),
    (lambda: contrib.ademamix(0.1, b3=1.5), ValueError, "ademamix: b3"),
    (lambda: contrib.scale_by_ademamix(alpha=-1.0), ValueError, "scale_by_ademamix: alpha"),
    (lambda: contrib.simplified_ademamix(0.1, b2=-0.1), ValueError, "simplified_ademamix: b2"),
    (lambda: contrib.adopt(0.1, eps=-1.0), ValueError, "adopt: eps"),
    (lambda: contrib.scale_by_adopt(clip_value_fn=3.0), TypeError, "scale_by_adopt: clip_value_fn"),
    (lambda: contrib.madgrad(0.1, momentum=1.5), ValueError, "madgrad: momentum"),
    (lambda: contrib.sophia(0.1, gamma=0.0), ValueError, "sophia: gamma"),
    (lambda: contrib.sophia(0.1, update_interval=0), ValueError, "sophia: update_interval"),
    (lambda: contrib.sophia(0.1, verbose=True), ValueError, "sophia: print_win_rate_every_n_steps"),
    (lambda: contrib.hutchinson_estimator_diag_hessian("seed"), TypeError, "hutchinson_estimator_diag_hessian: key"),
    (lambda: contrib.sam(steadax.sgd(0.1), steadax.sgd(0.1), sync_period=0), ValueError, "sam: sync_period"),
    (lambda: contrib.reduce_on_plateau(factor=1.0), ValueError, "reduce_on_plateau: factor"),
    (lambda: contrib.reduce_on_plateau(rtol=0.0, atol=0.0), ValueError, "reduce_on_plateau: at least one of rtol"),
    (lambda: contrib.reduce_on_plateau(rtol=2.0), ValueError, "reduce_on_plateau: rtol"),
    (lambda: contrib.reduce_on_plateau(accumulation_size=0), ValueError, "reduce_on_plateau: accumulation_size"),
    (lambda: contrib.differentially_private_aggregate(0.0, 1.0, key=0), ValueError,
     "differentially_private_aggregate: l2_norm_clip"),
    (lambda: contrib.differentially_private_aggregate(1.0, -1.0, key=0), ValueError,
     "differentially_private_aggregate: noise_multiplier"),
    (lambda: contrib.dpsgd(0.1, 1.0, 1.0, seed=0, momentum=2.0), ValueError, "dpsgd: momentum"),
]


@pytest.mark.parametrize("make, error, match", BAD, ids=[b[2] for b in BAD])
def test_bad_hyperparameters_raise_clear_errors(make, error, match):
  with pytest.raises(error, match=match):
    make()


def test_missing_extra_arguments_name_the_argument():
  p = jnp.ones(2)
  tx = contrib.reduce_on_plateau()
  with pytest.raises(ValueError, match="reduce_on_plateau: .*`value=loss`"):
    tx.update(p, tx.init(p), p)
  opt = contrib.sophia(0.1)
  with pytest.raises(ValueError, match="hutchinson_estimator_diag_hessian: .*`obj_fn"):
    opt.update(p, opt.init(p), p)
  opaque = contrib.sam(steadax.sgd(0.1), steadax.sgd(0.1), opaque_mode=True)
  with pytest.raises(ValueError, match="sam: .*`grad_fn`"):
    opaque.update(p, opaque.init(p), p)
  mad = contrib.madgrad(0.1)
  with pytest.raises(ValueError, match="params"):
    mad.update(p, mad.init(p))
  dp = contrib.differentially_private_aggregate(1.0, 1.0, key=0)
  with pytest.raises(ValueError, match="differentially_private_aggregate: .*per-example"):
    dp.update({"s": jnp.ones(())}, dp.init({"s": jnp.ones(())}))


def test_sophia_verbose_prints_the_win_rate(capfd):
  opt = contrib.sophia(0.1, verbose=True, print_win_rate_every_n_steps=1)
  p = jnp.asarray([1.0, 0.001], jnp.float32)

  def loss(x):
    return jnp.sum(x**2)

  opt.update(jax.grad(loss)(p), opt.init(p), p, obj_fn=loss)
  jax.effects_barrier()
  assert "Sophia optimizer win rate: 0.0" in capfd.readouterr().out  # every step clipped at first
