"""The benchmark suite runs (benchmarks/): its harness and report on toy sizes.

Nothing is timed here; ``make bench`` measures. The cases run here cover every piece of the
harness (columns, fused and flat-parameter columns, floors, the training step, alternating rounds, first call, memory analysis) in about
8 s of CPU; many_small (five optimizers) and lbfgs (a while-loop solve) add 15 s of compilation and
only repeat those pieces. The lm case (a language model, eight optimizers) is not run here: its
smallest config still compiles four sweep programs (about 25 s, the suite's budget is 15 minutes);
`python -m benchmarks.run --cases lm --quick` runs it (2 minutes) and reports its Optax twins'
agreement. Its step-counting summary is tested below, and its scanned layout's maths and dimension
numbers; the device script's dry run (``benchmarks/device.py``) runs every section on toy sizes,
the lm case and its per-layer/scanned comparison included.
"""

import json

import jax
import pytest

from benchmarks import harness, report
from benchmarks.cases import CASES

pytestmark = pytest.mark.x32_only


SMOKE_CASES = ("big", "mixed", "train", "first_call", "memory", "recipes")


@pytest.fixture
def standard_promotion():
  """Optax's code is not written for strict promotion; the suite runs under JAX's default.

  Set globally, not with the thread-local context manager: the harness compiles on threads.
  """
  previous = jax.config.jax_numpy_dtype_promotion
  jax.config.update("jax_numpy_dtype_promotion", "standard")
  yield
  jax.config.update("jax_numpy_dtype_promotion", previous)


@pytest.mark.slow
def test_cases_run_and_report(tmp_path, standard_promotion):
  results = {name: CASES[name](harness.SMOKE, harness.Progress(enabled=False))
             for name in SMOKE_CASES}
  text = report.tables(results)
  for name in ("big: adamw", "mixed f32/bf16", "adam8bit", "steadax/optax", "steadax fused",
               "train step, 6 small: adamw", "steadax flat params/optax"):
    assert name in text
  assert "| 2 |" in text  # the first-call row of 2 leaves
  assert "| clip+adamw | 4 |" in text  # the recipes case's compile times
  path = tmp_path / "results.json"
  report.write_json(str(path), {"machine": report.machine(), "results": results})
  saved = json.loads(path.read_text())
  for row in saved["results"]["big"]["rows"] + saved["results"]["mixed"]["rows"]:
    assert row["median_s"]["steadax"] > 0 and row["ratios"]["steadax/optax"] > 0
    assert row["ratios"]["steadax/floor"] > 0
  for row in saved["results"]["train"]["rows"]:
    assert row["ratios"]["steadax flat params/optax"] > 0 and row["ratios"]["steadax fused/optax"] > 0
  first_call = saved["results"]["first_call"]["rows"][0]["first_call"]
  assert first_call["steadax flat params"]["total_s"] > 0
  assert saved["machine"]["slug"].endswith(f"-{saved['machine']['cores']}c")


@pytest.mark.slow
def test_grid_case_measures_every_column_and_draws_its_heat_maps(tmp_path, standard_promotion,
                                                                 monkeypatch):
  """The grid (issue 24) on toy cells: an MLP of five identical layers (where the limit on leaves
  of one shape changes the layout, so the no-limit column is measured too), an Equinox and an NNX
  model, a few columns each. One first call (a plain JAX MLP's) runs in a child process as ``make
  bench`` runs them all; the others are stood in for by its figures (each child imports jax and
  compiles: seconds apiece). 17 s of CPU under a load of 8 on 2 cores, imports and child included."""
  from benchmarks.cases import grid
  from benchmarks.grid_models import Cell

  child = grid.first_call_in_child(Cell("mlp", 1, 2), "steadax", 60)
  assert child["cpu_s"] > 0 and child["lowered_lines"] > 0 and child["peak_bytes"] > 0
  monkeypatch.setattr(grid, "first_call_in_child", lambda cell, label, limit: dict(child))
  quiet, rows = harness.Progress(enabled=False), {}
  for cell, columns in ((Cell("mlp", 5, 1), ("steadax", "steadax flat params",
                                              "steadax flat params, no shape limit")),
                        (Cell("equinox", 1, 2), ("steadax", "steadax fused")),
                        (Cell("nnx", 1, 2), ("steadax", "steadax fused"))):
    rows[cell.name] = grid.run(harness.SMOKE, quiet, cells=(cell,), columns=columns)["rows"][0]
  deep = rows["mlp 5x1"]
  assert set(deep["first_call"]) == {"steadax", "steadax flat params",
                                     "steadax flat params, no shape limit"}
  assert "no buffers" in deep["layouts"]["steadax flat params"]
  assert "no buffers" not in deep["layouts"]["steadax flat params, no shape limit"]
  assert all(v > 0 for v in deep["ratios"]["steadax flat params, no shape limit/steadax"].values())
  for name in ("equinox 1x2", "nnx 1x2"):
    assert rows[name]["ratios"]["steadax fused/steadax"]["train step"] > 0
    assert rows[name]["ratios"]["steadax fused/steadax"]["update step"] > 0
  result = {"kind": "grid", "time_limit_s": 60, "rounds": 2, "rows": list(rows.values())}
  text = report.tables({"grid": result})
  assert "| mlp 5x1 | 10 | 1 |" in text and "flat (no limit)/per leaf: first call" in text
  pytest.importorskip("matplotlib")  # the bench extra
  grid.chart(str(tmp_path / "grid.png"), result, "smoke")
  assert (tmp_path / "grid.png").stat().st_size > 0


def test_readme_block_replaces_only_the_text_between_the_markers(tmp_path):
  readme = tmp_path / "README.md"
  readme.write_text(f"before\n{report.README_START}\nold\n{report.README_END}\nafter\n")
  assert report.update_readme(f"{report.README_START}\nnew\n{report.README_END}", str(readme))
  assert readme.read_text() == f"before\n{report.README_START}\nnew\n{report.README_END}\nafter\n"
  readme.write_text("no markers\n")
  assert not report.update_readme("x", str(readme))


def test_lm_summary_counts_steps_to_adamws_best_final_loss():
  from benchmarks.cases import lm

  steps = [0, 10, 20, 30, 40]
  rows = {
      "adamw": {"learning_rates": [1e-3, 3e-3],
                "val_loss": [[5.0, 4.0, 3.5, 3.2, 3.0], [5.0, 3.8, 3.0, 2.8, 2.6]]},
      "muon": {"learning_rates": [0.01, 0.02],
               "val_loss": [[5.0, 3.0, 2.6, 2.5, 2.4], [5.0, 2.9, 2.7, 2.55, float("nan")]]},
      "soap": {"learning_rates": [1e-3], "val_loss": [[5.0, 4.0, 3.0, 2.7, 2.65]]},
  }
  summary = lm.summarize(rows, steps)
  assert summary["target"] == 2.6
  adamw, muon, soap = (summary["optimizers"][n] for n in ("adamw", "muon", "soap"))
  assert adamw["steps_to_target"] == 40 and adamw["steps_ratio"] == 1.0 and not adamw["meets_goal"]
  assert muon["best_lr"] == 0.01 and muon["best_final_val_loss"] == 2.4  # the NaN run is not best
  assert muon["steps_to_target"] == 20 and muon["steps_ratio"] == 0.5 and muon["meets_goal"]
  assert soap["steps_to_target"] is None and not soap["meets_goal"]
  assert summary["goal_met_by"] == ["muon"]


def test_matrix_depth_selects_the_execution_and_stacks_the_layers():
  # --no-cpu-chunks and the per-parameter path are the optimizers' ``execution`` argument (nothing
  # private is switched); --stacked gives one (L, d_in, d_out) leaf per weight with dimension numbers.
  import steadax
  from benchmarks.cases import matrix_depth
  whole = steadax.MatrixExecution(chunks=None)
  tx = matrix_depth.optimizers(whole)["steadax soap"]()
  assert tx.transforms[0].execution == whole  # type: ignore[attr-defined]
  params = matrix_depth.layers(2, stacked=True)
  assert params["q"].shape == (2, 64, 64) and params["bias"].shape == (2, 64)
  tx = matrix_depth.optimizers(whole, stacked=True)["steadax soap"]()
  state = jax.eval_shape(tx.init, params)
  assert [s.shape for s in state[0].statistics["up"]] == [(2, 64, 64), (2, 256, 256)]
  assert state[0].statistics["bias"] == (jax.ShapeDtypeStruct((0, 0), jax.numpy.float32),)


@pytest.mark.x32_only
def test_scanned_depth_compiles_the_examples_whole_step():
  # cases/scanned_depth.py: the example's training step (nnx.Optimizer with the model's dimension
  # numbers) compiled at each depth; one layer and two, AdamW and Muon, one repetition.
  from benchmarks.cases import scanned_depth
  result = scanned_depth.run([1, 2], 1, ["muon"])
  (row,) = result["rows"]
  assert row["optimizer"] == "muon" and set(row["cpu_s"]) == {1, 2}
  assert all(t > 0 for t in row["cpu_s"].values()) and row["cpu_ratio"] > 0
  assert "| muon |" in "\n".join(scanned_depth.table(result))


def test_lm_scanned_layout_computes_the_same_loss_with_stacked_dimension_numbers():
  # The scanned configuration (cases/lm_scanned.py): the same initial numbers stacked (layers, ...)
  # and run by one lax.scan give the per-layer model's loss; the one-liner's dimension numbers make
  # each layer's slice a matrix (Muon: blocks only; the others: every matrix, as per layer).
  import dataclasses

  import numpy as np

  from benchmarks.cases import lm, lm_scanned
  from steadax import WeightDimensionNumbers as Dims

  config = dataclasses.replace(lm.CONFIGS["smoke"], layers=2)
  per_layer = lm.init_params(config)
  scanned = lm.stack_blocks(per_layer)
  assert scanned["blocks"]["up"].shape == (2, config.d_model, 4 * config.d_model)
  tokens = jax.numpy.asarray(np.arange(2 * (config.context + 1)).reshape(2, -1) % lm.VOCAB)
  loss = jax.jit(lm.loss_fn, static_argnums=2)
  with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
    np.testing.assert_allclose(loss(scanned, tokens, config.heads),
                               loss(per_layer, tokens, config.heads), rtol=1e-6)
  muon = lm_scanned.dimension_numbers("muon", scanned)
  assert muon["blocks"]["query"] == Dims(1, 2) and muon["blocks"]["norm1"]["scale"] is None
  assert muon["embed"] is None and muon["head"] is None
  assert lm_scanned.dimension_numbers("muon", per_layer)["blocks"][1]["down"] == Dims(0, 1)
  soap = lm_scanned.dimension_numbers("soap", scanned)
  assert soap["embed"] == Dims(0, 1) and soap["blocks"]["down"] == Dims(1, 2)


def test_every_matrix_optimizer_takes_stacked_dimension_numbers():
  from benchmarks import stacked
  assert {name: stacked.stacked_support(name) for name in stacked.MATRIX_OPTIMIZERS} == dict.fromkeys(
      stacked.MATRIX_OPTIMIZERS)


@pytest.mark.slow
def test_device_script_dry_run_writes_every_section(tmp_path, capsys):
  """``benchmarks/device.py --dry-run``: every section in one child process on toy sizes (about
  15 s of CPU, XLA's cheap code generation inherited from the suite), one JSON and one table."""
  from benchmarks import device, stacked

  device.main(["--dry-run", str(tmp_path)])
  saved = json.loads((tmp_path / "device.json").read_text())
  table = (tmp_path / "device.md").read_text()
  assert saved["mode"] == "dry" and saved["machine"]["device_kind"]
  assert list(saved["sections"]) == list(device.SECTIONS)
  for name, entry in saved["sections"].items():
    assert entry["status"] == "ok", (name, entry.get("traceback") or entry.get("log_tail"))
    assert f"## {name} (ok, " in table
  result = {name: entry["result"] for name, entry in saved["sections"].items()}
  bandwidth = result["adamw_bandwidth"]
  assert bandwidth["copy"]["best_bytes_per_s"] > 0 and bandwidth["bytes_per_step"] > 0
  assert {"optax", "steadax", "floor"} <= set(bandwidth["bandwidth"])
  assert all(f["of_copy"] > 0 for f in bandwidth["bandwidth"].values())
  for kind in ("update", "train"):
    ratios = result["many_leaves"][kind]["ratios"]
    for column in ("steadax", "steadax fused", "steadax flat params"):
      assert ratios[f"{column}/optax"] > 0, (kind, column)
  # The matrix optimizers that take stacked dimension numbers, Muon at least, and the references.
  ready = stacked.supported(report=lambda reason: None)
  assert "muon" in ready
  measured = {row["optimizer"] for row in result["stacked_matrix"]["rows"]}
  assert measured == {*(f"steadax {n}" for n in ready), "steadax adamw", "optax contrib.muon"}
  assert all(row["step/adamw"] > 0 and row["compile_s"] > 0 for row in result["stacked_matrix"]["rows"])
  # Per layer and scanned train alike when each layer's slice is its own matrix.
  layouts = result["lm_layouts"]["rows"]
  assert set(layouts) == {"muon"} and layouts["muon"]["train_loss_max_rel_diff"] < 1e-5
  assert layouts["muon"]["scanned"]["compile_s"] > 0 and layouts["muon"]["per-layer"]["step_s"] > 0
  assert set(result["lm"]["rows"]) == {"adamw"} and "adamw" in result["lm"]["optax"]
  assert "| steadax muon |" in table and "| muon | 0.04 |" in table
