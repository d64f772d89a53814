"""Where the matrix optimizers' work runs on a mesh (private): gather once, or divide by owners.

Two layouts, chosen per shape group by the runner (``_runner.py``):

* **Gather once.** A matrix sharded along an axis that an iterative algorithm contracts (Newton-
  Schulz, an eigendecomposition) would make the SPMD partitioner insert a collective in every
  iteration; ``replicate_axes`` gathers those axes once and the result goes back to the input's
  layout (``place_like``: a local slice, no collective).
* **Owner layout** (issue 22 §2). On a mesh, a group of several matrices is stacked, padded to a
  multiple of the devices it is divided over and sharded along the stack (``to_owners``): each
  device computes whole matrices of its own share of the members in a manual region
  (``on_owners``), and the results go back to each member's layout (``from_owners``): two
  all-to-alls where gathering every matrix on every device moved whole matrices. A matrix statistic
  is stored divided like its parameter (``place_statistic``): along its batch axes when the
  parameter's batch axes are sharded (a stacked weight's layer axis keeps its sharding), else over
  the same mesh axes along its first axis that divides. Explicit mesh axes are in the traced types;
  under automatic axes the layout is the compiler's, so on a mesh the step can see (``jax.set_mesh``
  or a concrete array's mesh) a group is divided over every axis of the mesh with sharding
  constraints, and under ``jit`` with no mesh set the gather-once path is kept.
"""

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import jax.numpy as jnp
import numpy as np

from .._core._leafwise import place_like

__all__: list[str] = []


def sharding_of(x: Any) -> Any:
  """The sharding of an array, tracer (its type's) or ShapeDtypeStruct, or None."""
  if isinstance(x, jax.core.Tracer):
    return getattr(jax.typeof(x), "sharding", None)
  return getattr(x, "sharding", None)


def _mesh_types(mesh: Any) -> tuple:
  return tuple(getattr(mesh, "axis_types", ()))


def replicate_axes(x: jax.Array, axes: Sequence[int]) -> tuple[jax.Array, Callable[[jax.Array], jax.Array]]:
  """``x`` with ``axes`` whole on every device, and the function putting a result shaped like
  ``x`` back in ``x``'s layout.

  No mesh, or manual axes (inside ``shard_map``): nothing changes. Explicit axes: a ``reshard``
  with ``None`` on ``axes``. Automatic axes on a mesh: a sharding constraint with ``None`` on
  ``axes`` and ``UNCONSTRAINED`` elsewhere; the result is pinned where it was computed, then freed
  and tied to ``x`` (the partitioner slices once at the end instead of pulling ``x``'s layout back
  into the iteration). Axes not in ``axes`` (batch axes) keep their sharding.
  """
  original, restore = x, lambda y: place_like(x, y)
  sharding: Any = sharding_of(x)
  mesh = getattr(sharding, "mesh", None)
  if (not isinstance(x, jax.core.Tracer) and not isinstance(sharding, jax.sharding.NamedSharding)) or (
      mesh is None or getattr(mesh, "empty", True) or mesh.size <= 1):
    return x, restore
  kind = jax.sharding.AxisType
  if kind.Manual in _mesh_types(mesh):
    return x, lambda y: y
  whole = {a % x.ndim for a in axes}
  spec = tuple(sharding.spec) + (None,) * (x.ndim - len(tuple(sharding.spec)))
  if kind.Explicit in _mesh_types(mesh):
    new_spec = tuple(None if i in whole else s for i, s in enumerate(spec))
    if new_spec != spec:
      x = jax.sharding.reshard(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*new_spec)))
  if kind.Auto in _mesh_types(mesh):
    free = jax.sharding.PartitionSpec.UNCONSTRAINED
    gathered = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(
        *(None if i in whole else free for i in range(x.ndim))))
    unpinned = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*(free,) * x.ndim))
    x = jax.lax.with_sharding_constraint(x, gathered)
    restore = lambda y: place_like(original, jax.lax.with_sharding_constraint(  # noqa: E731
        jax.lax.with_sharding_constraint(y, gathered), unpinned))
  return x, restore


def replicate_whole(*arrays: jax.Array) -> tuple[tuple[jax.Array, ...], tuple[Callable, ...]]:
  """``replicate_axes`` over every axis of each array, and per array its way back."""
  pairs = [replicate_axes(x, range(x.ndim)) for x in arrays]
  return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


def layout_key(x: Any) -> Any:
  """What must agree for two arrays to be stacked without changing either's layout: the sharding
  of a traced value's type or of a concrete array (specs with and without trailing Nones alike)."""
  sharding = None if x is None else sharding_of(x)
  spec = getattr(sharding, "spec", None)
  if sharding is None or spec is None:
    return sharding
  entries = tuple(spec)
  while entries and entries[-1] is None:
    entries = entries[:-1]
  return (type(sharding).__name__, sharding.mesh, entries)


class Distribution(NamedTuple):
  """The mesh axes a group is divided over and their number of devices: the axes a parameter is
  sharded over (explicit axes), or every axis of an automatic mesh (``auto``)."""

  mesh: Any
  axes: tuple[str, ...]
  size: int
  auto: bool = False

  def spec_entry(self) -> Any:
    return self.axes[0] if len(self.axes) == 1 else self.axes

  def sharding(self, *spec: Any) -> jax.sharding.NamedSharding:
    return jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec(*spec))


def distribution(x: Any) -> Distribution | None:
  """How the matrices of ``x`` are divided across devices: over the explicit mesh axes ``x`` is
  sharded over, or every axis of an automatic mesh the value's type or sharding names; None on one
  device, inside ``shard_map``, or under ``jit`` with automatic axes and no mesh set."""
  sharding = sharding_of(x)
  if not isinstance(sharding, jax.sharding.NamedSharding):
    return None
  mesh = sharding.mesh
  if getattr(mesh, "empty", True) or mesh.size <= 1:
    return None
  kind = jax.sharding.AxisType
  types = dict(zip(mesh.axis_names, _mesh_types(mesh)))
  if types and all(t == kind.Auto for t in types.values()):
    axes = tuple(a for a in mesh.axis_names if mesh.shape[a] > 1)
    return Distribution(mesh, axes, int(np.prod([mesh.shape[a] for a in axes])), auto=True)
  axes = tuple(a for entry in sharding.spec if entry is not None
               for a in (entry if isinstance(entry, tuple) else (entry,)))
  if not axes or any(types.get(a) != kind.Explicit for a in axes):
    return None
  return Distribution(mesh, axes, int(np.prod([mesh.shape[a] for a in axes])))


def constrain(x: jax.Array, sharding: jax.sharding.NamedSharding, auto: bool) -> jax.Array:
  """``x`` in ``sharding``: a sharding constraint under automatic axes, a ``reshard`` under explicit
  ones (nothing when the type already says so)."""
  if auto:
    return jax.lax.with_sharding_constraint(x, sharding)
  have = getattr(jax.typeof(x), "sharding", None)
  return x if getattr(have, "spec", None) == sharding.spec else jax.sharding.reshard(x, sharding)


def statistic_sharding(param: Any, shape: Sequence[int], batch_axes: Sequence[int] = ()) -> Any:
  """The layout of a matrix statistic (``shape``, batch axes leading) of ``param``: the sharding
  of the parameter's batch axes on its own batch axes when any is sharded, else the parameter's
  mesh axes along the statistic's first axis that they divide (None: replicated)."""
  dist = distribution(param)
  if dist is None:
    return None
  spec = tuple(getattr(sharding_of(param), "spec", ())) + (None,) * len(shape)
  batch = [spec[a] for a in batch_axes]
  if not dist.auto and any(s is not None for s in batch):
    return dist.sharding(*batch)
  for axis, d in enumerate(shape):
    if d and d % dist.size == 0:
      return dist.sharding(*(None,) * axis, dist.spec_entry())
  return None


def place_statistic(param: Any, value: jax.Array, batch_axes: Sequence[int] = ()) -> jax.Array:
  """``value``, a matrix statistic of ``param``, in ``statistic_sharding``'s layout."""
  target = statistic_sharding(param, np.shape(value), batch_axes)
  if target is None:
    return value
  if isinstance(value, jax.core.Tracer):
    return constrain(value, target, bool(getattr(distribution(param), "auto", False)))
  return jax.device_put(value, target)


def to_owners(x: jax.Array, dist: Distribution) -> jax.Array:
  """A stack of matrices in the owner layout: padded to a multiple of ``dist.size`` (copies of the
  last one: finite values, results discarded), sharded over ``dist``'s axes along the stack."""
  n = x.shape[0]
  pad = -n % dist.size
  if pad:
    x = jnp.concatenate([x] + [jax.lax.slice_in_dim(x, n - 1, n)] * pad)
  return constrain(x, dist.sharding(dist.spec_entry(), *(None,) * (x.ndim - 1)), dist.auto)


def on_owners(fn: Callable, dist: Distribution, shared: Any, *stacked: jax.Array) -> list[jax.Array]:
  """``fn(shared, *blocks) -> list of arrays`` on each device's own rows of owner-layout stacks,
  manual over ``dist``'s axes (decompositions and reshapes see plain per-device arrays). ``shared``
  holds the replicated traced values ``fn`` reads: a manual region may not close over values typed
  with explicit axes."""
  spec = jax.sharding.PartitionSpec(dist.spec_entry())
  return jax.shard_map(lambda sh, *xs: list(fn(sh, *xs)), mesh=dist.mesh,
                       in_specs=(jax.sharding.PartitionSpec(), *(spec,) * len(stacked)), out_specs=spec,
                       axis_names=set(dist.axes))(shared, *stacked)


def from_owners(x: jax.Array, n: int, spec: tuple, stacked: bool) -> jax.Array:
  """The first ``n`` rows of an owner-layout stack in the layout ``spec`` (explicit axes). Under
  automatic axes the layout is the compiler's (the caller ties each result to its input with
  ``place_like``), with the stack axis whole where it ``stacked`` several members (a single stacked
  weight's rows are its own batch axis: they stay divided)."""
  mesh = jax.typeof(x).sharding.mesh
  named = lambda *s: jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*s))  # noqa: E731
  if jax.sharding.AxisType.Auto in _mesh_types(mesh):
    if stacked:
      free = jax.sharding.PartitionSpec.UNCONSTRAINED
      x = jax.lax.with_sharding_constraint(x, named(None, *(free,) * (x.ndim - 1)))
    return jax.lax.slice_in_dim(x, 0, n) if x.shape[0] != n else x
  spec = tuple(spec) + (None,) * (x.ndim - len(spec))
  if x.shape[0] != n:
    x = jax.lax.slice_in_dim(constrain(x, named(None, *spec[1:]), False), 0, n)
  return constrain(x, named(*spec), False)
