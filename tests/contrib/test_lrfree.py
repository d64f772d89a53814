"""Learning-rate-free contrib optimizers: dadapt_adamw, dog, dowg, mechanize, momo, momo_adam, cocob.

For each: mixed float32/bfloat16 trees (where Optax 0.2.8 fails, the test says so), init from
``jax.eval_shape``, convergence (real and complex leaves), the algorithm's defining property against
an independent float64 computation, and clear errors for bad hyperparameters.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax

X64 = bool(jax.config.jax_enable_x64)
contrib = steadax.contrib

FACTORIES = {
    "dadapt_adamw": lambda: contrib.dadapt_adamw(),
    "dog": lambda: contrib.dog(),
    "dowg": lambda: contrib.dowg(),
    "mechanize": lambda: contrib.mechanize(steadax.sgd(1.0)),
    "momo": lambda: contrib.momo(),
    "momo_adam": lambda: contrib.momo_adam(1.0),
    "cocob": lambda: contrib.cocob(),
}
# Optax 0.2.8 on {bfloat16, float32} leaves (checked with optax in a scratch script): the scalar
# statistics start in bfloat16 (the "lowest" dtype) and the first update returns them in float32,
# with a float32 update for the bfloat16 leaf (dadapt_adamw, dog, dowg, momo, momo_adam), so
# lax.scan and apply_if_finite reject the state; mechanize raises at the first update
# (lax.clamp on bfloat16 and float32). Only cocob (per-coordinate state) works there.
SCALAR_STATS = {
    "dadapt_adamw": [lambda s: s.estim_lr, lambda s: s.numerator_weighted],
    "dog": [lambda s: s[1].max_dist, lambda s: s[1].sum_sq_norm_grads],
    "dowg": [lambda s: s[1].estim_sq_dist, lambda s: s[1].weighted_sq_norm_grads],
    "mechanize": [lambda s: s.r, lambda s: s.m, lambda s: s.v, lambda s: s.s],
    "momo": [lambda s: s.barf, lambda s: s.gamma, lambda s: s.lb],
    "momo_adam": [lambda s: s.barf, lambda s: s.gamma, lambda s: s.lb],
    "cocob": [],  # per-coordinate statistics only, each in its parameter's (real) dtype
}


def _quadratic_loss(params):
  total = jnp.zeros([], jnp.float32)
  for x in jax.tree_util.tree_leaves(params):
    x = x.astype(jnp.complex64 if jnp.iscomplexobj(x) else jnp.float32)
    total = total + jnp.sum(jnp.abs(x - 0.25) ** 2).astype(jnp.float32)
  return total


def _quadratic_grads(params):
  return jax.tree_util.tree_map(lambda x: (x - jnp.asarray(0.25, x.dtype)) * jnp.asarray(2, x.dtype), params)


def _types(tree):
  leaves = jax.tree_util.tree_leaves(tree)
  return jax.tree_util.tree_structure(tree), [(np.shape(x), np.dtype(x.dtype)) for x in leaves]


def _scan(opt, params, steps):
  def body(carry, _):
    p, s = carry
    u, s = opt.update(_quadratic_grads(p), s, p, value=_quadratic_loss(p))
    return (steadax.apply_updates(p, u), s), u

  (p, s), u = jax.lax.scan(body, (params, opt.init(params)), None, length=steps)
  return p, s, u


def _mixed_params():
  p = {"bf16": jnp.asarray([0.5, -1.0, 2.0], jnp.bfloat16), "f32": jnp.asarray([[1.0, -0.5]], jnp.float32)}
  return p


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_mixed_tree_keeps_types_in_scan_and_apply_if_finite(name):
  params = _mixed_params()
  opt = FACTORIES[name]()
  state = opt.init(params)
  p, s, u = jax.jit(lambda p: _scan(opt, p, 3))(params)
  assert _types(s) == _types(state), f"{name}: state types changed in lax.scan"
  assert u["bf16"].dtype == jnp.bfloat16 and u["f32"].dtype == jnp.float32
  assert p["bf16"].dtype == jnp.bfloat16
  # One dtype for every scalar statistic: the widest among the params (float32 here), x64 or not.
  for field in SCALAR_STATS[name]:
    assert field(s).dtype == jnp.float32, f"{name}: a scalar statistic has dtype {field(s).dtype}"
  guarded = steadax.apply_if_finite(opt, 3)
  g_state = guarded.init(params)
  guarded_step = jax.jit(lambda p, s: guarded.update(_quadratic_grads(p), s, p, value=_quadratic_loss(p)))
  _, g_new = guarded_step(params, g_state)
  assert _types(g_new) == _types(g_state)


@pytest.mark.skipif(not X64, reason="a float64 leaf exists only under x64")
@pytest.mark.parametrize("name", [n for n in sorted(FACTORIES) if SCALAR_STATS[n]])
def test_float64_leaf_widens_the_statistics_at_init(name):
  params = {"a": jnp.ones(2, jnp.bfloat16), "b": jnp.ones(2, jnp.float64)}
  state = FACTORIES[name]().init(params)
  for field in SCALAR_STATS[name]:
    assert field(state).dtype == jnp.float64


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_init_from_eval_shape(name):
  params = _mixed_params()
  opt = FACTORIES[name]()
  shapes = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
  abstract = jax.eval_shape(opt.init, shapes)
  assert _types(abstract) == _types(opt.init(params))


def test_dog_heuristic_initial_distance_is_traceable():
  params = {"w": jnp.asarray([3.0, 4.0], jnp.float32)}
  opt = contrib.scale_by_dog(("heuristic", 1e-3))
  state = jax.jit(opt.init)(params)  # no concrete norm at init
  np.testing.assert_allclose(float(state.max_dist), 1e-3 * (1 + 5.0), rtol=1e-6)
  assert jax.eval_shape(opt.init, params).max_dist.dtype == jnp.float32


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_converges_on_real_and_complex_leaves(name):
  params = {"x": jnp.asarray([2.0, -1.0, 1.5]), "z": jnp.asarray([1 + 1j, -1j], jnp.complex64)}
  opt = FACTORIES[name]()
  final, _, _ = jax.jit(lambda p: _scan(opt, p, 300))(params)
  assert float(_quadratic_loss(final)) < 1e-2 * float(_quadratic_loss(params)), name


# ---- defining properties, against float64 numpy ----------------------------------------------

def _steps(opt, params, grads_fn, steps, **extra):
  """Run ``steps`` eager updates; returns the list of (params, grads, updates, state) per step."""
  state = opt.init(params)
  out = []
  for _ in range(steps):
    g = grads_fn(params)
    u, state = opt.update(g, state, params, **extra)
    out.append((np.asarray(params, np.float64), np.asarray(g, np.float64), np.asarray(u, np.float64), state))
    params = steadax.apply_updates(params, u)
  return out


def _grad_fn(x):
  return jnp.asarray([1.0, 2.0, -0.5]) * x - jnp.asarray([0.2, -0.1, 0.3])


def test_dog_step_is_max_distance_over_root_sum_of_squared_gradient_norms():
  x0 = jnp.asarray([1.0, -2.0, 0.5])
  r_eps, eps = 0.05, 1e-8
  history = _steps(contrib.dog(init_step=("distance", r_eps), eps=eps), x0, _grad_fn, 5)
  max_dist, sum_sq = r_eps, 0.0
  for x, g, u, _ in history:
    max_dist = max(max_dist, float(np.linalg.norm(x - np.asarray(x0, np.float64))))
    sum_sq += float(g @ g)
    np.testing.assert_allclose(u, -max_dist / np.sqrt(sum_sq + eps) * g, rtol=2e-6)


def test_dog_learning_rate_init_takes_that_first_step():
  x0 = jnp.asarray([1.0, -2.0, 0.5])
  (_, g, u, state), = _steps(contrib.dog(init_step=("learning_rate", 0.3)), x0, _grad_fn, 1)
  np.testing.assert_allclose(u, -0.3 * g, rtol=1e-6)
  assert not bool(state[1].is_init_step)


def test_dowg_step_is_squared_distance_over_weighted_gradient_norms():
  x0 = jnp.asarray([1.0, -2.0, 0.5])
  r2, eps = 0.01, 1e-4
  history = _steps(contrib.dowg(init_estim_sq_dist=r2, eps=eps), x0, _grad_fn, 5)
  v = 0.0
  for x, g, u, _ in history:
    r2 = max(r2, float(np.sum((x - np.asarray(x0, np.float64)) ** 2)))
    v += r2 * float(g @ g)
    np.testing.assert_allclose(u, -r2 / (np.sqrt(v) + eps) * g, rtol=2e-6)


def test_dadapt_first_step_is_d0_times_sign_and_the_estimate_grows():
  x0 = jnp.asarray([3.0, -2.0, 1.0])
  history = _steps(contrib.dadapt_adamw(estim_lr0=1e-3, eps=0.0), x0, _grad_fn, 30)
  _, g, u, state = history[0]
  # m = (1 - b1) dlr g, v = (1 - b2) g^2 and dlr = d0 sqrt(1 - b2) / (1 - b1): a sign step of size d0.
  np.testing.assert_allclose(u, -1e-3 * np.sign(g), rtol=1e-5)
  # s_0 = 0: no evidence yet (Optax 0.2.8 with eps = 0 computes 0 / 0 here: its estim_lr is NaN).
  assert float(state.estim_lr) == pytest.approx(1e-3)
  estimates = [float(s.estim_lr) for *_, s in history]
  assert all(b >= a for a, b in zip(estimates, estimates[1:]))
  assert estimates[-1] > 10 * estimates[0]


def test_dadapt_zero_gradients_keep_the_estimate():
  # Optax 0.2.8 divides by ||s||_1 = 0 here and its estim_lr becomes NaN.
  opt = contrib.dadapt_adamw()
  p = jnp.ones(3)
  _, state = opt.update(jnp.zeros(3), opt.init(p), p)
  assert float(state.estim_lr) == pytest.approx(1e-6)


def test_mechanic_moves_along_the_accumulated_base_updates():
  # x_{t+1} = x_0 + S_t * (sum of the base optimizer's updates): Mechanic only learns the scale S.
  x0 = jnp.zeros(3)  # parameters near 0: x_t - x_0 (of order S ~ 1e-6 at first) without cancellation
  history = _steps(contrib.mechanize(steadax.sgd(1.0), eps=1e-12, weight_decay=0.0), x0, _grad_fn, 12)
  base_sum = np.zeros(3)
  for x, g, u, state in history:
    base_sum -= g
    scale = float(np.sum(np.asarray(state.s, np.float64)))
    np.testing.assert_allclose(x + u - np.asarray(x0, np.float64), scale * base_sum, rtol=1e-4, atol=1e-9)
  assert float(np.sum(np.asarray(history[-1][3].s))) > 1e-5  # grew geometrically from s_init = 1e-6


def test_mechanic_reference_point_is_the_first_update_params():
  opt = contrib.mechanize(steadax.sgd(1.0))
  state = opt.init(jnp.zeros(3))  # e.g. placeholders replaced by pre-trained weights
  p = jnp.asarray([1.0, 2.0, 3.0])
  _, state = opt.update(_grad_fn(p), state, p)
  np.testing.assert_array_equal(state.x0, p)


def test_mechanic_statistics_stay_finite_with_huge_gradients():
  # h grows like |g|^2 (here ~1e30): its square overflowed v in float32 and set s to 0 for good.
  # Clamped per bettor, v stays below a quarter of float32's range and the scale stays positive.
  x0 = jnp.asarray([1.0, -2.0, 3.0], jnp.float32)  # float32 statistics in both x64 modes
  history = _steps(contrib.mechanize(steadax.sgd(1.0), num_betas=3), x0,
                   lambda x: 1e15 * jnp.sign(x), 6)
  largest = float(jnp.finfo(jnp.float32).max)
  for _, _, u, state in history:
    assert np.isfinite(u).all()
    v = np.asarray(state.v, np.float64)
    assert np.isfinite(v).all() and (v <= largest / 4 * (1 + 1e-5)).all()
    assert (np.asarray(state.s) > 0).all()


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_mechanic_weight_decay_term_stays_finite_past_the_sum_of_squares_range(weight_decay):
  # |g| = 3e19: sum |g|^2 = 2.7e39 is inf in float32; the decay term's norm ratio was inf, and
  # with weight_decay 0 it was 0 * inf = NaN in h, then in every statistic. The norms are summed
  # again, rescaled, where the plain sum overflows.
  x0 = jnp.asarray([1.0, -2.0, 3.0], jnp.float32)
  history = _steps(contrib.mechanize(steadax.adam(0.1), num_betas=3, weight_decay=weight_decay),
                   x0, lambda x: 3e19 * jnp.sign(x), 3)
  for _, _, u, state in history:
    assert np.isfinite(u).all()
    for stat in (state.r, state.m, state.v, state.s):
      assert np.isfinite(np.asarray(stat)).all()
    assert (np.asarray(state.s) > 0).all()


def test_mechanic_rescaled_norm_agrees_with_the_plain_one():
  from steadax.contrib._mechanic import _norm
  tree = {"a": jnp.asarray([3e19, -4e19], jnp.float32), "b": jnp.zeros(2, jnp.bfloat16)}
  big = _norm(tree, tree, tree, which=0, stat=jnp.float32)  # sum of squares overflows: rescaled
  np.testing.assert_allclose(float(big), 5e19, rtol=1e-6)
  small = {"a": jnp.asarray([3.0, -4.0], jnp.float32), "b": jnp.ones(2, jnp.bfloat16)}
  np.testing.assert_allclose(float(_norm(small, small, small, which=1, stat=jnp.float32)),
                             np.sqrt(27.0), rtol=1e-6)


def test_momo_without_momentum_is_the_polyak_step():
  loss = lambda x: jnp.sum(x**2)
  x = jnp.asarray([1.0, 2.0, 3.0])
  opt = contrib.momo(learning_rate=10.0, beta=0.0)
  state = opt.init(x)
  for _ in range(3):
    f, g = jax.value_and_grad(loss)(x)
    u, state = opt.update(g, state, x, value=f)
    g64 = np.asarray(g, np.float64)
    np.testing.assert_allclose(u, -min(10.0, float(f) / float(g64 @ g64)) * g64, rtol=1e-6)
    x = steadax.apply_updates(x, u)
  # A loss already at the lower bound: the model says stop.
  f, g = jax.value_and_grad(loss)(x)
  at_bound = contrib.momo(beta=0.0, lower_bound=float(f))
  u, _ = at_bound.update(g, at_bound.init(x), x, value=f)
  np.testing.assert_array_equal(u, jnp.zeros(3))


def test_momo_adam_first_step_is_a_preconditioned_polyak_step():
  # Step 1: d / D = sign(g), ||d||^2_D = (1 - b1) ||g||_1, so the update is -(f - lb) sign(g) / ||g||_1.
  loss = lambda x: jnp.sum((x - 0.5) ** 2)
  x = jnp.asarray([1.0, -2.0, 3.0])
  f, g = jax.value_and_grad(loss)(x)
  opt = contrib.momo_adam(learning_rate=1e3, eps=0.0, lower_bound=0.5)
  u, _ = opt.update(g, opt.init(x), x, value=f)
  g64 = np.asarray(g, np.float64)
  np.testing.assert_allclose(u, -(float(f) - 0.5) * np.sign(g64) / np.sum(np.abs(g64)), rtol=1e-5)


@pytest.mark.parametrize("name", ["momo", "momo_adam"])
def test_momo_needs_the_value(name):
  opt = FACTORIES[name]()
  p = jnp.ones(2)
  with pytest.raises(ValueError, match=f"{name}: update\\(\\) needs the loss: pass `value=loss`"):
    opt.update(p, opt.init(p), p)
  with pytest.raises(ValueError, match="`value` must be a scalar"):
    opt.update(p, opt.init(p), p, value=jnp.ones(2))


def test_momo_adapted_lower_bound_never_drops_below_the_given_one():
  opt = contrib.momo(lower_bound=-2.0, adapt_lower_bound=True)
  final, state, _ = _scan(opt, jnp.asarray([2.0, -1.0]), 20)
  assert float(state.lb) >= -2.0 and np.isfinite(float(state.lb))


def test_cocob_first_step_and_gradient_scale_invariance():
  x0 = jnp.asarray([1.0, -2.0, 0.5])
  (_, g, u, _), = _steps(contrib.cocob(alpha=10.0), x0, _grad_fn, 1)
  np.testing.assert_allclose(u, -np.sign(g) / 10.0, rtol=1e-6)  # θ/(L max(2L, αL)) L = -sign(g)/α
  runs = [_steps(contrib.cocob(alpha=10.0, eps=1e-12), x0, lambda x, c=c: c * _grad_fn(x), 6)
          for c in (1.0, 1e3)]
  for (_, _, u1, _), (_, _, u2, _) in zip(*runs):
    np.testing.assert_allclose(u1, u2, rtol=1e-4, atol=1e-7)


def test_cocob_zero_gradients_in_float16_stay_finite():
  # eps = 1e-8 underflows to 0 in float16: L = 0 and no bet rather than 0 / 0.
  opt = contrib.cocob()
  p = jnp.ones(2, jnp.float16)
  u, _ = opt.update(jnp.zeros(2, jnp.float16), opt.init(p), p)
  np.testing.assert_array_equal(np.asarray(u, np.float32), np.zeros(2))


# ---- errors ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("build, match", [
    (lambda: contrib.dadapt_adamw(betas=(1.0, 0.999)), r"dadapt_adamw: betas\[0\]"),
    (lambda: contrib.dadapt_adamw(estim_lr0=0.0), "dadapt_adamw: estim_lr0"),
    (lambda: contrib.dadapt_adamw(learning_rate=float("nan")), "dadapt_adamw: learning_rate"),
    (lambda: contrib.dog(init_step=("radius", 1.0)), r"dog: init_step\[0\] must be one of"),
    (lambda: contrib.dog(init_step=("distance", 0.0)), r"dog: init_step\[1\]"),
    (lambda: contrib.dog(init_step=0.1), "dog: init_step must be a pair"),
    (lambda: contrib.dog(weight_decay=-1.0), "dog: weight_decay"),
    (lambda: contrib.scale_by_dog(("distance", 1.0), eps=-1.0), "scale_by_dog: eps"),
    (lambda: contrib.dowg(eps=0.0), "scale_by_dowg: eps"),
    (lambda: contrib.dowg(init_estim_sq_dist=-1.0), "dowg: init_estim_sq_dist"),
    (lambda: contrib.mechanize(steadax.sgd(1.0), num_betas=0), "mechanize: num_betas"),
    (lambda: contrib.mechanize(steadax.sgd(1.0), s_init=0.0), "mechanize: s_init"),
    (lambda: contrib.mechanize(None), "mechanize: base_optimizer"),
    (lambda: contrib.momo(beta=1.0), "momo: beta"),
    (lambda: contrib.momo(lower_bound=float("inf")), "momo: lower_bound"),
    (lambda: contrib.momo_adam(b2=-0.1), "momo_adam: b2"),
    (lambda: contrib.cocob(alpha=0.0), "cocob: alpha"),
    (lambda: contrib.scale_by_cocob(eps=0.0), "scale_by_cocob: eps"),
])
def test_bad_hyperparameters_raise_clear_errors(build, match):
  with pytest.raises(ValueError, match=match):
    build()


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_update_without_params_names_the_argument(name):
  opt = FACTORIES[name]()
  p = jnp.ones(2)
  with pytest.raises(ValueError, match="`params` must be passed"):
    opt.update(p, opt.init(p), None, value=1.0)


def test_hyperparameters_are_leaves_and_flags_static():
  opt = contrib.dog(init_step=("learning_rate", 0.1), weight_decay=0.01)
  leaves = jax.tree_util.tree_leaves(opt)
  assert 0.1 in leaves and 0.01 in leaves and "learning_rate" not in leaves
  momo = contrib.momo(adapt_lower_bound=True)
  assert not any(isinstance(leaf, bool) for leaf in jax.tree_util.tree_leaves(momo))
  assert jax.tree_util.tree_leaves(contrib.mechanize(steadax.sgd(0.5), num_betas=3)).count(3) == 0


def test_signatures_and_state_fields_match_optax():
  import inspect

  import optax
  from optax.contrib import _dog as optax_dog

  def parameters(fn):
    return [(k, v.default) for k, v in inspect.signature(fn).parameters.items()]

  for name in ["dadapt_adamw", "dog", "dowg", "mechanize", "momo", "momo_adam", "cocob", "scale_by_cocob"]:
    assert parameters(getattr(contrib, name)) == parameters(getattr(optax.contrib, name)), name
  for name in ["scale_by_dog", "scale_by_dowg"]:  # private in Optax 0.2.8, public here
    assert parameters(getattr(contrib, name)) == parameters(getattr(optax_dog, name)), name
  for name in ["DAdaptAdamWState", "DoGState", "DoWGState", "MechanicState", "MomoState", "MomoAdamState",
               "COCOBState"]:
    assert getattr(contrib, name)._fields == getattr(optax.contrib, name)._fields, name
