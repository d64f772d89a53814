"""Kill-and-resume: a run checkpointed at step 3 and SIGKILLed while writing its step-5 checkpoint,
restored in a new process and continued, ends bit-identical to an uninterrupted run, for every
registry entry and the nested wrapper stacks of ``_registry_run``; the half-written checkpoint is
never read (issue 13, "Faults").

Two processes (``_kill_resume_worker``): the first is killed for real (SIGKILL, return code -9)
mid-write; the second restores the latest complete checkpoint, continues to step 8 and compares
with an uninterrupted run from step 0 through the same compiled program. The processes share a
persistent compilation cache (make test's, or one in the test's temporary directory), so the
second loads the step program the first compiled.
"""

from __future__ import annotations

import json
import os
import pathlib
import select
import signal
import subprocess
import sys
import time

import jax
import pytest

import steadax

pytestmark = [pytest.mark.x32_only, pytest.mark.slow]  # bit-identity across processes; dtypes are
# covered elsewhere

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKER = "tests.checkpoint._kill_resume_worker"


def _env(tmp_path):
  env = dict(os.environ, JAX_ENABLE_X64="0", JAX_PLATFORMS="cpu")
  env.setdefault("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "compilation_cache"))
  env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
  return env


def _kill_while_writing(directory, env, stderr_path, timeout=300):
  # stderr goes to a file: a full pipe would stall the worker before it reaches the write.
  stderr = open(stderr_path, "w")  # noqa: SIM115
  process = subprocess.Popen([sys.executable, "-m", WORKER, "interrupt", str(directory)], cwd=ROOT,
                             env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
  try:
    deadline = time.monotonic() + timeout
    line = ""
    while (remaining := deadline - time.monotonic()) > 0:
      # Wait for output with a deadline (a hung worker must not hang the suite).
      if not select.select([process.stdout], [], [], remaining)[0]:
        break
      line = process.stdout.readline()
      if line.strip() == "WRITING" or not line:
        break
    assert line.strip() == "WRITING", (
        f"the worker did not reach the write (output {line!r}): {stderr_path.read_text()[-3000:]}")
    os.kill(process.pid, signal.SIGKILL)
    assert process.wait(timeout=60) == -signal.SIGKILL
  finally:
    if process.poll() is None:
      process.kill()
      process.wait()
    process.stdout.close()
    stderr.close()


def test_sigkilled_run_resumes_bit_identically(tmp_path):
  directory, report_path, env = tmp_path / "checkpoints", tmp_path / "report.json", _env(tmp_path)
  _kill_while_writing(directory, env, tmp_path / "interrupt.stderr")

  # The killed write left only Orbax's temporary directory: the latest complete checkpoint is step
  # 3, and the temporary directory fails to read with an error naming it instead of giving a state.
  assert steadax.checkpoint.all_steps(directory) == [3]
  partial = [p for p in directory.iterdir() if p.name.startswith("5.orbax-checkpoint-tmp")]
  assert len(partial) == 1 and (partial[0] / "arrays").is_dir()
  with pytest.raises(steadax.checkpoint.CheckpointError, match="not a complete steadax checkpoint"):
    steadax.checkpoint.read_manifest(partial[0])

  result = subprocess.run([sys.executable, "-m", WORKER, "resume", str(directory), str(report_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  report = json.loads(report_path.read_text())
  assert report["restored_step"] == 3
  assert report["entries"] >= 150
  # MultiSteps was mid-accumulation when the checkpoint was taken.
  assert report["mini_steps_at_checkpoint"] and all(report["mini_steps_at_checkpoint"].values())
  assert report["mismatched_params"] == [] and report["mismatched_states"] == [], report


def test_interrupted_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
  # The same guarantee in-process: an exception while saving (a full disk, a KeyboardInterrupt)
  # leaves the previous step the latest, and the next save of that step goes through.
  import orbax.checkpoint as ocp

  tx = steadax.sgd(0.1, momentum=0.9)
  old, new = tx.init({"w": jax.numpy.zeros(2)}), tx.init({"w": jax.numpy.ones(2)})
  steadax.checkpoint.save_step(tmp_path, 1, old)

  def fail(self, directory):
    raise KeyboardInterrupt

  with monkeypatch.context() as patch:
    patch.setattr(ocp.CompositeCheckpointHandler, "finalize", fail)
    with pytest.raises(KeyboardInterrupt):
      steadax.checkpoint.save_step(tmp_path, 2, new)
  assert steadax.checkpoint.all_steps(tmp_path) == [1]
  assert steadax.checkpoint.restore_step(tmp_path, new)[0] == 1
  steadax.checkpoint.save_step(tmp_path, 2, new)
  assert steadax.checkpoint.latest_step(tmp_path) == 2
