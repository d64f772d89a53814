"""Segmentation losses: soft Dice / Tversky, generalized Dice and binary Dice."""

from typing import Any

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core._policy import cast, compute_dtype
from ._common import (
    broadcast_to,
    check_reduction,
    hyper,
    normalize_axes,
    require_floating,
    require_numeric,
    require_rank,
    require_same_shape,
    result_dtype,
)

__all__ = ["dice_loss", "multiclass_generalized_dice_loss", "binary_dice_loss"]


def _check_distributions(fn: str, predictions: jax.Array) -> None:
  """Probabilities must sum to 1 over the classes; checked only for concrete multi-class input.

  Under ``jit`` the values are unknown at trace time and the check is skipped; a single channel
  is a binary probability, which need not sum to 1.
  """
  if predictions.shape[-1] == 1 or isinstance(predictions, jax.core.Tracer):
    return
  sums = np.asarray(jnp.sum(cast(predictions, compute_dtype(predictions.dtype)), axis=-1))
  if sums.size and not np.allclose(sums, 1.0, rtol=1e-5, atol=1e-5 if predictions.dtype.itemsize
                                   > 2 else 1e-2):
    raise ValueError(
        f"{fn}: with apply_softmax=False, predictions must be valid probability distributions over "
        f"the last axis; their sums range over [{sums.min():.6f}, {sums.max():.6f}]."
    )


def _reduce(loss: jax.Array, reduction: str) -> jax.Array:
  if reduction == "mean":
    return jnp.mean(loss, axis=-1)
  if reduction == "sum":
    return jnp.sum(loss, axis=-1)
  return loss


def dice_loss(
    predictions: ArrayLike,
    targets: ArrayLike,
    *,
    class_weights: ArrayLike | None = None,
    smooth: ArrayLike = 1.0,
    alpha: ArrayLike = 0.5,
    beta: ArrayLike = 0.5,
    apply_softmax: bool = True,
    reduction: str = "mean",
    ignore_background: bool = False,
    axis: ArrayLike | None = None,
) -> jax.Array:
  r"""Soft Dice loss (Tversky loss for ``alpha != beta``), per class, then reduced over classes.

  For class ``c``, with ``p`` the predicted probabilities and ``t`` the targets summed over the
  spatial axes (:math:`I_c = \sum p_c t_c`, :math:`P_c = \sum p_c`, :math:`T_c = \sum t_c`):

  .. math::
    \ell_c = 1 - \frac{I_c + s}{I_c + \alpha (P_c - I_c) + \beta (T_c - I_c) + s}

  ``alpha`` weighs false positives and ``beta`` false negatives; 0.5 and 0.5 give the Dice loss.

  Args:
    predictions: floating logits (or probabilities, see ``apply_softmax``) of shape
      ``[batch, ..., num_classes]``, or ``[batch, ...]`` / ``[..., 1]`` for binary segmentation.
    targets: one-hot targets of the same shape (a missing trailing class axis is added).
    class_weights: optional ``[num_classes]`` weights multiplying the per-class losses.
    smooth: additive smoothing of numerator and denominator.
    alpha: weight of false positives.
    beta: weight of false negatives.
    apply_softmax: turn logits into probabilities: softmax over classes, or a sigmoid for a
      single channel. If False, multi-class predictions must sum to 1 over the classes (checked
      when the values are concrete, i.e. outside ``jit``).
    reduction: ``"mean"`` or ``"sum"`` over classes, or ``"none"`` for per-class losses.
    ignore_background: drop class 0 before the reduction (when there are several classes).
    axis: the axes to sum over; None sums over all axes except the first and the last.

  Returns:
    ``[batch]`` losses (``[batch, num_classes]`` for ``reduction="none"``), in the inputs'
    floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> logits = jnp.array([[[2.0, -2.0], [-1.0, 1.0]]])       # [batch, pixels, classes]
    >>> targets = jnp.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> steadax.losses.dice_loss(logits, targets).tolist()
    [0.0343]

  References:
    Milletari et al., `V-Net: Fully Convolutional Neural Networks for Volumetric Medical Image
    Segmentation <https://arxiv.org/abs/1606.04797>`_, 2016, eq. 1; Salehi et al., `Tversky loss
    function for image segmentation using 3D fully convolutional deep networks
    <https://arxiv.org/abs/1706.05721>`_, 2017, eq. 3.
  """
  return _dice("dice_loss", predictions, targets, class_weights=class_weights, smooth=smooth,
               alpha=alpha, beta=beta, apply_softmax=apply_softmax, reduction=reduction,
               ignore_background=ignore_background, axis=axis)


def _dice(fn, predictions, targets, *, class_weights, smooth, alpha, beta, apply_softmax,
          reduction, ignore_background, axis):
  predictions = require_floating(fn, "predictions", predictions)
  targets = require_numeric(fn, "targets", targets)
  check_reduction(fn, reduction)
  if predictions.ndim == targets.ndim - 1:
    predictions = predictions[..., None]
  if targets.ndim == predictions.ndim - 1:
    targets = targets[..., None]
  require_same_shape(fn, "predictions", predictions, "targets", targets)
  if predictions.ndim < 1:
    raise ValueError(f"{fn}: predictions need a class axis, got a scalar.")
  if not apply_softmax:
    _check_distributions(fn, predictions)
  out_dtype = result_dtype(predictions, targets)
  cdt = compute_dtype(out_dtype)
  p, t = cast(predictions, cdt), cast(targets, cdt)
  num_classes = p.shape[-1]
  if apply_softmax:
    p = jax.nn.sigmoid(p) if num_classes == 1 else jax.nn.softmax(p, axis=-1)
  axes = (tuple(range(1, p.ndim - 1)) if axis is None
          else normalize_axes(fn, axis, p.ndim))
  intersection = jnp.sum(p * t, axis=axes)
  pred_sum = jnp.sum(p, axis=axes)
  target_sum = jnp.sum(t, axis=axes)
  s = hyper(fn, "smooth", smooth, cdt)
  denominator = (intersection + hyper(fn, "alpha", alpha, cdt) * (pred_sum - intersection)
                 + hyper(fn, "beta", beta, cdt) * (target_sum - intersection) + s)
  loss = 1.0 - (intersection + s) / denominator
  if class_weights is not None:
    w = require_numeric(fn, "class_weights", class_weights)
    require_rank(fn, "class_weights", w, 1, "[num_classes]")
    loss = loss * broadcast_to(fn, "class_weights", cast(w, cdt), loss.shape,
                               "the per-class losses")
  if ignore_background and num_classes > 1:
    loss = loss[..., 1:]
  return cast(_reduce(loss, reduction), out_dtype)


def multiclass_generalized_dice_loss(
    predictions: ArrayLike,
    targets: ArrayLike,
    *,
    smooth: ArrayLike = 1.0,
    apply_softmax: bool = True,
    ignore_background: bool = False,
) -> jax.Array:
  r"""Generalized Dice loss: Dice with class weights inversely proportional to squared class
  frequency, so rare classes count as much as frequent ones.

  The weights are :math:`w_c \propto 1 / (F_c^2 + 10^{-7})`, :math:`F_c` the total target mass of
  class ``c`` over the whole batch, normalized to sum to ``num_classes``; the result is the mean of
  the weighted per-class Dice losses over batch and classes.

  Args:
    predictions: floating logits of shape ``[batch, ..., num_classes]``.
    targets: one-hot targets of the same shape.
    smooth: additive smoothing.
    apply_softmax: apply a softmax over classes (else ``predictions`` are probabilities).
    ignore_background: drop class 0 from the mean.

  Returns:
    The scalar loss in the inputs' floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> logits = jnp.array([[[2.0, -2.0], [-1.0, 1.0], [0.0, 3.0]]])
    >>> targets = jnp.array([[[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]])
    >>> steadax.losses.multiclass_generalized_dice_loss(logits, targets).tolist()
    0.0419

  References:
    Sudre et al., `Generalised Dice overlap as a deep learning loss function for highly
    unbalanced segmentations <https://arxiv.org/abs/1707.03237>`_, 2017, eq. 2.
  """
  fn = "multiclass_generalized_dice_loss"
  predictions = require_floating(fn, "predictions", predictions)
  targets = require_numeric(fn, "targets", targets)
  require_same_shape(fn, "predictions", predictions, "targets", targets)
  cdt = compute_dtype(result_dtype(predictions, targets))
  t = cast(targets, cdt)
  frequencies = jnp.sum(t, axis=tuple(range(t.ndim - 1)))
  weights = 1.0 / (jnp.square(frequencies) + 1e-7)
  weights = weights * (weights.shape[0] / jnp.sum(weights))
  per_class = _dice(fn, predictions, targets, class_weights=weights, smooth=smooth, alpha=0.5,
                    beta=0.5, apply_softmax=apply_softmax, reduction="none",
                    ignore_background=ignore_background, axis=None)
  return cast(jnp.mean(cast(per_class, cdt)), per_class.dtype)


def binary_dice_loss(
    predictions: ArrayLike,
    targets: ArrayLike,
    *,
    smooth: ArrayLike = 1.0,
    apply_sigmoid: bool = True,
) -> jax.Array:
  r"""Dice loss for binary segmentation (one foreground probability per pixel).

  Equivalent to :func:`dice_loss` with a single class channel: a sigmoid turns the logits into
  probabilities unless ``apply_sigmoid=False``, in which case ``predictions`` are probabilities
  in ``[0, 1]`` (Optax 0.2.8 wrongly requires them to sum to 1 there).

  Args:
    predictions: floating logits of shape ``[batch, ...]`` or ``[batch, ..., 1]``.
    targets: binary targets of the same shape.
    smooth: additive smoothing.
    apply_sigmoid: apply a sigmoid to ``predictions``.

  Returns:
    ``[batch]`` losses in the inputs' floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> logits = jnp.array([[3.0, -3.0, 2.0], [0.0, 0.0, 0.0]])
    >>> targets = jnp.array([[1.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    >>> steadax.losses.binary_dice_loss(logits, targets).tolist()
    [0.0364, 0.3333]

  References:
    Milletari et al., `V-Net: Fully Convolutional Neural Networks for Volumetric Medical Image
    Segmentation <https://arxiv.org/abs/1606.04797>`_, 2016, eq. 1.
  """
  fn = "binary_dice_loss"
  predictions = require_floating(fn, "predictions", predictions)
  targets = require_numeric(fn, "targets", targets)
  if predictions.ndim == targets.ndim and predictions.ndim and predictions.shape[-1] != 1:
    predictions, targets = predictions[..., None], targets[..., None]
  return _dice(fn, predictions, targets, class_weights=None, smooth=smooth, alpha=0.5, beta=0.5,
               apply_softmax=apply_sigmoid, reduction="mean", ignore_background=False, axis=None)
