"""MultiSteps, its skip functions and apply_every: behaviour, Optax agreement, type stability."""

from __future__ import annotations

import functools
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax
from tests.compile_flags import device_env

X64 = bool(jax.config.jax_enable_x64)


def _params():
  return {"w": jnp.array([1.0, -2.0, 0.5], jnp.float32), "b": jnp.asarray(0.3, jnp.float32)}


def _grads(i, params):
  # Different gradients at every mini-step, so a wrong average shows.
  return jax.tree_util.tree_map(lambda x: x * jnp.asarray(1.0 + 0.5 * i, x.dtype) - 0.1 * i, params)


def _run_pair(ours, theirs, steps, grads_fn=_grads):
  """Run steadax's and Optax's wrappers side by side; returns per-step (ours, theirs) records."""
  p1 = p2 = _params()
  s1 = ours.init(p1)
  with jax.numpy_dtype_promotion("standard"):
    s2 = theirs.init(p2)
  # Jitted once: eager lax.cond re-traces its branches at every call.
  step1 = jax.jit(lambda g, s, p: ours.update(g, s, p))
  step2 = jax.jit(lambda g, s, p: theirs.update(g, s, p))
  records = []
  for i in range(steps):
    u1, s1 = step1(grads_fn(i, p1), s1, p1)
    p1 = steadax.apply_updates(p1, u1)
    with jax.numpy_dtype_promotion("standard"):
      u2, s2 = step2(grads_fn(i, p2), s2, p2)
      p2 = optax.apply_updates(p2, u2)
    records.append(((u1, s1, p1), (u2, s2, p2)))
  return records


def _close(a, b, rtol=1e-4, atol=2e-5):
  # The registry's differential tolerance (steadax's Adam and Optax's differ in the last bits).
  jax.tree_util.tree_map(
      lambda x, y: np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64),
                                              rtol=rtol, atol=atol), a, b)


def test_state_fields_match_optax():
  assert steadax.MultiStepsState._fields == optax.MultiStepsState._fields
  assert steadax.ApplyEvery._fields == optax.ApplyEvery._fields
  state = steadax.MultiSteps(steadax.adam(0.1), 3).init(_params())
  assert state.mini_step.dtype == jnp.int32 and state.gradient_step.dtype == jnp.int32
  assert state.skip_state == ()
  # float32 accumulators by default, as Optax.
  assert all(x.dtype == jnp.float32 for x in jax.tree_util.tree_leaves(state.acc_grads))


@pytest.mark.parametrize("use_grad_mean", [True, False])
def test_multi_steps_agrees_with_optax(use_grad_mean):
  ours = steadax.MultiSteps(steadax.adam(0.1), 3, use_grad_mean=use_grad_mean)
  theirs = optax.MultiSteps(optax.adam(0.1), 3, use_grad_mean=use_grad_mean)
  for i, ((u1, s1, p1), (u2, s2, p2)) in enumerate(_run_pair(ours, theirs, 7)):
    assert int(s1.mini_step) == int(s2.mini_step), f"mini_step at {i}"
    assert int(s1.gradient_step) == int(s2.gradient_step), f"gradient_step at {i}"
    assert bool(ours.has_updated(s1)) == bool(theirs.has_updated(s2)) == (i % 3 == 2)
    _close(u1, u2)
    _close(s1.acc_grads, s2.acc_grads)
    _close(p1, p2)


def test_multi_steps_equals_inner_on_the_mean_gradient():
  params = _params()
  ms = steadax.MultiSteps(steadax.sgd(0.1, momentum=0.9), 4)
  inner = steadax.sgd(0.1, momentum=0.9)
  s, si, p, pi = ms.init(params), inner.init(params), params, params
  update = jax.jit(ms.update)
  for period in range(2):
    grads = [_grads(4 * period + j, p) for j in range(4)]
    for j, g in enumerate(grads):
      u, s = update(g, s, p)
      if j < 3:  # nothing moves in between
        assert all(not np.any(np.asarray(x)) for x in jax.tree_util.tree_leaves(u))
      p = steadax.apply_updates(p, u)
    mean = jax.tree_util.tree_map(lambda *xs: sum(xs) / 4.0, *grads)
    ui, si = inner.update(mean, si, pi)
    pi = steadax.apply_updates(pi, ui)
    _close(p, pi)
  # The inner state moved only twice: momentum equals the inner optimizer's.
  _close(s.inner_opt_state, si)


def test_k1_holds_no_accumulator_and_calls_the_inner_directly():
  params = _params()
  ms = steadax.MultiSteps(steadax.adam(0.1), 1)
  state = ms.init(params)
  assert state.acc_grads == ()
  inner_leaves = len(jax.tree_util.tree_leaves(state.inner_opt_state))
  assert len(jax.tree_util.tree_leaves(state)) == inner_leaves + 2  # + mini_step, gradient_step
  inner = steadax.adam(0.1)
  si = inner.init(params)
  for i in range(3):
    u, state = ms.update(_grads(i, params), state, params)
    ui, si = inner.update(_grads(i, params), si, params)
    _close(u, ui, rtol=0, atol=0)
    assert bool(ms.has_updated(state)) and int(state.gradient_step) == i + 1
    assert int(state.mini_step) == 0
  # The jitted update holds no conditional at all at k=1.
  jaxpr = jax.make_jaxpr(ms.update)(_grads(0, params), ms.init(params), params)
  assert "cond" not in str(jaxpr)


def test_schedule_of_k_varies_the_period():
  # One mini-step for the first update, then three per update.
  ms = steadax.MultiSteps(steadax.sgd(1.0), lambda step: jnp.where(step < 1, 1, 3))
  params = _params()
  state = ms.init(params)
  assert jax.tree_util.tree_structure(state.acc_grads) == jax.tree_util.tree_structure(params)
  emitted = []
  for i in range(7):
    _, state = ms.update(_grads(i, params), state, params)
    emitted.append(bool(ms.has_updated(state)))
  assert emitted == [True, False, False, True, False, False, True]


def test_skip_not_finite_skips_the_mini_step_entirely():
  params = _params()
  ours = steadax.MultiSteps(steadax.adam(0.1), 2, should_skip_update_fn=steadax.skip_not_finite)
  theirs = optax.MultiSteps(optax.adam(0.1), 2, should_skip_update_fn=optax.skip_not_finite)

  def grads(i, p):
    g = _grads(i, p)
    return {"w": g["w"].at[1].set(jnp.nan), "b": g["b"]} if i == 1 else g

  records = _run_pair(ours, theirs, 5, grads)
  (u1, s1, _), _ = records[1]
  assert int(s1.mini_step) == 1 and int(s1.gradient_step) == 0  # as if the NaN step never happened
  assert bool(s1.skip_state["should_skip"]) and int(s1.skip_state["num_not_finite"]) == 1
  assert s1.skip_state["num_not_finite"].dtype == jnp.int32
  for (u1, s1, p1), (u2, s2, p2) in records:
    assert int(s1.mini_step) == int(s2.mini_step) and int(s1.gradient_step) == int(s2.gradient_step)
    _close(u1, u2)
    _close(p1, p2)
    assert np.all(np.isfinite(np.asarray(p1["w"])))


def test_skip_large_updates_through_partial():
  skip = functools.partial(steadax.skip_large_updates, max_squared_norm=4.0)
  ms = steadax.MultiSteps(steadax.sgd(1.0), 1, should_skip_update_fn=skip)
  params = {"w": jnp.zeros(2, jnp.float32)}
  state = ms.init(params)
  u, state = ms.update({"w": jnp.array([3.0, 0.0])}, state, params)
  assert bool(state.skip_state["should_skip"]) and float(state.skip_state["norm_squared"]) == 9.0
  np.testing.assert_array_equal(u["w"], np.zeros(2))
  u, state = ms.update({"w": jnp.array([1.0, 1.0])}, state, params)
  assert not bool(state.skip_state["should_skip"])
  np.testing.assert_array_equal(u["w"], -np.ones(2))


def test_skip_state_keeps_its_init_types_for_other_update_dtypes():
  # A float32 norm at init (float32 params) stays float32 when bfloat16 gradients arrive.
  skip = functools.partial(steadax.skip_large_updates, max_squared_norm=100.0)
  ms = steadax.MultiSteps(steadax.sgd(1.0), 2, should_skip_update_fn=skip)
  params = {"w": jnp.zeros(2, jnp.float32)}
  state = ms.init(params)
  _, new = ms.update({"w": jnp.ones(2, jnp.bfloat16)}, state, params)
  assert new.skip_state["norm_squared"].dtype == state.skip_state["norm_squared"].dtype


def test_bad_arguments_raise_with_names():
  with pytest.raises(ValueError, match="MultiSteps: every_k_schedule"):
    steadax.MultiSteps(steadax.sgd(0.1), 0)
  with pytest.raises(TypeError, match="MultiSteps: every_k_schedule"):
    steadax.MultiSteps(steadax.sgd(0.1), 2.5)
  ms = steadax.MultiSteps(steadax.sgd(0.1), 2, should_skip_update_fn=lambda u, s, p: (jnp.zeros(2), ()))
  params = _params()
  with pytest.raises(ValueError, match="MultiSteps: `should_skip_update_fn` must return a boolean scalar"):
    ms.update(_grads(0, params), ms.init(params), params)
  with pytest.raises(ValueError, match="apply_every: k"):
    steadax.apply_every(0)


def test_accumulator_dtype_option():
  params = {"h": jnp.ones(2, jnp.bfloat16), "c": jnp.ones(2, jnp.complex64)}
  acc = steadax.MultiSteps(steadax.sgd(0.1), 2).init(params).acc_grads
  assert acc["h"].dtype == jnp.float32 and acc["c"].dtype == jnp.complex64  # imaginary part kept
  acc = steadax.MultiSteps(steadax.sgd(0.1), 2, accumulator_dtype=None).init(params).acc_grads
  assert acc["h"].dtype == jnp.bfloat16 and acc["c"].dtype == jnp.complex64


class _DriftingInner(steadax.GradientTransformation):
  """A foreign inner optimizer whose state changes dtype (float32 -> the updates' bfloat16)."""

  def init(self, params):
    return {"last": jnp.zeros(2, jnp.float32)}

  def update(self, updates, state, params=None):
    return updates, {"last": updates["w"]}


def test_foreign_inner_drift_raises_in_strict_mode_and_is_cast_back_otherwise():
  params = {"w": jnp.ones(2, jnp.bfloat16)}
  ms = steadax.MultiSteps(steadax.GradientTransformation(_DriftingInner().init, _DriftingInner().update), 2)
  state = ms.init(params)
  # The function pair itself is under the contract: the drift is caught there, naming its update.
  with pytest.raises(steadax.ContractError, match=r"GradientTransformation\(_DriftingInner.update\).*\['last'\]"):
    ms.update(params, state, params)
  with steadax.strict_mode(False):
    step = jax.jit(ms.update)
    for _ in range(2):
      _, state = step(params, state, params)
  assert state.inner_opt_state["last"].dtype == jnp.float32
  np.testing.assert_array_equal(state.inner_opt_state["last"], np.ones(2))


def test_optax_inner_optimizer_works():
  params = _params()
  ms = steadax.MultiSteps(optax.adam(0.1), 2)
  ref = optax.MultiSteps(optax.adam(0.1), 2)
  with jax.numpy_dtype_promotion("standard"):
    for (u1, _, p1), (u2, _, p2) in _run_pair(ms, ref, 4):
      _close(u1, u2)
      _close(p1, p2)


def _mixed():
  p = {"bf16": jnp.asarray([0.5, -0.25, 1.0], jnp.bfloat16), "f32": jnp.linspace(-1.0, 1.0, 4, dtype=jnp.float32),
       "scalar": jnp.asarray(0.5, jnp.float32)}
  if X64:
    p["f64"] = jnp.asarray([0.9, -0.3], jnp.float64)
  return p


INNERS = {
    "adam_bf16_mu": lambda: steadax.adam(0.1, mu_dtype=jnp.bfloat16),
    "sgd_momentum": lambda: steadax.sgd(0.1, momentum=0.9),
    "zero_nans_sgd": lambda: steadax.chain(steadax.zero_nans(), steadax.sgd(0.1)),
    "apply_if_finite_adamw": lambda: steadax.apply_if_finite(steadax.adamw(0.1), 2),
    "schedule_free_adamw": lambda: steadax.contrib.schedule_free_adamw(0.1, warmup_steps=2),
    "inject_adam": lambda: steadax.inject_hyperparams(steadax.adam)(learning_rate=0.1),
}


@pytest.mark.parametrize("grads_f32", [False, True], ids=["grads_like_params", "grads_f32"])
def test_every_branch_keeps_types_for_mixed_precision(grads_f32):
  """All inner optimizers at once in one jitted lax.scan; a branch type mismatch fails to trace."""
  params = _mixed()
  txs = {name: steadax.MultiSteps(make(), 3) for name, make in INNERS.items()}
  skipping = steadax.MultiSteps(steadax.adam(0.1), 2, should_skip_update_fn=steadax.skip_not_finite)
  txs["adam_skip_not_finite"] = skipping
  states = {name: tx.init(params) for name, tx in txs.items()}

  def grads_of(p):
    g = jax.tree_util.tree_map(lambda x: x - jnp.asarray(0.1, x.dtype), p)
    return jax.tree_util.tree_map(lambda x: x.astype(jnp.float32), g) if grads_f32 else g

  @jax.jit
  def run(txs, params, states):
    out = {}
    for name, tx in txs.items():
      def body(carry, _, tx=tx):
        p, s = carry
        u, s = tx.update(grads_of(p), s, p)
        return (steadax.apply_updates(p, u), s), None

      out[name] = jax.lax.scan(body, (params, states[name]), None, length=4)[0]
    return out

  for name, (p, s) in run(txs, params, states).items():
    assert jax.tree_util.tree_structure(s) == jax.tree_util.tree_structure(states[name]), name
    for a, b in zip(jax.tree_util.tree_leaves(states[name]), jax.tree_util.tree_leaves(s)):
      assert (a.dtype, a.shape) == (b.dtype, b.shape), name
    for key in params:
      assert p[key].dtype == params[key].dtype, (name, key)
      assert np.all(np.isfinite(np.asarray(p[key], np.float32))), (name, key)
    assert int(s.gradient_step) == (2 if name == "adam_skip_not_finite" else 1), name


def test_inside_shard_map_on_a_one_device_mesh():
  mesh = jax.make_mesh((1,), ("data",))
  spec = jax.sharding.PartitionSpec()
  ms = steadax.MultiSteps(steadax.adam(0.1), 2)
  params = _params()
  state = ms.init(params)

  def step(params, state, grads):
    u, state = ms.update(grads, state, params)
    return steadax.apply_updates(params, u), state

  sharded = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(spec, spec, spec), out_specs=(spec, spec)))
  p1, s1, p2, s2 = params, state, params, state
  for i in range(4):
    p1, s1 = sharded(p1, s1, _grads(i, p1))
    p2, s2 = step(p2, s2, _grads(i, p2))
  _close(p1, p2)
  assert int(s1.gradient_step) == 2


_TWO_DEVICES = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np, steadax
    from jax.sharding import NamedSharding, PartitionSpec as P
    steadax.set_strict(True)
    mesh = jax.make_mesh((2,), ("x",))
    params = {"w": jnp.arange(4.0, dtype=jnp.float32), "b": jnp.asarray(0.5, jnp.float32)}
    specs = {"w": P("x"), "b": P()}
    put = lambda tree, specs: jax.tree_util.tree_map(
        lambda x, s: jax.device_put(x, NamedSharding(mesh, s)), tree, specs)
    for skip in (None, steadax.skip_not_finite):
      ms = steadax.MultiSteps(steadax.adam(0.1), 2, should_skip_update_fn=skip)
      state = ms.init(params)
      state_specs = jax.tree_util.tree_map(lambda x: P("x") if x.shape == (4,) else P(), state)
      def step(params, state, i):
        grads = jax.tree_util.tree_map(lambda x: x * 2.0 - 1.0, params)
        # A NaN in the second device's shard only, at step 1: every device must skip it.
        bad = jnp.where(jnp.logical_and(i == 1, skip is not None), jnp.nan, 0.0).astype(jnp.float32)
        grads["w"] = grads["w"] + jnp.where(params["w"] >= 2.0, bad, jnp.zeros((), jnp.float32))
        u, state = ms.update(grads, state, params)
        return steadax.apply_updates(params, u), state
      sharded = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(specs, state_specs, P()),
                                      out_specs=(specs, state_specs)))
      p1, s1 = put(params, specs), put(state, state_specs)
      p2, s2 = params, state
      for i in range(5):
        p1, s1 = sharded(p1, s1, jnp.asarray(i))
        p2, s2 = step(p2, s2, jnp.asarray(i))
        if skip is not None and i == 1:
          assert int(s1.skip_state["num_not_finite"]) == 2 and int(s1.mini_step) == 1
      np.testing.assert_allclose(p1["w"], p2["w"], rtol=1e-6)
      np.testing.assert_allclose(p1["b"], p2["b"], rtol=1e-6)
      assert np.all(np.isfinite(np.asarray(p1["w"])))
      assert int(s1.gradient_step) == 2 and len(p1["w"].sharding.device_set) == 2
    print("OK")
""")



@pytest.mark.x32_only  # a subprocess on a 2-device host mesh; sharding does not depend on x64
def test_inside_shard_map_on_two_devices_with_sharded_params_and_a_local_nan():
  env = device_env(2)
  result = subprocess.run([sys.executable, "-c", _TWO_DEVICES], env=env, capture_output=True, text=True,
                          timeout=300)
  assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


def test_apply_every_agrees_with_optax():
  records = _run_pair(steadax.chain(steadax.apply_every(3), steadax.sgd(0.1)),
                      optax.chain(optax.apply_every(3), optax.sgd(0.1)), 7)
  for i, ((u1, s1, p1), (u2, s2, p2)) in enumerate(records):
    assert int(s1[0].count) == int(s2[0].count)
    _close(s1[0].grad_acc, s2[0].grad_acc)
    _close(u1, u2)
    _close(p1, p2)
    assert any(np.any(np.asarray(x)) for x in jax.tree_util.tree_leaves(u1)) == (i % 3 == 2)


def test_apply_every_k1_is_the_identity_without_a_buffer():
  tx = steadax.apply_every()
  params = _params()
  state = tx.init(params)
  assert state.grad_acc == () and state.count.dtype == jnp.int32
  u, new = tx.update(_grads(1, params), state, params)
  _close(u, _grads(1, params), rtol=0, atol=0)
  assert int(new.count) == 0


def test_apply_every_accumulator_dtype():
  params = {"h": jnp.ones(2, jnp.bfloat16)}
  assert steadax.apply_every(2).init(params).grad_acc["h"].dtype == jnp.bfloat16
  tx = steadax.apply_every(2, accumulator_dtype=jnp.float32)
  state = tx.init(params)
  assert state.grad_acc["h"].dtype == jnp.float32
  u, state = tx.update(params, state, params)
  assert u["h"].dtype == jnp.bfloat16


def test_every_wrapper_is_a_contract_checked_transformation():
  wrappers = [
      steadax.MultiSteps(steadax.sgd(0.1), 2).gradient_transformation(),
      steadax.apply_every(2),
      steadax.apply_if_finite(steadax.sgd(0.1), 1),
      steadax.zero_nans(),
      steadax.conditionally_transform(steadax.sgd(0.1), lambda s: s > 0),
      steadax.conditionally_mask(steadax.sgd(0.1), lambda s: s > 0),
      steadax.snapshot("n", steadax.global_norm),
      steadax.monitor({"n": steadax.global_norm}),
      steadax.measure_with_ema(steadax.global_norm, 0.9),
      steadax.skip_spikes(steadax.sgd(0.1)),
  ]
  for tx in wrappers:
    assert isinstance(tx, steadax.Transformation), type(tx)
    # Unpacks as Optax's (init, update) pair too.
    init, update = tx
    assert callable(init) and callable(update)
