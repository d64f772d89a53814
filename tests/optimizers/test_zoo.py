"""The zoo's optimizers: defining properties, low precision, abstract init, Polyak's extra argument."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax

from ..conformance import _harness as h

# Every optimizer of the zoo, built for a problem with O(1) parameters.
ZOO = {
    "adabelief": lambda: steadax.adabelief(1e-2),
    "adadelta": lambda: steadax.adadelta(),
    "adan": lambda: steadax.adan(1e-2, weight_decay=1e-3),
    "fromage": lambda: steadax.fromage(1e-2),
    "noisy_sgd": lambda: steadax.noisy_sgd(1e-2, key=0),
    "novograd": lambda: steadax.novograd(1e-2),
    "optimistic_gradient_descent": lambda: steadax.optimistic_gradient_descent(1e-2),
    "optimistic_adam": lambda: steadax.optimistic_adam(1e-2),
    "optimistic_adam_v2": lambda: steadax.optimistic_adam_v2(1e-2),
    "polyak_sgd": lambda: steadax.polyak_sgd(),
    "radam": lambda: steadax.radam(1e-2),
    "rprop": lambda: steadax.rprop(1e-2),
    "sign_sgd": lambda: steadax.sign_sgd(1e-2),
    "signum": lambda: steadax.signum(1e-2),
    "sm3": lambda: steadax.sm3(1e-2),
    "yogi": lambda: steadax.yogi(1e-2),
    "distance_over_gradients": lambda: steadax.chain(steadax.scale_by_distance_over_gradients(), steadax.sgd(1.0)),
}
ADAM_LIKE = ["adabelief", "adan", "novograd", "optimistic_adam", "optimistic_adam_v2", "radam", "yogi", "sm3",
             "adadelta"]


def _extra(name, value=1.0):
  return {"value": jnp.asarray(value, jnp.float32)} if name == "polyak_sgd" else {}


def test_sign_sgd_update_is_the_sign():
  g = {"w": jnp.array([3.0, -1e-4, 0.0]), "b": jnp.array([-7.0], jnp.bfloat16)}
  opt = steadax.sign_sgd(0.5)
  u, _ = opt.update(g, opt.init(g))
  np.testing.assert_array_equal(u["w"], [-0.5, 0.5, 0.0])
  np.testing.assert_array_equal(u["b"], np.array([0.5], np.float32))
  assert u["b"].dtype == jnp.bfloat16


def test_signum_follows_the_sign_of_the_momentum_not_of_the_gradient():
  opt = steadax.signum(0.1, beta=0.9)
  state = opt.init(jnp.zeros(1))
  _, state = opt.update(jnp.array([10.0]), state)
  u, _ = opt.update(jnp.array([-1.0]), state)  # momentum 0.9 * 1 - 0.1 is still positive
  np.testing.assert_allclose(u, [-0.1])


def test_fromage_keeps_the_norm_for_an_orthogonal_gradient_and_bounds_the_relative_change():
  lr = 0.1
  opt = steadax.fromage(lr)
  p = {"w": jnp.array([[3.0, 0.0], [0.0, 4.0]]), "b": jnp.array([1.0, 1.0])}
  g = {"w": jnp.array([[0.0, 7.0], [-5.0, 0.0]]), "b": jnp.array([1.0, -1.0])}  # orthogonal to p
  u, _ = opt.update(g, opt.init(p), p)
  new = steadax.apply_updates(p, u)
  for k in p:
    norm, new_norm = np.linalg.norm(p[k]), np.linalg.norm(new[k])
    assert new_norm == pytest.approx(norm, rel=1e-6)
    # The step before the norm correction is exactly lr * ||w|| (Bernstein et al. 2020, eq. 11).
    assert np.linalg.norm(np.asarray(new[k]) * np.sqrt(1 + lr**2) - np.asarray(p[k])) == pytest.approx(
        lr * norm, rel=1e-5)


def test_fromage_with_a_schedule():
  opt = steadax.fromage(lambda count: 0.1 / (1.0 + count.astype(jnp.float32)))
  p = jnp.array([3.0, 4.0])
  state = opt.init(p)
  _, state = opt.update(jnp.array([0.0, 1.0]), state, p)
  assert int(state[1].count) == 1 and int(state[2].count) == 1


@pytest.mark.parametrize("name", ADAM_LIKE)
def test_float16_tiny_gradients_give_finite_updates(name):
  # Optax 0.2.8 computes these in float16, where eps (1e-8) and g^2 (1e-14) underflow to 0.
  opt = ZOO[name]()
  params = {"w": jnp.full((2, 3), 0.5, jnp.float16), "s": jnp.asarray(0.25, jnp.float16)}
  grads = jax.tree_util.tree_map(lambda p: jnp.full(p.shape, 1e-7, jnp.float16), params)
  state = opt.init(params)
  for _ in range(8):  # past RAdam's momentum-only warm-up, whose tiny steps round to 0 in float16
    u, state = opt.update(grads, state, params, **_extra(name))
    h.assert_finite(u, f"{name} updates")
    h.assert_finite(state, f"{name} state")
    assert all(x.dtype == jnp.float16 for x in jax.tree_util.tree_leaves(u))
  assert any(np.any(np.asarray(x, np.float32) != 0) for x in jax.tree_util.tree_leaves(u))


@pytest.mark.parametrize("name", sorted(ZOO))
def test_init_from_abstract_parameters(name):
  params = {"w": jnp.ones((3, 2), jnp.float32), "h": jnp.ones((4,), jnp.bfloat16), "s": jnp.asarray(1.0)}
  abstract = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
  opt = ZOO[name]()
  h.assert_same_types(jax.eval_shape(opt.init, abstract), opt.init(params), f"{name} init")


def test_sm3_works_with_scalar_parameters():
  opt = steadax.sm3(0.1)
  params = {"s": jnp.asarray(2.0), "m": jnp.ones((2, 3))}
  state = opt.init(params)
  for _ in range(3):
    u, state = opt.update(jax.tree_util.tree_map(lambda p: 2 * p, params), state, params)
    params = steadax.apply_updates(params, u)
  assert float(params["s"]) < 2.0 and np.all(np.asarray(params["m"]) < 1.0)


def test_polyak_sgd_mixed_tree_keeps_dtypes_inside_scan():
  params = {"f32": jnp.array([1.0, -2.0], jnp.float32), "bf16": jnp.array([0.5, 3.0], jnp.bfloat16)}
  loss = lambda p: sum(jnp.sum(x.astype(jnp.float32) ** 2) for x in jax.tree_util.tree_leaves(p))
  opt = steadax.polyak_sgd(max_learning_rate=0.3, scaling=lambda c: 1.0 / (1.0 + c.astype(jnp.float32)))
  state = opt.init(params)

  @jax.jit
  def run(params, state):
    def body(carry, _):
      p, s = carry
      value, grads = jax.value_and_grad(loss)(p)
      # value arrives in another dtype than the tree's: it must not leak into updates or state.
      u, s = opt.update(grads, s, p, value=value.astype(jnp.bfloat16))
      return (steadax.apply_updates(p, u), s), u

    return jax.lax.scan(body, (params, state), None, length=4)

  (new_params, new_state), updates = run(params, state)
  h.assert_same_types(state, new_state, "polyak_sgd state")
  assert updates["bf16"].dtype == jnp.bfloat16 and updates["f32"].dtype == jnp.float32
  assert new_state[0][1].count.dtype == jnp.int32
  assert loss(new_params) < loss(params)


def test_polyak_step_uses_the_widest_dtype_of_a_mixed_tree():
  g = {"f32": jnp.array([1e-3, 2.0], jnp.float32), "bf16": jnp.array([1.0], jnp.bfloat16)}
  wide = {"f32": g["f32"], "bf16": g["bf16"].astype(jnp.float32)}
  tx = steadax.scale_by_polyak(max_learning_rate=100.0)
  u_mixed, _ = tx.update(g, tx.init(g), value=1.2345)
  u_wide, _ = tx.update(wide, tx.init(wide), value=1.2345)
  np.testing.assert_allclose(u_mixed["f32"], u_wide["f32"], rtol=1e-7)


def test_polyak_sgd_without_value_raises_naming_the_argument():
  opt = steadax.polyak_sgd()
  p = jnp.ones(2)
  with pytest.raises(TypeError, match="needs the keyword argument `value`"):
    opt.update(p, opt.init(p), p)


def test_optimistic_gradient_descent_converges_on_a_bilinear_game():
  # min_x max_y x*y: simultaneous gradient descent-ascent spirals outwards, OGD converges.
  def grads(p):
    return {"x": p["y"], "y": -p["x"]}

  def run(opt, steps=200):
    p = {"x": jnp.asarray(1.0), "y": jnp.asarray(1.0)}
    state = opt.init(p)
    for _ in range(steps):
      u, state = opt.update(grads(p), state, p)
      p = steadax.apply_updates(p, u)
    return float(jnp.hypot(p["x"], p["y"]))

  assert run(steadax.optimistic_gradient_descent(0.2)) < 0.1  # from sqrt(2)
  assert run(steadax.sgd(0.2)) > 10.0


@pytest.mark.parametrize("make, error, match", [
    (lambda: steadax.rprop(lambda c: 0.1), TypeError, "rprop: learning_rate is the initial step size"),
    (lambda: steadax.optimistic_adam(lambda c: 0.1), TypeError, "optimistic_adam: learning_rate must be a scalar"),
    (lambda: steadax.optimistic_gradient_descent(0.1, beta=lambda c: 1.0), TypeError, "beta must be a scalar"),
    (lambda: steadax.optimistic_adam_v2(0.1, b2=1.0), ValueError, "optimistic_adam_v2: b2"),
    (lambda: steadax.adabelief(float("nan")), ValueError, "adabelief: learning_rate must be finite"),
    (lambda: steadax.adan(0.1, weight_decay=-1.0), ValueError, "adan: weight_decay"),
    (lambda: steadax.radam(0.1, threshold=2.0), ValueError, "radam: threshold"),
    (lambda: steadax.signum(0.1, beta=1.0), ValueError, "signum: beta"),
    (lambda: steadax.sm3(0.1, momentum=1.0), ValueError, "sm3 > scale_by_sm3: b1"),
    (lambda: steadax.polyak_sgd(variant="sgd"), ValueError, "scale_by_polyak: variant"),
    (lambda: steadax.polyak_sgd(max_learning_rate=0.0), ValueError, "max_learning_rate"),
    (lambda: steadax.fromage(0.1, min_norm=-1.0), ValueError, "fromage: min_norm"),
    (lambda: steadax.noisy_sgd(0.1, key=0, gamma=-1.0), ValueError, "noisy_sgd: gamma"),
    (lambda: steadax.adadelta(rho=1.0), ValueError, "adadelta: rho"),
    (lambda: steadax.yogi("0.1"), TypeError, "yogi: learning_rate"),
])
def test_bad_hyperparameters_raise_clear_errors(make, error, match):
  with pytest.raises(error, match=match):
    make()
