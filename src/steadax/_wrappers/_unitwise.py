"""Unit-wise and per-example clipping (AGC, DP-SGD style) and the non-negativity constraint.

Norms accumulate in at least float32 (the widest dtype present for mixed trees); clipped values are
written back in each input's dtype.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._core._docs import shared_args
from .._core._interface import EmptyState
from .._core._transformation import Transformation
from .._core._leafwise import Scalars, leafwise, place_like
from .._core._module import hyper_field, static_field
from .._core._policy import COUNTER_DTYPE, cast, compute_dtype, hyper, key_path_str, real_dtype
from .._core._types import Updates

__all__ = [
    "AdaptiveGradClipState",
    "NonNegativeParamsState",
    "keep_params_nonnegative",
    "unitwise_norm",
    "unitwise_clip",
    "adaptive_grad_clip",
    "per_example_global_norm_clip",
    "per_example_layer_norm_clip",
]

NonNegativeParamsState = EmptyState  # Optax's name for keep_params_nonnegative's (empty) state
AdaptiveGradClipState = EmptyState  # Optax's name for adaptive_grad_clip's (empty) state


def _abs_sq(x: jax.Array) -> jax.Array:
  return jnp.real(x * jnp.conj(x)) if jnp.iscomplexobj(x) else x * x


def _default_axes(owner: str, x: Any) -> tuple[int, ...] | None:
  """The reduction axes of a unit for a parameter of ``x``'s rank (None: the whole array)."""
  shape = np.shape(x)
  if sum(d != 1 for d in shape) <= 1:  # scalars and vectors (squeezed)
    return None
  if len(shape) in (2, 3):  # dense (in, out) or multi-head dense kernels
    return (0,)
  if len(shape) == 4:  # 2D convolutions, HWIO
    return (0, 1, 2)
  if len(shape) == 5:  # 3D convolutions, DHWIO
    return (0, 1, 2, 3)
  raise ValueError(
      f"{owner}: no default unit for a parameter of shape {shape} (ranks 1 to 5 have one); pass "
      "`axis`."
  )


def _unit_norm(owner: str, x: jax.Array, axis: Any) -> jax.Array:
  """Unit-wise l2 norm of ``x`` (already in its compute dtype), broadcast to ``x``'s shape."""
  axes = _default_axes(owner, x) if axis is None else axis
  sq = jnp.sum(_abs_sq(x), axis=axes, keepdims=True)
  # Broadcast back in x's layout (under explicit mesh axes a broadcast of the reduced axes would be
  # replicated there, and could not be selected against x).
  return place_like(x, jnp.broadcast_to(jnp.sqrt(sq), np.shape(x)))


def _clip_leaf(k: Scalars, grad: jax.Array, g_norm: jax.Array, max_norm: jax.Array) -> jax.Array:
  """Brock et al. 2021, Eq. 3: ``grad * max_norm / max(g_norm, div_eps)`` where the unit is too long."""
  factor = max_norm / jnp.maximum(g_norm, k.div_eps)
  return jnp.where(g_norm < max_norm, grad, grad * factor)


def unitwise_norm(x: jax.Array, axis: int | tuple[int, ...] | None = None) -> jax.Array:
  """The l2 norm of each *unit* of ``x``, broadcast back to ``x``'s shape.

  A unit is the slice over ``axis``; by default: the whole array for scalars and vectors, axis 0
  for rank 2 and 3 (dense kernels ``(in, out)``), axes ``(0, 1, 2)`` for rank 4 (HWIO convolutions)
  and ``(0, 1, 2, 3)`` for rank 5.

  Args:
    x: an array.
    axis: the reduction axes, or None for the defaults above.

  Returns:
    An array of ``x``'s shape and real dtype (summed in at least float32).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.transforms.unitwise_norm(jnp.array([[3.0, 0.0], [4.0, 1.0]]))
    Array([[5., 1.],
           [5., 1.]], dtype=float32)
  """
  x = jnp.asarray(x)
  out = _unit_norm("unitwise_norm", cast(x, compute_dtype(x.dtype)), axis)
  # Summed in at least float32; returned in the input's own real dtype, as Optax's.
  return out.astype(real_dtype(x.dtype) if jnp.issubdtype(x.dtype, jnp.inexact) else out.dtype)


def _check_same_shape(owner: str, **arrays: Any) -> None:
  shapes = {name: np.shape(a) for name, a in arrays.items()}
  if len(set(shapes.values())) > 1:
    raise ValueError(f"{owner}: the arguments must have one shape, got {shapes}.")


def unitwise_clip(
    g_norm: jax.Array, max_norm: jax.Array, grad: jax.Array, div_eps: float = 1e-6
) -> jax.Array:
  """Scales ``grad`` down to ``max_norm`` where its unit norm ``g_norm`` exceeds ``max_norm``.

  Args:
    g_norm: the unit-wise norms of ``grad`` (``unitwise_norm(grad)``).
    max_norm: the largest allowed norms, of the same shape.
    grad: the gradient.
    div_eps: the smallest norm divided by.

  Returns:
    ``grad`` where ``g_norm < max_norm``, else ``grad * max_norm / max(g_norm, div_eps)``, in
    ``grad``'s dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> g = jnp.array([3.0, 4.0])
    >>> steadax.transforms.unitwise_clip(steadax.transforms.unitwise_norm(g), jnp.full(2, 1.0), g)
    Array([0.6, 0.8], dtype=float32)
  """
  _check_same_shape("unitwise_clip", g_norm=g_norm, max_norm=max_norm, grad=grad)
  leaf = lambda k, g, gn, mn: _clip_leaf(k, g, jnp.real(gn), jnp.real(mn))
  (out,) = leafwise("unitwise_clip", leaf, jnp.asarray(grad),
                    reads=(jnp.asarray(g_norm), jnp.asarray(max_norm)),
                    scalars=Scalars(div_eps=div_eps))
  return out


class AdaptiveGradClip(Transformation):
  name = "adaptive_grad_clip"
  clipping: Any = hyper_field(0.01)
  eps: Any = hyper_field(0.001)
  axis: Any = static_field(default=None)

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError(f"{self.owner}: update needs `params` (the clip is relative to their norms).")
    if self.axis is None:  # a rank without a default unit raises here, naming its path
      for path, g in jax.tree_util.tree_flatten_with_path(updates)[0]:
        try:
          _default_axes(self.owner, g)
        except ValueError as err:
          raise ValueError(f"at {key_path_str(path)}: {err}") from None

    def leaf(k, g, p):
      # Brock et al. 2021, Eq. 3: the unit's norm at most clipping * max(|w|, eps).
      max_norm = k.clipping * jnp.maximum(_unit_norm(self.owner, p, self.axis), k.eps)
      return _clip_leaf(k, g, _unit_norm(self.owner, g, self.axis), max_norm)

    scalars = Scalars(clipping=self.clipping, eps=self.eps, div_eps=1e-6)
    (out,) = self.leafwise(leaf, updates, params=params, reads=(params,), scalars=scalars)
    return out, state


@shared_args
def adaptive_grad_clip(clipping: float, eps: float = 1e-3, axis: int | tuple[int, ...] | None = None) -> AdaptiveGradClip:
  """Adaptive gradient clipping (AGC): unit-wise norms at most ``clipping`` x the parameters'.

  Each unit's update (see ``unitwise_norm``) is scaled down to ``clipping * max(|w|, eps)`` where
  ``|w|`` is the matching unit norm of the parameters.

  Args:
    clipping: the largest allowed ratio of update norm to parameter norm.
    eps: the smallest parameter norm used (so zero-initialised parameters can move).
    axis: the unit's reduction axes, or None for the rank-based defaults.

  Returns:
    A stateless transformation that needs ``params``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.adaptive_grad_clip(0.1)
    >>> params = jnp.array([3.0, 4.0])
    >>> tx.update(jnp.array([30.0, 40.0]), tx.init(params), params)[0]
    Array([0.3, 0.4], dtype=float32)

  References:
    Brock et al., `High-Performance Large-Scale Image Recognition Without Normalization
    <https://arxiv.org/abs/2102.06171>`_, 2021 (Section 3, Eq. 3).
  """
  return AdaptiveGradClip(clipping, eps, axis=axis)


def _check_batch(owner: str, leaves: list[Any]) -> None:
  if not leaves:
    raise ValueError(f"{owner}: `grads` has no arrays.")
  sizes = {np.shape(g)[0] if np.ndim(g) else None for g in leaves}
  if None in sizes or len(sizes) != 1:
    raise ValueError(
        f"{owner}: every array of `grads` needs the same batch (per-example) axis 0, got shapes "
        f"{[np.shape(g) for g in leaves]}."
    )


def _clip_sum(leaves: list[jax.Array], clip: Any) -> tuple[list[jax.Array], jax.Array]:
  """The per-example norms over ``leaves`` clipped to ``clip``, summed over the batch axis.

  Not leafwise: the norms reduce across leaves and the sum drops the batch axis. Each leaf's
  squares are summed in its own compute dtype and join the norms in the widest dtype present; the
  clipped sum is taken in the leaf's compute dtype and returned in the leaf's dtype (an integer
  leaf's in the compute dtype).
  """
  cdt = real_dtype(compute_dtype(*[g.dtype for g in leaves]))
  sq = sum(
      jnp.sum(_abs_sq(cast(g, compute_dtype(g.dtype))).reshape(g.shape[0], -1), axis=1).astype(cdt)
      for g in leaves
  )
  norms = jnp.sqrt(sq)
  multipliers = jnp.nan_to_num(jnp.minimum(hyper(clip, cdt) / norms, 1.0), nan=1.0)
  num_clipped = jnp.sum(multipliers < 1.0, dtype=COUNTER_DTYPE)
  summed = []
  for g in leaves:
    gdt = compute_dtype(g.dtype, cdt)
    # An integer leaf's clipped sum is fractional: it stays in the compute dtype (as in Optax)
    # instead of being truncated back to integers.
    out_dtype = g.dtype if jnp.issubdtype(g.dtype, jnp.inexact) else gdt
    summed.append(jnp.tensordot(multipliers.astype(gdt), cast(g, gdt), axes=1).astype(out_dtype))
  return summed, num_clipped


def per_example_global_norm_clip(grads: Updates, l2_norm_clip: float) -> tuple[Any, jax.Array]:
  """Clips each example's gradient to global norm ``l2_norm_clip`` and sums over the examples.

  Args:
    grads: a tree of per-example gradients, each leaf with the batch on axis 0.
    l2_norm_clip: the largest l2 norm of one example's gradient (over all leaves).

  Returns:
    ``(summed, num_clipped)``: the sum of the clipped gradients (``grads``' structure without the
    batch axis, each leaf in its dtype; an integer leaf's sum in float32, or float64 under x64)
    and the int32 number of examples that were clipped.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> grads = [jnp.array([[3.0, 4.0], [0.3, 0.4]])]
    >>> summed, clipped = steadax.per_example_global_norm_clip(grads, 1.0)
    >>> summed, clipped
    ([Array([0.90000004, 1.2       ], dtype=float32)], Array(1, dtype=int32))

  References:
    Abadi et al., `Deep Learning with Differential Privacy <https://arxiv.org/abs/1607.00133>`_,
    2016 (Algorithm 1).
  """
  leaves, treedef = jax.tree_util.tree_flatten(grads)
  _check_batch("per_example_global_norm_clip", leaves)
  summed, num_clipped = _clip_sum(leaves, l2_norm_clip)
  return treedef.unflatten(summed), num_clipped


def per_example_layer_norm_clip(
    grads: Updates, global_l2_norm_clip: float, uniform: bool = True
) -> tuple[Any, Any]:
  """Clips each example's gradient layer by layer (leaf by leaf) and sums over the examples.

  With ``K`` leaves and ``C = global_l2_norm_clip``, leaf ``i`` is clipped to ``C / sqrt(K)``
  (``uniform``) or to ``C * sqrt(D_i / D)`` where ``D_i`` is its per-example size and ``D`` the
  total; either way the clipped example's global norm is at most ``C``.

  Args:
    grads: a tree of per-example gradients, each leaf with the batch on axis 0.
    global_l2_norm_clip: the overall clip norm ``C``.
    uniform: split ``C`` evenly between the leaves (True) or by their sizes (False).

  Returns:
    ``(summed, num_clipped)``: two trees with ``grads``' structure, the summed clipped gradients
    and the int32 number of clipped examples per leaf.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> grads = [jnp.array([[3.0, 4.0]]), jnp.array([[0.0]])]
    >>> summed, clipped = steadax.per_example_layer_norm_clip(grads, 2.0 ** 0.5)
    >>> summed[0], clipped
    (Array([0.6, 0.8], dtype=float32), [Array(1, dtype=int32), Array(0, dtype=int32)])

  References:
    McMahan et al., `Learning Differentially Private Recurrent Language Models
    <https://arxiv.org/abs/1710.06963>`_, 2018 (Section 3, per-layer clipping).
  """
  leaves, treedef = jax.tree_util.tree_flatten(grads)
  _check_batch("per_example_layer_norm_clip", leaves)
  if uniform:
    clips = [global_l2_norm_clip * (1.0 / len(leaves)) ** 0.5 for _ in leaves]
  else:
    total = sum(int(np.prod(np.shape(g)[1:])) for g in leaves)
    clips = [global_l2_norm_clip * (int(np.prod(np.shape(g)[1:])) / total) ** 0.5 for g in leaves]
  pairs = [_clip_sum([g], c) for g, c in zip(leaves, clips)]
  return (treedef.unflatten([s[0] for s, _ in pairs]), treedef.unflatten([n for _, n in pairs]))


class KeepParamsNonnegative(Transformation):
  name = "keep_params_nonnegative"
  elementwise = True

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError(f"{self.owner}: update needs `params`.")

    def check_real(path, p, u):
      if p is not None and (jnp.iscomplexobj(p) or jnp.iscomplexobj(u)):
        raise TypeError(f"{self.owner}: the parameter at {key_path_str(path)} is complex; "
                        "non-negativity needs real parameters.")

    jax.tree_util.tree_map_with_path(check_real, params, updates, is_leaf=lambda x: x is None)
    # An update that would cross zero lands exactly on it.
    nonnegative = lambda k, u, p: jnp.where(p + u < 0, -p, u)
    (out,) = self.leafwise(nonnegative, updates, params=params, reads=(params,))
    return out, state


@shared_args
def keep_params_nonnegative() -> KeepParamsNonnegative:
  """Changes updates so the parameters stay >= 0 (place it last in a chain).

  An update that would make a parameter negative is replaced by ``-param`` (the parameter becomes
  0); parameters that are already negative are moved to 0.

  Returns:
    A stateless transformation (state ``NonNegativeParamsState()``) that needs ``params``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.keep_params_nonnegative()
    >>> params = jnp.array([1.0, 1.0])
    >>> tx.update(jnp.array([-2.0, -0.5]), tx.init(params), params)[0]
    Array([-1. , -0.5], dtype=float32)
  """
  return KeepParamsNonnegative()
