"""Matrix helpers shared by the orthogonalized and Kronecker-factored optimizers (private).

Muon, GaLore, SOAP and Shampoo treat a parameter as a matrix (or a tensor with one small matrix per
axis). What they share lives here: mode products and per-axis Gram statistics of tensors, Hermitian
eigendecompositions and inverse roots, the blocking of large axes, and the gathering of a sharded
matrix before an iterative algorithm runs on it.

These functions take their inputs in one compute dtype (the ``_core._policy`` rule: at least
float32, float64 for float64 parameters, complex for complex ones) and do no casting of their own:
the optimizers call them inside ``self.leafwise`` leaf functions, where every input, eigenbases and
factors included, is already cast and real-with-complex products promote as the maths says.

Complex parameters are handled with conjugate transposes throughout: the statistic of axis ``k`` is
``X_(k) X_(k)^H`` (``X_(k)`` the mode-``k`` unfolding), which is Hermitian, so ``eigh`` applies and
its eigenvalues are real.
"""

import math
import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import jax.numpy as jnp
import numpy as np

from .._core._leafwise import _record, place_like, split_record
from .._core._policy import compute_dtype, key_path_str, real_dtype

__all__: list[str] = []


# --------------------------------------------------------------------------------------------------
# Sharding: gather a matrix once, not once per iteration.


def _identity(x: jax.Array) -> jax.Array:
  return x


def replicate_axes(x: jax.Array, axes: Sequence[int]) -> tuple[jax.Array, Callable[[jax.Array], jax.Array]]:
  """``x`` with ``axes`` gathered onto every device, and a function restoring ``x``'s sharding.

  Iterative matrix algorithms (Newton-Schulz) on a matrix sharded along a contracted axis make the
  SPMD partitioner insert a collective in every iteration. Gathering the matrix axes once up front
  (one all-gather) and computing redundantly on each device makes the collective count independent
  of the number of iterations; axes not in ``axes`` (batch axes of stacked weights) keep their
  sharding, so each device orthogonalizes its own blocks.

  * No mesh (single device, or an unsharded value): nothing changes.
  * Explicit mesh axes (``jax.sharding.AxisType.Explicit``): ``reshard`` to a spec with ``None`` on
    ``axes``.
  * Auto mesh axes: a sharding constraint with ``None`` on ``axes`` and ``UNCONSTRAINED`` elsewhere;
    the partitioner propagates the rest. Meshes mixing both kinds get both.
  * Inside ``shard_map`` (manual axes) values are per-device blocks already: nothing changes.

  The way back is ``place_like(x, result)`` (``_core._leafwise``): a ``reshard`` under explicit
  axes, a sharding group with ``x`` under automatic ones (without it the partitioner leaves the
  result replicated: every device would hold, and ``apply_updates`` reshard, the whole update).
  Either way it is a local slice of the replicated result, no collective.

  Args:
    x: an array (or tracer).
    axes: the axes that must be whole on every device.

  Returns:
    ``(gathered, restore)``; ``restore`` maps a result shaped like ``x`` back to ``x``'s sharding.
  """
  typeof = getattr(jax, "typeof", None)
  aval = typeof(x) if typeof is not None else getattr(x, "aval", None)
  sharding: Any = getattr(aval, "sharding", None)
  mesh = getattr(sharding, "mesh", None)
  axis_type = getattr(jax.sharding, "AxisType", None)
  original = x
  restore = lambda y: place_like(original, y)  # noqa: E731
  if not isinstance(x, jax.core.Tracer) and not isinstance(getattr(x, "sharding", None), jax.sharding.NamedSharding):
    return x, restore
  if mesh is None or axis_type is None or getattr(mesh, "empty", True) or mesh.size <= 1:
    # Automatic axes under jit (no mesh in the type): the layout is the compiler's; the result
    # is still tied to x's.
    return x, restore
  types = tuple(getattr(mesh, "axis_types", ()))
  if any(t == axis_type.Manual for t in types):
    return x, _identity
  whole = {a % x.ndim for a in axes}
  named = jax.sharding.NamedSharding
  spec = tuple(sharding.spec) + (None,) * (x.ndim - len(tuple(sharding.spec)))
  if any(t == axis_type.Explicit for t in types):
    new_spec = tuple(None if i in whole else s for i, s in enumerate(spec))
    if new_spec != spec:
      x = jax.sharding.reshard(x, named(mesh, jax.sharding.PartitionSpec(*new_spec)))
    spec = new_spec
  if any(t == axis_type.Auto for t in types):
    # Auto axes do not appear in the type: constrain the matrix axes to be whole and leave the
    # partitioner free elsewhere (a constraint may not name explicit axes).
    unconstrained = jax.sharding.PartitionSpec.UNCONSTRAINED
    wanted = tuple(None if i in whole else unconstrained for i in range(x.ndim))
    gathered = named(mesh, jax.sharding.PartitionSpec(*wanted))
    free = named(mesh, jax.sharding.PartitionSpec(*(unconstrained,) * x.ndim))
    x = jax.lax.with_sharding_constraint(x, gathered)

    def restore(y):
      # The result is pinned where it was computed (whole), then a new, unconstrained value takes
      # x's layout: the partitioner slices once at the end instead of pulling x's layout back
      # into the iteration (a collective in every step).
      y = jax.lax.with_sharding_constraint(jax.lax.with_sharding_constraint(y, gathered), free)
      return place_like(original, y)
  return x, restore


def replicate_whole(*arrays: jax.Array) -> tuple[tuple[jax.Array, ...], tuple[Callable, ...]]:
  """``replicate_axes`` over every axis of each array: the arrays whole on every device (one
  all-gather each when sharded) and, per array, the function restoring its sharding."""
  pairs = [replicate_axes(x, range(x.ndim)) for x in arrays]
  return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


# --------------------------------------------------------------------------------------------------
# Shape groups: parameters that share a shape, dtypes, layout and static configuration run as one
# batched computation (stacked on a new leading axis), so the traced and compiled program grows
# with the number of distinct shapes of a model, not with its depth. The state stays per parameter:
# a group is stacked on entry and split on exit, inside one update.


def layout_key(x: Any) -> Any:
  """What must agree for two arrays to be stacked without changing either's layout.

  The sharding in a traced value's type (explicit mesh axes; empty on automatic axes, where the
  partitioner places the stack and ``place_like`` ties each result back to its parameter), or a
  concrete array's sharding; None for None. Equal keys mean the stack along a new leading axis is
  sharded like each member, with that axis whole.
  """
  if x is None:
    return None
  if isinstance(x, jax.core.Tracer):
    sharding = getattr(jax.typeof(x), "sharding", None)
  else:
    sharding = getattr(x, "sharding", None)
  if sharding is None:
    return None
  spec = getattr(sharding, "spec", None)
  mesh = getattr(sharding, "mesh", None)
  if spec is not None:
    # Specs written with and without trailing Nones are the same layout.
    entries = tuple(spec)
    while entries and entries[-1] is None:
      entries = entries[:-1]
    try:
      return (type(sharding).__name__, mesh, entries)
    except TypeError:  # pragma: no cover - an unhashable mesh: keep such leaves apart
      return id(x)
  try:
    hash(sharding)
  except TypeError:  # pragma: no cover
    return id(x)
  return sharding


# False: every parameter is a group of its own (the per-parameter path), which the tests compare
# the grouped results with.
_GROUPING = True


def _cpu_cores() -> int:
  """The cores XLA's CPU backend runs a program's operations on (at most ``_MAX_CHUNKS``), with one
  CPU device; 0 elsewhere (accelerators run a batch as one kernel, and several CPU devices divide a
  group among themselves: the owner layout).

  XLA's CPU backend runs independent operations of a program at the same time, one per core, and
  runs one batched matrix product (a group's) on one core. Per parameter, a 2-core machine
  computed the matrices of a deep model two at a time; as one group, one at a time: Muon's step at
  8 layers took 1.25x the per-parameter time. Split into as many chunks as cores (or a multiple:
  ``BALANCED_CHUNKS_PER_CORE``), the chunks run side by side; their shapes are equal (or differ by
  one member), so XLA still compiles each kernel once or twice, and the program grows with the
  cores, not the depth.
  """
  if jax.default_backend() != "cpu" or jax.local_device_count() > 1:
    return 0
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
  return max(1, min(cores, _MAX_CHUNKS))


_MAX_CHUNKS = 8

# Chunks per core for the steps that are chains of matrix products of different lengths from one
# group to the next (Muon's Newton-Schulz, GaLore's projections): with one chunk per core, the
# chunks of a long group and of a short one do not share the cores evenly (Muon's grouped step took
# up to 1.34x the per-parameter step with one chunk per core; the figures, and why PSGD-Kron keeps
# one: docs/performance.md, "Step time on a CPU").
BALANCED_CHUNKS_PER_CORE = 4

# On one CPU device, the bytes of a chunk of a shape group (its members' arrays) that
# ``leafwise_with_matrices`` aims at: SOAP's step passes over seven state arrays per matrix, and
# stacked beyond a core's cache (128 matrices of 64x64: 2 MiB per array) the grouped step took 1.5x
# the per-parameter one. A group within this size is not split (nothing to gain on tiny matrices).
_CHUNK_BYTES = 512 * 1024


def chunk_bounds(n: int, member_bytes: int = 0, per_core: int = 1) -> list[tuple[int, int]]:
  """``(start, stop)`` of the contiguous chunks, of nearly equal size, a group of ``n`` members is
  split into on one CPU device: ``per_core`` per core (``_cpu_cores``) or, given the bytes of a
  member's arrays, none for a group within ``_CHUNK_BYTES`` and otherwise enough that a chunk holds
  about ``_CHUNK_BYTES`` (and at least one per core). Elsewhere the whole group."""
  cores = _cpu_cores()
  k = cores * per_core
  if cores and member_bytes:
    total = n * member_bytes
    k = 1 if total <= _CHUNK_BYTES else max(cores, -(-total // _CHUNK_BYTES))
  k = max(1, min(k, n))
  bounds = [n * j // k for j in range(k + 1)]
  return list(zip(bounds, bounds[1:]))


def shape_groups(keys: Sequence[Any], grouping: bool | None = None, chunked: bool = True,
                 per_core: int = 1) -> list[list[int]]:
  """Indices with equal keys, in order of first appearance (None keys: not grouped, left out), each
  group split into ``chunk_bounds`` chunks (``per_core`` per core) unless ``chunked`` is False.

  ``grouping`` (default: the module's ``_GROUPING``) False makes every index a group of its own;
  True gives the groups whatever ``_GROUPING`` says (an order both paths share, e.g. PSGD's probes).
  """
  grouping = _GROUPING if grouping is None else grouping
  groups: dict = {}
  for i, key in enumerate(keys):
    if key is not None:
      groups.setdefault(key if grouping else i, []).append(i)
  if not chunked:
    return list(groups.values())
  return [members[a:b] for members in groups.values()
          for a, b in chunk_bounds(len(members), per_core=per_core)]


def stack(arrays: Sequence[jax.Array]) -> jax.Array:
  """The arrays on a new leading axis (one concatenation)."""
  return jnp.stack(list(arrays))


def unstack(x: jax.Array, n: int) -> list[jax.Array]:
  """The ``n`` slices of ``x`` along its leading axis, taken by gathers whose index is a constant
  array rather than a number.

  XLA compiles every distinct fused computation separately (about 20 ms each on a CPU) and
  compiles identical ones once. ``x[i]`` is a slice whose offset ``i`` is part of its fused
  computation, so ``n`` members cost ``n`` compilations and a group's split grew with depth as the
  per-parameter path did. A gather reads its start indices from an operand: given a constant
  array of two different rows ``[i, i + 1]`` (a single index becomes a slice again, and a uniform
  array a broadcast scalar folded into the kernel), the ``n`` gathers are one kernel compiled once;
  the first row is kept (only the elements kept are computed).
  """
  if n == 1:
    return [jax.lax.index_in_dim(x, 0, keepdims=False)]
  rest = tuple(x.shape[1:])
  dn = jax.lax.GatherDimensionNumbers(offset_dims=tuple(range(1, 1 + len(rest))), collapsed_slice_dims=(0,),
                                      start_index_map=(0,))
  return [jax.lax.index_in_dim(
      jax.lax.gather(x, np.array([[i], [(i + 1) % n]], np.int32), dn, slice_sizes=(1, *rest),
                     mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS), 0, keepdims=False)
          for i in range(n)]


def stacked_struct(x: Any, n: int) -> Any:
  """A shape-and-dtype stand-in for ``n`` stacked copies of ``x`` (None stays None): what
  ``leafwise`` reads of a parameter is its dtype, so the parameters themselves are not stacked."""
  return None if x is None else jax.ShapeDtypeStruct((n, *np.shape(x)), x.dtype)


def group_label(paths: Sequence[str]) -> str:
  """The key naming a stacked group in ``leafwise``'s error messages: its members' paths."""
  return ", ".join(paths) if len(paths) <= 3 else f"{paths[0]}, ... ({len(paths)} parameters)"


# --------------------------------------------------------------------------------------------------
# Statistics divided across devices (issue 22 §2). On a mesh with explicit axes, a shape group whose
# parameters are sharded over some mesh axes (FSDP: ``P("fsdp", None)``) is computed in the *owner
# layout*: the group's stacked axis (padded to a multiple of the number of shards) is sharded over
# those axes, so each device holds whole matrices of its own share of the members and runs their
# eigendecompositions, Newton-Schulz iterations or triangular solves; the results go back to each
# member's layout (two all-to-alls, where gathering every matrix on every device moved the whole
# matrices). The state stays one leaf per parameter: a matrix statistic (SOAP's and Shampoo's
# statistics and eigenbases or inverse roots, PSGD's dense factors) is stored sharded over the same
# mesh axes along its first axis that divides (``statistic_sharding``), so each device stores a
# share of every statistic. Under automatic mesh axes the parameters' layout is the compiler's,
# unknown while tracing: on a mesh the step can see (``jax.set_mesh``, or concrete arrays on an
# automatic mesh) a group is divided over every axis of the mesh, with sharding constraints where
# explicit axes reshard; under ``jit`` with no mesh set it keeps the gather-once path.


class Distribution(NamedTuple):
  """The mesh axes a group is divided over and their number of devices: the axes a parameter is
  sharded over (explicit axes), or every axis of an automatic mesh (``auto``: the parameter's own
  layout is the compiler's choice, unknown while tracing)."""

  mesh: Any
  axes: tuple[str, ...]
  size: int
  auto: bool = False

  def spec_entry(self) -> Any:
    return self.axes[0] if len(self.axes) == 1 else self.axes

  def sharding(self, *spec: Any) -> jax.sharding.NamedSharding:
    return jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec(*spec))


def sharding_of(x: Any) -> Any:
  if isinstance(x, jax.core.Tracer):
    return getattr(jax.typeof(x), "sharding", None)
  return getattr(x, "sharding", None)


def distribution(x: Any) -> Distribution | None:
  """How the statistics of ``x`` (a parameter, gradient, tracer or ShapeDtypeStruct) are divided
  across devices. Explicit mesh axes: over the axes ``x`` is sharded over (None when it is
  replicated). Automatic mesh axes, on a mesh the value's type or sharding names (``jax.set_mesh``
  under ``jit``; a concrete array's own mesh): over every axis of the mesh, ``x``'s layout being
  the compiler's choice. None otherwise: one device, manual axes (inside ``shard_map``), or ``jit``
  with automatic axes and no mesh set."""
  sharding = sharding_of(x)
  if not isinstance(sharding, jax.sharding.NamedSharding):
    return None
  mesh = sharding.mesh
  if getattr(mesh, "empty", True) or mesh.size <= 1:
    return None
  axis_type = jax.sharding.AxisType
  types = dict(zip(mesh.axis_names, getattr(mesh, "axis_types", ())))
  if types and all(t == axis_type.Auto for t in types.values()):
    axes = tuple(a for a in mesh.axis_names if mesh.shape[a] > 1)
    return Distribution(mesh, axes, int(np.prod([mesh.shape[a] for a in axes])), auto=True)
  axes = tuple(a for entry in sharding.spec if entry is not None
               for a in (entry if isinstance(entry, tuple) else (entry,)))
  if not axes or any(types.get(a) != axis_type.Explicit for a in axes):
    return None
  return Distribution(mesh, axes, int(np.prod([mesh.shape[a] for a in axes])))


def constrain(x: jax.Array, sharding: jax.sharding.NamedSharding, auto: bool) -> jax.Array:
  """``x`` in ``sharding``: a sharding constraint under automatic axes, a ``reshard`` under explicit
  ones (nothing when the type already says so)."""
  if auto:
    return jax.lax.with_sharding_constraint(x, sharding)
  have = getattr(jax.typeof(x), "sharding", None)
  return x if getattr(have, "spec", None) == sharding.spec else jax.sharding.reshard(x, sharding)


def statistic_sharding(dist: Distribution | None, shape: Sequence[int]) -> Any:
  """The layout of a matrix statistic of a parameter divided as ``dist``: sharded over the same mesh
  axes along its first axis that they divide (None: replicated, nothing divides)."""
  if dist is None:
    return None
  for axis, d in enumerate(shape):
    if d and d % dist.size == 0:
      return dist.sharding(*(None,) * axis, dist.spec_entry())
  return None


def place_statistic(param: Any, value: jax.Array) -> jax.Array:
  """``value``, a matrix statistic of ``param``, in ``statistic_sharding``'s layout (unchanged when
  the parameter is not divided across devices, or the statistic has no axis to divide)."""
  dist = distribution(param)
  target = statistic_sharding(dist, np.shape(value))
  if target is None or dist is None:
    return value
  if isinstance(value, jax.core.Tracer):
    return constrain(value, target, dist.auto)
  return jax.device_put(value, target)


def to_owners(x: jax.Array, dist: Distribution) -> jax.Array:
  """A stacked group in the owner layout: padded to a multiple of ``dist.size`` members (copies of
  the last one: finite values, results discarded) and sharded over ``dist``'s axes along the stack."""
  n = x.shape[0]
  pad = -n % dist.size
  if pad:
    last = jax.lax.slice_in_dim(x, n - 1, n)
    x = jnp.concatenate([x] + [last] * pad)
  return constrain(x, dist.sharding(dist.spec_entry(), *(None,) * (x.ndim - 1)), dist.auto)


def on_owners(fn: Callable, dist: Distribution, shared: Any, *stacked: jax.Array) -> list[jax.Array]:
  """``fn(shared, *blocks) -> list of arrays`` on each device's own members of owner-layout stacks,
  the results as owner-layout stacks: manual over ``dist``'s axes, so the leaf functions' reshapes,
  blockings and decompositions see plain per-device arrays (explicit sharding types have no rule
  for some of them). ``shared`` holds the replicated traced values ``fn`` reads (scalars, flags):
  a manual region may not close over values typed with explicit axes, so they come in as
  arguments."""
  spec = jax.sharding.PartitionSpec(dist.spec_entry())
  replicated = jax.sharding.PartitionSpec()
  return jax.shard_map(lambda sh, *xs: list(fn(sh, *xs)), mesh=dist.mesh,
                       in_specs=(replicated, *(spec,) * len(stacked)), out_specs=spec,
                       axis_names=set(dist.axes))(shared, *stacked)


def from_owners(x: jax.Array, n: int, member: Any) -> jax.Array:
  """The first ``n`` members of an owner-layout stack, each back in the layout ``member`` (a member's
  sharding: the stack axis whole, the other axes as the member's). Under automatic axes the
  members' layouts are the compiler's: the caller ties each member to its parameter (``place_like``)."""
  mesh: Any = getattr(jax.typeof(x).sharding, "mesh", None)
  if mesh is not None and any(t == jax.sharding.AxisType.Auto for t in mesh.axis_types):
    free = jax.sharding.PartitionSpec.UNCONSTRAINED
    x = jax.lax.with_sharding_constraint(x, jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec(None, *(free,) * (x.ndim - 1))))
    return jax.lax.slice_in_dim(x, 0, n) if x.shape[0] != n else x
  spec = tuple(getattr(member, "spec", ())) if member is not None else ()
  spec = spec + (None,) * (x.ndim - 1 - len(spec))
  x = jax.sharding.reshard(x, jax.sharding.NamedSharding(
      getattr(member, "mesh", None) or jax.typeof(x).sharding.mesh, jax.sharding.PartitionSpec(None, *spec)))
  return jax.lax.slice_in_dim(x, 0, n) if x.shape[0] != n else x


# --------------------------------------------------------------------------------------------------
# Refreshes under vmap. A preconditioner refreshed every f steps is ``cond(refresh, fresh, old)``;
# under ``jax.vmap`` with the step count batched (``steadax.sweep`` runs n configurations with
# stacked states), ``lax.cond`` with a batched predicate becomes a ``select`` of both branches: the
# eigendecompositions ran at every step. ``refresh_cond`` decides on one unbatched predicate, "any
# member refreshes", and selects per member inside the refreshing branch, so the refresh runs only
# at the steps where some member needs it and every member gets its own branch's result.


@jax.custom_batching.custom_vmap
def _any_member(pred: jax.Array) -> jax.Array:
  return pred


@_any_member.def_vmap
def _any_member_vmap(axis_size: int, in_batched: list, pred: jax.Array) -> tuple:
  del axis_size
  return (jnp.any(pred) if in_batched[0] else pred), False


def refresh_cond(pred: Any, fresh: Callable[[], Any], old: Any) -> Any:
  """``fresh()`` where ``pred`` holds, else ``old`` (a pytree), computing ``fresh()`` only at the
  steps where ``pred`` holds for some member of an enclosing ``vmap`` (see above). Outside any vmap
  it is ``cond(pred, fresh, lambda: old)``; the per-member select costs one elementwise pass over
  the refreshed values at a refresh."""
  if not isinstance(pred, jax.core.Tracer):
    return fresh() if bool(pred) else old

  def refreshed():
    return jax.tree_util.tree_map(lambda new, kept: jnp.where(pred, new, kept), fresh(), old)

  return jax.lax.cond(_any_member(pred), refreshed, lambda: old)


# --------------------------------------------------------------------------------------------------
# Tensors as Kronecker products of per-axis matrices.


def conj_t(m: jax.Array) -> jax.Array:
  """The conjugate transpose of the last two axes."""
  m = jnp.swapaxes(m, -1, -2)
  return jnp.conj(m) if jnp.iscomplexobj(m) else m


def mode_product(x: jax.Array, m: jax.Array, axis: int) -> jax.Array:
  """``x ×_axis m``: ``m`` applied to every mode-``axis`` fibre of ``x`` (``m @ X_(axis)``)."""
  return jnp.moveaxis(jnp.tensordot(m, x, axes=((1,), (axis,))), 0, axis)


def axis_statistic(x: jax.Array, axis: int) -> jax.Array:
  """``X_(axis) X_(axis)^H``: the Gram matrix of ``x``'s mode-``axis`` unfolding (Hermitian)."""
  others = tuple(i for i in range(x.ndim) if i != axis)
  return jnp.tensordot(x, jnp.conj(x) if jnp.iscomplexobj(x) else x, axes=(others, others))


def symmetrize(s: jax.Array) -> jax.Array:
  """``(S + S^H) / 2``: removes the rounding asymmetry of accumulated Gram matrices."""
  return (s + conj_t(s)) * 0.5


def _one_at_a_time() -> bool:
  """Whether to run LAPACK's decompositions and triangular solves one matrix per call: on a CPU
  backend.

  jaxlib's CPU kernels (``eigh``, ``svd``, ``trsm``, every LAPACK call) split a batch of matrices
  over the CPU client's thread pool and block a pool thread until the pieces are done. XLA runs
  independent operations of a program at the same time on that same pool, so two batched calls in
  flight (the left and right factors of one shape group, two groups, or several virtual devices)
  can occupy every pool thread as waiters, and the step never returns: seen with SOAP's shape
  groups on a 2-core machine with one device, and with Shampoo and PSGD-Kron on 8 virtual devices.
  Unbatched, a call runs inline on the thread that reached it; XLA still runs independent calls in
  parallel. Accelerators' solvers have no such pool.
  """
  return jax.default_backend() == "cpu"


def _one_matrix_per_call(fn: Callable[..., Any]) -> Callable[..., Any]:
  """``fn`` of one matrix per argument (each argument's last two axes), batched over leading axes:
  on a CPU backend applied to a batch (leading axes, or a ``jax.vmap`` around it, as shape groups
  and sweeps add) one matrix per call (``lax.map``; see ``_one_at_a_time``), elsewhere ``fn``
  itself. The arguments share their leading axes."""

  @jax.custom_batching.custom_vmap
  def per_matrix(*xs: jax.Array) -> Any:
    lead = xs[0].shape[:-2]
    if not lead:
      return fn(*xs)
    flat = tuple(x.reshape(-1, *x.shape[-2:]) for x in xs)
    out = jax.lax.map(lambda args: per_matrix(*args), flat)
    return jax.tree.map(lambda o: o.reshape(*lead, *o.shape[1:]), out)

  @per_matrix.def_vmap
  def per_matrix_vmap(axis_size: int, in_batched: list, *xs: jax.Array) -> tuple:
    xs = tuple(x if batched else jnp.broadcast_to(x, (axis_size, *x.shape)) for x, batched in zip(xs, in_batched))
    out = per_matrix(*xs)
    return out, jax.tree.map(lambda _: True, out)

  def call(*xs: jax.Array) -> Any:
    return per_matrix(*xs) if _one_at_a_time() else fn(*xs)

  return call


_eigh = _one_matrix_per_call(lambda s: tuple(jnp.linalg.eigh(s)))
_solve_h = _one_matrix_per_call(lambda q, b: jax.scipy.linalg.solve_triangular(q, b, trans="C", lower=False))
_svd = _one_matrix_per_call(lambda x: tuple(jnp.linalg.svd(x, full_matrices=False)))


def upper_solve_h(q: jax.Array, b: jax.Array) -> jax.Array:
  """``Q^{-H} B`` for an upper-triangular ``q`` (``solve_triangular(q, b, trans="C")``), one
  matrix per LAPACK call on a CPU backend (see ``_one_at_a_time``)."""
  return _solve_h(q, b)


def hermitian_eigh(s: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``jnp.linalg.eigh`` of the Hermitian ``s`` (batched over leading axes), one matrix per LAPACK
  call on a CPU backend (see ``_one_at_a_time``)."""
  values, vectors = _eigh(s)
  return values, vectors


def thin_svd(x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """``jnp.linalg.svd(x, full_matrices=False)`` (batched over leading axes), one matrix per LAPACK
  call on a CPU backend (see ``_one_at_a_time``)."""
  u, s, vh = _svd(x)
  return u, s, vh


def eigenbasis(s: jax.Array) -> jax.Array:
  """Eigenvectors of the Hermitian ``s`` (batched over leading axes), by decreasing eigenvalue.

  ``s`` is in its compute dtype (at least float32: ``eigh`` has no 16-bit kernels).

  Example:
    >>> import jax.numpy as jnp
    >>> eigenbasis(jnp.diag(jnp.array([1.0, 3.0])))
    Array([[0., 1.],
           [1., 0.]], dtype=float32)
  """
  _, vectors = hermitian_eigh(symmetrize(s))
  return vectors[..., ::-1]


def inverse_root(s: jax.Array, exponent: Any, relative_eps: Any) -> jax.Array:
  """``(S + eps * lambda_max * I)^(-1/exponent)`` of the Hermitian PSD ``s``, batched.

  The regularisation is relative to the largest eigenvalue, so the result does not depend on the
  scale of the statistics (grafting restores the scale). A zero matrix (no gradient seen yet) gives
  the identity. Negative eigenvalues (rounding) are clipped to zero.

  Called inside a leaf function: ``s`` is in its compute dtype (at least float32) and the scalars
  are weakly typed; the real powers scale the (possibly complex) eigenvectors by standard promotion.

  Args:
    s: ``(..., d, d)`` Hermitian positive semi-definite matrices.
    exponent: the root (``4`` for a matrix's left and right Shampoo factors).
    relative_eps: the regulariser, relative to the largest eigenvalue.

  Returns:
    The inverse roots, in ``s``'s dtype.

  Example:
    >>> import jax.numpy as jnp
    >>> inverse_root(jnp.diag(jnp.array([16.0, 1.0])), 4, 0.0)
    Array([[0.5, 0. ],
           [0. , 1. ]], dtype=float32)
  """
  values, vectors = hermitian_eigh(symmetrize(s))
  values = jnp.maximum(values, 0)
  if values.shape[-1]:
    top = jnp.max(values, axis=-1, keepdims=True)
  else:
    top = jnp.zeros(values.shape[:-1] + (1,), values.dtype)
  positive = top > 0
  reg = values + relative_eps * top
  safe = jnp.where(positive, reg, jnp.ones_like(reg))
  power = jnp.where(positive, safe ** (-1 / exponent), jnp.ones_like(reg))
  root = (vectors * power[..., None, :]) @ conj_t(vectors)
  return symmetrize(root)


# --------------------------------------------------------------------------------------------------
# Per-axis matrices of a parameter (statistics, eigenbases, inverse roots) are stored as one tuple
# per parameter, with a ``(0, 0)`` placeholder for the axes that are not preconditioned.


def split_matrices(matrices: tuple) -> tuple[tuple[int, ...], tuple]:
  """The axes that carry a matrix (not the ``(0, 0)`` placeholder) and those matrices."""
  axes = tuple(axis for axis, x in enumerate(matrices) if x.size)
  return axes, tuple(matrices[axis] for axis in axes)


def merge_matrices(matrices: tuple, axes: tuple[int, ...], new: Sequence[Any]) -> tuple:
  """``matrices`` with the entries of ``axes`` replaced by ``new`` (placeholders kept)."""
  out = list(matrices)
  for axis, x in zip(axes, new):
    out[axis] = x
  return tuple(out)


def leafwise_with_matrices(tx: Any, make_leaf: Callable, updates: Any, moments: tuple, matrices: tuple,
                           params: Any, scalars: Callable, shared: tuple = ()) -> tuple:
  """``tx.leafwise`` once per parameter, with its per-axis matrices beside its moments.

  ``make_leaf(axes, *shared)`` builds the leaf function of a parameter whose ``axes`` carry
  matrices (``shared``: the traced values it reads besides its scalars, such as a refresh flag:
  passed, not closed over, so a group can run in a manual region); the leaf is called as ``leaf(k, g, *moment_leaves, *matrices_of_tree_0, *matrices_of_tree_1, ...)`` (only the
  live matrices, in the order of ``axes``) and returns ``(update, *moments, *matrices)``. Going
  through ``leafwise`` means the moments and the matrices are cast into one compute dtype (the
  policy's promotion of all of them, at least float32), the leaf runs under standard promotion
  (real matrices on complex tensors), and every output is checked and written back once in its
  stored dtype. Parameters with a preconditioned axis are gathered whole first (a contraction over
  a sharded axis is ambiguous under explicit sharding and costs collectives in every product
  otherwise) and the results are put back to the inputs' shardings (a local slice).

  Args:
    tx: the transformation (its ``leafwise`` and name).
    make_leaf: ``make_leaf(axes, *shared) -> leaf``.
    updates: the incoming updates.
    moments: state trees mirroring the parameters (``mu``, ``nu``).
    matrices: state trees holding one tuple of per-axis matrices per parameter.
    params: the parameters or None (the updates take their dtypes).
    scalars: a ``Scalars`` record, or ``scalars(dtype) -> Scalars`` building one per compute dtype.
    shared: traced values for ``make_leaf`` (flags), the same for every parameter.

  Returns:
    ``(updates, *moments, *matrices)`` as trees.
  """
  treedef = jax.tree_util.tree_structure(updates, is_leaf=lambda x: x is None)
  grads = treedef.flatten_up_to(updates)
  moment_leaves = [treedef.flatten_up_to(tree) for tree in moments]
  matrix_leaves = [treedef.flatten_up_to(tree) for tree in matrices]
  param_leaves = treedef.flatten_up_to(params) if params is not None else [None] * len(grads)
  paths = [key_path_str(p) for p, _ in jax.tree_util.tree_flatten_with_path(
      updates, is_leaf=lambda x: x is None)[0]]
  outs: list = [None] * len(grads)
  keys = []
  for i, g in enumerate(grads):
    leaf_moments = [tree[i] for tree in moment_leaves]
    leaf_matrices = [tree[i] for tree in matrix_leaves]
    if g is None:
      outs[i] = (None, *leaf_moments, *leaf_matrices)
      keys.append(None)
    elif not jnp.issubdtype(g.dtype, jnp.inexact):
      keys.append(("alone", i))  # not optimised (leafwise's zero update): nothing to batch
    else:
      arrays = [g, *leaf_moments, *(x for mats in leaf_matrices for x in mats), param_leaves[i]]
      keys.append((split_matrices(leaf_matrices[0])[0] if leaf_matrices else (),
                   tuple(None if x is None else (tuple(np.shape(x)), np.dtype(x.dtype), layout_key(x))
                         for x in arrays)))
  # One leafwise call per shape group (see "Shape groups" above); a group of one is the
  # per-parameter path. On one CPU device a group's chunks (``chunk_bounds``, by the bytes of a
  # member's arrays) are the leaves of that call, so leafwise traces the chunk function once.
  for members in shape_groups(keys, chunked=False):
    i, n = members[0], len(members)
    leaf_matrices = [tree[i] for tree in matrix_leaves]
    axes = split_matrices(leaf_matrices[0])[0] if leaf_matrices else ()
    # A group of preconditioned parameters divided across devices runs in the owner layout (see
    # "Statistics divided across devices"); a single one is gathered whole once (each device would
    # compute one matrix either way, and one all-gather moves less than two all-to-alls), and
    # unpreconditioned ones need no gathering.
    dist = distribution(grads[i]) if axes and n > 1 else None
    gathered, backs, lives = [], [], []
    for j in members:
      g, leaf_moments = grads[j], [tree[j] for tree in moment_leaves]
      back = [_identity] * (1 + len(leaf_moments))
      if axes and dist is None:
        (g, *leaf_moments), back = replicate_whole(g, *leaf_moments)
      elif dist is not None and dist.auto:
        # Automatic axes: the layouts are the compiler's; each result is tied to its input's.
        back = [lambda y, x=x: place_like(x, y) for x in (g, *leaf_moments)]
      live = [x for tree in matrix_leaves for x in split_matrices(tree[j])[1]]
      if axes and dist is None and live:
        # Statistics divided across devices (``place_statistic``) are gathered with their
        # parameter; each goes back to its own layout below (``place_like``).
        live = list(replicate_whole(*live)[0])
      gathered.append([g, *leaf_moments])
      backs.append(back)
      lives.append(live)
    grouped = n > 1 or dist is not None
    if not grouped:
      leaf = make_leaf(axes, *shared)
      label = None
      inputs = gathered[0] + lives[0]
      param = param_leaves[i]
    else:
      label = group_label([paths[j] for j in members])
      columns = list(zip(*(g_and_moments + live for g_and_moments, live in zip(gathered, lives))))
      if dist is None:
        bounds = chunk_bounds(n, sum(x.size * x.dtype.itemsize for x in gathered[0] + lives[0]))
      else:
        bounds = [(0, n)]
      labels = [label if len(bounds) == 1 else f"{label}[{a}:{b}]" for a, b in bounds]
      # Each chunk's columns stacked (``stacked[c][t]``: chunk c, input t).
      stacked = [[stack(column[a:b]) for column in columns] for a, b in bounds]
      if dist is not None:
        layouts = [sharding_of(column[0]) for column in columns]
        stacked = [[to_owners(x, dist) for x in stacked[0]]]
      rows = [xs[0].shape[0] // (dist.size if dist is not None else 1) for xs in stacked]
      param = None if param_leaves[i] is None else {
          name: stacked_struct(param_leaves[i], r) for name, r in zip(labels, rows)}

      def run(flags, record, chunks, labels=labels, param=param):
        one = make_leaf(axes, *flags)
        # The scalars record is shared by the group; every array input has the group axis.
        leaf = lambda k, *ys: jax.vmap(lambda *zs: one(k, *zs))(*ys)  # noqa: E731
        inputs = [dict(zip(labels, column)) for column in zip(*chunks)]
        outputs = tx.leafwise(leaf, inputs[0], *inputs[1:], params=param, scalars=record)
        return [[r[name] for r in outputs] for name in labels]

    if not grouped:
      results = [tx.leafwise(leaf, inputs[0], *inputs[1:], params=param, scalars=scalars)]
    elif dist is None:
      results = [member for (a, b), outputs in zip(bounds, run(shared, scalars, stacked))
                 for member in zip(*(unstack(r, b - a) for r in outputs))]
    else:
      # The scalars of the group's compute dtype, built here and passed in (see ``on_owners``).
      rdt = real_dtype(compute_dtype(*[x.dtype for x in stacked[0]]))
      traced, rebuild = split_record(_record(scalars, rdt))
      blocks = on_owners(lambda sh, *xs: run(sh[0], lambda dt: rebuild(sh[1]), [xs])[0], dist,
                         (tuple(shared), traced), *stacked[0])
      results = [from_owners(r, n, layout) for r, layout in zip(blocks, layouts)]
      results = list(zip(*(unstack(r, n) for r in results)))
    n_moments = len(moment_leaves)
    for j, back, (u, *rest) in zip(members, backs, results):
      live = [x for tree in matrix_leaves for x in split_matrices(tree[j])[1]]
      new_moments, new_live = rest[:n_moments], rest[n_moments:]
      # Each matrix keeps the layout it came in with: computed from the gathered parameter, it
      # would otherwise come out wherever the partitioner puts it (a different layout at each step).
      new_live = [place_like(old, new) for old, new in zip(live, new_live)]
      new_matrices = [merge_matrices(tree[j], axes, new_live[t * len(axes):(t + 1) * len(axes)])
                      for t, tree in enumerate(matrix_leaves)]
      outs[j] = (back[0](u), *(b(x) for b, x in zip(back[1:], new_moments)), *new_matrices)
  n = 1 + len(moments) + len(matrices)
  return tuple(treedef.unflatten([o[j] for o in outs]) for j in range(n))


# --------------------------------------------------------------------------------------------------
# Blocking of large axes (Anil et al. 2020, §3.3): every axis longer than ``block_size`` is cut into
# blocks of ``block_size`` (the last one zero-padded), and every block gets its own preconditioners.
# Blocks are stacked on one leading axis so that statistics, eigendecompositions and products run
# batched. Zero padding is exact: a padded row of the gradient is zero, so the statistics are block
# diagonal between real and padded coordinates and the padded part never mixes into the real one.


def block_sizes(shape: Sequence[int], block_size: int) -> tuple[int, ...]:
  """Per-axis block length: the axis itself when it fits in a block, else ``block_size``."""
  return tuple(d if d <= block_size else block_size for d in shape)


def to_blocks(x: jax.Array, sizes: Sequence[int]) -> jax.Array:
  """``x`` cut into blocks of ``sizes``: shape ``(num_blocks, *sizes)`` (zero-padded)."""
  counts = [-(-d // b) if b else 1 for d, b in zip(x.shape, sizes)]
  pads = [(0, n * b - d) for d, n, b in zip(x.shape, counts, sizes)]
  if any(p for _, p in pads):
    x = jnp.pad(x, pads)
  split = [v for n, b in zip(counts, sizes) for v in (n, b)]
  x = x.reshape(split)
  k = len(sizes)
  x = x.transpose([2 * i for i in range(k)] + [2 * i + 1 for i in range(k)])
  return x.reshape((math.prod(counts), *sizes))


def from_blocks(blocks: jax.Array, shape: Sequence[int], sizes: Sequence[int]) -> jax.Array:
  """The inverse of ``to_blocks``: the stacked blocks reassembled into ``shape``."""
  counts = [-(-d // b) if b else 1 for d, b in zip(shape, sizes)]
  k = len(sizes)
  x = blocks.reshape((*counts, *sizes))
  order = [v for i in range(k) for v in (i, k + i)]
  x = x.transpose(order).reshape([n * b for n, b in zip(counts, sizes)])
  if tuple(x.shape) != tuple(shape):
    x = x[tuple(slice(0, d) for d in shape)]
  return x


def num_blocks(shape: Sequence[int], sizes: Sequence[int]) -> int:
  return math.prod(-(-d // b) if b else 1 for d, b in zip(shape, sizes))


# --------------------------------------------------------------------------------------------------
# Validation of the static sizes of the matrix optimizers (static fields have no hyper_field check:
# the classes call this from ``__post_init__``, so the class, its factory and ``.replace`` raise).


def check_positive_int(owner: str, name: str, value: Any) -> None:
  """Raise a ValueError unless ``value`` is a positive Python (or numpy) int.

  Example:
    >>> check_positive_int("scale_by_soap", "precondition_frequency", 0)
    Traceback (most recent call last):
    ...
    ValueError: scale_by_soap: precondition_frequency must be a positive Python int, got 0.
  """
  if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
    raise ValueError(f"{owner}: {name} must be a positive Python int, got {value!r}.")
