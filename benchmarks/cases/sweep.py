"""The learning-rate sweep: 8 sequential Optax runs against one vmapped ``steadax.sweep``.

The measurement is ``benchmarks/sweep_case.py`` (its docstring says what is timed and counted);
this case runs it and adds the ratios in the suite's direction (steadax time / Optax time).
"""

from __future__ import annotations

from .. import harness, sweep_case


def run(sizes: harness.Sizes, progress: harness.Progress) -> dict:
  progress.start("sweep", 1)
  numbers = sweep_case.run(rounds=sizes.sweep_rounds)
  progress.tick(f"{sizes.sweep_rounds} round(s)")
  return {"kind": "sweep", "numbers": numbers, "ratios": {
      "steadax/optax (total)": numbers["steadax_sweep_total_s"] / numbers["optax_sequential_total_s"],
      "steadax/optax (step)": numbers["steadax_sweep_step_s"] / numbers["optax_sequential_step_s"],
  }}
