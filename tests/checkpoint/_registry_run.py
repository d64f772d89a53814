"""Every conformance registry entry, plus nested wrappers, trained together: one jitted init for all
of them, and jitted steps of 12 entries each.

Shared by the Orbax round-trip test and the kill-and-resume worker (which imports it in fresh
processes): a few programs compile for all entries instead of one per entry, and identical programs
are hits in the persistent compilation cache that ``make test`` shares between processes.
"""

from __future__ import annotations

import functools

import jax
import numpy as np

import steadax

from ..conformance.entries_contrib_b import SHIFTED
from ..conformance.registry import Entry, all_entries, value_extra_args

# Wrappers nested in orders the registry does not list, each with state that is mid-way through
# something at the checkpoint steps the tests use (3 and 5): an accumulation (MultiSteps with k=2
# or 4), a lookahead sync period of 4, schedule-free averaging, a reduce_on_plateau cooldown.
NESTED = [
    Entry("lookahead(multi_steps(adam))", lambda: steadax.lookahead(
        steadax.MultiSteps(steadax.adam(0.05), every_k_schedule=2), sync_period=4, slow_step_size=0.5)),
    Entry("lookahead(schedule_free_adamw)", lambda: steadax.lookahead(
        steadax.contrib.schedule_free_adamw(0.05, warmup_steps=2), sync_period=4, slow_step_size=0.5)),
    Entry("multi_steps(schedule_free_sgd)", lambda: steadax.MultiSteps(
        steadax.contrib.schedule_free_sgd(0.1), every_k_schedule=4)),
    Entry("multi_steps(chain(sgd, reduce_on_plateau))", lambda: steadax.MultiSteps(steadax.chain(
        steadax.sgd(0.4), steadax.contrib.reduce_on_plateau(factor=0.5, patience=1, cooldown=2)),
        every_k_schedule=2), extra_args=value_extra_args, problem=SHIFTED),
    Entry("apply_if_finite(multi_steps(inject_hyperparams(adamw)))", lambda: steadax.apply_if_finite(
        steadax.MultiSteps(steadax.inject_hyperparams(steadax.adamw)(
            learning_rate=steadax.cosine_decay_schedule(0.05, 20), weight_decay=0.01), 4), 3)),
]
LOOKAHEAD = {e.name for e in NESTED if e.name.startswith("lookahead(")}
ENTRIES = all_entries() + NESTED


@functools.lru_cache(maxsize=None)
def transformations() -> dict:
  return {e.name: e.factory() for e in ENTRIES}


def initial_params() -> dict:
  params = {e.name: e.problem.init() for e in ENTRIES}
  for name in LOOKAHEAD:
    params[name] = steadax.LookaheadParams.init_synced(params[name])
  return params


@jax.jit  # also traced inside jax.eval_shape, where a jit may not carry compiler options
def init_all(params):
  txs = transformations()
  return {name: txs[name].init(params[name]) for name in txs}


# Entries per step program: XLA's compile time grows faster than the program (the 170 entries'
# step in one program: 8.6-9.4 CPU-s to trace and compile; in programs of 12: 6.4-6.6).
CHUNK = 12


@functools.lru_cache(maxsize=None)
def _step_some(names: tuple):
  txs, entries = transformations(), [e for e in ENTRIES if e.name in names]

  @jax.jit
  def step(params, states):
    new_params, new_states = {}, {}
    for entry in entries:
      loss_fn, p = entry.problem.loss, params[entry.name]
      grads = jax.grad(loss_fn)(p.fast if entry.name in LOOKAHEAD else p)
      extra = entry.extra_args(loss_fn, p, grads) if entry.extra_args else {}
      updates, new_states[entry.name] = txs[entry.name].update(grads, states[entry.name], p, **extra)
      new_params[entry.name] = steadax.apply_updates(p, updates)
    return new_params, new_states

  return step


def step_all(params, states):
  """One step of every entry on its own problem (with the extras it needs), CHUNK entries a
  compiled program."""
  names = [e.name for e in ENTRIES]
  new_params, new_states = {}, {}
  for k in range(0, len(names), CHUNK):
    chunk = tuple(names[k:k + CHUNK])
    p, s = _step_some(chunk)({n: params[n] for n in chunk}, {n: states[n] for n in chunk})
    new_params.update(p)
    new_states.update(s)
  return new_params, new_states


def train(params, states, steps: int):
  # One placement for every input (freshly made arrays are uncommitted, Orbax's come back with
  # its own sharding type): a different placement would compile step_all again.
  params, states = jax.device_put((params, states), jax.devices()[0])
  for _ in range(steps):
    params, states = step_all(params, states)
  return params, states


def _bits(x):
  if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  x = np.asarray(jax.device_get(x))
  return str(x.dtype), x.shape, np.ascontiguousarray(x).tobytes()  # the bytes: NaN payloads count


def bit_differences(a, b) -> list[str]:
  """The paths where two trees differ in structure, dtype, shape or any bit (NaNs included)."""
  if jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(b):
    return ["<structure>"]
  return [jax.tree_util.keystr(path) for (path, x), y in
          zip(jax.tree_util.tree_flatten_with_path(a)[0], jax.tree_util.tree_leaves(b))
          if _bits(x) != _bits(y)]
