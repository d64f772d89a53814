"""Run by test_as_optax.py as ``python -m steadax.as_optax _switch_program.py ARGS``: the switch in
one process, Optax made unimportable (as if not installed). Prints a JSON report on stdout."""

import importlib
import json
import sys

import steadax

report: dict = {"argv": sys.argv[1:], "name": __name__, "on_at_start": steadax.as_optax.is_installed()}


class _NoOptax:
  """Makes the real Optax unimportable, as if it were not installed (right after the switch's
  finder, so it only answers what the switch leaves)."""

  def find_spec(self, fullname, path=None, target=None):
    if fullname == "optax" or fullname.startswith("optax."):
      raise ModuleNotFoundError(f"No module named {fullname!r} (blocked)", name=fullname)
    return None


sys.meta_path.insert(1, _NoOptax())

# Every public namespace of Optax 0.2.8, in each import form.
NAMESPACES = ["contrib", "transforms", "tree", "tree_utils", "schedules", "losses", "projections",
              "second_order", "assignment", "perturbations", "microbatching", "experimental",
              "experimental.aggregating"]
report["namespaces"] = {
    ns: importlib.import_module(f"optax.{ns}") is importlib.import_module(f"steadax.{ns}")
    for ns in NAMESPACES}
import optax  # noqa: E402
import optax.tree_utils as otu  # noqa: E402
import optax.schedules  # noqa: E402
from optax import losses  # noqa: E402
from optax.contrib import muon  # noqa: E402
from optax.experimental import aggregating  # noqa: E402

report["forms"] = [optax is steadax, otu is steadax.tree_utils, optax.schedules is steadax.schedules,
                   losses is steadax.losses, muon is steadax.contrib.muon,
                   aggregating is steadax.experimental.aggregating,
                   optax.adam is steadax.adam, sys.modules["optax.contrib"] is steadax.contrib]
# importlib set the modules' __spec__ to the alias's; the loader puts steadax's back.
report["specs"] = [steadax.__spec__.name, steadax.contrib.__spec__.name,
                   steadax.experimental.aggregating.__spec__.name]


def _error(statement):
  try:
    exec(statement, {})
  except Exception as e:  # noqa: BLE001 - the report records the type
    return [type(e).__name__, getattr(e, "name", None), str(e)]
  return None


report["errors"] = {s: _error(s) for s in [
    "import optax._src.base", "from optax._src.alias import adam", "import optax.contrib._muon",
    "from optax.transforms._masking import masked", "import optax._src.not_a_module",
    "import optax.not_a_module"]}

again = steadax.as_optax.install()
report["idempotent"] = [again.installed, sum(type(f).__name__ == "_OptaxFinder" for f in sys.meta_path)]

steadax.as_optax.restore()
report["restored"] = [steadax.as_optax.is_installed(),
                      sorted(n for n in sys.modules if n == "optax" or n.startswith("optax."))]
report["after_restore"] = _error("import optax")

with steadax.as_optax.install() as outer:
  with steadax.as_optax.install() as inner:
    import optax as inside  # noqa: E402
  report["nested"] = [outer.installed, inner.installed, steadax.as_optax.is_installed(),
                      inside is steadax]
report["after_with"] = [steadax.as_optax.is_installed(), "optax" in sys.modules]
print(json.dumps(report))
