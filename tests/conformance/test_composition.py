"""The composition matrix: every registered entry inside every stateful wrapper (issue 4).

``steadax.testing.check_transformation`` runs each wrapped variant through ``lax.scan`` (4 steps; the
strictest check of carry invariance) on the mixed-precision tree. Type stability is a trace-time
property: the scan is traced with ``jax.eval_shape`` (no XLA compilation, which would dominate the
suite's time), the contract (strict mode) raises at trace time with the wrapper's name on any drift,
``lax.scan`` rejects any carry whose type changes, and the checker compares the resulting types of
the state, the params and the updates. Numerical behaviour of the wrappers is tested in
tests/wrappers and by their own registry entries.
"""

from __future__ import annotations

import jax
import pytest

import steadax

from . import _harness as h
from .registry import all_entries, entry_ids

ENTRIES = all_entries()


def _labels(params):
  return jax.tree_util.tree_map(lambda x: "inner" if x.ndim > 0 else "other", params)


def _mask(params):
  return jax.tree_util.tree_map(lambda x: x.ndim > 0, params)


def wrappers():
  """(name, wrap(tx_factory) -> transformation) for every stateful wrapper of the matrix."""
  return [
      ("multi_steps_k3", lambda f: steadax.MultiSteps(f(), every_k_schedule=3).gradient_transformation()),
      ("apply_if_finite", lambda f: steadax.apply_if_finite(f(), max_consecutive_errors=2)),
      ("masked", lambda f: steadax.masked(f(), _mask)),
      ("partition", lambda f: steadax.partition({"inner": f(), "other": steadax.sgd(0.1)}, _labels)),
      ("inject_hyperparams", lambda f: steadax.inject_hyperparams(
          lambda step_size: steadax.chain(f(), steadax.scale(step_size)))(
              step_size=steadax.linear_schedule(1.0, 0.5, 10))),
      ("zero_nans_clip_chain", lambda f: steadax.chain(
          steadax.zero_nans(), steadax.clip_by_global_norm(1.0), f())),
      ("flatten", lambda f: steadax.flatten(f())),
  ]


WRAPPERS = wrappers()
# Wrappers that show the inner transformation a different parameter tree (a subset, or a flat
# vector) cannot forward whole-model extras (`value_fn`, `grad`) meaningfully: line searches and
# Polyak-type steps are checked inside the other wrappers only.
_RESTRUCTURING = {"masked", "partition", "flatten"}


@pytest.mark.parametrize("entry", ENTRIES, ids=entry_ids(ENTRIES))
def test_entry_inside_every_wrapper(entry):
  params = h.mixed_params(entry.low_precision_ok)
  for name, wrap in WRAPPERS:
    if entry.extra_args and name in _RESTRUCTURING:
      continue
    h.check_entry(entry, params, ("init", "scan"), steps=4, tx=wrap(entry.factory),
                  name=f"{entry.name} inside {name}")
