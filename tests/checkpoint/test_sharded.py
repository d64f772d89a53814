"""Sharded states through Orbax with two processes: each writes the shards it holds, and a restore
reads into the template's shardings, the saved layout or another one.

Two processes on 127.0.0.1 (``jax.distributed.initialize``, two CPU devices each) run
``_sharded_worker.py``; the run is bounded as in tests/sharding/test_multiprocess.py (a free port,
each process in its own session, the group killed on failure or at the limit).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tests.compile_flags import device_env

WORKER = Path(__file__).with_name("_sharded_worker.py")
ROOT = Path(__file__).resolve().parents[2]
LIMIT_S = 90


def _free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _run_pair(directory: Path) -> tuple[list[int | None], list[str]]:
  env = device_env(2)
  env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
  port = _free_port()
  procs = [subprocess.Popen([sys.executable, str(WORKER), str(i), str(port), str(directory)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
           for i in range(2)]
  codes: list[int | None] = [None, None]
  outputs = ["", ""]
  try:
    for i, proc in enumerate(procs):
      try:
        outputs[i] = proc.communicate(timeout=LIMIT_S)[0]
        codes[i] = proc.returncode
      except subprocess.TimeoutExpired:
        pass
      if codes[i] != 0:
        break  # the other process cannot finish alone: killed below
  finally:
    for proc in procs:
      if proc.poll() is None:
        try:
          os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
          pass
      proc.wait()
  return codes, outputs


@pytest.mark.slow
@pytest.mark.x32_only  # two subprocesses with x64 off whatever the pass
def test_two_processes_save_their_shards_and_restore_into_the_template_shardings(tmp_path):
  codes, outputs = _run_pair(tmp_path / "checkpoints")
  assert codes == [0, 0], f"return codes {codes}\n--- process 0\n{outputs[0][-3000:]}\n--- process 1\n{outputs[1][-3000:]}"
  result = json.loads(next(l for l in outputs[0].splitlines() if l.startswith("RESULT "))[len("RESULT "):])
  # Each process wrote its own shards (Orbax's OCDBT layout: one database per process).
  assert {"arrays/ocdbt.process_0", "arrays/ocdbt.process_1"} <= set(result["files"]), result["files"]
  assert result["manifest_step"] == 7
  same, other = result["same"], result["other"]
  assert set(same) == set(other) and {"params/w", "opt_state/0/0/mu/w", "keys", "empty"} <= set(same)
  for layout in (same, other):
    assert all(r["equal"] and r["local_shards"] == 2 for r in layout.values()), layout
  # Every leaf is restored with the template's sharding: the saved layout, then another one.
  assert same["params/w"]["spec"] == same["opt_state/0/0/nu/w"]["spec"] == "P('fsdp', None)"
  assert same["opt_state/0/0/mu/b"]["spec"] == "P('fsdp',)" and same["keys"]["spec"] == "P('fsdp',)"
  assert other["opt_state/0/0/mu/w"]["spec"] == "P(None, 'fsdp')" and other["opt_state/0/0/mu/b"]["spec"] == "P()"
  assert same["keys"]["dtype"] == "key<fry>" and same["opt_state/0/0/count"]["dtype"] == "int32"
  # SOAP's statistics and eigenbases divided across the four devices (issue 22 §2: one leaf per
  # parameter, sharded along its first axis): each process wrote and read back its own rows.
  soap = result["soap"]
  assert len(soap) == 8, soap  # two weights, two axes, statistics and eigenbases
  assert all(r["equal"] and r["local_shards"] == 2 and r["spec"] == "P('fsdp', None)" for r in soap.values()), soap
