"""Every registry entry's state (and nested wrappers') survives Orbax and steadax.checkpoint files
bit-exactly, and training resumed from the restored state is bit-identical to training on.

All entries train together in one compiled program (``_registry_run``): 3 steps, so moments,
counters, accumulations (MultiSteps mid-way), lookahead phases and PRNG keys are all non-trivial;
the states are saved, restored into ``jax.eval_shape`` templates, compared bit by bit, and both the
original and the restored run go 2 steps further through the same program.
"""

from __future__ import annotations

import functools
import os

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

import steadax

from . import _registry_run as run

# Bit-exact storage of every dtype the x32 states hold; the dtype-dependent part (each dtype's bytes)
# is tested in both modes by test_checkpoint.py. Slow: the module's tests share one compiled run.
pytestmark = [pytest.mark.x32_only, pytest.mark.slow]

STEPS, MORE = 3, 2


@functools.lru_cache(maxsize=None)
def _trained():
  params = run.initial_params()
  return run.train(params, run.init_all(params), STEPS)


def _has_empty_leaf(state):
  return any(np.size(x) == 0 for x in jax.tree_util.tree_leaves(state))


def _assert_resumes_identically(params, states, restored_params, restored_states):
  assert not run.bit_differences(states, restored_states)
  expected = run.train(params, states, MORE)
  resumed = run.train(restored_params, restored_states, MORE)
  differences = run.bit_differences(expected, resumed)
  assert not differences, f"resumed training differs at {differences[:10]}"


def test_orbax_round_trips_raw_states(tmp_path):
  # Orbax saves the state pytree itself (NamedTuples, bfloat16, uint8 codes, PRNG keys) except
  # arrays with no elements, which it refuses ("Cannot save arrays with zero size"): those states
  # go through steadax.checkpoint (path-keyed arrays and a manifest, over Orbax) in the next test.
  params, states = _trained()
  saved = {n: s for n, s in states.items() if not _has_empty_leaf(s)}
  assert len(saved) > 0.9 * len(states)
  target = {"params": params, "states": saved}
  with ocp.StandardCheckpointer() as checkpointer:
    checkpointer.save(tmp_path / "raw", target)
    checkpointer.wait_until_finished()
    restored = checkpointer.restore(tmp_path / "raw", jax.eval_shape(lambda: target))
  differences = run.bit_differences(target, restored)
  assert not differences, f"Orbax round trip differs at {differences[:10]}"
  names = sorted(saved)
  _assert_resumes_identically(
      params, states, restored["params"], {n: restored["states"].get(n, states[n]) for n in states})
  assert names  # every entry without an empty leaf went through Orbax


def test_checkpoint_file_round_trips_every_state(tmp_path):
  params, states = _trained()
  tree = {"params": params, "states": states}
  path = steadax.checkpoint.save_step(tmp_path, STEPS, tree)
  step, restored = steadax.checkpoint.restore_step(tmp_path, jax.eval_shape(lambda: tree))
  # Orbax's step layout; the empty leaves (GaLore, Shampoo, SOAP) are rebuilt from the manifest.
  assert step == STEPS and os.path.basename(path) == str(STEPS)
  assert any(_has_empty_leaf(s) for s in states.values())
  _assert_resumes_identically(params, states, restored["params"], restored["states"])


def test_every_registry_entry_is_covered():
  _, states = _trained()
  registry = {e.name for e in run.all_entries()}
  assert registry <= set(states) and {e.name for e in run.NESTED} <= set(states)
