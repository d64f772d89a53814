"""Flat buffers of many small leaves: the layout shared by ``fuse`` and ``FlatParams``.

A model with hundreds of small leaves (biases, norms, small layers) pays per leaf, not per byte: a
kernel per leaf and per state buffer, and an array crossing the jitted step's boundary per leaf of
the parameters, the gradients and every state tree. Both ways out keep the small floating leaves of
each dtype in one flat buffer:

* ``fuse(tx)`` (``_fuse.py``) keeps the user's parameter tree and packs the gradients and
  parameters into buffers inside ``update``; its state holds the buffers.
* ``FlatParams`` (here) is the parameters themselves held as buffers: the model reads its leaves
  through ``flat.tree()`` (slices of the buffers, which XLA fuses into their consumers), the
  gradient of a ``FlatParams`` is a ``FlatParams`` (one concatenation in the backward pass), and
  any elementwise transformation runs on it as on a tree of a few vectors. Nothing crosses the
  step's boundary per leaf.

Which leaves share a buffer is ``FusedLayout.build``'s rule: floating leaves of at most
``max_leaf_size`` elements, unsharded, one buffer per dtype; every other leaf stays as it is.

The core knows nothing of ``FlatParams``: this module registers the check that refuses one to a
transformation that is not elementwise (``Transformation.init`` runs it), and extends the core's
``resolve_prefix`` to it (``masked`` and ``partition`` call this module's).
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import jax.numpy as jnp
import numpy as np

from .._core._contract import InputMismatchError
from .._core._leafwise import _path as leaf_path
from .._core._leafwise import place_like
from .._core._policy import key_path_str, promote_types
from .._core._prefix import prefix_leaves
from .._core._prefix import resolve_prefix as resolve_tree_prefix
from .._core._transformation import register_parameter_check
from .._core._tree import array_leaf, is_none, param_array
from .._core._types import Params
from ._elementwise import fusion_blocker

__all__ = [
    "DEFAULT_MAX_LEAF_SIZE", "DEFAULT_MAX_SAME_SHAPE", "FlatParams", "FusedLayout",
    "check_max_leaf_size", "check_max_same_shape",
    "contains_flat_params", "flat_params", "resolve_prefix", "unflatten_params",
]

# Leaves above this many elements stay leaves. Fusing pays per leaf (a kernel and a state array
# fewer for each moment) but costs a copy of every fused gradient and parameter into the buffer,
# and XLA's CPU backend copies a concatenation that several kernels read (the gradient read by
# both of Adam's moments) at a fraction of memory speed. Measured with adamw, 100 float32 leaves
# of n elements, fused/unfused step time on 2 cores: 0.84-0.94 at 1,024, 0.70-0.80 at 4,096, 0.85
# at 8,192, 0.96-2.1 at 16,384 and 5.4-5.6 from 65,536 up (docs/performance.md).
DEFAULT_MAX_LEAF_SIZE = 1 << 13

# Leaves of a shape and dtype that more than this many small leaves share stay leaves (None: no
# limit). XLA compiles one kernel per distinct fused computation: the identical layers of a deep
# model share theirs on the per-leaf path, but as pieces of a buffer, each at its own constant
# offset, every one gets its own kernel (tens of milliseconds of LLVM each on a CPU), so buffering
# a stack of identical layers costs more compile time than it saves (docs/performance.md, "When
# the multi-tensor paths pay", from the grid benchmark).
DEFAULT_MAX_SAME_SHAPE = 4


@jax.tree_util.register_pytree_node_class
class FusedLayout:
  """Where each parameter lives in the fused tree: static data, no arrays.

  Attributes:
    treedef: the parameters' tree structure.
    groups: ``(key, dtype name, leaf indices, leaf shapes)`` per flat buffer; ``key`` is the dtype
      name (``"float32"``), or ``"<label>/<dtype name>"`` with ``flat_params``' groups.
    singles: ``(key, leaf index)`` per leaf kept as it is; ``key`` is its tree path.
  """

  def __init__(self, treedef: Any, groups: tuple, singles: tuple):
    self.treedef = treedef
    self.groups = groups
    self.singles = singles

  def tree_flatten(self):
    return (), (self.treedef, self.groups, self.singles)

  @classmethod
  def tree_unflatten(cls, aux: tuple, children: tuple) -> "FusedLayout":
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
    return frozenset(self.buffer_keys)

  @property
  def buffer_keys(self) -> tuple:
    """The keys of the fused tree in order: the buffers (by dtype name), then the kept leaves."""
    return tuple([g[0] for g in self.groups] + [s[0] for s in self.singles])

  @classmethod
  def build(cls, params: Any, max_leaf_size: int, labels: list | None = None,
            max_same_shape: int | None = None) -> "FusedLayout":
    """The layout of ``params``: small floating leaves of one dtype (and one label) share a buffer.

    A leaf stays a leaf when it is larger than ``max_leaf_size``, not floating (an integer
    parameter, handled by the inner transformation as without fusion), sharded across devices (a
    buffer would gather it), one of more than ``max_same_shape`` small leaves of one shape and
    dtype (None: no limit), or the only small leaf of its dtype and label. ``labels`` (one per
    leaf, ``flat_params``' groups) split the buffers further: a buffer's key is its dtype name, or
    ``"<label>/<dtype name>"`` when the leaves have labels.
    """
    paths_leaves, treedef = jax.tree_util.tree_flatten_with_path(params, is_leaf=is_none)
    paths_leaves = [(path, array_leaf(leaf)) for path, leaf in paths_leaves]
    candidates = [i for i, (_, leaf) in enumerate(paths_leaves)
                  if leaf is not None and int(np.size(leaf)) <= max_leaf_size
                  and jnp.issubdtype(leaf.dtype, jnp.inexact) and not _partitioned(leaf)]
    if max_same_shape is not None:
      # Identical layers share their compiled kernels on the per-leaf path; as pieces of a buffer
      # (each at its own offset) every one needs its own (REPEATED_SHAPE_NOTE).
      count: dict[tuple, int] = {}
      for i in candidates:
        key = _shape_key(paths_leaves[i][1])
        count[key] = count.get(key, 0) + 1
      candidates = [i for i in candidates if count[_shape_key(paths_leaves[i][1])] <= max_same_shape]
    chosen = set(candidates)
    by_key: dict[str, tuple[str, list[int]]] = {}
    singles = []
    for i, (path, leaf) in enumerate(paths_leaves):
      if i in chosen:
        name = np.dtype(leaf.dtype).name
        key = name if labels is None else f"{labels[i]}/{name}"
        by_key.setdefault(key, (name, []))[1].append(i)
      else:
        singles.append(i)
    groups = []
    for key, (name, idx) in sorted(by_key.items()):
      if len(idx) == 1:
        singles.extend(idx)
        continue
      shapes = tuple(tuple(np.shape(paths_leaves[i][1])) for i in idx)
      groups.append((key, name, tuple(idx), shapes))
    singles_keyed = tuple((key_path_str(paths_leaves[i][0]), i) for i in sorted(singles))
    return cls(treedef, tuple(groups), singles_keyed)

  def _leaves(self, owner: str, tree: Any, what: str) -> tuple[list, Any]:
    """The leaves of ``tree`` and its structure, which must have the parameters' leaves.

    The structure may differ in wrappers around single arrays: Flax's NNX ``Optimizer`` calls
    ``init`` on a state of ``Param`` variables and ``update`` on the plain arrays.
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree, is_leaf=is_none)
    if len(leaves) != self.treedef.num_leaves:
      raise InputMismatchError(
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
          raise InputMismatchError(
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


def _shape_key(leaf: Any) -> tuple:
  return (tuple(np.shape(leaf)), np.dtype(leaf.dtype).name)


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


@jax.tree_util.register_pytree_with_keys_class
class FlatParams:
  """Parameters held as one flat buffer per dtype (the small leaves) and the other leaves as they are.

  Made by ``flat_params(params)``; ``flat.tree()`` gives the parameters in their own structure.
  ``FlatParams`` is a pytree whose leaves are the buffers (keyed by dtype name, ``"float32"``) and
  the kept leaves (keyed by tree path), with the layout as static data, so:

  * ``jax.grad(lambda f: loss(f.tree(), batch))(flat)`` is a ``FlatParams`` of gradients: the
    backward pass concatenates the leaves' gradients once, into buffers laid out as the parameters;
  * an elementwise transformation's ``init(flat)`` builds state of the same shape (``state[0].mu``
    is a ``FlatParams`` of moments; ``mu.tree()["w"]`` reads one leaf's), and ``update`` and
    ``apply_updates`` run on a handful of arrays instead of one per leaf and per moment;
  * ``jax.jit``, ``lax.scan``, ``eqx.partition`` and ``jax.tree_util`` see a few leaves and a
    structure that depends only on the layout.

  Transformations that are not elementwise (Adafactor, trust ratios, matrix optimizers, line
  searches: ``Transformation.elementwise``) refuse a ``FlatParams`` at ``init``, naming the piece:
  on a buffer they would compute something else.

  Attributes:
    layout: the static ``FusedLayout`` (which leaf lives where).
    buffers: dict from key to array: the buffers, then the kept leaves, in ``layout.buffer_keys``
      order.
  """

  __slots__ = ("layout", "buffers")

  def __init__(self, layout: FusedLayout, buffers: dict):
    self.layout = layout
    self.buffers = buffers

  def tree_flatten_with_keys(self):
    return [(jax.tree_util.DictKey(key), self.buffers[key]) for key in self.layout.buffer_keys], self.layout

  def tree_flatten(self):
    return [self.buffers[key] for key in self.layout.buffer_keys], self.layout

  @classmethod
  def tree_unflatten(cls, layout: FusedLayout, children: Any) -> "FlatParams":
    return cls(layout, dict(zip(layout.buffer_keys, children)))

  def __getitem__(self, key: str) -> Any:
    return self.buffers[key]

  def __repr__(self) -> str:
    parts = [f"{key}: {_describe(self.buffers[key])}" for key, *_ in self.layout.groups]
    kept = len(self.layout.singles)
    return f"FlatParams({', '.join(parts) or 'no buffers'}; {kept} leaves kept)"

  def tree(self) -> Any:
    """The parameters in their own structure, each small leaf a piece of its buffer.

    Under ``jax.jit`` the pieces are slices that XLA fuses into the code that reads them (no copy),
    and their gradient is one concatenation. Works on any ``FlatParams`` that holds arrays: the
    parameters, their gradients, or a state tree that mirrors them (``state[0].mu.tree()``), whose
    buffers may have another dtype than the parameters'.

    Returns:
      The tree ``flat_params`` was given (same structure, shapes; each leaf's dtype is its
      buffer's). A scalar in place of a buffer (a statistic per buffer, such as ``zero_nans``'
      found-NaN flag) or an empty node (the ``MaskedNode`` of a buffer a mask leaves out) is given
      to each leaf of that buffer.

    Example:
      >>> import jax.numpy as jnp, steadax
      >>> flat = steadax.flat_params({"b": jnp.zeros(2), "s": jnp.ones(3)})
      >>> flat.tree()["s"]
      Array([1., 1., 1.], dtype=float32)
    """
    layout = self.layout
    out: list = [None] * layout.treedef.num_leaves
    for key, _, idx, shapes in layout.groups:
      vector = self.buffers[key]
      if (hasattr(vector, "dtype") and np.ndim(vector) == 0) or (
          not hasattr(vector, "dtype") and not jax.tree_util.tree_leaves(vector)):
        # A statistic per buffer (zero_nans' found-NaN flag), or an empty node (the MaskedNode of
        # a buffer that a mask or partition leaves out): it holds for each leaf of the buffer.
        for i in idx:
          out[i] = vector
        continue
      if not hasattr(vector, "dtype") or np.ndim(vector) != 1:
        raise TypeError(
            f"FlatParams.tree: the buffer {key!r} is {type(vector).__name__} "
            f"{np.shape(vector) if hasattr(vector, 'shape') else ''}, not a flat array; only a "
            "FlatParams holding arrays (parameters, gradients, state) can be unflattened.")
      sizes = [int(np.prod(shape)) for shape in shapes]
      if int(np.shape(vector)[0]) != sum(sizes):
        raise ValueError(f"FlatParams.tree: the buffer {key!r} has {np.shape(vector)[0]} elements; "
                         f"the layout places {sum(sizes)} there.")
      # One split (its transpose is one concatenation), not a slice per leaf: the gradient of a
      # slice is a buffer-sized pad, and summing one per leaf would cost leaves x buffer size.
      pieces = jnp.split(vector, np.cumsum(sizes)[:-1].tolist()) if len(sizes) > 1 else [vector]
      for i, shape, piece in zip(idx, shapes, pieces):
        out[i] = piece.reshape(shape)
    for key, i in layout.singles:
      out[i] = self.buffers[key]
    return layout.treedef.unflatten(out)

  def leaf_view(self) -> Any:
    """The parameters' structure with a ``jax.ShapeDtypeStruct`` for each leaf in a buffer (the
    kept leaves as they are): what a mask or label function needs, without splitting a buffer."""
    layout = self.layout
    out: list = [None] * layout.treedef.num_leaves
    for key, _, idx, shapes in layout.groups:
      dtype = getattr(self.buffers[key], "dtype", None)
      for i, shape in zip(idx, shapes):
        out[i] = jax.ShapeDtypeStruct(shape, dtype) if dtype is not None else None
    for key, i in layout.singles:
      out[i] = self.buffers[key]
    return layout.treedef.unflatten(out)

  def per_buffer(self, owner: str, argname: str, values: list) -> "FlatParams":
    """One value per leaf (in the parameters' leaf order) as one value per buffer.

    Args:
      owner: the transformation, for the error.
      argname: what the values are (``"mask"``, ``"param_labels"``).
      values: the value of each leaf (a mask's booleans, partition's labels).

    Returns:
      A ``FlatParams`` with this layout holding each buffer's value.

    Raises:
      ValueError: two leaves of one buffer have different values (naming both and the buffer).
    """
    layout = self.layout
    out = {}
    for key, _, idx, _ in layout.groups:
      first = values[idx[0]]
      for i in idx[1:]:
        if values[i] != first:
          raise ValueError(
              f"{owner}: the {argname} gives {first!r} to {leaf_path(layout.treedef, idx[0])} and "
              f"{values[i]!r} to {leaf_path(layout.treedef, i)}, which share the flat buffer "
              f"{key!r}. Flatten with `steadax.flat_params(params, groups=...)` (the same {argname}) "
              "so that each buffer holds leaves of one group.")
      out[key] = first
    for key, i in layout.singles:
      out[key] = values[i]
    return FlatParams(layout, out)

  def repack(self, tree: Any) -> "FlatParams":
    """``tree`` (in the parameters' structure) packed into this layout.

    For example a moment of an unflattened run or an Optax checkpoint, to continue with flat
    parameters: ``jax.tree.map(flat.repack, ...)`` over the parts that mirror the parameters.

    Args:
      tree: a tree with the parameters' structure and shapes.

    Returns:
      A ``FlatParams`` with this layout holding ``tree``'s values.

    Example:
      >>> import jax.numpy as jnp, steadax
      >>> flat = steadax.flat_params({"b": jnp.zeros(2), "s": jnp.zeros(3)})
      >>> flat.repack({"b": jnp.ones(2), "s": jnp.full(3, 2.0)})["float32"]
      Array([1., 1., 2., 2., 2.], dtype=float32)
    """
    tree = jax.tree_util.tree_map(param_array, tree, is_leaf=is_none)
    return FlatParams(self.layout, self.layout.pack("FlatParams.repack", tree, "tree"))


def _describe(x: Any) -> str:
  if hasattr(x, "dtype") and hasattr(x, "shape"):
    return f"{np.dtype(x.dtype).name}[{', '.join(map(str, x.shape))}]"
  return type(x).__name__


def flat_params(params: Params, *, max_leaf_size: int = DEFAULT_MAX_LEAF_SIZE,
                groups: Params | Callable[[Params], Params] | None = None,
                max_same_shape: int | None = DEFAULT_MAX_SAME_SHAPE) -> FlatParams:
  """Parameters as one flat buffer per dtype for their small leaves: the fastest many-leaf step.

  The small floating leaves of each dtype (at most ``max_leaf_size`` elements, not sharded across
  devices, not one of more than ``max_same_shape`` leaves of one shape) are concatenated into one
  vector; larger, integer and sharded leaves are kept as they are. Keep the result as the parameters of the training loop and read the model's leaves with
  ``flat.tree()`` inside the loss: the gradient is then a ``FlatParams`` too, and an elementwise
  optimizer's ``update`` and ``apply_updates`` run on a few arrays, with a few state arrays,
  whatever the number of leaves (``docs/performance.md`` has the measurements). Results equal the
  per-leaf run's up to rounding (XLA may order a leaf's arithmetic differently inside a larger
  kernel) and up to summation order for whole-tree reductions (a global norm).

  Only elementwise transformations (``Transformation.elementwise``: sgd, adam, adamw, lion,
  rmsprop, clipping by value or global norm, weight decay, schedules, and wrappers of those such as
  ``MultiSteps``, ``apply_if_finite``, ``inject_hyperparams``) accept a ``FlatParams``; the others
  raise at ``init`` naming the piece. ``masked`` (so ``adamw(mask=...)``) and ``partition`` accept
  one when every buffer holds leaves of one mask value or label: flatten with ``groups`` set to
  the same mask or labels, and give them the same mask or labels as for the parameters' tree (a
  function of the parameters is called on their structure, each leaf in a buffer a
  ``jax.ShapeDtypeStruct``).

  Args:
    params: the parameter tree.
    max_leaf_size: leaves with more elements stay leaves (8,192 by default: larger leaves already
      run at memory speed, and the concatenation of their gradients would cost more than it saves).
      0 keeps every leaf.
    groups: None, or labels that split the buffers: leaves with different labels never share one
      (a buffer per label and dtype, keyed ``"<label>/<dtype>"``). A tree of hashable labels with
      the parameters' structure or a prefix of it, or a function of the parameters returning one,
      as ``partition``'s labels or a ``masked`` mask.
    max_same_shape: when more than this many small leaves share a shape and dtype (the layers of
      a deep stack), those leaves stay leaves (4 by default; None buffers them all). XLA compiles
      identical layers once on the per-leaf path, but every piece of a buffer at its own offset
      once each: on a 2-core CPU, buffering the 100 leaves of a 50-layer MLP made the first call
      of its training step 1.8-2.9x the per-leaf path's, for training steps of 0.2-1.0x its time
      (``docs/performance.md``, "The shape grid"). Set None where faster steps are worth a longer
      first compilation.

  Returns:
    A ``FlatParams``; ``unflatten_params`` turns it (and any ``FlatParams`` inside a state) back.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> params = {"bias": jnp.zeros(2), "scale": jnp.ones(3), "w": jnp.ones((2, 3))}
    >>> flat = steadax.flat_params(params)
    >>> flat
    FlatParams(float32: float32[11]; 0 leaves kept)
    >>> def loss(p):
    ...   return jnp.sum((p["w"] @ p["scale"] + p["bias"]) ** 2)
    >>> tx = steadax.adam(0.1)
    >>> state = tx.init(flat)
    >>> grads = jax.grad(lambda f: loss(f.tree()))(flat)
    >>> updates, state = tx.update(grads, state, flat)
    >>> flat = steadax.apply_updates(flat, updates)
    >>> flat.tree()["bias"]
    Array([-0.1, -0.1], dtype=float32)

    With groups, for AdamW without weight decay on the vectors (biases, norms' scales):

    >>> decay = lambda p: jax.tree.map(lambda x: x.ndim > 1, p)
    >>> flat = steadax.flat_params(params, groups=decay)
    >>> flat
    FlatParams(False/float32: float32[5]; 1 leaves kept)
    >>> tx = steadax.adamw(0.1, weight_decay=0.1, mask=decay)
    >>> updates, _ = tx.update(jax.grad(lambda f: loss(f.tree()))(flat), tx.init(flat), flat)

  References:
    PyTorch FSDP's ``FlatParameter``; NVIDIA Apex, "multi_tensor_apply".
  """
  if isinstance(params, FlatParams):
    return params
  check_max_leaf_size("flat_params", max_leaf_size)
  check_max_same_shape("flat_params", max_same_shape)
  params = jax.tree_util.tree_map(param_array, params, is_leaf=is_none)
  nested = [x for x in jax.tree_util.tree_leaves(params, is_leaf=lambda x: isinstance(x, FlatParams))
            if isinstance(x, FlatParams)]
  if nested:
    raise ValueError("flat_params: the parameters already hold a FlatParams; flatten the tree once.")
  labels = None
  if groups is not None:
    labels = prefix_leaves("flat_params", "groups", groups, params)
    for path, label in zip(jax.tree_util.tree_flatten_with_path(params, is_leaf=is_none)[0], labels):
      try:
        hash(label)
      except TypeError:
        raise TypeError(f"flat_params: the group of {key_path_str(path[0])} is {label!r}, which is "
                        "not hashable; groups are labels (strings, numbers, booleans).") from None
  layout = FusedLayout.build(params, int(max_leaf_size), labels,
                            None if max_same_shape is None else int(max_same_shape))
  return FlatParams(layout, layout.pack("flat_params", params, "parameters"))


def check_max_same_shape(owner: str, value: Any) -> None:
  """``value`` must be None or a positive integer (``fuse``'s and ``flat_params``' ``max_same_shape``)."""
  if value is None:
    return
  if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
    raise ValueError(f"{owner}: max_same_shape must be None or a positive integer, got {value!r}.")


def check_max_leaf_size(owner: str, value: Any) -> None:
  """``value`` must be a non-negative integer (``fuse``'s and ``flat_params``' ``max_leaf_size``)."""
  if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
    raise ValueError(f"{owner}: max_leaf_size must be a non-negative integer, got {value!r}.")


def is_flat_params(x: Any) -> bool:
  return isinstance(x, FlatParams)


def contains_flat_params(tree: Any) -> bool:
  """True when ``tree`` is or holds a ``FlatParams`` node."""
  return any(isinstance(x, FlatParams) for x in jax.tree_util.tree_leaves(tree, is_leaf=is_flat_params))


def unflatten_params(tree: Params) -> Any:
  """``tree`` with every ``FlatParams`` in it replaced by ``.tree()``: parameters or a whole state.

  The state of a transformation initialised on ``FlatParams`` holds a ``FlatParams`` wherever the
  per-leaf state holds a tree mirroring the parameters (``mu``, ``nu``, ...); unflattened, it has
  the structure, shapes and dtypes ``tx.init(params)`` gives, for inspection or an Optax-layout
  checkpoint.

  Args:
    tree: any tree (a ``FlatParams``, a state, ...).

  Returns:
    The same tree with the parameters' structure in place of each ``FlatParams``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> flat = steadax.flat_params({"b": jnp.zeros(2), "s": jnp.zeros(3)})
    >>> state = steadax.adam(0.1).init(flat)
    >>> steadax.unflatten_params(state)[0].mu["s"].shape
    (3,)
  """
  return jax.tree_util.tree_map(lambda x: x.tree() if isinstance(x, FlatParams) else x, tree,
                                is_leaf=is_flat_params)


def _refuse_unless_elementwise(tx: Any, params: Any) -> None:
  """``Transformation.init``'s check (registered below): FlatParams only for elementwise ones."""
  if not contains_flat_params(params):
    return
  reason = fusion_blocker(tx, flat_params=True)
  if reason is not None:
    raise ValueError(
        f"{tx.owner}: cannot run on FlatParams: {reason}. Its buffers concatenate many "
        "leaves, so only transformations whose update is elementwise or reduces over the whole "
        "tree give the per-leaf result. Use the parameters' tree (`flat.tree()`) with this "
        "transformation.")


register_parameter_check(_refuse_unless_elementwise)


def resolve_prefix(owner: str, argname: str, spec: Any, tree: Any) -> Any:
  """The core's ``resolve_prefix`` (a mask or labels aligned with the parameters), on FlatParams too.

  On a ``FlatParams``, the mask or labels are those of the parameters' tree (a function is called
  on ``tree.leaf_view()``), one value per buffer: every leaf of a buffer must get the same one
  (``flat_params(params, groups=...)`` makes that so). A ``FlatParams`` of values with the same
  layout (``partition``'s masks) is taken as it is.

  Args:
    owner: the transformation, for the errors.
    argname: what ``spec`` is (``"mask"``, ``"param_labels"``).
    spec: a prefix tree of the parameters, or a function of them returning one.
    tree: the parameters (or updates): a tree, or a ``FlatParams``.

  Returns:
    ``spec`` aligned with ``tree``; on a ``FlatParams``, a ``FlatParams`` of one value per buffer.

  Raises:
    ValueError: where the keys differ, two leaves of one buffer get different values, or a
      ``FlatParams`` sits below the root of ``tree``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> flat = steadax.flat_params({"b": jnp.zeros(2), "s": jnp.zeros(3)})
    >>> resolve_prefix("masked", "mask", True, flat)
    FlatParams(float32: bool; 0 leaves kept)
  """
  if isinstance(tree, FlatParams):
    if isinstance(spec, FlatParams):
      if spec.layout != tree.layout:
        raise ValueError(f"{owner}: the {argname} is a FlatParams of another layout than the "
                         "parameters'.")
      return spec
    return tree.per_buffer(owner, argname, prefix_leaves(owner, argname, spec, tree.leaf_view()))
  if contains_flat_params(tree):
    # Below the root, the mask would be matched against the buffers themselves (a function that
    # looks at each leaf's ndim would see vectors): refused rather than silently wrong.
    raise ValueError(f"{owner}: the parameters hold a FlatParams below their root; a {argname} "
                     "works on FlatParams given as the parameters themselves.")
  return resolve_tree_prefix(owner, argname, spec, tree)
