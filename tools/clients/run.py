"""``make clients``: libraries built on Optax run their own tests on Optax, then on steadax.

For each client library (NumPyro, GPJax, BlackJAX, FlowJAX; installed by the ``clients`` extra of
pyproject.toml at the versions pinned there), the test files that exercise its Optax code are run
twice with pytest: plainly (``optax`` is Optax) and under ``python -m steadax.as_optax -m pytest``
(``optax`` is steadax). Outcomes are compared test by test; every test that passes with Optax must
pass with steadax. The script prints a table per library and exits non-zero on a difference.

Where the tests come from, pinned to the installed version:
* NumPyro, GPJax, BlackJAX: their source distribution on PyPI (``pip download --no-binary :all:
  name==version``, cached under ``.clients/``), run from the unpacked source tree so that their own
  pytest configuration and conftest files apply (their ``addopts`` are cleared: coverage, xdist and
  verbosity flags are not what is compared).
* FlowJAX: its sdist has no tests; ``tools/clients/flowjax/`` holds the one test file that runs its
  Optax training loops, copied from its repository with its license (see the README there).

The test files chosen are those that import optax or run the library's modules that do (listed in
``LIBRARIES``). A small pytest plugin (``_which_optax.py``) records which module ``optax`` was at
the end of each run; the table shows it, and a run under the switch that did not resolve optax to
steadax is an error, not a pass.

Usage: ``python tools/clients/run.py [--only numpyro,gpjax] [--timeout SECONDS] [--keep]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
CACHE = ROOT / ".clients"


@dataclasses.dataclass(frozen=True)
class Library:
  name: str            # distribution name (pip)
  tests: tuple[str, ...]  # test files, relative to the test tree's root
  vendored: str | None = None  # a folder under tools/clients holding the tests (no sdist tests)
  args: tuple[str, ...] = ()   # the library's own pytest options that matter (addopts is cleared)


LIBRARIES = (
    # numpyro.optim.optax_to_numpyro and SVI with an optax optimizer.
    Library("numpyro", ("test/test_optimizers.py",)),
    # gpjax.fit / fit_lbfgs / state_space.fit take optax optimizers.
    Library("gpjax", ("tests/test_fit.py", "tests/test_mean_functions.py",
                      "tests/test_integration_equinox.py", "tests/test_state_space/test_fit.py")),
    # blackjax.vi (optax optimizers), blackjax.optimizers.lbfgs (optax.lbfgs and its zoom line
    # search, under pathfinder) and chees_adaptation (an optax optimizer): the vi and optimizers
    # tests, the adaptation tests that import optax or run pathfinder, and the two chees tests of
    # the (long) sampling file.
    Library("blackjax", ("tests/vi", "tests/optimizers", "tests/adaptation/test_adaptation.py",
                         "tests/adaptation/test_pathfinder_adaptation_multichain.py",
                         "tests/mcmc/test_sampling.py::LinearRegressionTest::test_chees0",
                         "tests/mcmc/test_sampling.py::LinearRegressionTest::test_chees1")),
    # flowjax.train's fit_to_data / fit_to_key_based_loss (optax.adam by default).
    # FlowJAX's configuration checks every annotation of its functions at run time (jaxtyping with
    # beartype): `optimizer: optax.GradientTransformation` then checks steadax's transformations.
    Library("flowjax", ("tests/test_train/test_loops.py",), vendored="flowjax",
            args=("--jaxtyping-packages=flowjax,beartype.beartype(conf=beartype.BeartypeConf("
                  "strategy=beartype.BeartypeStrategy.On))",)),
)


def _sdist_tree(name: str, version: str) -> pathlib.Path:
  """The unpacked sdist of ``name==version``, downloaded once into .clients/."""
  tree = CACHE / f"{name}-{version}"
  if tree.is_dir():
    return tree
  CACHE.mkdir(exist_ok=True)
  with tempfile.TemporaryDirectory() as tmp:
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--no-binary", ":all:", "--dest", tmp, f"{name}=={version}"], check=True)
    archive = next(pathlib.Path(tmp).glob("*.tar.gz"))
    with tarfile.open(archive) as tar:
      tar.extractall(tmp, filter="data")
    unpacked = next(p for p in pathlib.Path(tmp).iterdir() if p.is_dir())
    shutil.move(str(unpacked), tree)
  return tree


def _outcomes(junit: pathlib.Path) -> dict[str, str]:
  """``{test id: passed | failed | error | skipped}`` from a junit XML report."""
  outcomes = {}
  for case in ET.parse(junit).getroot().iter("testcase"):
    test = f"{case.get('classname')}::{case.get('name')}"
    kinds = {child.tag for child in case}
    outcome = ("failed" if "failure" in kinds else "error" if "error" in kinds
               else "skipped" if "skipped" in kinds else "passed")
    if outcomes.get(test, "passed") == "passed":  # a teardown error after a pass is an error
      outcomes[test] = outcome
  return outcomes


def _run(tree: pathlib.Path, library: Library, switched: bool, timeout: float, workdir: pathlib.Path):
  """Runs pytest on ``tests`` in ``tree``; returns (outcomes, which optax, seconds, log tail)."""
  mode = "steadax" if switched else "optax"
  junit, which = workdir / f"{mode}.xml", workdir / f"{mode}.json"
  launcher = [sys.executable, "-m", "steadax.as_optax", "-m", "pytest"] if switched else [
      sys.executable, "-m", "pytest"]
  command = [*launcher, "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-p", "_which_optax",
             f"--junitxml={junit}", *library.args, *library.tests]
  env = dict(os.environ, STEADAX_CLIENTS_WHICH=str(which),
             PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(HERE),
                                         *filter(None, [os.environ.get("PYTHONPATH")])]))
  start = time.perf_counter()
  try:
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    log = done.stdout + done.stderr
  except subprocess.TimeoutExpired as e:
    log = f"timed out after {timeout} s\n{e.stdout or ''}"
  seconds = time.perf_counter() - start
  outcomes = _outcomes(junit) if junit.exists() else {}
  resolved = json.loads(which.read_text())["optax"] if which.exists() else "no report"
  return outcomes, resolved, seconds, log[-3000:]


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--only", default="", help="comma-separated library names")
  parser.add_argument("--timeout", type=float, default=3600, help="seconds per pytest run")
  parser.add_argument("--keep", action="store_true", help="keep the junit reports in .clients/")
  args = parser.parse_args()
  only = set(filter(None, args.only.split(",")))
  rows, problems = [], []
  for library in LIBRARIES:
    if only and library.name not in only:
      continue
    try:
      version = importlib.metadata.version(library.name)
    except importlib.metadata.PackageNotFoundError:
      rows.append((library.name, "not installed", "", "", "", "", ""))
      problems.append(f"{library.name}: not installed (pip install -e '.[clients]')")
      continue
    tree = HERE / library.vendored if library.vendored else _sdist_tree(library.name, version)
    workdir = CACHE / "reports" / f"{library.name}-{version}"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    results = {}
    for switched in (False, True):
      outcomes, resolved, seconds, log = _run(tree, library, switched, args.timeout, workdir)
      results[switched] = outcomes
      expected = "steadax" if switched else "optax"
      print(f"{library.name} {version} with optax = {resolved}: {len(outcomes)} tests, "
            f"{sum(o == 'passed' for o in outcomes.values())} passed, {seconds:.0f} s", flush=True)
      if resolved != expected or not outcomes:
        problems.append(f"{library.name} with optax = {expected}: optax resolved to {resolved}, "
                        f"{len(outcomes)} tests ran\n{log}")
    plain, steady = results[False], results[True]
    lost = sorted(t for t, o in plain.items() if o == "passed" and steady.get(t) != "passed")
    gained = sorted(t for t, o in steady.items() if o == "passed" and plain.get(t) != "passed")
    for test in lost:
      problems.append(f"{library.name}: {test} passes with Optax, {steady.get(test, 'missing')} "
                      f"with steadax")
    rows.append((library.name, version, str(len(plain)),
                 str(sum(o == "passed" for o in plain.values())),
                 str(sum(o == "passed" for o in steady.values())), str(len(lost)), str(len(gained))))
    if not args.keep:
      shutil.rmtree(workdir, ignore_errors=True)
  header = ("library", "version", "tests", "passed with optax", "passed with steadax",
            "passed with optax only", "passed with steadax only")
  print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
  for row in rows:
    print("| " + " | ".join(row) + " |")
  for problem in problems:
    print(f"\n{problem}")
  return 1 if problems else 0


if __name__ == "__main__":
  sys.exit(main())
