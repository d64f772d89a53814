"""The integration examples (examples/flax_nnx.py, flax_linen.py, equinox_loop.py,
scanned_transformer.py) run and train.

Each example's ``main()`` runs in this process, under the suite's strict configuration (strict
dtype promotion, rank promotion raising, steadax's strict contract mode), prints its table and
returns its rows; an example exits with a message when a loss does not fall, a frozen or integer
parameter moves, or a new learning rate retraces a step. The assertions below repeat the checks on
the returned rows, so a failure names the row. The demo (``make demo``) and examples/sweep.py have
their own tests or are too slow for the suite.
"""

from __future__ import annotations

import pathlib
import runpy

import jax.numpy as jnp
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def _main(name):
  return runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name=name)["main"]


@pytest.mark.x32_only
def test_flax_nnx_example_trains_every_optimizer(capsys):
  rows = _main("flax_nnx")()
  assert "| contrib.muon (matrices) |" in capsys.readouterr().out
  assert len(rows) == 5
  for name, row in rows.items():
    assert row["final"] < 0.5 * row["first"], name
  assert rows["inject_hyperparams(adamw)"]["lr"] == "1e-03"   # lowered halfway through


@pytest.mark.x32_only
def test_flax_linen_example_keeps_the_integer_leaf_and_the_frozen_layer(capsys):
  rows = _main("flax_linen")()
  assert "| MultiSteps(adamw, 2) |" in capsys.readouterr().out
  for name, row in rows.items():
    assert row["final"] < 0.7 * row["first"], name
    assert row["version"].dtype == jnp.int32 and int(row["version"]) == 3, name
    assert row["hidden_moved"] != name.startswith("partition"), name


@pytest.mark.x32_only
def test_equinox_example_traces_once_for_three_learning_rates(capsys):
  rows = _main("equinox_loop")()
  assert "| chain(clip, lion) |" in capsys.readouterr().out
  for name, first, final, _ in rows:
    assert final < 0.5 * first, name
  assert [traces for name, _, _, traces in rows if name.startswith("adamw, lr")] == [1, 0, 0]


@pytest.mark.x32_only
def test_scanned_transformer_trains_with_dimension_numbers_from_the_model(capsys):
  # A small model (the defaults take 20-40 s): two stacked layers, 20 steps per optimizer.
  module = runpy.run_path(str(EXAMPLES / "scanned_transformer.py"), run_name="scanned_transformer")
  rows = module["main"](["--steps", "20", "--layers", "2", "--width", "16", "--context", "16",
                         "--batch", "8", "--print-every", "10"])
  out = capsys.readouterr().out
  assert ("blocks.up.kernel (2, 16, 64) ('layers', 'embed', 'mlp'): "
          "WeightDimensionNumbers(reduction_axis=1, output_axis=2)") in out
  assert "blocks.norm1.scale (2, 16) ('layers', 'embed'): None" in out
  # Every optimizer of the example's table that takes dimension numbers trains (SOAP joins Muon
  # and AdamW once it takes them: tests/test_bench_smoke.py fails until this is switched on).
  expected = {name for name, (factory, keyword, *_) in module["OPTIMIZERS"].items()
              if keyword is None or module["takes_stacked_dimension_numbers"](factory, keyword)}
  assert {"adamw", "muon"} <= expected and set(rows) == expected
  for name, row in rows.items():
    assert row["final"] < 0.8 * row["first"], name


def test_every_example_says_how_to_run_it_with_the_projects_python():
  # A bare ``python examples/x.py`` runs whichever python is first on PATH (often one without
  # steadax, flax or equinox): each example names ``make example NAME=x`` (``make demo``) instead.
  import ast
  import re
  makefile = (EXAMPLES.parent / "Makefile").read_text()
  assert re.search(r"^example: ", makefile, flags=re.M) and "examples/$(NAME).py" in makefile
  for path in sorted(EXAMPLES.glob("*.py")):
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert not re.search(r"(^|[\s`])python examples/", doc), path.name
    target = "make demo" if path.stem == "demo" else f"make example NAME={path.stem}"
    assert target in doc, path.name
