"""``import steadax`` against ``import optax`` after ``import jax`` (``benchmarks/import_time.py``:
fresh processes, medians), and the import with the first ``adam(1e-3)`` and its ``init``."""

from __future__ import annotations

from .. import harness, import_time


def run(sizes: harness.Sizes, progress: harness.Progress) -> dict:
  progress.start("import_time", 1)
  numbers = import_time.run(runs=sizes.rounds)
  progress.tick(f"{sizes.rounds} run(s) of each")
  return {"kind": "import_time", "numbers": numbers, "ratios": {
      "steadax/optax (import)": numbers["import_ratio"],
      "steadax/optax (import + adam + init)": numbers["first_use_ratio"],
  }}
