"""Faults: NaN and infinite gradients injected at random steps (seeded, so the schedules are fixed).

``apply_if_finite``, ``MultiSteps(..., skip_not_finite)`` and ``skip_spikes`` skip a bad step: the
parameters stay finite and unchanged on it, the inner optimizer's state is untouched (the run equals
the inner optimizer fed the good gradients only), and the counters take exactly the values a
Python model of the documented rules gives. ``zero_nans`` zeroes the NaN entries and records which
parameters had one. Issue 13, "Faults"; docs/guarantees.md.

One compiled ``lax.scan`` per wrapper serves every seed: the schedules differ in data only.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax

STEPS = 14
SEEDS = (0, 1, 2)
PARAMS = {"w": jnp.asarray([1.0, -1.5, 2.0], jnp.float32), "b": jnp.asarray([0.5, -0.25], jnp.float32)}
KINDS = ("nan_all", "nan_one", "inf_one", "neg_inf_all")


def _schedule(seed: int, kinds=KINDS, max_run: int = 2) -> list:
  """``None`` (a good step) or a fault kind per step: about a third bad, at most ``max_run`` in a
  row, at least one of each kind."""
  rng = np.random.default_rng(seed)
  while True:
    bad = rng.random(STEPS) < 0.35
    runs = max((len(r) for r in "".join("x" if b else "." for b in bad).split(".")), default=0)
    schedule = [str(rng.choice(kinds)) if b else None for b in bad]
    if runs <= max_run and set(kinds) <= set(schedule) and not bad[0]:
      return schedule


def _grads(schedule: list) -> dict:
  """A stack of gradients, one per step, with the faults of ``schedule`` injected."""
  t = np.arange(STEPS, dtype=np.float32)[:, None]
  w = np.sin(t + np.arange(3)) + 0.1 * t
  b = np.cos(2 * t + np.arange(2))
  for i, kind in enumerate(schedule):
    if kind == "nan_all":
      w[i], b[i] = np.nan, np.nan
    elif kind == "nan_one":
      w[i, 1] = np.nan
    elif kind == "inf_one":
      b[i, 0] = np.inf
    elif kind == "neg_inf_all":
      w[i], b[i] = -np.inf, -np.inf
  return {"w": jnp.asarray(w), "b": jnp.asarray(b)}


def _good(grads: dict, schedule: list) -> dict:
  keep = np.array([kind is None for kind in schedule])
  return jax.tree.map(lambda g: g[keep], grads)


@functools.lru_cache(maxsize=None)
def _runner(tx):
  """A jitted run of ``tx`` over a stack of gradients: params and state after every step."""
  @jax.jit
  def run(grads):
    def body(carry, g):
      params, state = carry
      updates, state = tx.update(g, state, params)
      params = steadax.apply_updates(params, updates)
      return (params, state), (params, state)
    _, (params, states) = jax.lax.scan(body, (PARAMS, tx.init(PARAMS)), grads)
    return params, states
  return run


def _at(tree, i):
  return jax.tree.map(lambda x: x[i], tree)


def _assert_skipped_steps_change_nothing(params, schedule):
  previous = PARAMS
  for i, kind in enumerate(schedule):
    now = _at(params, i)
    for name in PARAMS:
      assert np.isfinite(now[name]).all(), (i, kind, name, now[name])
      if kind is not None:
        np.testing.assert_array_equal(now[name], previous[name], err_msg=f"step {i} ({kind})")
    previous = now


def _assert_same_final(params, reference):
  for name in PARAMS:
    np.testing.assert_allclose(_at(params, -1)[name], _at(reference, -1)[name], rtol=2e-6, atol=1e-7)


def _bad_step_counts(schedule):
  """``(step, kind, bad steps in a row, bad steps so far)`` after each step of ``schedule``: the
  counters every guard keeps."""
  consecutive = total = 0
  for i, kind in enumerate(schedule):
    consecutive = 0 if kind is None else consecutive + 1
    total += kind is not None
    yield i, kind, consecutive, total


INNER = steadax.adam(0.1)
APPLY_IF_FINITE = steadax.apply_if_finite(INNER, max_consecutive_errors=2)


@pytest.mark.x32_only
@pytest.mark.parametrize("seed", SEEDS)
def test_apply_if_finite(seed):
  schedule = _schedule(seed)
  grads = _grads(schedule)
  params, states = _runner(APPLY_IF_FINITE)(grads)
  _assert_skipped_steps_change_nothing(params, schedule)
  # Skipping leaves the inner state untouched: the run is Adam over the good gradients only.
  reference, _ = _runner(INNER)(_good(grads, schedule))
  _assert_same_final(params, reference)
  for i, kind, consecutive, total in _bad_step_counts(schedule):
    assert int(states.notfinite_count[i]) == consecutive, (i, schedule)
    assert int(states.total_notfinite[i]) == total
    assert bool(states.last_finite[i]) == (kind is None)
  assert int(states.inner_state[0].count[-1]) == schedule.count(None)


@pytest.mark.x32_only
def test_apply_if_finite_gives_up_after_max_consecutive_errors():
  # Three bad steps in a row with max_consecutive_errors=2: the third reaches the inner optimizer.
  schedule = [None, "nan_one", "nan_one", "nan_one"] + [None] * (STEPS - 4)
  params, states = _runner(APPLY_IF_FINITE)(_grads(schedule))
  assert np.isfinite(_at(params, 2)["w"]).all()
  assert np.isnan(_at(params, 3)["w"][1])
  assert [int(c) for c in states.notfinite_count[:5]] == [0, 1, 2, 3, 0]


MULTI_STEPS = steadax.MultiSteps(INNER, 3, should_skip_update_fn=steadax.skip_not_finite)
MULTI_STEPS_CLEAN = steadax.MultiSteps(INNER, 3)


@pytest.mark.x32_only
@pytest.mark.parametrize("seed", SEEDS)
def test_multi_steps_skip_not_finite(seed):
  schedule = _schedule(seed)
  grads = _grads(schedule)
  params, states = _runner(MULTI_STEPS)(grads)
  _assert_skipped_steps_change_nothing(params, schedule)
  reference, _ = _runner(MULTI_STEPS_CLEAN)(_good(grads, schedule))
  _assert_same_final(params, reference)
  mini = gradient = 0
  for i, kind in enumerate(schedule):
    if kind is None:
      mini += 1
      if mini == 3:
        mini, gradient = 0, gradient + 1
    assert int(states.mini_step[i]) == mini, (i, schedule)
    assert int(states.gradient_step[i]) == gradient
    assert bool(states.skip_state["should_skip"][i]) == (kind is not None)
    expected_count = {None: 0, "nan_all": 5, "nan_one": 1, "inf_one": 1, "neg_inf_all": 5}[kind]
    assert int(states.skip_state["num_not_finite"][i]) == expected_count


GUARDED_MULTI_STEPS = steadax.apply_if_finite(steadax.MultiSteps(INNER, 2), max_consecutive_errors=2)


@pytest.mark.x32_only
@pytest.mark.parametrize("seed", SEEDS)
def test_apply_if_finite_around_multi_steps(seed):
  # A bad mini-step never reaches the accumulator: MultiSteps sees the good gradients only.
  schedule = _schedule(seed)
  grads = _grads(schedule)
  params, states = _runner(GUARDED_MULTI_STEPS)(grads)
  _assert_skipped_steps_change_nothing(params, schedule)
  reference, _ = _runner(steadax.MultiSteps(INNER, 2))(_good(grads, schedule))
  _assert_same_final(params, reference)
  good = np.cumsum([kind is None for kind in schedule])
  assert [int(s) for s in states.inner_state.mini_step] == [int(n) % 2 for n in good]
  assert [int(s) for s in states.inner_state.gradient_step] == [int(n) // 2 for n in good]


# max_consecutive_errors above the schedules' longest run of bad periods: nothing is given up.
GUARD_INSIDE_MULTI_STEPS = steadax.MultiSteps(steadax.apply_if_finite(INNER, STEPS), 2)


@pytest.mark.x32_only
@pytest.mark.parametrize("seed", SEEDS)
def test_apply_if_finite_inside_multi_steps(seed):
  # Inside MultiSteps the guard sees the period's mean gradient: a period holding a bad
  # mini-step is non-finite and skipped whole; the accumulator starts clean for the next one.
  schedule = _schedule(seed)
  grads = _grads(schedule)
  params, states = _runner(GUARD_INSIDE_MULTI_STEPS)(grads)
  periods = [schedule[i:i + 2] for i in range(0, STEPS, 2)]
  good_periods = [all(k is None for k in p) for p in periods]
  previous = PARAMS
  for i in range(STEPS):
    now = _at(params, i)
    for name in PARAMS:
      assert np.isfinite(now[name]).all()
      if i % 2 == 0 or not good_periods[i // 2]:
        np.testing.assert_array_equal(now[name], previous[name])
    previous = now
  guard = states.inner_opt_state
  bad_periods = np.cumsum([not g for g in good_periods])
  assert [int(t) for t in guard.total_notfinite[1::2]] == [int(n) for n in bad_periods]
  assert int(guard.inner_state[0].count[-1]) == sum(good_periods)
  assert not np.isnan(np.asarray(states.acc_grads["w"][-1])).any()


ZERO_NANS = steadax.chain(steadax.zero_nans(), steadax.sgd(0.1))


@pytest.mark.x32_only
@pytest.mark.parametrize("seed", SEEDS)
def test_zero_nans(seed):
  schedule = _schedule(seed, kinds=("nan_all", "nan_one"))
  grads = _grads(schedule)
  params, states = _runner(ZERO_NANS)(grads)
  found = states[0].found_nan
  previous = PARAMS
  for i, kind in enumerate(schedule):
    now = _at(params, i)
    assert bool(found["w"][i]) == (kind is not None)
    assert bool(found["b"][i]) == (kind == "nan_all")
    for name in PARAMS:
      assert np.isfinite(now[name]).all()
      g = np.nan_to_num(np.asarray(grads[name][i]), nan=0.0)
      np.testing.assert_allclose(now[name], previous[name] - 0.1 * g, rtol=1e-6)
    previous = now


# max_consecutive_skips=1 below the schedules' runs of 2 bad steps: non-finite steps are skipped
# whatever the count; the factor is high enough that no finite step is a spike.
SKIP_SPIKES = steadax.skip_spikes(INNER, watch="grad_norm", factor=100.0, warmup_steps=0,
                                  max_consecutive_skips=1)


@pytest.mark.x32_only
@pytest.mark.parametrize("seed", SEEDS)
def test_skip_spikes(seed):
  schedule = _schedule(seed)
  grads = _grads(schedule)
  params, states = _runner(SKIP_SPIKES)(grads)
  _assert_skipped_steps_change_nothing(params, schedule)
  reference, _ = _runner(INNER)(_good(grads, schedule))
  _assert_same_final(params, reference)
  for i, kind, consecutive, total in _bad_step_counts(schedule):
    assert int(states.consecutive_skips[i]) == consecutive, (i, schedule)
    assert int(states.total_skips[i]) == total
    assert bool(states.last_skipped[i]) == (kind is not None)
    assert int(states.count[i]) == i + 1 - total  # only accepted steps enter the statistics
    assert np.isfinite(states.mean[i]) and np.isfinite(states.variance[i])
