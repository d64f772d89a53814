"""Core v2: every state record of the wrappers, L-BFGS, line searches, inject_hyperparams and the
aggregators declares its fields' roles, and init builds states that agree with them."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest

import steadax
from steadax._core._roles import roles_of
from steadax.experimental import aggregating
from steadax._linesearch import _backtracking, _zoom
from steadax.schedules import _inject
from steadax._wrappers import _accumulation, _conditionality, _lookahead, _monitoring
from steadax.transforms import _masked
from steadax._wrappers import _partition, _spikes

STATE_CLASSES = [
    _accumulation.MultiStepsState, _accumulation.ApplyEvery,
    _conditionality.ConditionallyTransformState, _conditionality.ConditionallyMaskState,
    _conditionality.ApplyIfFiniteState, _conditionality.ZeroNansState,
    _lookahead.LookaheadState, _masked.MaskedState, _partition.PartitionState,
    _monitoring.SnapshotState, _monitoring.MonitorState, _spikes.SkipSpikesState,
    steadax.ScaleByLBFGSState,
    _backtracking.BacktrackingLinesearchInfo, _backtracking.ScaleByBacktrackingLinesearchState,
    _backtracking.BacktrackingLineSearchState,
    _zoom.ZoomLinesearchInfo, _zoom.ScaleByZoomLinesearchState, _zoom._Search,
    _inject.InjectHyperparamsState, _inject.InjectStatefulHyperparamsState, _inject.WrappedScheduleState,
    aggregating.AccumulateAvgUpdatesState, aggregating.PerElementMeanAndSumSqDiffGradsState,
    aggregating.PerElementMeanAndVarianceEMAState,
]


@pytest.mark.parametrize("cls", STATE_CLASSES, ids=lambda c: c.__name__)
def test_every_state_record_declares_roles(cls):
  roles = roles_of(cls)
  assert roles is not None and set(roles) == set(cls._fields)


PARAMS = {"w": jnp.ones((2, 3), jnp.bfloat16), "b": jnp.ones(3, jnp.float32)}

FACTORIES = {
    "multi_steps": lambda: steadax.MultiSteps(steadax.adam(0.1), 3),
    "multi_steps_k1": lambda: steadax.MultiSteps(steadax.adam(0.1), 1),
    "multi_steps_f16_acc": lambda: steadax.MultiSteps(steadax.sgd(0.1), 2, accumulator_dtype=jnp.float16),
    "multi_steps_skip": lambda: steadax.MultiSteps(
        steadax.sgd(0.1), 2, should_skip_update_fn=functools.partial(
            steadax.skip_large_updates, max_squared_norm=1.0)),
    "apply_every": lambda: steadax.apply_every(3),
    "apply_every_k1": lambda: steadax.apply_every(1),
    "conditionally_transform": lambda: steadax.conditionally_transform(steadax.sgd(0.1), lambda s: s > 0),
    "conditionally_mask": lambda: steadax.conditionally_mask(steadax.sgd(0.1), lambda s: s > 0),
    "apply_if_finite": lambda: steadax.apply_if_finite(steadax.adam(0.1), 2),
    "zero_nans": steadax.zero_nans,
    "masked": lambda: steadax.masked(steadax.adam(0.1), {"w": True, "b": False}),
    "partition": lambda: steadax.partition({"a": steadax.adam(0.1), "s": steadax.sgd(0.1)},
                                           {"w": "a", "b": "s"}),
    "skip_spikes": lambda: steadax.skip_spikes(steadax.adam(0.1)),
    "snapshot": lambda: steadax.snapshot("norm", steadax.global_norm),
    "lbfgs": steadax.scale_by_lbfgs,
    "zoom": lambda: steadax.scale_by_zoom_linesearch(5),
    "backtracking": lambda: steadax.scale_by_backtracking_linesearch(5, store_grad=True),
    "inject_hyperparams": lambda: steadax.inject_hyperparams(steadax.adam)(learning_rate=0.1),
    "accumulate_avg_updates": lambda: aggregating.accumulate_avg_updates(2),
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_init_agrees_with_the_roles_for_mixed_precision(name):
  tx = FACTORIES[name]()
  tx.init(PARAMS)  # Transformation.init checks the roles: raises on a wrong dtype
  jax.eval_shape(tx.init, PARAMS)


def test_multi_steps_accumulator_follows_accumulator_dtype():
  state = steadax.MultiSteps(steadax.sgd(0.1), 2, accumulator_dtype=jnp.float16).init(PARAMS)
  assert {x.dtype for x in jax.tree.leaves(state.acc_grads)} == {jnp.dtype(jnp.float16)}
  assert state.mini_step.dtype == jnp.int32 and state.gradient_step.dtype == jnp.int32


def test_k1_state_has_no_accumulator_and_checked_counters():
  assert steadax.MultiSteps(steadax.sgd(0.1), 1).init(PARAMS).acc_grads == ()
  assert steadax.apply_every(1).init(PARAMS).grad_acc == ()
