"""The measuring machinery every case shares: the user's step, alternating timed rounds, floors.

A *contender* is one column of a case: a jitted ``step(params, state, grads) -> (params, state)``
with params and state donated, and the arrays it starts from. ``time_rounds`` warms every contender
up, then runs them in turn, round after round (the order reversed every other round), so that drift
of a loaded or thermally throttled machine hits all of them alike; each round times a block of
consecutive steps (as a training loop runs them: dispatch overlapping execution) and the result is
the median over rounds of the time per step.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import steadax
from steadax._fusion._elementwise import fusion_blocker


@dataclasses.dataclass(frozen=True)
class Sizes:
  """How big and how long: ``FULL`` is ``make bench``, ``QUICK`` its ``--quick``, ``SMOKE`` the test."""

  rounds: int               # alternating timed rounds per case
  steps: int                # steps per round (a multiple of the MultiSteps period, 4)
  big_leaves: int           # leaves of the big-leaf case
  big_leaf_size: int
  small_leaves: int         # leaves of the many-small-leaf case (64..4096 elements)
  mixed_small_leaves: int   # small leaves of the mixed case (it adds two large ones)
  compile_leaves: tuple     # leaf counts of the first-call case
  compile_time_limit_s: float  # a first-call point still compiling after this is stopped
  memory_width: int         # the memory case's matrices are width x width
  lbfgs_rounds: int
  sweep_rounds: int
  matrix_depths: tuple = (2, 8, 32)  # layers of the matrix_depth case (7 leaves each)
  matrix_repetitions: int = 3       # compilations per point of that case (the median is kept)
  lm_config: str = "full"           # the lm case's model and training length (cases/lm.py CONFIGS)
  grid: str = "full"                # the grid case's cells (cases/grid.py CELLS)
  recipe_leaves: int = 200          # leaves of the recipes case (compile time of common optimizers)


FULL = Sizes(rounds=15, steps=8, big_leaves=8, big_leaf_size=2_000_000, small_leaves=400,
             mixed_small_leaves=100, compile_leaves=(100, 400, 1600), compile_time_limit_s=120,
             memory_width=512, lbfgs_rounds=15, sweep_rounds=3)
QUICK = Sizes(rounds=5, steps=4, big_leaves=8, big_leaf_size=250_000, small_leaves=100,
              mixed_small_leaves=50, compile_leaves=(25, 50, 100), compile_time_limit_s=60,
              memory_width=256, lbfgs_rounds=5, sweep_rounds=1, matrix_depths=(2, 8),
              matrix_repetitions=1, lm_config="quick", grid="quick", recipe_leaves=50)
SMOKE = Sizes(rounds=2, steps=4, big_leaves=2, big_leaf_size=1_000, small_leaves=6,
              mixed_small_leaves=6, compile_leaves=(2,), compile_time_limit_s=60, memory_width=16,
              lbfgs_rounds=1, sweep_rounds=1, matrix_depths=(1, 2),
              matrix_repetitions=1, lm_config="smoke", grid="smoke", recipe_leaves=4)


class Progress:
  """A progress bar per case (tqdm, from the bench extra); ``Progress(enabled=False)`` is silent."""

  def __init__(self, enabled: bool = True):
    self.enabled = enabled
    self._bar = None

  def start(self, case: str, total: int) -> None:
    self.close()
    if self.enabled:
      from tqdm import tqdm  # only `make bench` needs it; the smoke test runs without the extra
      self._bar = tqdm(total=total, desc=case, unit="task", leave=True, dynamic_ncols=True)

  def doing(self, what: str) -> None:
    """Shows the task under way after the bar."""
    if self._bar is not None:
      self._bar.set_postfix_str(what)

  def tick(self, what: str) -> None:
    """Counts one task done, shown after the bar."""
    if self._bar is not None:
      self._bar.set_postfix_str(what, refresh=False)
      self._bar.update(1)

  def close(self) -> None:
    if self._bar is not None:
      self._bar.close()
      self._bar = None


# -- the columns ---------------------------------------------------------------------------------

FUSED = "steadax fused"
FLAT = "steadax flat params"


def transformations(optax_tx: Any, steadax_tx: Any, *, fused: bool = False, flat: bool = False
                    ) -> dict[str, tuple[Any, Any]]:
  """The columns of a comparison: label -> (library providing apply_updates, transformation).

  ``fused`` adds "steadax fused", ``steadax.fuse(steadax_tx)``, and ``flat`` adds "steadax flat
  params", ``steadax_tx`` on ``steadax.flat_params(params)`` (the contender flattens its
  parameters), for the cases with many small leaves. A transformation of None is a column that
  cannot be filled ("n/a" in the table): Optax has no such optimizer, or ``fuse`` / ``FlatParams``
  refuse one that is not elementwise.
  """
  columns = {"optax": (optax, optax_tx), "steadax": (steadax, steadax_tx)}
  elementwise = steadax_tx is not None and fusion_blocker(steadax_tx) is None
  if fused:
    columns[FUSED] = (steadax, steadax.fuse(steadax_tx) if elementwise else None)
  if flat:
    columns[FLAT] = (steadax, steadax_tx if elementwise else None)
  return columns


def step_fn(lib: Any, tx: Any) -> Callable:
  """The user's step, jitted with params and state donated."""

  def step(params, state, grads):
    updates, state = tx.update(grads, state, params)
    return lib.apply_updates(params, updates), state

  return jax.jit(step, donate_argnums=(0, 1))


@dataclasses.dataclass
class Contender:
  """One timed column: a jitted step and its current arguments (params and state are donated)."""

  fn: Callable
  params: Any
  state: Any
  grads: Any

  def run(self, steps: int) -> float:
    """Runs ``steps`` steps and returns the seconds per step."""
    params, state = self.params, self.state
    t0 = time.perf_counter()
    for _ in range(steps):
      params, state = self.fn(params, state, self.grads)
    jax.block_until_ready((params, state))
    elapsed = time.perf_counter() - t0
    self.params, self.state = params, state
    return elapsed / steps


def filled(shape: tuple, value: float, dtype: Any) -> jax.Array:
  """An array made on the host and transferred: eager ``jnp.full`` compiles a program per shape,
  which for hundreds of leaf sizes costs more than the measurement."""
  return jax.device_put(np.full(shape, value, jnp.dtype(dtype)))


def gradients_like(params: Any, scale: float = 1e-2) -> Any:
  """Deterministic nonzero gradients in each leaf's dtype (small, so long runs stay finite)."""
  return jax.tree_util.tree_map(lambda p: filled(p.shape, scale, p.dtype), params)


def init_state(tx: Any, params: Any) -> Any:
  """``tx.init`` as one jitted program (eagerly it compiles a small program per leaf shape)."""
  return jax.jit(tx.init)(params)


def optimizer_contender(lib: Any, tx: Any, make_params: Callable[[], Any], flat: bool = False
                        ) -> Contender:
  """The user's step for ``tx`` on fresh params (``flat``: as ``steadax.flat_params``, so the
  gradients come flat too, as ``jax.grad`` of a ``FlatParams`` gives them), compiled and run once."""
  params = make_params()
  if flat:
    params = steadax.flat_params(params)
  grads = gradients_like(params)
  state = init_state(tx, params)
  fn = step_fn(lib, tx)
  params, state = jax.block_until_ready(fn(params, state, grads))  # trace, compile, first step
  return Contender(fn, params, state, grads)


def build_contenders(columns: dict[str, tuple[Any, Any]], make_params: Callable[[], Any],
                     progress: Progress, name: str, make: Callable[..., Contender] | None = None
                     ) -> dict[str, Contender]:
  """The contenders of the columns that can be filled, compiled concurrently.

  Compiling a step over hundreds of leaves takes most of a run (tens of seconds each on 2 cores)
  and XLA compiles outside the GIL, so the columns compile on one thread per core. Their compile
  times are therefore not measured here: ``cases/first_call.py`` measures them one at a time.
  """
  make = make or optimizer_contender  # make(lib, tx, make_params, flat) -> Contender
  available = {label: (lib, tx) for label, (lib, tx) in columns.items() if tx is not None}
  with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
    futures = {label: pool.submit(make, lib, tx, make_params, label == FLAT)
               for label, (lib, tx) in available.items()}
    labels = {future: label for label, future in futures.items()}
    for future in concurrent.futures.as_completed(labels):
      future.result()
      progress.tick(f"{name} compiled {labels[future]}")
  return {label: future.result() for label, future in futures.items()}


def time_rounds(contenders: dict[str, Contender], sizes: Sizes, progress: Progress,
                name: str) -> dict[str, dict]:
  """Median seconds per step of each contender over alternating rounds, with every round's time."""
  labels = list(contenders)
  for label in labels:
    contenders[label].run(sizes.steps)  # warm-up: caches, allocator, page faults
  per_round = {label: [] for label in labels}
  for r in range(sizes.rounds):
    for label in (labels if r % 2 == 0 else labels[::-1]):
      per_round[label].append(contenders[label].run(sizes.steps))
    progress.tick(f"{name} round {r + 1}/{sizes.rounds}")
  return {label: {"median_s": statistics.median(times), "rounds_s": times}
          for label, times in per_round.items()}


# -- floors --------------------------------------------------------------------------------------

def tree_bytes(tree: Any) -> int:
  return sum(int(np.prod(x.shape)) * jnp.dtype(x.dtype).itemsize
             for x in jax.tree_util.tree_leaves(tree))


def _floor_step(params, state, grads):
  """Reads params, grads and state once, writes params and state once: the traffic floor."""
  params = jax.tree_util.tree_map(lambda p, g: p + g, params, grads)
  state = jax.tree_util.tree_map(lambda s: s + jnp.ones((), s.dtype), state)
  return params, state


def _floor_contender(params: Any, state: Any, grads: Any) -> Contender:
  fn = jax.jit(_floor_step, donate_argnums=(0, 1))
  params, state = jax.block_until_ready(fn(params, state, grads))
  return Contender(fn, params, state, grads)


def floor_one_buffer(param_bytes: int, state_bytes: int) -> Contender:
  """The floor on one float32 buffer per role, of the total size of the step's params and state.

  A step must at least read params, grads and state and write params and state; this kernel does
  exactly that with one add per element, so it runs at the machine's memory bandwidth with no
  per-leaf cost. Sizes are rounded up to whole KiB: an odd-length buffer (the state's bytes plus a
  4-byte step count) ran at 60% of the speed on XLA's CPU backend, a floor the optimizer beat.
  """
  def elements(nbytes):
    return max(1, -(-nbytes // 1024)) * 256

  n_params = elements(param_bytes)
  params = filled((n_params,), 1.0, jnp.float32)
  state = filled((elements(state_bytes),), 1.0, jnp.float32)
  return _floor_contender(params, state, filled((n_params,), 1e-3, jnp.float32))


def floor_same_leaves(contender: Contender) -> Contender:
  """The floor on a copy of the contender's own leaves (same shapes and dtypes, same count)."""
  params = jax.tree_util.tree_map(jnp.copy, contender.params)
  state = [jnp.copy(s) for s in jax.tree_util.tree_leaves(contender.state)
           if jnp.issubdtype(s.dtype, jnp.inexact)]
  return _floor_contender(params, state, contender.grads)


def small_leaf_sizes(n: int, seed: int = 0) -> list[int]:
  """``n`` leaf sizes drawn uniformly from 64..4096 (seeded): biases, norms and small layers."""
  return [int(s) for s in np.random.default_rng(seed).integers(64, 4097, n)]


def small_params(n: int) -> tuple[list[int], Callable[[], dict]]:
  """The leaf sizes of ``small_leaf_sizes(n)`` and a maker of fresh float32 parameters of those
  sizes (ones, keyed ``p0000``, ``p0001``, ...): the many-small-leaf model of every case."""
  sizes = small_leaf_sizes(n)

  def make_params() -> dict:
    return {f"p{i:04d}": filled((k,), 1.0, jnp.float32) for i, k in enumerate(sizes)}

  return sizes, make_params


def peak_rss_bytes() -> int | None:
  """This process's peak resident memory (Linux; None elsewhere).

  Not ``getrusage``: on Linux its ``ru_maxrss`` survives fork and exec, so a child of a large
  process reports the parent's peak.
  """
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith("VmHWM:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return None
