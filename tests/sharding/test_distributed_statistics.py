"""Matrix statistics divided across devices (issue 22 §2): on an 8-device mesh with explicit axes, a
group of FSDP-sharded matrices runs in the owner layout. Each device stores an eighth of every
statistic (the state stays one leaf per parameter, sharded along its first axis) and computes its
own share of the matrices; the results equal the one-device steps and every update keeps its
parameter's layout, with all-to-alls and no all-gather. One subprocess (the device count is fixed
when jax starts) runs _distributed_script.py; its docstring says what it measures."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("_distributed_script.py")


@functools.lru_cache(maxsize=1)
def _results() -> dict:
  # Layouts and collectives are decided before code generation: the cheapest code generation.
  flags = ("--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0 "
           "--xla_llvm_disable_expensive_passes=true")
  env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu")
  env.pop("JAX_ENABLE_X64", None)
  proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=600)
  assert proc.returncode == 0, proc.stderr[-4000:]
  line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
  return json.loads(line[len("RESULT "):])


@pytest.mark.slow
@pytest.mark.x32_only  # the subprocess runs with x64 off whatever the pass
@pytest.mark.parametrize("name", ["muon", "soap", "shampoo", "psgd_kron"])
def test_each_device_stores_and_computes_its_share_of_the_statistics(name):
  result = _results()
  assert result["devices"] == 8
  found = result["optimizers"][name]
  # An eighth of the statistics per device (16x16 statistics: two rows each).
  assert found["busiest_bytes"] * 8 == found["total_bytes"], found
  # Along the first axis that divides: a 16x16 statistic's rows, Shampoo's (1, 16, 16) block's rows.
  assert found["statistic_layouts"] in (["P('fsdp', None)"], ["P(None, 'fsdp', None)"]), found
  assert found["update_layouts"] == ["P('fsdp', None)"], found
  # The group moves to the owner layout and back: all-to-alls, never a whole matrix per device.
  assert found["all_gathers"] == 0 and found["all_to_alls"] > 0, found
  assert found["max_diff"] < 1e-5, found
