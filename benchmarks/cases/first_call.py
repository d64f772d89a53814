"""First-call time (trace, lower, compile, one step) of the AdamW training step as the leaf count grows.

A model with hundreds of leaves waits for this at every start; it grows with the leaf count because
the step is traced and compiled leaf by leaf. The step is ``cases/train.py``'s (the same small
elementwise layer per leaf, its gradient, the update and ``apply_updates``), so every column
compiles the same model and the differences are the optimizer's; with ``steadax.flat_params`` the
optimizer's part no longer grows with the leaf count. Each point is measured once, in a fresh
Python process (nothing cached or held from earlier cases; its peak memory is the compilation's),
the columns in turn, alternating which goes first. A point still in its first call after
``compile_time_limit_s`` is stopped and reported as such: that bounds the run where a compile goes
badly (on a loaded 2-core machine a 1,600-leaf step took minutes and several GB to compile).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import jax
import optax

import steadax

from .. import harness
from . import train

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _columns() -> dict:
  return harness.transformations(optax.adamw(1e-3), steadax.adamw(1e-3), fused=True, flat=True)


def measure(label: str, leaves: int, time_limit_s: float) -> dict:
  """One point, in this process: seconds of each phase and the process's peak memory.

  A watchdog ends the process, reporting the point as stopped, once the step has been in its first
  call for ``time_limit_s`` (the set-up before it does not count).
  """
  lib, tx = _columns()[label]
  params = harness.small_params(leaves)[1]()
  batch = train.batch_for(params)
  flat = label == harness.FLAT
  if flat:
    params = steadax.flat_params(params)
  state = harness.init_state(tx, params)
  fn = train.train_step(lib, tx, flat)

  def stop():
    print(json.dumps({"total_s": None, "stopped_after_s": time_limit_s}), flush=True)
    os._exit(0)

  watchdog = threading.Timer(time_limit_s, stop)
  watchdog.start()
  t0 = time.perf_counter()
  traced = fn.trace(params, state, batch)
  t1 = time.perf_counter()
  lowered = traced.lower()
  t2 = time.perf_counter()
  compiled = lowered.compile()
  t3 = time.perf_counter()
  jax.block_until_ready(compiled(params, state, batch))
  t4 = time.perf_counter()
  watchdog.cancel()
  return {"total_s": t4 - t0, "trace_s": t1 - t0, "lower_s": t2 - t1, "compile_s": t3 - t2,
          "peak_rss_bytes": harness.peak_rss_bytes()}


_CHILD = ("import json, sys; from benchmarks.cases.first_call import measure; "
          "print(json.dumps(measure(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))))")


def _measure_in_child(label: str, leaves: int, time_limit_s: float) -> dict:
  try:
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, label, str(leaves), str(time_limit_s)], cwd=ROOT,
        capture_output=True, text=True, check=True)
  except subprocess.CalledProcessError as error:
    raise RuntimeError(f"first_call {label} at {leaves} leaves failed:\n{error.stderr}") from error
  return json.loads(child.stdout.strip().splitlines()[-1])


def run(sizes: harness.Sizes, progress: harness.Progress) -> dict:
  labels = [label for label, (_, tx) in _columns().items() if tx is not None]
  progress.start("first_call", len(sizes.compile_leaves) * len(labels))
  rows = []
  for i, leaves in enumerate(sizes.compile_leaves):
    calls = {}
    for label in (labels if i % 2 == 0 else labels[::-1]):
      progress.doing(f"{leaves} leaves, {label}")
      calls[label] = _measure_in_child(label, leaves, sizes.compile_time_limit_s)
      progress.tick(f"{leaves} leaves, {label}")
    rows.append({"leaves": leaves, "parameters": sum(harness.small_leaf_sizes(leaves)),
                 "first_call": {label: calls[label] for label in labels}})
  return {"kind": "first_call", "time_limit_s": sizes.compile_time_limit_s, "rows": rows}

