"""Runs a script in a child process on virtual CPU devices and reads its result: the device count
is fixed when jax starts, so a test of layouts and collectives on a mesh needs a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def run_for_result(args: list[str], devices: int, *, fusion_emitters: bool = True, timeout: int = 600) -> dict:
  """The JSON a child ``python *args`` prints after ``RESULT`` on a line of its own.

  The child sees ``devices`` virtual CPU devices, x64 off (layouts and collectives do not depend on
  it) and XLA's cheapest code generation: layouts and collectives are decided before code is
  generated, and both sides of every comparison are compiled alike.

  Args:
    args: the interpreter's arguments (a script's path, or ``-c`` and a program).
    devices: the number of virtual CPU devices.
    fusion_emitters: False uses XLA's older CPU fusion emitters (the MLIR ones run a pass pipeline
      per fusion: half the time of a program with hundreds of fusions).
    timeout: seconds before the child is stopped and the test fails.

  Returns:
    The parsed JSON.
  """
  flags = (f"--xla_force_host_platform_device_count={devices} --xla_backend_optimization_level=0 "
           "--xla_llvm_disable_expensive_passes=true")
  if not fusion_emitters:
    flags += " --xla_cpu_use_fusion_emitters=false"
  env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu")
  env.pop("JAX_ENABLE_X64", None)
  proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout)
  assert proc.returncode == 0, proc.stderr[-4000:]
  line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT"))
  return json.loads(line[len("RESULT"):])
