"""Matrix statistics divided across devices (issue 22 §2): on an 8-device mesh, with explicit axes
and with automatic ones set by ``jax.set_mesh``, a group of FSDP-sharded matrices runs in the owner
layout. Each device stores an eighth of every
statistic (the state stays one leaf per parameter, sharded along its first axis) and computes its
own share of the matrices; the results equal the one-device steps and every update keeps its
parameter's layout, with all-to-alls and no all-gather. One subprocess (the device count is fixed
when jax starts) runs _distributed_script.py; its docstring says what it measures."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest

from tests.sharding.virtual_devices import run_for_result

SCRIPT = Path(__file__).with_name("_distributed_script.py")
NNX_SCRIPT = Path(__file__).with_name("_nnx_auto_script.py")


@functools.lru_cache(maxsize=2)
def _results(script: Path = SCRIPT) -> dict:
  """The script's result, run once per pytest process (on 8 virtual devices)."""
  return run_for_result([str(script)], devices=8)


@pytest.mark.slow
@pytest.mark.x32_only  # the subprocess runs with x64 off whatever the pass
@pytest.mark.parametrize("kind", ["Explicit", "Auto"])
@pytest.mark.parametrize("name", ["muon", "soap", "shampoo", "psgd_kron", "galore"])
def test_each_device_stores_and_computes_its_share_of_the_statistics(name, kind):
  result = _results()
  assert result["devices"] == 8
  found = result["kinds"][kind][name]
  # An eighth of the statistics per device (16x16 statistics: two rows each).
  assert found["busiest_bytes"] * 8 == found["total_bytes"], found
  # Along the first axis that divides: a 16x16 statistic's rows, Shampoo's (1, 16, 16) block's rows.
  assert found["statistic_layouts"] in (["P('fsdp', None)"], ["P(None, 'fsdp', None)"]), found
  assert found["update_layouts"] == ["P('fsdp', None)"], found
  if name == "muon":  # vmapped over the gradients, the parameters closed over: still FSDP
    assert found["swept_layouts"] == ["P(None, 'fsdp', None)"], found
  # The group moves to the owner layout and back: all-to-alls, never a whole matrix per device.
  assert found["all_gathers"] == 0 and found["all_to_alls"] > 0, found
  assert found["max_diff"] < 1e-5, found



@pytest.mark.slow
@pytest.mark.x32_only  # the subprocess runs with x64 off whatever the pass
@pytest.mark.parametrize("kind", ["Explicit", "Auto"])
@pytest.mark.parametrize("name", ["muon", "soap", "shampoo", "psgd_kron", "galore"])
def test_a_stacked_weight_keeps_its_layer_axis_sharding(name, kind):
  # Sixteen layers stacked in one (16, 16, 16) weight sharded along the layer axis, dimension
  # numbers naming it a batch axis: every state leaf with the layer axis (moments, statistics,
  # factors, projectors, the low-rank moments) keeps that sharding, so does the update, and no
  # matrix is gathered (each device has whole matrices of its own layers). Equal to one device.
  found = _results()["stacked"][kind][name]
  assert found["state_layouts"] and all(re.fullmatch(r"P\('fsdp'(, None)+\)", layout)
                                        for layout in found["state_layouts"]), found
  assert found["update_layouts"] == ["P('fsdp', None, None)"], found
  assert found["all_gathers"] == 0 and found["all_to_alls"] == 0, found
  assert found["max_diff"] < 1e-5, found


@pytest.mark.slow
@pytest.mark.x32_only  # the subprocess runs with x64 off whatever the pass
@pytest.mark.parametrize("name", ["muon", "soap", "shampoo", "psgd_kron", "galore"])
def test_nnx_optimizer_on_an_automatic_mesh_trains_like_one_device(name):
  # The user's setup: kernels annotated ("fsdp", None), the model made under jax.set_mesh with
  # automatic axes, nnx.Optimizer and nnx.jit, three steps (the update in the owner layout); the
  # same code on a one-device mesh. The layouts below hold with the gather-once path too (Flax
  # places each state leaf by its parameter's annotation): what this adds to the test above is the
  # framework's loop and the equality with one device.
  found = _results(NNX_SCRIPT)["optimizers"][name]
  assert "error" not in found, found
  assert found["kernel_layout"] in ("P('fsdp',)", "P('fsdp', None)"), found
  # Along the first axis 8 divides (Shampoo's (1, 16, 16) block statistics: the rows).
  assert found["statistic_layout"] in ("P('fsdp',)", "P('fsdp', None)", "P(None, 'fsdp')"), found
  assert found["statistic_share"] == 0.125, found
  # The first two steps equal one device's. SOAP's third step does not, with the owner layout or
  # without it (its eigenbases of the first statistics are ill-determined here: the same difference,
  # 0.04-0.05 in the parameters, came from the gather-once path before automatic axes divided it).
  assert np.allclose(found["losses"][:2], found["reference_losses"][:2], rtol=1e-5), found
  if name != "soap":
    assert np.allclose(found["losses"], found["reference_losses"], rtol=1e-5), found
    # Shampoo's inverse fourth roots of the first, ill-conditioned statistics magnify rounding
    # (2.6e-4 in the parameters after three steps, 1.6e-4 with the gather-once path; its losses
    # agree to 1e-6).
    assert found["max_param_diff"] < (1e-3 if name == "shampoo" else 1e-5), found
