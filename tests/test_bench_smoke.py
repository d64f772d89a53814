"""The benchmark suite runs (benchmarks/): its harness and report on toy sizes.

Nothing is timed here; ``make bench`` measures. The cases run here cover every piece of the
harness (columns, fused and flat-parameter columns, floors, the training step, alternating rounds, first call, memory analysis) in about
8 s of CPU; many_small (five optimizers) and lbfgs (a while-loop solve) add 15 s of compilation and
only repeat those pieces.
"""

import json

import jax
import pytest

from benchmarks import harness, report
from benchmarks.cases import CASES

pytestmark = pytest.mark.x32_only


SMOKE_CASES = ("big", "mixed", "train", "first_call", "memory")


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


def test_readme_block_replaces_only_the_text_between_the_markers(tmp_path):
  readme = tmp_path / "README.md"
  readme.write_text(f"before\n{report.README_START}\nold\n{report.README_END}\nafter\n")
  assert report.update_readme(f"{report.README_START}\nnew\n{report.README_END}", str(readme))
  assert readme.read_text() == f"before\n{report.README_START}\nnew\n{report.README_END}\nafter\n"
  readme.write_text("no markers\n")
  assert not report.update_readme("x", str(readme))
