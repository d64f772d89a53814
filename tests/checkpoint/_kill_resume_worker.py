"""The processes of the kill-and-resume test (run as ``python -m tests.checkpoint._kill_resume_worker``).

``interrupt DIR``: trains every entry to step ``CHECKPOINT``, saves, trains to ``KILLED_AT`` and
starts saving again; once the arrays are in Orbax's temporary directory (not yet renamed) it prints
``WRITING`` and waits to be killed (the test sends SIGKILL). ``resume DIR OUT``: restores the latest complete checkpoint in a new
process, trains on to ``FINAL``, trains an uninterrupted run from step 0 to ``FINAL`` too, and writes
a JSON report of the comparison to OUT.
"""

from __future__ import annotations

import json
import sys
import time

import jax
import orbax.checkpoint as ocp

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")

import steadax  # noqa: E402

from . import _registry_run as run  # noqa: E402

steadax.set_strict(True)

CHECKPOINT, KILLED_AT, FINAL = 3, 5, 8  # MultiSteps (k = 2, 4) and lookahead (4) are mid-way at 3


def _interrupt(directory: str) -> None:
  params = run.initial_params()
  params, states = run.train(params, run.init_all(params), CHECKPOINT)
  steadax.checkpoint.save_step(directory, CHECKPOINT, {"params": params, "states": states})
  params, states = run.train(params, states, KILLED_AT - CHECKPOINT)
  finalize = ocp.CompositeCheckpointHandler.finalize

  def finalize_then_stall(self, directory):
    # Every array of step KILLED_AT is in Orbax's temporary directory; it is not yet renamed.
    finalize(self, directory)
    print("WRITING", flush=True)
    time.sleep(600)  # the test kills the process here

  ocp.CompositeCheckpointHandler.finalize = finalize_then_stall
  steadax.checkpoint.save_step(directory, KILLED_AT, {"params": params, "states": states})
  print("NOT KILLED", flush=True)


def _resume(directory: str, out: str) -> None:
  params0 = run.initial_params()
  template = jax.eval_shape(lambda: {"params": params0, "states": run.init_all(params0)})
  step, restored = steadax.checkpoint.restore_step(directory, template)
  resumed = run.train(restored["params"], restored["states"], FINAL - step)
  uninterrupted = run.train(params0, run.init_all(params0), FINAL)
  report = {
      "restored_step": step,
      "entries": len(run.ENTRIES),
      "mismatched_params": run.bit_differences(uninterrupted[0], resumed[0]),
      "mismatched_states": run.bit_differences(uninterrupted[1], resumed[1]),
      "mini_steps_at_checkpoint": {
          name: int(restored["states"][name].mini_step) for name in restored["states"]
          if name.startswith("multi_steps(")},
  }
  with open(out, "w") as f:
    json.dump(report, f)


if __name__ == "__main__":
  if sys.argv[1] == "interrupt":
    _interrupt(sys.argv[2])
  else:
    _resume(sys.argv[2], sys.argv[3])
