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

from typing import Any, NamedTuple

import jax
import numpy as np

from .._core._adapters import as_inner
from .._core._docs import shared_args
from .._core._interface import GradientTransformation
from .._core._module import child_field, static_field
from .._core._roles import INNER, OTHER, state_roles
from .._core._transformation import Transformation
from .._core._tree import array_leaf, tree_map
from .._core._types import OptState
from ._elementwise import fusion_blocker
from ._flat import (
    DEFAULT_MAX_LEAF_SIZE,
    DEFAULT_MAX_SAME_SHAPE,
    FusedLayout,
    check_max_leaf_size,
    check_max_same_shape,
)

__all__ = ["fuse", "Fused", "FusedState", "FusedLayout", "DEFAULT_MAX_LEAF_SIZE"]

@state_roles(inner_state=INNER, layout=OTHER)
class FusedState(NamedTuple):
  """State of ``fuse``.

  Attributes:
    inner_state: the inner transformation's state over the fused tree (a dict with one flat
      buffer per dtype and the leaves kept as they are); ``Fused.unfused_state`` gives it back in
      the parameters' structure.
    layout: the static ``FusedLayout`` (no arrays).
  """

  inner_state: OptState
  layout: FusedLayout


class Fused(Transformation):
  """The transformation ``fuse`` returns.

  Attributes:
    inner: the elementwise transformation run on the flat buffers.
    max_leaf_size: leaves larger than this many elements stay separate (not copied into a buffer).
    max_same_shape: leaves of a shape and dtype shared by more small leaves than this stay
      separate (None: no limit).
  """

  name = "fuse"
  requires_float = False  # the inner transformation checks its parameters
  elementwise = "children"  # as elementwise as what it fuses (so it accepts FlatParams too)
  inner: GradientTransformation = child_field()
  max_leaf_size: int = static_field(DEFAULT_MAX_LEAF_SIZE)
  max_same_shape: int | None = static_field(DEFAULT_MAX_SAME_SHAPE)

  def __post_init__(self):
    check_max_leaf_size("fuse", self.max_leaf_size)
    check_max_same_shape("fuse", self.max_same_shape)
    reason = fusion_blocker(self.inner)
    if reason is not None:
      raise ValueError(
          f"fuse: cannot fuse {reason}. Only transformations whose update is elementwise or "
          "reduces over the whole tree give the same result on concatenated leaves; fuse the "
          "elementwise part (e.g. `partition` with fuse(adamw) for vectors and the matrix "
          "optimizer for matrices), or run it unfused."
      )

  def init_fn(self, params):
    layout = self._layout(params)
    return FusedState(self.inner.init(layout.pack(self.owner, params, "parameters")), layout)

  def _layout(self, params: Any) -> FusedLayout:
    limit = self.max_same_shape
    return FusedLayout.build(params, int(self.max_leaf_size),
                             max_same_shape=None if limit is None else int(limit))

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
    layout = self._layout(params)
    shapes = [np.shape(x) for x in layout.treedef.flatten_up_to(params)]

    def mirrors_params(x: Any) -> bool:
      if jax.tree_util.tree_structure(x) != layout.treedef:
        return False
      return [np.shape(l) for l in jax.tree_util.tree_leaves(x)] == shapes

    inner = jax.tree_util.tree_map(
        lambda x: layout.pack(self.owner, x, "state") if mirrors_params(x) else x, inner_state,
        is_leaf=mirrors_params)
    return FusedState(inner, layout)


@shared_args
def fuse(inner: GradientTransformation, *, max_leaf_size: int = DEFAULT_MAX_LEAF_SIZE,
         max_same_shape: int | None = DEFAULT_MAX_SAME_SHAPE) -> Fused:
  """Runs an elementwise transformation on one flat buffer per dtype instead of leaf by leaf.

  The small floating leaves of each dtype (at most ``max_leaf_size`` elements, not sharded across
  devices, not one of more than ``max_same_shape`` leaves of one shape) are concatenated into one
  vector; ``inner`` runs on a dict holding those vectors (keyed
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
    max_same_shape: when more than this many small leaves share a shape and dtype (the layers of
      a deep stack), those leaves stay leaves (4 by default; None fuses them all): XLA compiles
      identical layers once unfused but each piece of a buffer once, so fusing them makes the
      first call slower than unfused (``docs/performance.md``, "The shape grid").

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
  return Fused(as_inner(inner, "fuse", "inner"), max_leaf_size, max_same_shape)
