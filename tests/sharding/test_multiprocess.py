"""Two processes on 127.0.0.1 (``jax.distributed.initialize``, CPU collectives over gloo) train a small
model data-parallel and FSDP-sharded with steadax and end with the single-process parameters.

The worker is _multiprocess_worker.py. The run is bounded: a free port is taken from the OS, each
process is started in its own session and the whole group is killed on failure or when the time
limit passes (a process whose peer died would otherwise wait in a collective until gloo's
timeouts).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.compile_flags import device_env

WORKER = Path(__file__).with_name("_multiprocess_worker.py")
LIMIT_S = 55


def _free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _kill(proc: subprocess.Popen) -> None:
  if proc.poll() is None:
    try:
      os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
  proc.wait()


def _run_pair() -> tuple[list[int | None], list[str]]:
  """Both processes' return codes (None: killed at the limit) and outputs."""
  env = device_env(2)
  port = _free_port()
  procs = [subprocess.Popen([sys.executable, str(WORKER), str(i), str(port)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True) for i in range(2)]
  deadline = time.monotonic() + LIMIT_S
  codes: list[int | None] = [None, None]
  outputs = ["", ""]
  try:
    for i, proc in enumerate(procs):
      try:
        outputs[i] = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))[0]
        codes[i] = proc.returncode
      except subprocess.TimeoutExpired:
        _kill(proc)
        outputs[i] = proc.communicate()[0]
      if codes[i] != 0:
        break  # the other process cannot finish alone: killed below
  finally:
    for proc in procs:
      _kill(proc)
  return codes, outputs


@pytest.mark.slow
@pytest.mark.x32_only  # two subprocesses with x64 off whatever the pass
def test_two_processes_train_like_one():
  codes, outputs = _run_pair()
  assert codes == [0, 0], f"return codes {codes}\n--- process 0\n{outputs[0][-3000:]}\n--- process 1\n{outputs[1][-3000:]}"
  line = next(l for l in outputs[0].splitlines() if l.startswith("RESULT "))
  result = json.loads(line[len("RESULT "):])
  # Training moved the parameters, and the two-process FSDP run moved them as one device did
  # (float32; the sums are split differently across devices).
  assert result["moved"] > 0.05, result
  assert result["max_diff"] < 1e-5, result
  # The parameters and muon's momentum kept their FSDP layout; each device holds half of each weight.
  assert set(result["layouts"].values()) <= {"P('fsdp',)", "P('fsdp', None)"}, result
  assert result["mu_layout"] == "P('fsdp', None)", result
  assert result["local_shapes"] == {"w1": [4, 16], "b1": [8], "w2": [8, 4], "b2": [2]}, result
