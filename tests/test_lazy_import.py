"""``import steadax`` loads nothing a user does not read (PEP 562 surfaces, ``_core/_lazy.py``).

How long the import takes is measured by the benchmarks (``benchmarks/import_time.py``, side by
side with Optax), never by a timed test; this file checks the structure that makes it fast, and
that the lazy surfaces still behave as eager ones for ``dir()``, ``from ... import *``, ``help()``
and a ``__getattr__`` deprecation.
"""

from __future__ import annotations

import importlib
import os
import pathlib
import subprocess
import sys

import pytest

import steadax

SRC = pathlib.Path(steadax.__file__).resolve().parents[1]

_PROBE = """
import sys, jax
before = set(sys.modules)
import steadax
loaded = sorted(m for m in set(sys.modules) - before)
print("LOADED", " ".join(loaded))
namespace = {}
exec("from steadax import *", namespace)
print("STAR", int("adam" in namespace and "contrib" in namespace and "dpsgd" not in namespace))
"""


@pytest.mark.x32_only
def test_import_steadax_loads_only_the_lazy_machinery():
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
  run = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env,
                       timeout=300)
  assert run.returncode == 0, run.stderr
  lines = dict(line.split(" ", 1) for line in run.stdout.splitlines() if " " in line)
  loaded = lines["LOADED"].split()
  # The package, the deprecation table's helper and the lazy surface: no optimizer, no transform,
  # no Module class built, nothing outside steadax (jax is already imported).
  assert loaded == ["steadax", "steadax._core", "steadax._core._deprecations", "steadax._core._lazy"]
  assert lines["STAR"] == "1"


def test_help_lists_the_lazy_names():
  import pydoc
  text = pydoc.render_doc(steadax.contrib)
  assert "muon" in text and "schedule_free_adamw" in text


_PACKAGES = ["steadax", "steadax.transforms", "steadax.contrib", "steadax.schedules", "steadax.losses",
             "steadax.tree", "steadax.projections", "steadax.perturbations", "steadax.experimental",
             "steadax.experimental.aggregating", "steadax.testing", "steadax.checkpoint",
             "steadax.microbatching", "steadax.assignment", "steadax.second_order",
             "steadax._linalg", "steadax._utils"]


@pytest.mark.parametrize("package", _PACKAGES)
def test_a_lazy_surface_serves_every_name_it_lists(package):
  module = importlib.import_module(package)
  public = {n for n in dir(module) if not n.startswith("_")}
  assert set(module.__all__) == public
  for name in module.__all__:
    value = getattr(module, name)
    assert module.__dict__[name] is value  # kept: the next read is a plain attribute
  with pytest.raises(AttributeError, match=f"{package}.*no_such_name"):
    getattr(module, "no_such_name")
