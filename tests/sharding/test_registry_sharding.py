"""Every conformance registry entry keeps its parameters' shardings on a 4x2 mesh of 8 virtual CPU
devices (explicit and automatic mesh axes), and the elementwise ones (wrappers included) compile
without an all-gather. One subprocess runs _registry_script.py (the device count is fixed when jax
starts); its docstring says what is checked and how the compilations are shared."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tests.conformance.registry import all_entries
from tests.sharding.virtual_devices import run_for_result

SCRIPT = Path(__file__).with_name("_registry_script.py")

# Failures of work in progress elsewhere (reported to its owners; remove an entry when it passes).
KNOWN: dict = {}


@functools.lru_cache(maxsize=1)
def _results() -> dict:
  return run_for_result([str(SCRIPT)], devices=8, timeout=900)


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


NNX_SCRIPT = Path(__file__).with_name("_nnx_registry_script.py")


@pytest.mark.slow
@pytest.mark.x32_only  # the subprocess runs with x64 off whatever the pass
def test_every_entry_in_nnx_optimizer_with_annotated_parameters():
  # nnx.Optimizer gives each state entry its parameter's sharding annotation: an entry whose state
  # has another shape (Shampoo's block statistics, Adafactor's factors, a per-parameter scalar)
  # failed at nnx.Optimizer(...) with an IndivisibleError or a mismatched constraint (16 entries).
  result = run_for_result([str(NNX_SCRIPT)], devices=8, timeout=900)
  assert result["devices"] == 8 and result["entries"] == len(all_entries())
  assert not result["failures"], "\n".join(f"{k}: {v}" for k, v in sorted(result["failures"].items()))
  assert result["trained"] == sum(e.extra_args is None for e in all_entries()) > 100, result
