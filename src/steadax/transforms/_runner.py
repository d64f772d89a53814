"""The grouped runner of the matrix optimizers (private), and ``MatrixExecution``, its policy.

Muon, SOAP, Shampoo, PSGD-Kron and GaLore each write one per-matrix step (``matrix_step``: the
algebra of one matrix, on compute-dtype inputs) and declare their per-matrix state; ``run_matrices``
does the rest for all of them, as HeavyBall serves its optimizers with one bucketing primitive:

* **Views.** A parameter is read through its ``MatrixView`` (dimension numbers): axes in neither
  field are batch axes, each slice an independent matrix; without a view the parameter is one
  tensor. Parameter-shaped state (moments) is viewed the same way; matrix state (statistics,
  eigenbases, factors, projectors) is stored with the batch axes leading, so a stacked weight's
  state is stacked like it and no statistic spans a batch axis.
* **Shape groups.** Parameters that agree in matrix shape, batch size, dtypes, layout and static
  configuration (``plan``) are stacked and run as one ``vmap``ped computation: the traced and
  compiled program grows with the number of distinct shapes, not with depth. A stacked weight is a
  batch already (a reshape, never split into layers).
* **Layouts.** On a mesh a group of several matrices runs in the owner layout; a single matrix is
  gathered once (``_matrix.py``); results go back to each parameter's and state leaf's layout.
* **Casts.** Every group is one ``leafwise`` call, so the dtype policy and the contract apply as
  to every elementwise optimizer.
* **Scheduling.** How a group is split on the backend is ``MatrixExecution``, a static field of
  each matrix transformation (docs/performance.md says what each rule buys).
"""

import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import jax.numpy as jnp
import numpy as np

from .._core._leafwise import place_kept_axes, place_like, split_record
from .._core._policy import compute_dtype, key_path_str, real_dtype
from ._axes import leaf_views
from ._matrix import (constrain, distribution, from_owners, layout_key, on_owners, place_statistic, replicate_axes,
                      sharding_of, to_owners)

__all__ = ["MatrixExecution"]

_MAX_CHUNKS = 8


@dataclasses.dataclass(frozen=True)
class MatrixExecution:
  """How a matrix optimizer schedules its shape groups: a static field of ``scale_by_soap``,
  ``scale_by_shampoo``, ``scale_by_psgd_kron``, ``contrib.scale_by_muon``, ``contrib.scale_by_galore``
  and the optimizers built on them (their ``execution`` argument).

  Attributes:
    grouping: parameters that agree in matrix shape, dtypes, layout and configuration run as one
      batched computation; False runs every parameter on its own (a stacked weight is one batch
      either way).
    chunks: how a group is split: ``"auto"`` (decided when the update is traced: on one CPU
      device the optimizer's measured rule, elsewhere none), None (one batch per group, what an
      accelerator runs), or a positive int (at most that many chunks per group).

  Example:
    >>> import steadax
    >>> tx = steadax.soap(1e-3, execution=steadax.MatrixExecution(chunks=None))
  """

  grouping: bool = True
  chunks: int | str | None = "auto"

  def __post_init__(self):
    chunks = self.chunks
    if not (chunks is None or chunks == "auto" or (isinstance(chunks, int) and not isinstance(chunks, bool)
                                                   and chunks > 0)):
      raise ValueError(f"MatrixExecution: chunks must be 'auto', None or a positive int, got {chunks!r}.")

  def bounds(self, n: int, member_bytes: int, rule: tuple | None, cores: int | None = None) -> list[tuple[int, int]]:
    """``(start, stop)`` of the contiguous chunks, of nearly equal size, of a group of ``n``
    members. ``rule`` is the optimizer's CPU rule for ``"auto"``: ``("cores", k)``, k chunks per
    core, ``("bytes", b)``, chunks of about ``b`` bytes of the members' arrays and at least one per
    core (a group within ``b`` stays whole), or None (one batch); ``cores``: default, the cores of
    one CPU device (0 elsewhere: no chunks)."""
    k = self.chunks if isinstance(self.chunks, int) else 1
    if self.chunks == "auto" and rule is not None:
      cores = _cpu_cores() if cores is None else cores
      k = cores * rule[1] if rule[0] == "cores" else (
          1 if n * member_bytes <= rule[1] else max(cores, -(-n * member_bytes // rule[1])))
      k = k if cores else 1
    k = max(1, min(k, n))
    edges = [n * j // k for j in range(k + 1)]
    return list(zip(edges, edges[1:]))


def _cpu_cores() -> int:
  """The cores XLA's CPU backend runs a program's operations on (at most 8), with one CPU device;
  0 elsewhere (an accelerator runs a batch as one kernel; several devices divide groups by owners)."""
  if jax.default_backend() != "cpu" or jax.local_device_count() > 1:
    return 0
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
  return max(1, min(cores, _MAX_CHUNKS))


def unstack(x: jax.Array, n: int) -> list[jax.Array]:
  """The ``n`` slices of ``x`` along its leading axis, taken by gathers from constant index arrays.

  XLA compiles every distinct fused computation once (about 20 ms each on a CPU); ``x[i]`` has its
  offset in its kernel, so ``n`` members would be ``n`` kernels. A gather reads its start indices
  from an operand: given a constant array of two different rows ``[i, i + 1]`` (one index becomes a
  slice again, a uniform array a folded scalar) the ``n`` gathers are one kernel; the first row is
  kept (only the kept elements are computed).
  """
  if n == 1:
    return [x[0]]
  rest = tuple(x.shape[1:])
  dn = jax.lax.GatherDimensionNumbers(offset_dims=tuple(range(1, 1 + len(rest))), collapsed_slice_dims=(0,),
                                      start_index_map=(0,))
  return [jax.lax.gather(x, np.array([[i], [(i + 1) % n]], np.int32), dn, slice_sizes=(1, *rest),
                         mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS)[0] for i in range(n)]


# Refreshes under vmap. A preconditioner refreshed every f steps is ``cond(refresh, fresh, old)``;
# under ``jax.vmap`` with a batched step count (``steadax.sweep``) a cond on a batched predicate
# becomes a select of both branches: the decompositions would run at every step. ``refresh_cond``
# decides on one unbatched predicate, "any member refreshes", and selects per member inside.


@jax.custom_batching.custom_vmap
def _any_member(pred: jax.Array) -> jax.Array:
  return pred


@_any_member.def_vmap
def _(axis_size: int, in_batched: list, pred: jax.Array) -> tuple:
  return (jnp.any(pred) if in_batched[0] else pred), False


@jax.custom_batching.custom_vmap
def _refreshed(pred: jax.Array, new: jax.Array, kept: jax.Array) -> jax.Array:
  return new  # the refreshing branch runs only where the (unbatched) predicate holds


@_refreshed.def_vmap
def _(axis_size: int, in_batched: list, pred: jax.Array, new: jax.Array, kept: jax.Array) -> tuple:
  new, kept = (x if b else jnp.broadcast_to(x, (axis_size, *x.shape)) for x, b in zip((new, kept), in_batched[1:]))
  if in_batched[0]:  # a member refreshing or not: its own branch's value
    return jnp.where(pred.reshape(pred.shape + (1,) * (new.ndim - 1)), new, kept), True
  return _refreshed(pred, new, kept), True  # decided by an enclosing vmap, if any


def refresh_cond(pred: Any, fresh: Callable[[], Any], old: Any) -> Any:
  """``fresh()`` where ``pred`` holds, else ``old``, computing ``fresh()`` only at the steps where
  ``pred`` holds for some member of an enclosing ``vmap`` (each member then selects its own
  branch's value; with ``pred`` the same for every member, nothing is selected)."""
  if not isinstance(pred, jax.core.Tracer):
    return fresh() if bool(pred) else old
  refreshed = lambda: jax.tree.map(lambda new, kept: _refreshed(pred, new, kept), fresh(), old)  # noqa: E731
  return jax.lax.cond(_any_member(pred), refreshed, lambda: old)


def core_shape(x: Any, view: Any, two_d: bool = False) -> tuple[int, ...]:
  """The shape of one matrix of ``x`` read through ``view`` (``x``'s own shape without one): the
  sizes of its reduction and output fields, an empty field left out unless ``two_d`` (a stacked
  vector, ``WeightDimensionNumbers((), 1)``, is a batch of vectors for the Kronecker optimizers;
  Muon and GaLore, ``two_d``, see ``(1, d)`` matrices)."""
  if view is None:
    return tuple(x.shape)
  return tuple(d for d, axes in ((view.fan_in, view.reduction_axes), (view.fan_out, view.output_axes))
               if axes or two_d)


def plans_of(tx: Any, tree: Any, plan: Callable[[tuple[int, ...]], Any]) -> tuple[list, list]:
  """Per leaf of ``tree``, its ``MatrixView`` under ``tx.weight_dimension_numbers`` (or None) and
  ``plan`` of the shape of one of its matrices (None for a None leaf)."""
  views = leaf_views(tx.owner, tx.weight_dimension_numbers, tree)
  leaves = jax.tree_util.tree_leaves(tree, is_leaf=lambda x: x is None)
  return views, [None if x is None else plan(core_shape(x, v)) for x, v in zip(leaves, views)]


def init_matrices(tx: Any, params: Any, make: Callable) -> Any:
  """Per parameter (viewed through ``tx.weight_dimension_numbers``), the tuple of matrix state
  ``make(x, core_shape)`` builds for one matrix (``(0, 0)`` placeholders kept), broadcast over the
  batch axes (leading) and placed like the parameter (``place_statistic``; a diagonal of one axis,
  as PSGD-Kron's, takes that axis' sharding, and the batch axes')."""
  treedef = jax.tree_util.tree_structure(params, is_leaf=lambda x: x is None)
  views = leaf_views(tx.owner, tx.weight_dimension_numbers, params)

  def place(x, view, t, a):
    if tuple(a.shape) == (0, 0):
      return a
    if view is None:
      return place_kept_axes(x, a, (t,)) if a.ndim == 1 and np.ndim(x) else place_statistic(x, a)
    kept = (*view.batch_axes, *[f for f in (view.reduction_axes, view.output_axes) if f][t])
    a = jnp.broadcast_to(a, (*view.batch_shape, *a.shape))
    if a.ndim == len(kept) == len(view.batch_axes) + 1 and list(kept) == sorted(kept):
      return place_kept_axes(x, a, kept)  # a diagonal of one axis, per matrix: the axes' sharding
    return place_statistic(x, a, view.batch_axes)

  return treedef.unflatten([None if x is None else tuple(place(x, v, t, a) for t, a in enumerate(
      make(x, core_shape(x, v)))) for x, v in zip(treedef.flatten_up_to(params), views)])


def _live(matrices: tuple) -> tuple[int, ...]:
  """The entries of a per-parameter tuple of matrix state that hold matrices (not a ``(0, 0)``
  placeholder of an axis that is not preconditioned)."""
  return tuple(t for t, x in enumerate(matrices) if tuple(x.shape) != (0, 0))


class _Member:
  """One parameter's inputs in rows: ``(B, *per-matrix shape)`` arrays, B its number of matrices."""

  def __init__(self, view, g, mirrored, matrices, param, two_d):
    self.view, self.param, self.g, self.mirrored, self.old = view, param, g, mirrored, matrices
    self.batch = tuple(g.shape[a] for a in view.batch_axes) if view is not None else ()
    self.rows = math.prod(self.batch)
    to_rows = lambda x: (view.to_matrices(x) if view is not None else x).reshape(  # noqa: E731
        (self.rows, *core_shape(x, view, two_d)))
    self.live = [(t, a) for t, tree in enumerate(matrices) for a in _live(tree)]
    nb = len(self.batch)
    self.inputs = [to_rows(g), *(to_rows(m) for m in mirrored),
                   *(matrices[t][a].reshape((self.rows, *matrices[t][a].shape[nb:])) for t, a in self.live)]

  def key(self, alone: Any) -> tuple:
    if any(s is not None for s in tuple(getattr(sharding_of(self.inputs[0]), "spec", ()))[:1]):
      alone = id(self)  # a weight sharded along its batch axes is a group of its own (kept in place)
    return (alone, self.rows, tuple((x.shape[1:], np.dtype(x.dtype), layout_key(x))
                                                     for x in self.inputs),
            None if self.param is None else (np.dtype(self.param.dtype), layout_key(self.param)))

  def outputs(self, results: Sequence[jax.Array], backs: Sequence[Callable]) -> tuple:
    """``(update, *mirrored, *matrices)`` in the parameter's layout from per-row results."""
    results = [back(r) for back, r in zip(backs, results)]
    leaf = lambda r, like: place_like(like, (self.view.from_matrices(r.reshape(  # noqa: E731
        (*self.batch, *r.shape[1:]))) if self.view is not None else r.reshape(like.shape)))
    u = leaf(results[0], self.param if self.param is not None else self.g)
    mirrored = [leaf(r, m) for r, m in zip(results[1:], self.mirrored)]
    matrices = [list(tree) for tree in self.old]
    for (t, a), r in zip(self.live, results[1 + len(self.mirrored):]):
      matrices[t][a] = place_like(self.old[t][a], r.reshape(self.old[t][a].shape))
    return (u, *mirrored, *(tuple(tree) for tree in matrices))


def run_matrices(tx: Any, step: Callable, updates: Any, params: Any, *, views: Sequence[Any], plans: Sequence[Any],
                 mirrored: tuple = (), matrices: tuple = (), scalars: Any = None, shared: tuple = (),
                 extra: Callable | None = None) -> tuple:
  """``step`` on every matrix of ``updates``, grouped, in each parameter's layout.

  Args:
    tx: the transformation: its ``execution`` (a ``MatrixExecution``), ``cpu_chunks`` (its rule
      for ``"auto"``) and ``leafwise``.
    step: ``step(plan, k, shared, g, *mirrored, *matrices, *extra) -> (update, *mirrored,
      *matrices)`` (the update alone without state), the step of one matrix: every input in the
      compute dtype, without batch axes, ``k`` the scalars record.
    updates: the incoming updates (None leaves, and leaves whose view and plan are None, stay None).
    params: the parameters or None (they give the updates' dtypes).
    views: per leaf, a ``MatrixView`` or None (the whole parameter is one tensor).
    plans: per leaf, the static configuration ``matrix_step`` reads (hashable, part of the group
      key). A falsy plan marks elementwise work: no gathering, no owner layout.
    mirrored: state trees shaped like the parameters (moments).
    matrices: state trees holding a tuple of matrix state per parameter, batch axes leading; a
      ``(0, 0)`` entry is a placeholder, passed through.
    scalars: a ``Scalars`` record or ``scalars(dtype) -> Scalars``.
    shared: traced values the step reads, the same for every matrix (flags, coefficients).
    extra: ``extra(indices, rows, dist) -> list of arrays`` of a group, stacked (``rows`` per
      member; ``dist``: the group's owner ``Distribution`` or None): inputs drawn per group
      (PSGD's probes).

  Returns:
    ``(updates, *mirrored, *matrices)`` as trees.
  """
  execution: MatrixExecution = tx.execution
  none = lambda x: x is None  # noqa: E731
  treedef = jax.tree_util.tree_structure(updates, is_leaf=none)
  grads = treedef.flatten_up_to(updates)
  columns = [treedef.flatten_up_to(t) for t in (*mirrored, *matrices)]
  nm = len(mirrored)
  ps = treedef.flatten_up_to(params) if params is not None else [None] * len(grads)
  paths = [key_path_str(p) for p, _ in jax.tree_util.tree_flatten_with_path(updates, is_leaf=none)[0]]
  outs = [(None, *(c[i] for c in columns)) for i in range(len(grads))]
  members: dict = {}
  for i, g in enumerate(grads):
    if g is None:
      continue
    if g.size == 0 or not jnp.issubdtype(g.dtype, jnp.inexact):
      # Nothing to precondition (an empty parameter), or not optimised (leafwise's zero update).
      (u,) = tx.leafwise(lambda k, g: g, g, params=ps[i])
      outs[i] = (u, *outs[i][1:])
      continue
    member = _Member(views[i], g, [c[i] for c in columns[:nm]], [c[i] for c in columns[nm:]], ps[i],
                     getattr(tx, "two_d", False))
    key = (plans[i], member.key(None if execution.grouping else i))
    members.setdefault(key, []).append((i, member))
  for (plan, _), group in members.items():
    indices = [i for i, _ in group]
    label = ", ".join(paths[i] for i in indices) if len(indices) <= 3 else (
        f"{paths[indices[0]]}, ... ({len(indices)} parameters)")
    for i, out in zip(indices, _run_group(tx, step, plan, [m for _, m in group], indices, label, scalars, shared,
                                          extra)):
      outs[i] = out
  return tuple(treedef.unflatten([o[j] for o in outs]) for j in range(1 + len(columns)))


def _run_group(tx, one_step, plan, group, indices, label, scalars, shared, extra) -> list:
  """The outputs of one shape group's members (see ``run_matrices``)."""
  first, rows, n = group[0], group[0].rows, len(group)
  dist = distribution(first.inputs[0]) if plan and n * rows > 1 else None
  param = first.param
  step = lambda sh: lambda k, *xs: one_step(plan, k, sh, *xs)  # noqa: E731
  batched = lambda sh: lambda k, *xs: jax.vmap(lambda *ys: one_step(plan, k, sh, *ys))(*xs)  # noqa: E731

  def call(fn, labels, chunks, extras, record):
    """One leafwise call whose leaves are the chunks (``labels``): ``chunks[c]`` the inputs of c."""
    per_input = [dict(zip(labels, xs)) for xs in zip(*chunks)]
    out = tx.leafwise(fn, per_input[0], *per_input[1:], params=None if param is None else {
        name: jax.ShapeDtypeStruct(c[0].shape, param.dtype) for name, c in zip(labels, chunks)},
        reads=tuple(dict(zip(labels, xs)) for xs in zip(*extras)), scalars=record)
    return [[o[name] for o in out] for name in labels]

  if dist is not None:
    # The owner layout: the group's rows stacked, divided over the devices, run in a manual region.
    stacks = [xs[0] if n == 1 else jnp.concatenate(xs) for xs in zip(*(m.inputs for m in group))]
    extras = extra(indices, rows, dist) if extra is not None else []
    owned = [to_owners(x, dist) for x in (*stacks, *extras)]
    record = scalars(real_dtype(compute_dtype(*[x.dtype for x in (*stacks, *extras)], *(
        () if param is None else (param.dtype,))))) if callable(scalars) else scalars
    traced, rebuild = split_record(record)
    k_in = len(stacks)
    blocks = on_owners(lambda sh, *xs: call(batched(sh[0]), [label], [xs[:k_in]], [xs[k_in:]] if extras else [],
                                            None if record is None else (lambda dt: rebuild(sh[1])))[0],
                       dist, (tuple(shared), traced), *owned)
    specs = [tuple(getattr(sharding_of(x), "spec", ())) for x in first.inputs]
    results = [from_owners(b, n * rows, (None,) * (n > 1) + s[n > 1:], n > 1) for b, s in zip(blocks, specs)]
    per_member = list(zip(*(_split(r, n, rows) for r in results)))
    return [m.outputs(rs, [lambda y, x=x: place_like(x, y) for x in m.inputs]) for m, rs in zip(group, per_member)]
  # Gathered once where the matrix axes are sharded (a single matrix, or no mesh the step can see).
  backs = []
  for m in group:
    pairs = [replicate_axes(x, range(1, x.ndim)) if plan else (x, lambda y: y) for x in m.inputs]
    m.inputs = [p[0] for p in pairs]
    backs.append([p[1] for p in pairs])
  bounds = tx.execution.bounds(n, sum(x.size * x.dtype.itemsize for x in first.inputs), tx.cpu_chunks)
  labels = [label if len(bounds) == 1 else f"{label}[{a}:{b}]" for a, b in bounds]
  chunks = [[xs[0] if b - a == 1 else jnp.concatenate(xs) for xs in zip(*(m.inputs for m in group[a:b]))]
            for a, b in bounds]
  drawn = extra(indices, rows, None) if extra is not None else []
  lead = sharding_of(first.inputs[0])
  axis: tuple[Any, ...] = tuple(getattr(lead, "spec", ()))[:1]
  if drawn and axis and axis[0] is not None and jax.sharding.AxisType.Explicit in tuple(lead.mesh.axis_types):
    # A stacked weight sharded along its batch axes (explicit axes): its draws divided alike.
    drawn = [constrain(x, jax.sharding.NamedSharding(lead.mesh, jax.sharding.PartitionSpec(*axis)), False)
             for x in drawn]
  extras = [[jax.lax.slice_in_dim(x, a * rows, b * rows) for x in drawn] for a, b in bounds]
  # Chunks of one matrix (the per-parameter path among them) run the step unbatched: a stack of one
  # compiles to more than the matrix alone.
  single = rows == 1 and len(bounds) == n
  if single:
    chunks, extras = ([[x[0] for x in c] for c in cs] for cs in (chunks, extras))
  results = call((step if single else batched)(shared), labels, chunks, extras, scalars)
  results = [[o[None] for o in out] for out in results] if single else results
  per_member = [rs for (a, b), out in zip(bounds, results) for rs in zip(*(_split(r, b - a, rows) for r in out))]
  return [m.outputs(rs, back) for m, rs, back in zip(group, per_member, backs)]


def _split(x: jax.Array, n: int, rows: int) -> list[jax.Array]:
  """The ``n`` members' rows of a stacked result (``rows`` each)."""
  return [x] if n == 1 else unstack(x.reshape((n, rows, *x.shape[1:])), n)
