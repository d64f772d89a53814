"""The conformance matrix: every registered entry x dtypes x execution forms (x64 via the env)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import steadax

from . import _harness as h
from .registry import all_entries, entry_ids

ENTRIES = all_entries()


def _check_forms(entry, params):
  tx = entry.factory()
  state = tx.init(params)
  h.assert_strongly_typed(state, f"{entry.name} init")
  abstract = jax.eval_shape(tx.init, params)
  h.assert_same_types(abstract, state, f"{entry.name} init from eval_shape")

  # The forms' types are traced (their carry checks are trace-time; no compilation); the values they
  # compute are those of 3 steps of one compiled step: after step 1 the cond's, after 2 the
  # while_loop's, after 3 the scan's.
  p_scan, s_scan, u_cond, s_cond, p_while, s_while = jax.eval_shape(
      h.make_forms(entry), tx, params, state, jnp.asarray(True))
  steps = h.run_jitted_steps(entry, tx, params, state)
  for what, s, k in (("scan", s_scan, 3), ("cond", s_cond, 1), ("while_loop", s_while, 2)):
    h.assert_same_types(state, s, f"{entry.name} state after {what}")
    h.assert_same_types(state, steps[k - 1][1], f"{entry.name} state after {k} jitted steps")
    h.assert_finite(steps[k - 1][1], f"{entry.name} state after {what}")
  h.assert_updates_follow_params(params, u_cond, f"{entry.name} updates")
  # The same, before the contract casts them: the transformation writes each update in its
  # parameter's dtype itself (leafwise's one cast), not in a compute dtype the contract must fix.
  raw = h.raw_update_types(entry, tx, params, state)
  if raw is not None:
    h.assert_updates_follow_params(params, raw, f"{entry.name} updates before the contract")
  for what, p, k in (("scan", p_scan, 3), ("while_loop", p_while, 2)):
    h.assert_same_types(params, p, f"{entry.name} params after {what}")
    h.assert_same_types(params, steps[k - 1][0], f"{entry.name} params after {k} jitted steps")
    h.assert_finite(steps[k - 1][0], f"{entry.name} params after {what}")


@pytest.mark.parametrize("entry", ENTRIES, ids=entry_ids(ENTRIES))
def test_mixed_tree_all_forms(entry):
  _check_forms(entry, h.mixed_params(entry.low_precision_ok))


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.complex_ok],
                         ids=entry_ids([e for e in ENTRIES if e.complex_ok]))
def test_complex_all_forms(entry):
  _check_forms(entry, h.complex_params())


@pytest.mark.parametrize("entry", ENTRIES, ids=entry_ids(ENTRIES))
def test_jit_loop_traces_once_and_keeps_types(entry):
  params = h.mixed_params(entry.low_precision_ok)
  tx = entry.factory()
  state = tx.init(params)
  traces = []
  raw_step = h.make_step(entry)

  def step(tx, params, state):
    traces.append(1)
    updates, state = raw_step(tx, params, state)
    return steadax.apply_updates(params, updates), state, updates

  # Retracing and the types a jitted step returns are trace-time facts: the loop goes through the
  # jitted function's own trace cache (the one a call uses) with jax.eval_shape, so no XLA compilation
  # (the cost of the suite); the forms tests above run the same step compiled.
  jitted = jax.jit(step)
  p, s = params, state
  for i, t in enumerate((tx, h.perturb_hyperparameters(tx), tx)):
    p, s, u = jax.eval_shape(jitted, t, p, s)
    h.assert_same_types(state, s, f"{entry.name} state after jit step {i}")
    h.assert_updates_follow_params(params, u, f"{entry.name} updates at jit step {i}")
  assert len(traces) == 1, f"{entry.name}: traced {len(traces)} times for new hyperparameter values"


@pytest.mark.parametrize("entry", ENTRIES, ids=entry_ids(ENTRIES))
def test_empty_and_scalar_trees(entry):
  tx = entry.factory()
  for params in ({}, jnp.asarray(0.7, jnp.float32)):
    state = tx.init(params)
    updates, new_state = h.make_step(entry)(tx, params, state)
    h.assert_same_types(state, new_state, f"{entry.name} state for {params!r}")
    h.assert_updates_follow_params(params, updates, f"{entry.name} updates for {params!r}")
