"""fuse: run an elementwise transformation on a few flat buffers instead of leaf by leaf.

A model with hundreds of small leaves (biases, norms, small layers) runs an optimizer as hundreds of
tiny kernels per state buffer, and passes hundreds of state arrays in and out of the jitted step. On
a CPU (and for launch-bound GPU steps) that per-array cost, not the bytes, sets the step time.
``fuse(tx)`` keeps the small leaves of each dtype in one flat buffer: the inner transformation sees
a tree of a few vectors (one per dtype) plus the large leaves, kept as they are, so its maths runs
as a handful of kernels and its state is a handful of arrays.

Only transformations that give the same result on concatenated leaves may be fused: those whose
update is elementwise or reduces over the whole tree (``Transformation.elementwise``). A factored
second moment (Adafactor), a per-leaf norm (LARS, block RMS clipping), a mask or a matrix optimizer
(Muon, Shampoo) is refused at construction, naming the piece.

Measured on a 2-core CPU (docs/performance.md): AdamW over 400 float32 leaves of 64..4096
elements ran at 0.75-0.90 of Optax's step time (per leaf: 0.86-1.07) and its first step compiled
3-4x faster; around 100 small leaves fusing does not pay, and large leaves (which already run at
memory bandwidth) are left as leaves.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import jax.numpy as jnp
import numpy as np

from .._core._base import GradientTransformation, Transformation, as_inner, fusion_blocker
from .._core._leafwise import _path as leaf_path
from .._core._leafwise import place_like
from .._core._module import child_field, static_field
from .._core._policy import key_path_str, promote_types
from .._core._roles import INNER, OTHER, state_roles
from .._core._tree import array_leaf, is_none, tree_map

__all__ = ["fuse", "Fused", "FusedState", "FusedLayout"]

# Leaves above this many elements stay leaves. Fusing pays per leaf (a kernel and a state array
# fewer for each moment) but costs a copy of every fused gradient and parameter into the buffer,
# and XLA's CPU backend copies a concatenation that several kernels read (the gradient read by
# both of Adam's moments) at a fraction of memory speed. Measured with adamw, 100 float32 leaves
# of n elements, fused/unfused step time on 2 cores: 0.84-0.94 at 1,024, 0.70-0.80 at 4,096, 0.85
# at 8,192, 0.96-2.1 at 16,384 and 5.4-5.6 from 65,536 up (docs/performance.md).
DEFAULT_MAX_LEAF_SIZE = 1 << 13


@jax.tree_util.register_pytree_node_class
class FusedLayout:
  """Where each parameter lives in the fused tree: static data, no arrays.

  Attributes:
    treedef: the parameters' tree structure.
    groups: ``(key, dtype name, leaf indices, leaf shapes)`` per flat buffer; ``key`` is the dtype
      name (``"float32"``).
    singles: ``(key, leaf index)`` per leaf kept as it is; ``key`` is its tree path.
  """

  def __init__(self, treedef: Any, groups: tuple, singles: tuple):
    self.treedef = treedef
    self.groups = groups
    self.singles = singles

  def tree_flatten(self):
    return (), (self.treedef, self.groups, self.singles)

  @classmethod
  def tree_unflatten(cls, aux: tuple, children: tuple) -> FusedLayout:
    del children
    return cls(*aux)

  def _aux(self) -> tuple:
    return (self.treedef, self.groups, self.singles)

  def __eq__(self, other: object) -> bool:
    return isinstance(other, FusedLayout) and self._aux() == other._aux()

  def __hash__(self) -> int:
    return hash(self._aux())

  def __repr__(self) -> str:
    parts = [f"{key}: {len(idx)} leaves, {sum(int(np.prod(s)) for s in shapes):,} elements"
             for key, _, idx, shapes in self.groups]
    return f"FusedLayout({'; '.join(parts) or 'no buffers'}; {len(self.singles)} leaves kept)"

  @property
  def keys(self) -> frozenset:
    return frozenset([g[0] for g in self.groups] + [s[0] for s in self.singles])

  @classmethod
  def build(cls, params: Any, max_leaf_size: int) -> FusedLayout:
    """The layout of ``params``: small floating leaves of one dtype share a buffer.

    A leaf stays a leaf when it is larger than ``max_leaf_size``, not floating (an integer
    parameter, handled by the inner transformation as without fusion), sharded across devices (a
    buffer would gather it), or the only small leaf of its dtype.
    """
    paths_leaves, treedef = jax.tree_util.tree_flatten_with_path(params, is_leaf=is_none)
    paths_leaves = [(path, array_leaf(leaf)) for path, leaf in paths_leaves]
    by_dtype: dict[str, list[int]] = {}
    singles = []
    for i, (path, leaf) in enumerate(paths_leaves):
      small = leaf is not None and int(np.size(leaf)) <= max_leaf_size
      if small and leaf is not None and jnp.issubdtype(leaf.dtype, jnp.inexact) and not _partitioned(leaf):
        by_dtype.setdefault(np.dtype(leaf.dtype).name, []).append(i)
      else:
        singles.append(i)
    groups = []
    for name, idx in sorted(by_dtype.items()):
      if len(idx) == 1:
        singles.extend(idx)
        continue
      shapes = tuple(tuple(np.shape(paths_leaves[i][1])) for i in idx)
      groups.append((name, name, tuple(idx), shapes))
    singles_keyed = tuple((key_path_str(paths_leaves[i][0]), i) for i in sorted(singles))
    return cls(treedef, tuple(groups), singles_keyed)

  def _leaves(self, owner: str, tree: Any, what: str) -> tuple[list, Any]:
    """The leaves of ``tree`` and its structure, which must have the parameters' leaves.

    The structure may differ in wrappers around single arrays: Flax's NNX ``Optimizer`` calls
    ``init`` on a state of ``Param`` variables and ``update`` on the plain arrays.
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree, is_leaf=is_none)
    if len(leaves) != self.treedef.num_leaves:
      raise ValueError(
          f"{owner}: the {what} do not have the tree structure the fused state was built for: "
          f"{len(leaves)} leaves, expected {self.treedef.num_leaves} ({self.treedef})."
      )
    return [array_leaf(x) for x in leaves], treedef

  def pack(self, owner: str, tree: Any, what: str) -> dict:
    """``tree`` (with the parameters' structure) as the fused tree the inner transformation sees."""
    leaves, _ = self._leaves(owner, tree, what)
    packed = {}
    for key, _, idx, shapes in self.groups:
      parts = []
      for i, shape in zip(idx, shapes):
        leaf = leaves[i]
        if leaf is None or np.shape(leaf) != shape or not jnp.issubdtype(leaf.dtype, jnp.inexact):
          got = "None" if leaf is None else f"{np.dtype(leaf.dtype).name}{list(np.shape(leaf))}"
          raise ValueError(
              f"{owner}: the {what} at {leaf_path(self.treedef, i)} is {got}; the fused buffer '{key}' holds a "
              f"floating leaf of shape {list(shape)} there."
          )
        parts.append(leaf)
      dtype = promote_types(*[p.dtype for p in parts])
      packed[key] = jnp.concatenate([jnp.ravel(p).astype(dtype) for p in parts])
    for key, i in self.singles:
      packed[key] = leaves[i]
    return packed

  def unpack(self, packed: dict, like: Any = None, dtypes: Any = None) -> Any:
    """The inverse of ``pack``: a tree with the structure of ``like`` (else the parameters').

    Each piece of a buffer is cast to the dtype of the matching leaf of ``dtypes`` (else of
    ``like``) when one is given.
    """
    out: list = [None] * self.treedef.num_leaves
    like_leaves, treedef = self._leaves("fuse", like, "tree") if like is not None else (None, self.treedef)
    if dtypes is not None:
      like_leaves = self._leaves("fuse", dtypes, "tree")[0]
    for key, _, idx, shapes in self.groups:
      vector, start = packed[key], 0
      for i, shape in zip(idx, shapes):
        size = int(np.prod(shape))
        piece = vector[start:start + size].reshape(shape)
        if like_leaves is not None and like_leaves[i] is not None:
          # A leaf that went into a buffer unsharded as far as tracing could tell (automatic mesh
          # axes under jit) still comes back in its own layout.
          piece = place_like(like_leaves[i], piece.astype(like_leaves[i].dtype))
        out[i] = piece
        start += size
    for key, i in self.singles:
      out[i] = packed[key]
    return treedef.unflatten(out)

  def is_packed(self, x: Any) -> bool:
    return isinstance(x, dict) and frozenset(x.keys()) == self.keys


def _partitioned(leaf: Any) -> bool:
  """True when ``leaf`` is split across devices (known for concrete arrays and explicit meshes)."""
  if isinstance(leaf, jax.core.Tracer):
    try:
      spec = jax.typeof(leaf).sharding.spec
    except Exception:  # pragma: no cover - no sharding information while tracing
      return False
    return any(axis is not None for axis in spec)
  sharding = getattr(leaf, "sharding", None)
  return sharding is not None and not sharding.is_fully_replicated


@state_roles(inner_state=INNER, layout=OTHER)
class FusedState(NamedTuple):
  """State of ``fuse``.

  Attributes:
    inner_state: the inner transformation's state over the fused tree (a dict with one flat
      buffer per dtype and the leaves kept as they are); ``Fused.unfused_state`` gives it back in
      the parameters' structure.
    layout: the static ``FusedLayout`` (no arrays).
  """

  inner_state: Any
  layout: FusedLayout


class Fused(Transformation):
  """The transformation ``fuse`` returns."""

  name = "fuse"
  requires_float = False  # the inner transformation checks its parameters
  inner: Any = child_field()
  max_leaf_size: int = static_field(DEFAULT_MAX_LEAF_SIZE)

  def __post_init__(self):
    if not isinstance(self.max_leaf_size, (int, np.integer)) or self.max_leaf_size < 0:
      raise ValueError(f"fuse: max_leaf_size must be a non-negative integer, got {self.max_leaf_size!r}.")
    reason = fusion_blocker(self.inner)
    if reason is not None:
      raise ValueError(
          f"fuse: cannot fuse {reason}. Only transformations whose update is elementwise or "
          "reduces over the whole tree give the same result on concatenated leaves; fuse the "
          "elementwise part (e.g. `partition` with fuse(adamw) for vectors and the matrix "
          "optimizer for matrices), or run it unfused."
      )

  def init_fn(self, params):
    layout = FusedLayout.build(params, int(self.max_leaf_size))
    return FusedState(self.inner.init(layout.pack(self.owner, params, "parameters")), layout)

  def update_fn(self, updates, state, params=None, **extra_args):
    layout = state.layout
    if not isinstance(layout, FusedLayout):
      raise TypeError(f"{self.owner}: expected a FusedState from fuse(...).init, got {type(state).__name__}.")
    packed_params = None if params is None else layout.pack(self.owner, params, "parameters")
    packed, inner_state = self.inner.update(
        layout.pack(self.owner, updates, "updates"), state.inner_state, packed_params, **extra_args)
    return layout.unpack(packed, like=updates, dtypes=params), FusedState(inner_state, layout)

  def unfused_state(self, state: FusedState) -> Any:
    """The inner state in the parameters' structure (every flat buffer split into its leaves).

    It is the state ``self.inner.init(params)`` would have built: same structure, shapes and
    dtypes (useful to inspect ``mu['w']`` or to save a checkpoint an unfused run can load).

    Args:
      state: a ``FusedState``.

    Returns:
      The inner transformation's state, unfused.
    """
    layout = state.layout
    return jax.tree_util.tree_map(
        lambda x: layout.unpack(x) if layout.is_packed(x) else x, state.inner_state,
        is_leaf=layout.is_packed)

  def fused_state(self, inner_state: Any, params: Any) -> FusedState:
    """The inverse of ``unfused_state``: fuse a state of ``self.inner`` built without fusion.

    Args:
      inner_state: a state of ``self.inner`` for ``params`` (e.g. restored from an unfused run).
      params: the parameters (for the layout; only shapes, dtypes and shardings are read).

    Returns:
      The ``FusedState`` ``self.init(params)`` would have built, holding ``inner_state``'s values.
    """
    params = tree_map(array_leaf, params)
    layout = FusedLayout.build(params, int(self.max_leaf_size))
    shapes = [np.shape(x) for x in layout.treedef.flatten_up_to(params)]

    def mirrors_params(x: Any) -> bool:
      if jax.tree_util.tree_structure(x) != layout.treedef:
        return False
      return [np.shape(l) for l in jax.tree_util.tree_leaves(x)] == shapes

    inner = jax.tree_util.tree_map(
        lambda x: layout.pack(self.owner, x, "state") if mirrors_params(x) else x, inner_state,
        is_leaf=mirrors_params)
    return FusedState(inner, layout)


def fuse(inner: GradientTransformation, *, max_leaf_size: int = DEFAULT_MAX_LEAF_SIZE) -> Fused:
  """Runs an elementwise transformation on one flat buffer per dtype instead of leaf by leaf.

  The small floating leaves of each dtype (at most ``max_leaf_size`` elements, not sharded across
  devices) are concatenated into one vector; ``inner`` runs on a dict holding those vectors (keyed
  by dtype name) and the other leaves (keyed by tree path), and its updates are split back into the
  parameters' structure, each in its parameter's dtype. The state keeps the buffers, so a step
  passes a few state arrays instead of one per leaf and per moment, and the optimizer's maths
  compiles to a few kernels. Results equal the unfused transformation's up to rounding: XLA may
  order a leaf's arithmetic differently inside a larger kernel (a unit in the last place at most in
  the tests), and whole-tree reductions (a global norm) sum in another order.

  ``inner`` must be elementwise (``Transformation.elementwise``): the standard optimizers (sgd,
  adam, adamw, lion, rmsprop, adagrad, ...), clipping by value or global norm, weight decay without
  a mask, schedules, ``inject_hyperparams``, ``MultiSteps``, ``apply_if_finite``, lookahead and
  schedule-free wrappers. Adafactor, masks, partitions, matrix optimizers and line searches are
  refused with the piece named.

  Args:
    inner: the transformation to run fused.
    max_leaf_size: leaves with more elements stay leaves (8,192 by default: above about 16k
      elements the copy into a buffer costs more than the kernels it saves). 0 fuses nothing.

  Returns:
    A transformation whose state is ``FusedState(inner_state, layout)``; ``tx.unfused_state(state)``
    gives the inner state in the parameters' structure and ``tx.fused_state(s, params)`` converts
    back.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> params = {"b1": jnp.zeros(3), "b2": jnp.zeros(2), "w": jnp.zeros((4, 4))}
    >>> tx = steadax.fuse(steadax.adam(0.1))
    >>> state = tx.init(params)
    >>> state.inner_state[0].mu["float32"].shape  # the three leaves in one buffer
    (21,)
    >>> updates, state = tx.update(params, state, params)
    >>> tx.unfused_state(state)[0].mu["w"].shape
    (4, 4)

  References:
    NVIDIA Apex, "multi_tensor_apply" (fused optimizers over lists of tensors).
    PyTorch, ``torch.optim.AdamW(foreach=True)`` / ``fused=True``.
  """
  return Fused(as_inner(inner, "fuse", "inner"), max_leaf_size)
