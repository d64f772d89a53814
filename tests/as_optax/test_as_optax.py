"""steadax.as_optax: every ``import optax ...`` in a process resolves to steadax.

The switch is process-wide, so each check runs in a fresh interpreter started through the runner
(``python -m steadax.as_optax``): one program checks the import machinery with Optax made
unimportable (as if not installed), one runs Optimistix and Flax NNX on steadax and checks, inside
those libraries, that the transformation and state records they hold are steadax's.
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

import steadax
from steadax.as_optax import _optax_private

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.x32_only  # the import machinery does not depend on x64: run it once


def _run(*args):
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [str(ROOT / "src"), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
  done = subprocess.run([sys.executable, "-m", "steadax.as_optax", *args], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  return json.loads(done.stdout.strip().splitlines()[-1])


def test_switch_in_a_process_without_optax():
  # One program (one interpreter start) for all of the import machinery's checks: under pytest-xdist
  # separate tests would start it once per worker.
  report = _run(str(ROOT / "tests" / "as_optax" / "_switch_program.py"), "first", "--second")

  # The runner ran the script as __main__ with its arguments, the switch already on.
  assert report["argv"] == ["first", "--second"] and report["name"] == "__main__"
  assert report["on_at_start"]

  # Every Optax namespace, in each import form (import optax / import optax.tree_utils as otu /
  # import optax.schedules / from optax import losses / from optax.contrib import muon / from
  # optax.experimental import aggregating, and the sys.modules entries): steadax's objects.
  assert all(report["namespaces"].values()), report["namespaces"]
  assert len(report["namespaces"]) == 13
  assert report["forms"] == [True] * 8
  assert report["specs"] == ["steadax", "steadax.contrib", "steadax.experimental.aggregating"]

  # Optax's private modules resolve, in the forms public code imports them: importing them imports
  # no other module and binds only steadax._src; their names are steadax's objects, and a custom
  # optimizer written against them runs (2 momentum steps of 1 + 1.5 from 1: [-1.5, -1.5]).
  private = report["private_imports"]
  assert private["new_modules"] == [
      "optax._src", "optax._src.alias", "optax._src.base", "optax._src.combine",
      "optax._src.linear_algebra", "optax._src.numerics", "optax._src.transform",
      "optax._src.update", "optax._src.utils", "optax._src.wrappers"]
  assert private["new_steadax_attributes"] == ["_src"] and private["attribute_chain"]
  assert report["private_objects"] == [True] * 14, report["private_objects"]
  assert report["private_run"] == [[-1.5, -1.5], 2, "float32"]
  assert report["star_import"] == [True, False]  # `import *` gives the names that resolve

  errors = report["errors"]
  kind, name, message = errors["import optax._src.not_a_module"]
  assert (kind, name) == ("ModuleNotFoundError", "optax._src.not_a_module")
  assert "Optax 0.2.8 has no module of that name either" in message
  assert errors["import optax._src.clipping"][:2] == ["ModuleNotFoundError", "optax._src.clipping"]
  kind, name, message = errors["import optax.not_a_module"]
  assert kind == "ModuleNotFoundError" and "no module 'steadax.not_a_module'" in message
  # A name Optax defines there but steadax has no counterpart for: the explanation survives the
  # `from ... import` form. A name Optax does not define there either: AttributeError.
  kind, name, message = errors["from optax._src.utils import tile_second_to_last_dim"]
  assert (kind, name) == ("ImportError", "optax._src.utils")
  assert message.startswith("optax._src.utils.tile_second_to_last_dim: Optax 0.2.8 defines")
  assert "steadax has no counterpart" in message
  kind, _, message = errors["import optax._src.utils as u; u.cast_tree"]
  assert kind == "AttributeError" and "nor has Optax 0.2.8's" in message

  # A second install is a no-op (one finder); restore leaves no optax entry in sys.modules, and
  # Optax is "not installed" there, so import optax fails again.
  assert report["idempotent"] == [False, 1]
  # ... and the attributes imports bound on steadax's packages: steadax.contrib._muon is
  # steadax's own module again.
  assert report["restored"] == [False, [], False, "steadax.contrib._muon"]
  assert report["after_restore"][:2] == ["ModuleNotFoundError", "optax"]
  # with-blocks: the outer one installed, the inner one found it on and leaves it on at its exit.
  assert report["nested"] == [True, False, True, True]
  assert report["after_with"] == [False, False]


def test_optimistix_and_flax_nnx_run_on_steadax():
  report = _run("-m", "tests.as_optax._libraries_program", "arg")
  assert report["argv"] == ["arg"] and report["name"] == "__main__"  # the runner's -m form

  # Optimistix's OptaxMinimiser holds a steadax transformation and carries steadax's state records.
  optimistix = report["optimistix"]
  assert optimistix["optim"] == "steadax" and optimistix["optim_is_transformation"]
  assert optimistix["state_has_adam_record"]
  assert all(abs(v - 1.0) < 1e-2 for v in optimistix["value"]), optimistix["value"]

  # Flax's nnx.Optimizer: its module's own `optax` global is steadax; it holds a steadax
  # transformation and state records, and two jitted steps move the parameters.
  nnx = report["nnx"]
  assert nnx["module_optax"] == "steadax"
  assert nnx["tx_is_transformation"] and nnx["state_has_adam_record"] and nnx["moved"]

  # Optax itself imported (after restore): a second install refuses, naming the importer.
  assert report["real_after_restore"] == "optax"
  message = report["install_after_real"]
  assert message is not None and "Optax itself is already imported (imported by __main__)" in message
  assert "python -m steadax.as_optax" in message


def test_off_in_this_process():
  # The suite itself imports Optax: the switch must never have been left on here.
  assert not steadax.as_optax.is_installed()


def test_private_names_table_is_current_and_public():
  # Generated in a fresh interpreter, as the tool runs: in the suite's process other tests have
  # already imported (and patched) parts of Optax, and the same objects are no longer found.
  program = ("import importlib.util, json, sys\n"
             f"spec = importlib.util.spec_from_file_location('g', {str(ROOT / 'tools' / 'optax_private_names.py')!r})\n"
             "g = importlib.util.module_from_spec(spec); spec.loader.exec_module(g)\n"
             "print(json.dumps(g.table()))\n")
  env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
  out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env,
                       check=True)
  assert json.loads(out.stdout) == _optax_private.PRIVATE_NAMES, (
      "stale: run `PYTHONPATH=src python tools/optax_private_names.py`")
  for names in _optax_private.PRIVATE_NAMES.values():
    for reference in filter(None, names.values()):  # each counterpart exists
      module, _, attribute = reference.partition(":")
      getattr(importlib.import_module(module), attribute)


@pytest.mark.parametrize("argv,code", [([], 2), (["-m"], 2), (["-c"], 2), (["--help"], 0)])
def test_runner_usage(argv, code, capsys):
  from steadax.as_optax.__main__ import main

  with pytest.raises(SystemExit) as exit_info:
    main(argv)
  assert exit_info.value.code == code
  assert "usage: python -m steadax.as_optax" in "".join(capsys.readouterr())
  assert not steadax.as_optax.is_installed()  # nothing ran: the switch stays off
