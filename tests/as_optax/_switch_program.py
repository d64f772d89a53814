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


# Optax's private modules, in the forms public code imports them. Importing them imports nothing
# else and binds only the attribute the import statement binds (steadax._src); reading a name
# imports steadax's object.
modules_before, steadax_before = set(sys.modules), set(vars(steadax))
import optax._src.base  # noqa: E402
from optax._src import alias, base, combine, linear_algebra, numerics, transform, utils, wrappers  # noqa: E402
import optax._src.update as update  # noqa: E402
report["private_imports"] = {
    "new_modules": sorted(set(sys.modules) - modules_before),
    "new_steadax_attributes": sorted(set(vars(steadax)) - steadax_before),
    "attribute_chain": optax._src.base is base and optax._src.update is update,
}
from optax._src.utils import canonicalize_dtype  # noqa: E402
from optax._src.numerics import abs_sq, safe_int32_increment  # noqa: E402
from optax._src.transform import ScaleByAdamState  # noqa: E402
from optax.contrib._muon import MuonDimensionNumbers  # noqa: E402
from optax.transforms._masking import MaskedNode  # noqa: E402
import optax.contrib._muon as muon_module  # noqa: E402

sophia_loaded_before = "steadax.contrib._sophia" in sys.modules
import optax.contrib._sophia as sophia_module  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


def momentum(b1, mu_dtype=None):
  """A custom optimizer written against Optax's private modules, as public code writes them."""
  mu_dtype = canonicalize_dtype(mu_dtype)

  def init(params):
    mu = jnp.zeros_like(params, dtype=mu_dtype)
    return ScaleByAdamState(count=jnp.zeros([], jnp.int32), mu=mu, nu=abs_sq(mu))

  def update_fn(updates, state, params=None):
    mu = b1 * state.mu + updates
    return mu, ScaleByAdamState(count=safe_int32_increment(state.count), mu=mu, nu=abs_sq(mu))

  return base.GradientTransformation(init, update_fn)


tx = combine.chain(momentum(0.5), alias.sgd(1.0))
params = jnp.ones(2, jnp.float32)
state = tx.init(params)
for _ in range(2):
  updates, state = tx.update(jnp.ones(2), state, params)
  params = update.apply_updates(params, updates)
report["private_objects"] = [
    base.GradientTransformation is steadax.GradientTransformation,
    numerics.safe_int32_increment is steadax.safe_int32_increment,
    transform.ScaleByAdamState is steadax.ScaleByAdamState,
    linear_algebra.global_norm is steadax.global_norm, wrappers.masked is steadax.masked,
    MuonDimensionNumbers is steadax.contrib.MuonDimensionNumbers, MaskedNode is steadax.MaskedNode,
    isinstance(tx, steadax.GradientTransformation), canonicalize_dtype("float64") == jax.dtypes.canonicalize_dtype(jnp.float64),
    sys.modules["optax.contrib._muon"] is muon_module, steadax.contrib._muon is muon_module,
    # Reading sophia imports steadax's own contrib/_sophia.py (not imported before), which must
    # not take the attribute steadax.contrib._sophia (optax.contrib._sophia) back.
    not sophia_loaded_before, sophia_module.sophia is steadax.contrib.sophia,
    steadax.contrib._sophia is sophia_module]
report["private_run"] = [params.tolist(), int(state[0].count), str(state[0].nu.dtype)]
star: dict = {}
exec("from optax._src.base import *", star)  # noqa: S102
report["star_import"] = [star["EmptyState"] is steadax.EmptyState, "NO_PARAMS_MSG" in star]
report["errors"] = {s: _error(s) for s in [
    "import optax._src.not_a_module", "import optax._src.clipping", "import optax.not_a_module",
    "from optax._src.utils import tile_second_to_last_dim", "import optax._src.utils as u; u.cast_tree"]}


again = steadax.as_optax.install()
report["idempotent"] = [again.installed, sum(type(f).__name__ == "_OptaxFinder" for f in sys.meta_path)]

steadax.as_optax.restore()
report["restored"] = [steadax.as_optax.is_installed(),
                      sorted(n for n in sys.modules if n == "optax" or n.startswith("optax.")),
                      hasattr(steadax, "_src"), steadax.contrib._muon.__name__]
report["after_restore"] = _error("import optax")

with steadax.as_optax.install() as outer:
  with steadax.as_optax.install() as inner:
    import optax as inside  # noqa: E402
  report["nested"] = [outer.installed, inner.installed, steadax.as_optax.is_installed(),
                      inside is steadax]
report["after_with"] = [steadax.as_optax.is_installed(), "optax" in sys.modules]
print(json.dumps(report))
