"""with_stats and stats (issue 34 §4): updates bit for bit, statistics against NumPy, one reader.

The programs are small (two or three leaves) and shared: one jitted ``lax.scan`` runs every
optimizer with and without statistics over the same gradients.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax

STEPS = 7
SCHEDULE = steadax.linear_schedule(0.1, 0.01, 6)


def _params():
  return {"dense": {"kernel": jnp.array([[0.5, -1.0], [0.2, 0.3]], jnp.float32),
                    "bias": jnp.array([0.1, -0.2], jnp.float32)},
          "embed": jnp.array([0.3, -0.7, 1.1], jnp.float32)}


def _grads():
  """STEPS gradients, one with a spike (step 4) and one with a NaN (step 5)."""
  rng = np.random.default_rng(0)
  params = _params()
  seq = []
  for i in range(STEPS):
    scale = 40.0 if i == 4 else 1.0
    g = jax.tree_util.tree_map(lambda p: np.asarray(rng.normal(size=p.shape) * scale, np.float32), params)
    if i == 5:
      g["embed"][1] = np.nan
    seq.append(g)
  return jax.tree_util.tree_map(lambda *xs: jnp.asarray(np.stack(xs)), *seq)


def _groups_base():
  return steadax.groups({"re:.*bias": {"wd_mult": 0.0}, "embed": {"lr_mult": 3.0}, "*": {}},
                        steadax.adamw(SCHEDULE, weight_decay=0.1))


# name -> the optimizer (with_stats wraps it); every one of them must update bit for bit alike.
OPTIMIZERS = {
    "adamw_schedule": lambda: steadax.adamw(SCHEDULE, weight_decay=0.05),
    "clip_adamw": lambda: steadax.chain(steadax.clip_by_global_norm(3.0), steadax.adamw(1e-2)),
    "groups_multipliers": _groups_base,
    "partition_clip": lambda: steadax.partition(
        {"a": steadax.chain(steadax.clip_by_global_norm(0.3), steadax.adam(0.05)),
         "b": steadax.sgd(0.1, momentum=0.9)},
        lambda p: jax.tree_util.tree_map(lambda x: "a" if x.ndim > 1 else "b", p)),
    "multisteps": lambda: steadax.MultiSteps(
        steadax.chain(steadax.clip_by_global_norm(0.5), steadax.adamw(SCHEDULE)), every_k_schedule=3),
    "inject": lambda: steadax.inject_hyperparams(steadax.adamw)(learning_rate=SCHEDULE, weight_decay=0.1),
    "skip_guards": lambda: steadax.apply_if_finite(steadax.skip_spikes(
        steadax.sgd(0.05, momentum=0.9), factor=3.0, warmup_steps=2, watch="grad_norm"), 2),
}


def _run(tx, grads, params):
  def step(state, g):
    updates, state = tx.update(g, state, params)
    return state, (updates, state)

  return jax.lax.scan(step, tx.init(params), grads)


@pytest.fixture(scope="module")
def runs():
  """Every optimizer over STEPS steps, plain and with statistics (norms on), in one program."""
  params, grads = _params(), _grads()

  @jax.jit
  def all_runs(grads, params):
    out = {}
    for name, make in OPTIMIZERS.items():
      plain = _run(make(), grads, params)
      stats = _run(steadax.with_stats(make(), norms=True), grads, params)
      out[name] = (plain, stats)
    return out

  return jax.device_get(all_runs(grads, params)), jax.device_get(grads), jax.device_get(params)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_updates_and_inner_state_bit_identical(runs, name):
  (plain, stats) = runs[0][name]
  (plain_state, (plain_updates, plain_states)), (state, (updates, states)) = plain, stats
  jax.tree_util.tree_map(np.testing.assert_array_equal, updates, plain_updates)
  jax.tree_util.tree_map(np.testing.assert_array_equal, states.inner_state, plain_states)
  assert jax.tree_util.tree_structure(state.inner_state) == jax.tree_util.tree_structure(plain_state)


def _norm(tree):
  return float(np.sqrt(sum(np.sum(np.asarray(x, np.float64) ** 2) for x in jax.tree_util.tree_leaves(tree))))


def _at(tree, i):
  return jax.tree_util.tree_map(lambda x: x[i], tree)


def test_norms_and_clip_against_numpy(runs):
  _, grads, params = runs
  _, (_, (updates, states)) = runs[0]["clip_adamw"]
  clipped = []
  for i in range(STEPS):
    logs = steadax.stats(_at(states, i))
    g, u = _at(grads, i), _at(updates, i)
    if i == 5:  # the NaN step: the norm is NaN, the clip says so
      assert np.isnan(logs["grad_norm"])
      continue
    norm = _norm(g)
    np.testing.assert_allclose(logs["grad_norm"], norm, rtol=1e-6)
    assert bool(logs["clipped"]) == (norm > 3.0)
    clipped.append(bool(logs["clipped"]))
    np.testing.assert_allclose(logs["clip_factor"], min(1.0, 3.0 / norm), rtol=1e-6)
    np.testing.assert_allclose(logs["update_norm"], _norm(u), rtol=1e-6)
    np.testing.assert_allclose(logs["param_norm"], _norm(params), rtol=1e-6)
    np.testing.assert_allclose(logs["update_rms_ratio"], _norm(u) / _norm(params), rtol=1e-6)
    assert float(logs["learning_rate"]) == np.float32(1e-2)
  assert True in clipped and False in clipped  # both sides of the clip's decision were seen


def test_learning_rate_is_the_schedule_at_the_step(runs):
  for name in ("adamw_schedule", "inject"):
    _, (_, (_, states)) = runs[0][name]
    rates = [float(steadax.stats(_at(states, i))["learning_rate"]) for i in range(STEPS)]
    # The schedule at the optimizer's int32 count (its value is float32 then, x64 or not, as
    # Optax's), applied to float32 parameters.
    assert rates == [float(np.float32(SCHEDULE(jnp.int32(i)))) for i in range(STEPS)], name


def test_multisteps_learning_rate_of_the_last_real_step(runs):
  _, (_, (updates, states)) = runs[0]["multisteps"]
  rates = [float(steadax.stats(_at(states, i))["learning_rate"]) for i in range(STEPS)]
  # Real steps at calls 2 and 5 (k=3) apply the schedule at counts 0 and 1; calls before the
  # first real step show the rate it will apply.
  expected = [SCHEDULE(0)] * 5 + [SCHEDULE(1)] * 2
  assert rates == [float(np.float32(r)) for r in expected]  # counts 0 and 1: exact in any dtype
  ratios = [float(steadax.stats(_at(states, i))["update_rms_ratio"]) for i in range(STEPS)]
  assert ratios[0] == ratios[1] == 0.0 and ratios[2] > 0 and ratios[3] == ratios[4] == ratios[2]
  assert np.all(np.asarray(_at(updates, 3)["embed"]) == 0)


def test_groups_learning_rates_and_ratios_per_group(runs):
  _, grads, params = runs
  _, (_, (updates, states)) = runs[0]["groups_multipliers"]
  labels = steadax.group_labels(_groups_base(), params)
  for i in (0, 3):
    logs = steadax.stats(_at(states, i))
    assert float(logs["learning_rate/embed"]) == np.float32(np.float32(SCHEDULE(i)) * np.float32(3.0))
    assert float(logs["learning_rate/*"]) == float(logs["learning_rate/re:.*bias"]) == np.float32(SCHEDULE(i))
    for label in ("re:.*bias", "embed", "*"):
      pick = lambda tree: [x for x, l in zip(jax.tree_util.tree_leaves(tree),  # noqa: E731
                                             jax.tree_util.tree_leaves(labels)) if l == label]
      u, p = pick(_at(updates, i)), pick(params)
      np.testing.assert_allclose(logs[f"update_rms_ratio/{label}"], _norm(u) / _norm(p), rtol=1e-6)
      np.testing.assert_allclose(logs[f"grad_norm/{label}"], _norm(pick(_at(grads, i))), rtol=1e-6)
    np.testing.assert_allclose(logs["grad_norm"], _norm(_at(grads, i)), rtol=1e-6)


def test_partition_clip_per_group(runs):
  _, grads, _ = runs
  _, (_, (_, states)) = runs[0]["partition_clip"]
  logs = steadax.stats(_at(states, 0))
  kernel_norm = _norm(_at(grads, 0)["dense"]["kernel"])
  np.testing.assert_allclose(logs["grad_norm/a"], kernel_norm, rtol=1e-6)
  assert bool(logs["clipped/a"]) == (kernel_norm > 0.3)
  assert "clipped/b" not in logs and "clipped" not in logs
  assert float(logs["learning_rate/a"]) == np.float32(0.05) and float(logs["learning_rate/b"]) == np.float32(0.1)


def test_skipped_steps_are_read_from_the_guards(runs):
  _, (_, (_, states)) = runs[0]["skip_guards"]
  seen = [steadax.stats(_at(states, i)) for i in range(STEPS)]
  # Step 4's spike is skipped by skip_spikes, step 5's NaN by apply_if_finite, outside it: the
  # inner guard did not run at step 5, so its flag still tells of the last step it saw (step 4).
  assert [bool(s["spike_skipped"]) for s in seen] == [False] * 4 + [True, True, False]
  assert [bool(s["not_finite"]) for s in seen] == [False] * 5 + [True, False]
  assert int(seen[-1]["spike_skips"]) == 1 and int(seen[-1]["not_finite_total"]) == 1
  # The rate of the last step that ran is kept over the skipped ones (the update ratio too).
  ratios = [float(s["update_rms_ratio"]) for s in seen]
  assert ratios[4] == ratios[3] and ratios[5] == ratios[3] and ratios[6] != ratios[3]


def test_default_keeps_only_what_is_free():
  params = _params()
  for tx, keys in [
      (steadax.adamw(1e-3), {"learning_rate"}),
      (steadax.chain(steadax.clip_by_global_norm(1.0), steadax.adamw(1e-3)),
       {"learning_rate", "grad_norm", "clipped", "clip_factor"}),
      # Behind accumulation the clip sees the accumulated gradient, not the one given to update.
      (steadax.MultiSteps(steadax.chain(steadax.clip_by_global_norm(1.0), steadax.sgd(0.1)), 2),
       {"learning_rate"}),
  ]:
    state = jax.eval_shape(steadax.with_stats(tx).init, params)
    assert set(state.statistics) == keys
  # Foreign transformations are opaque: no rate is found inside Optax's adam.
  assert steadax.with_stats(optax.adam(1e-3)).init(params).statistics == {}


def test_injected_learning_rate_overwritten_between_steps():
  params, g = _params(), _at(_grads(), 0)
  tx = steadax.with_stats(steadax.inject_hyperparams(steadax.sgd)(learning_rate=0.1))
  state = tx.init(params)
  state = steadax.state_set(state, "learning_rate", 0.25)
  updates, state = jax.jit(tx.update)(g, state, params)
  assert float(steadax.stats(state)["learning_rate"]) == 0.25
  assert float(steadax.stats(state)["hyperparams.learning_rate"]) == 0.25
  np.testing.assert_array_equal(updates["embed"], -0.25 * g["embed"])


def test_reader_finds_statistics_in_framework_holders():
  from flax import nnx
  from flax.training import train_state

  class Model(nnx.Module):
    def __init__(self):
      self.w = nnx.Param(jnp.ones(3))

  tx = steadax.with_stats(steadax.chain(steadax.clip_by_global_norm(1.0), steadax.adamw(1e-3)))
  model = Model()
  optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
  grads = nnx.state(model, nnx.Param)
  grads = jax.tree_util.tree_map(lambda x: x * 2.0, grads)
  optimizer.update(model, grads)
  logs = steadax.stats(optimizer)
  np.testing.assert_allclose(logs["grad_norm"], 2.0 * np.sqrt(3.0), rtol=1e-6)
  assert float(logs["learning_rate"]) == np.float32(1e-3)

  state = train_state.TrainState.create(apply_fn=None, params={"w": jnp.ones(3)}, tx=tx)
  state = state.apply_gradients(grads={"w": jnp.full(3, 0.1)})
  assert bool(steadax.stats(state)["clipped"]) is False


def test_reader_names_groups_duplicates_and_leaves_out_non_scalars():
  params = {"w": jnp.ones(2), "b": jnp.ones(1)}
  tx = steadax.chain(
      steadax.monitor({"norm": steadax.tree.norm, "abs": lambda u: jax.tree_util.tree_map(jnp.abs, u)}),
      steadax.skip_spikes(steadax.sgd(0.1), watch="grad_norm"),
      steadax.skip_spikes(steadax.identity(), watch="grad_norm"),
      steadax.partition({"x": steadax.with_stats(steadax.sgd(0.2)), "y": steadax.with_stats(steadax.sgd(0.3))},
                        {"w": "x", "b": "y"}),
  )
  state = tx.init(params)
  _, state = tx.update(params, state, params)
  logs = steadax.stats(state)
  assert set(logs) == {"monitor.norm", "spike_skipped", "spike_skips", "spike_skipped.1",
                       "spike_skips.1", "learning_rate/x", "learning_rate/y"}
  assert float(logs["learning_rate/y"]) == np.float32(0.3)


def test_state_types_are_stable_under_x64_and_mixed_dtypes():
  params = {"a": jnp.ones(3, jnp.bfloat16), "b": jnp.ones(2, jnp.float32)}
  tx = steadax.with_stats(steadax.chain(steadax.clip_by_global_norm(1.0), steadax.adamw(SCHEDULE)),
                          norms=True)
  state = tx.init(params)
  grads = jax.tree_util.tree_map(lambda p: jnp.full(p.shape, 0.5, p.dtype), params)
  _, new = jax.jit(tx.update)(grads, state, params)
  types = lambda s: [(x.dtype, x.shape, x.weak_type) for x in jax.tree_util.tree_leaves(s)]  # noqa: E731
  assert types(new) == types(state)
  assert state.statistics["grad_norm"].dtype == jnp.float32 and state.statistics["clipped"].dtype == jnp.bool_


def test_without_params_the_parameter_norms_are_nan():
  tx = steadax.with_stats(steadax.sgd(0.1), norms=True)
  g = {"w": jnp.array([3.0, 4.0])}
  _, state = tx.update(g, tx.init(g))
  logs = steadax.stats(state)
  assert np.isnan(logs["param_norm"]) and np.isnan(logs["update_rms_ratio"])
  np.testing.assert_allclose(logs["update_norm"], 0.5, rtol=1e-6)
