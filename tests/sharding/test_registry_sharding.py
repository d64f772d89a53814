"""Every conformance registry entry keeps its parameters' shardings on a 4x2 mesh of 8 virtual CPU
devices (explicit and automatic mesh axes), and the elementwise ones (wrappers included) compile
without an all-gather. One subprocess runs _registry_script.py (the device count is fixed when jax
starts); its docstring says what is checked and how the compilations are shared."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conformance.registry import all_entries

SCRIPT = Path(__file__).with_name("_registry_script.py")

# Failures of work in progress elsewhere (reported to its owners; remove an entry when it passes).
KNOWN: dict = {}


@functools.lru_cache(maxsize=1)
def _results() -> dict:
  # Layouts and collectives are decided before code generation: the CPU backend's optimisations
  # are turned down and its older fusion emitters used (the MLIR ones compile each of these
  # programs' hundreds of fusions through a pass pipeline: half of the subprocess's time).
  flags = ("--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0 "
           "--xla_llvm_disable_expensive_passes=true --xla_cpu_use_fusion_emitters=false")
  env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu")
  env.pop("JAX_ENABLE_X64", None)
  proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=900)
  assert proc.returncode == 0, proc.stderr[-4000:]
  line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
  return json.loads(line[len("RESULT "):])


@pytest.mark.slow
@pytest.mark.x32_only  # layouts do not depend on the x64 flag; the subprocess runs with x64 off
def test_every_entry_keeps_its_parameters_shardings():
  result = _results()
  assert result["devices"] == 8
  assert result["entries"] == len(all_entries())
  failures = {k: v for k, v in result["failures"].items() if "all-gathers" not in k and k not in KNOWN}
  report = "\n".join(f"{name}:\n  " + "\n  ".join(found[:6]) for name, found in sorted(failures.items()))
  assert not failures, f"{len(failures)} entry/mesh pairs lose a parameter's layout:\n{report}"


@pytest.mark.slow
@pytest.mark.x32_only
def test_elementwise_entries_compile_without_all_gather():
  result = _results()
  names = set(result["elementwise"])
  # The selection holds the elementwise optimizers and the wrappers named by the issue.
  for name in ("adam", "adamw", "sgd_momentum", "lion", "rmsprop", "multi_steps_adam", "masked_adam_callable",
               "partition_adam_sgd", "apply_if_finite_adam"):
    assert name in names, name
  assert len(names) > 60, len(names)
  assert result["elementwise_all_gathers"] == 0, result["failures"].get("Auto/elementwise all-gathers")
