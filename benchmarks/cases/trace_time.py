"""Trace time of the update on about 200 leaves, steadax against Optax (``benchmarks/trace_time.py``:
repeated shapes, transformer blocks, no repeated shape; the smallest CPU time of the rounds)."""

from __future__ import annotations

from .. import harness, trace_time


def run(sizes: harness.Sizes, progress: harness.Progress) -> dict:
  progress.start("trace_time", len(trace_time.OPTIMIZERS))
  rows = []
  for name in trace_time.OPTIMIZERS:
    rows += trace_time.run(sizes.rounds, (name,))
    progress.tick(name)
  return {"kind": "trace_time", "rows": rows,
          "ratios": {f"{r['optimizer']} {r['tree']}": r["ratio"] for r in rows}}
