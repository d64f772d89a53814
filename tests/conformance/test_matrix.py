"""The conformance matrix: every registered entry x dtypes x execution forms (x64 via the env).

Each test is ``steadax.testing.check_transformation`` on the entry (the public checker users run on
their own transformations) with a subset of its checks; see ``_harness.check_entry``. The checker
traces every type check with ``jax.eval_shape`` (no XLA compilation: the cost of the suite) and
compiles one step for the values (``finite``). Mixed precision and both x64 modes come from the
parameter trees and the suite's two pytest passes, so the checker runs in this process's mode only.
"""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from . import _harness as h
from .registry import all_entries, entry_ids

ENTRIES = all_entries()
# init from concrete and abstract values, one update before the contract (every drifting leaf),
# the step inside lax.scan (3 steps), both branches of lax.cond and lax.while_loop (2 steps), and
# 3 steps of one compiled step: finite values of the same types.
FORMS = ("init", "abstract_init", "update", "scan", "cond", "while_loop", "finite")


@pytest.mark.parametrize("entry", ENTRIES, ids=entry_ids(ENTRIES))
def test_mixed_tree_all_forms(entry):
  h.check_entry(entry, h.mixed_params(entry.low_precision_ok), FORMS)


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.complex_ok],
                         ids=entry_ids([e for e in ENTRIES if e.complex_ok]))
def test_complex_all_forms(entry):
  h.check_entry(entry, h.complex_params(), FORMS)


@pytest.mark.parametrize("entry", ENTRIES, ids=entry_ids(ENTRIES))
def test_jit_loop_traces_once_and_keeps_types(entry):
  # A jitted step traced (through its own trace cache, with jax.eval_shape) for the entry, the entry
  # with new hyperparameter values, and the entry again: one trace, the same types each time.
  h.check_entry(entry, h.mixed_params(entry.low_precision_ok), ("jit", "recompile"))


@pytest.mark.parametrize("entry", ENTRIES, ids=entry_ids(ENTRIES))
def test_empty_and_scalar_trees(entry):
  for params in ({}, jnp.asarray(0.7, jnp.float32)):
    h.check_entry(entry, params, ("init", "eager"))
