"""examples/fsdp.py runs: FSDP training on 8 virtual CPU devices, the loss falls, the state is sharded."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.compile_flags import defaults_env

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fsdp.py"


@pytest.mark.slow
@pytest.mark.x32_only  # a subprocess with x64 off whatever the pass
def test_fsdp_example_trains_with_sharded_state():
  env = defaults_env()  # as a user runs it (the example sets its own device count)
  proc = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "10"], capture_output=True, text=True,
                        env=env, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = proc.stdout
  # The Muon momentum of a (32, 128) matrix has the matrix's FSDP layout: a quarter per device.
  assert "is stored P('fsdp',), its Muon momentum P('fsdp', None), one device holds (8, 128)" in out, out
  assert "| micro-step | loss | step time (ms) |" in out and "10/10" in out
  first, last = map(float, re.search(r"first loss ([\d.]+), last loss ([\d.]+)", out).groups())
  assert last < first - 0.3, (first, last)
