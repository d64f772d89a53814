"""Defining properties of the zoo's blocks: rprop, centralize, sm3, yogi, radam, adan, adadelta,
novograd, optimistic gradients, Polyak steps, DoG and gradient noise."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax


def _run(tx, grads, params=None, **extra):
  """Feed a sequence of gradients; return the list of updates and the final state."""
  ref = grads[0] if params is None else params
  state = tx.init(ref)
  outs = []
  for g in grads:
    u, state = tx.update(g, state, params, **extra)
    outs.append(u)
  return outs, state


# --- rprop -------------------------------------------------------------------------------------


def test_rprop_step_sizes_grow_on_agreement_and_shrink_on_flips():
  tx = steadax.scale_by_rprop(0.1, eta_minus=0.5, eta_plus=1.2)
  g = [jnp.array([1.0, 1.0]), jnp.array([2.0, -1.0]), jnp.array([3.0, 1.0])]
  state = tx.init(g[0])
  _, state = tx.update(g[0], state)
  np.testing.assert_allclose(state.step_sizes, [0.1, 0.1])  # no previous sign yet
  _, state = tx.update(g[1], state)
  np.testing.assert_allclose(state.step_sizes, [0.12, 0.05], rtol=1e-6)  # kept sign / flipped sign
  u, state = tx.update(g[2], state)
  # After a flip the stored update is zero, so the step size neither grows nor shrinks.
  np.testing.assert_allclose(state.step_sizes, [0.144, 0.05], rtol=1e-6)
  np.testing.assert_allclose(u, [0.144, 0.05], rtol=1e-6)


def test_rprop_skips_the_step_after_a_flip_and_moves_along_the_sign():
  tx = steadax.scale_by_rprop(0.5)
  (u1, u2), _ = _run(tx, [jnp.array([-3.0, 2.0]), jnp.array([1.0, 7.0])])
  np.testing.assert_array_equal(u1, [-0.5, 0.5])  # magnitude is the step size, not |g|
  np.testing.assert_allclose(u2, [0.0, 0.6], rtol=1e-6)


def test_rprop_step_sizes_stay_within_bounds():
  tx = steadax.scale_by_rprop(1.0, eta_minus=0.1, eta_plus=3.0, min_step_size=0.05, max_step_size=2.0)
  same = [jnp.array([1.0])] * 5
  _, state = _run(tx, same)
  assert float(state.step_sizes[0]) == pytest.approx(2.0)
  flips = [jnp.array([(-1.0) ** i]) for i in range(8)]
  _, state = _run(tx, flips)
  assert float(state.step_sizes[0]) == pytest.approx(0.05)


def test_rprop_rejects_complex_parameters_naming_the_path():
  tx = steadax.scale_by_rprop(0.1)
  with pytest.raises(TypeError, match=r"scale_by_rprop: parameter at \['z'\] is complex"):
    tx.init({"z": jnp.ones(2, jnp.complex64), "x": jnp.ones(2)})


# --- centralize --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_centralize_gives_zero_mean_rows(dtype):
  rng = np.random.default_rng(0)
  g = {"w": jnp.asarray(rng.normal(size=(4, 5)) + 3.0, dtype),
       "k": jnp.asarray(rng.normal(size=(3, 2, 2)), dtype),
       "b": jnp.asarray(rng.normal(size=(5,)) + 1.0, dtype)}
  tx = steadax.centralize()
  u, _ = tx.update(g, tx.init(g))
  tol = 1e-6 if dtype == jnp.float32 else 3e-2
  np.testing.assert_allclose(np.asarray(u["w"], np.float32).mean(axis=1), 0.0, atol=tol)
  np.testing.assert_allclose(np.asarray(u["k"], np.float32).mean(axis=(1, 2)), 0.0, atol=tol)
  np.testing.assert_array_equal(u["b"], g["b"])  # vectors pass through
  # Only the row means are removed: the centred gradient differs from g by a per-row constant.
  shift = np.asarray(g["w"], np.float32) - np.asarray(u["w"], np.float32)
  np.testing.assert_allclose(shift, np.repeat(shift[:, :1], 5, axis=1), atol=4 * tol)
  assert all(x.dtype == dtype for x in jax.tree_util.tree_leaves(u))


# --- sm3 ---------------------------------------------------------------------------------------


def test_sm3_on_vectors_and_scalars_is_adagrad_with_momentum():
  grads = [{"v": jnp.array([1.0, -2.0]), "s": jnp.asarray(3.0)},
           {"v": jnp.array([3.0, 0.5]), "s": jnp.asarray(-1.0)}]
  tx = steadax.scale_by_sm3(b1=0.0, eps=0.0)
  ups, state = _run(tx, grads)
  sum_sq = {"v": np.array([10.0, 4.25]), "s": np.array(10.0)}
  np.testing.assert_allclose(ups[1]["v"], np.array([3.0, 0.5]) / np.sqrt(sum_sq["v"]), rtol=1e-6)
  np.testing.assert_allclose(ups[1]["s"], -1.0 / np.sqrt(sum_sq["s"]), rtol=1e-6)
  np.testing.assert_allclose(state.mu["s"][0], sum_sq["s"], rtol=1e-6)


def test_sm3_matrix_accumulators_bound_the_true_sum_of_squares():
  rng = np.random.default_rng(1)
  grads = [jnp.asarray(rng.normal(size=(3, 4)), jnp.float32) for _ in range(6)]
  tx = steadax.scale_by_sm3(b1=0.0, eps=0.0)
  state = tx.init(grads[0])
  true_sum = np.zeros((3, 4))
  for g in grads:
    u, state = tx.update(g, state)
    true_sum += np.asarray(g) ** 2
    rows, cols = state.mu
    assert rows.shape == (3,) and cols.shape == (4,)  # n + m accumulators, not n * m
    estimate = np.minimum(np.asarray(rows)[:, None], np.asarray(cols)[None, :])
    # SM3's guarantee (Anil et al. 2019, Prop. 1): the cover estimate never underestimates.
    assert np.all(estimate >= true_sum - 1e-5)
    assert np.all(np.abs(np.asarray(u)) <= np.abs(np.asarray(g)) / np.sqrt(true_sum) + 1e-6)


# --- Adam relatives ----------------------------------------------------------------------------


def test_yogi_moves_the_second_moment_additively():
  tx = steadax.scale_by_yogi(b2=0.9, initial_accumulator_value=1.0)
  state = tx.init(jnp.zeros(2))
  g = jnp.array([2.0, 0.5])  # g^2 = 4 above v = 1, and 0.25 below it
  _, state = tx.update(g, state)
  # v moves towards g^2 by exactly (1 - b2) g^2, up or down.
  np.testing.assert_allclose(state.nu, [1.0 + 0.1 * 4.0, 1.0 - 0.1 * 0.25], rtol=1e-6)


def test_adabelief_and_adan_steps_are_invariant_to_gradient_scale():
  grads = [jnp.array([0.3, -1.0, 2.0]), jnp.array([0.1, -0.5, 1.0]), jnp.array([0.2, 0.7, -3.0])]
  for make in (lambda: steadax.scale_by_belief(eps=0.0, eps_root=0.0),
               lambda: steadax.scale_by_adan(eps=0.0), lambda: steadax.scale_by_yogi(eps=0.0, initial_accumulator_value=1e-30)):
    small, _ = _run(make(), grads)
    large, _ = _run(make(), [1e3 * g for g in grads])
    np.testing.assert_allclose(small[-1], large[-1], rtol=1e-5)


def test_adabelief_steps_grow_when_the_gradient_is_predictable():
  # A constant gradient has no "surprise" once the mean has caught up: AdaBelief's step keeps
  # growing while Adam's stays at 1.
  const = [jnp.array([1.0])] * 40
  belief, state = _run(steadax.scale_by_belief(eps=1e-8, eps_root=0.0), const)
  adam, adam_state = _run(steadax.scale_by_adam(), const)
  steps = [float(u[0]) for u in belief]
  assert all(b > a for a, b in zip(steps[5::5], steps[10::5]))
  assert steps[-1] > 2.5 * float(adam[-1][0])
  assert float(state.nu[0]) < 0.2 * float(adam_state.nu[0])


def test_radam_is_momentum_sgd_until_the_variance_is_tractable():
  grads = [jnp.array([1.0, -2.0]) * (1 + 0.1 * t) for t in range(8)]
  radam, _ = _run(steadax.scale_by_radam(), grads)
  momentum, _ = _run(steadax.ema(0.9, debias=True), grads)
  for t in range(5):  # rho_t < 5 for t <= 5
    np.testing.assert_allclose(radam[t], momentum[t], rtol=1e-5)
  assert not np.allclose(radam[6], momentum[6], rtol=1e-2)


def test_adan_first_step_has_no_gradient_difference():
  tx = steadax.scale_by_adan(eps=0.0, eps_root=0.0)
  (u,), state = _run(tx, [jnp.array([2.0, -0.5])])
  np.testing.assert_allclose(u, [1.0, -1.0], rtol=1e-6)  # m_hat / sqrt(n_hat) = g / |g|
  np.testing.assert_array_equal(state.v, jnp.zeros(2))
  np.testing.assert_array_equal(state.g, jnp.array([2.0, -0.5]))


# --- adadelta, novograd, optimistic ------------------------------------------------------------


def test_adadelta_first_step_is_set_by_eps():
  tx = steadax.scale_by_adadelta(rho=0.9, eps=1e-4)
  (u,), state = _run(tx, [jnp.array([2.0])])
  expected = np.sqrt(1e-4) / np.sqrt(0.1 * 4.0 + 1e-4) * 2.0
  np.testing.assert_allclose(u, [expected], rtol=1e-5)
  np.testing.assert_allclose(state.e_x, [0.1 * expected**2], rtol=1e-5)


def test_novograd_normalises_each_layer_by_its_own_gradient_norm():
  tx = steadax.scale_by_novograd(eps=0.0)
  params = {"a": jnp.zeros(2), "b": jnp.zeros(3)}
  g = {"a": jnp.array([3.0, 4.0]), "b": jnp.array([100.0, 0.0, 0.0])}
  (u,), state = _run(tx, [g], params)
  np.testing.assert_allclose(u["a"], [0.6, 0.8], rtol=1e-6)
  np.testing.assert_allclose(u["b"], [1.0, 0.0, 0.0], rtol=1e-6)
  assert state.nu["a"].shape == () and float(state.nu["b"]) == pytest.approx(1e4)
  with pytest.raises(ValueError, match="scale_by_novograd: `params` must be passed"):
    tx.update(g, state)


def test_optimistic_gradient_extrapolates_from_the_previous_gradient():
  tx = steadax.scale_by_optimistic_gradient(alpha=0.5, beta=2.0)
  (u1, u2), state = _run(tx, [jnp.array([1.0]), jnp.array([3.0])])
  np.testing.assert_allclose(u1, [0.5])  # alpha * g at the first step
  np.testing.assert_allclose(u2, [2.5 * 3.0 - 2.0 * 1.0])
  assert state.is_initial_step.dtype == jnp.bool_ and not bool(state.is_initial_step)


# --- Polyak, DoG -------------------------------------------------------------------------------


def test_polyak_step_is_the_gap_over_the_squared_norm_capped():
  tx = steadax.scale_by_polyak(f_min=1.0, max_learning_rate=10.0)
  g = {"a": jnp.array([1.0, 2.0]), "b": jnp.array([2.0])}
  u, _ = tx.update(g, tx.init(g), value=19.0)  # (19 - 1) / 9 = 2
  np.testing.assert_allclose(u["a"], [2.0, 4.0], rtol=1e-6)
  u, _ = tx.update(g, tx.init(g), value=1000.0)
  np.testing.assert_allclose(u["b"], [20.0], rtol=1e-6)  # capped at 10
  u, _ = steadax.scale_by_polyak(variant="sps+").update(g, tx.init(g), value=-3.0)
  np.testing.assert_array_equal(u["a"], [0.0, 0.0])  # negative gap clipped
  zero = {"a": jnp.zeros(2), "b": jnp.zeros(1)}
  u, _ = tx.update(zero, tx.init(zero), value=5.0)
  assert all(np.all(np.asarray(x) == 0) for x in jax.tree_util.tree_leaves(u))  # no NaN at g = 0


def test_polyak_without_value_names_the_argument():
  tx = steadax.scale_by_polyak()
  with pytest.raises(TypeError, match=r"scale_by_polyak: update\(\) needs the keyword argument `value`"):
    tx.update(jnp.ones(2), tx.init(jnp.ones(2)))


def test_distance_over_gradients_first_step_and_statistics_dtypes():
  tx = steadax.scale_by_distance_over_gradients(reps_rel=0.1, eps=0.0)
  params = {"w": jnp.array([3.0, 4.0], jnp.bfloat16), "v": jnp.array([0.0], jnp.float32)}
  state = tx.init(params)
  assert state.max_dist["w"].dtype == jnp.float32 and state.grad_sum_of_squares["w"].shape == (1,)
  assert state.init_params["w"].dtype == jnp.float32  # param_dtype, as Optax
  g = {"w": jnp.array([1.0, 0.0], jnp.bfloat16), "v": jnp.array([2.0], jnp.float32)}
  u, state = tx.update(g, state, params)
  # eta = reps_rel (1 + ||x0||) / ||g||: 0.1 * 6 / 1 for w, 0.1 * 1 / 2 for v.
  np.testing.assert_allclose(np.asarray(u["w"], np.float32), [0.6, 0.0], rtol=1e-2)
  np.testing.assert_allclose(u["v"], [0.1], rtol=1e-6)
  assert u["w"].dtype == jnp.bfloat16
  moved = {"w": params["w"] + jnp.array([30.0, 40.0], jnp.bfloat16), "v": params["v"]}
  _, state = tx.update(g, state, moved)
  assert float(state.max_dist["w"]) == pytest.approx(50.0, rel=1e-2)  # the distance travelled


# --- gradient noise ----------------------------------------------------------------------------


def test_add_noise_variance_is_annealed_as_eta_over_t_to_the_gamma():
  eta, gamma = 0.5, 0.55
  tx = steadax.add_noise(eta, gamma, key=jax.random.key(3))
  zeros = jnp.zeros(20000)
  state = tx.init(zeros)
  for t in range(1, 4):
    u, new_state = tx.update(zeros, state)
    assert not np.array_equal(np.asarray(jax.random.key_data(new_state.rng_key)),
                              np.asarray(jax.random.key_data(state.rng_key)))
    state = new_state
    np.testing.assert_allclose(np.var(np.asarray(u)), eta / t**gamma, rtol=0.05)
    assert abs(float(np.mean(np.asarray(u)))) < 0.05


def test_add_noise_is_reproducible_per_key_and_keeps_low_precision_dtypes():
  g = {"a": jnp.zeros(8, jnp.bfloat16), "b": jnp.zeros(3)}
  same = [steadax.add_noise(0.1, 0.5, key=k) for k in (7, jax.random.key(7))]
  other = steadax.add_noise(0.1, 0.5, key=8)
  u1, u2, u3 = (tx.update(g, tx.init(g))[0] for tx in (*same, other))
  np.testing.assert_array_equal(u1["b"], u2["b"])
  assert not np.array_equal(u1["b"], u3["b"])
  assert u1["a"].dtype == jnp.bfloat16 and np.std(np.asarray(u1["a"], np.float32)) > 0


def test_add_noise_key_handling():
  with pytest.warns(UserWarning, match="add_noise: no `key` given"):
    steadax.add_noise(0.1, 0.5)
  with pytest.warns(DeprecationWarning, match="`seed` is deprecated"):
    steadax.add_noise(0.1, 0.5, seed=1)
  with pytest.raises(TypeError, match="add_noise: key must be"):
    steadax.add_noise(0.1, 0.5, key=1.5)
  raw = jax.random.key_data(jax.random.key(2))
  tx = steadax.add_noise(0.1, 0.5, key=raw)
  assert jnp.issubdtype(tx.init(jnp.zeros(1)).rng_key.dtype, jax.dtypes.prng_key)


# --- bad hyperparameters -----------------------------------------------------------------------


@pytest.mark.parametrize("make, match", [
    (lambda: steadax.scale_by_belief(b1=1.0), r"scale_by_belief: b1 must lie in \[0.0, 1.0\)"),
    (lambda: steadax.scale_by_yogi(initial_accumulator_value=0.0), "initial_accumulator_value"),
    (lambda: steadax.scale_by_radam(threshold=3.0), r"scale_by_radam: threshold must lie in \[4.0"),
    (lambda: steadax.scale_by_adan(b3=-0.1), "scale_by_adan: b3"),
    (lambda: steadax.scale_by_adadelta(eps=0.0), "scale_by_adadelta: eps"),
    (lambda: steadax.scale_by_novograd(weight_decay=-1.0), "scale_by_novograd: weight_decay"),
    (lambda: steadax.scale_by_sm3(b2=1.5), "scale_by_sm3: b2"),
    (lambda: steadax.scale_by_rprop(0.1, eta_plus=0.9), "scale_by_rprop: eta_plus"),
    (lambda: steadax.scale_by_rprop(0.1, min_step_size=2.0, max_step_size=1.0), "exceeds max_step_size"),
    (lambda: steadax.scale_by_optimistic_gradient(alpha=lambda c: 1.0), "alpha must be a scalar"),
    (lambda: steadax.scale_by_polyak(variant="sps2"), "scale_by_polyak: variant must be one of"),
    (lambda: steadax.scale_by_distance_over_gradients(reps_rel=0.0), "reps_rel"),
    (lambda: steadax.add_noise(-1.0, 0.5, key=0), "add_noise: eta"),
])
def test_bad_hyperparameters_raise_clear_errors(make, match):
  with pytest.raises((ValueError, TypeError), match=match):
    make()
