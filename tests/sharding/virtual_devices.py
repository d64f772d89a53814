"""Runs a script in a child process on virtual CPU devices and reads its result: the device count
is fixed when jax starts, so a test of layouts and collectives on a mesh needs a process of its own."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.compile_flags import device_env


def run_for_result(args: list[str], devices: int, *, timeout: int = 600) -> dict:
  """The JSON a child ``python *args`` prints after ``RESULT`` on a line of its own.

  The child sees ``devices`` virtual CPU devices, x64 off (layouts and collectives do not depend on
  it) and XLA's cheapest code generation (``tests/compile_flags.py``): layouts and collectives are
  decided before code is generated, and both sides of every comparison are compiled alike.

  Args:
    args: the interpreter's arguments (a script's path, or ``-c`` and a program).
    devices: the number of virtual CPU devices.
    timeout: seconds before the child is stopped and the test fails.

  Returns:
    The parsed JSON.
  """
  env = device_env(devices)
  proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout)
  assert proc.returncode == 0, proc.stderr[-4000:]
  line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT"))
  return json.loads(line[len("RESULT"):])
