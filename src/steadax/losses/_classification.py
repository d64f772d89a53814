"""Cross-entropy losses: softmax (one-hot, integer, safe), sigmoid, focal and poly losses.

All of them work on log-probabilities computed with a max shift in at least float32, so logits of
1e4 and bfloat16 inputs stay finite; the result takes the inputs' floating dtype (see _common).
"""

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero
from jax.typing import ArrayLike

from .._core._policy import cast, compute_dtype
from ._common import (
    Axis,
    broadcast_pair,
    broadcast_to,
    check_where,
    hyper,
    masked_log_softmax,
    masked_logsumexp,
    normalize_axes,
    require_floating,
    require_integer,
    require_numeric,
    result_dtype,
)

__all__ = [
    "softmax_cross_entropy",
    "softmax_cross_entropy_with_integer_labels",
    "safe_softmax_cross_entropy",
    "sigmoid_binary_cross_entropy",
    "sigmoid_focal_loss",
    "poly_loss_cross_entropy",
]


def _prepare_softmax(fn: str, logits: Any, labels: Any, axis: Axis, where: Any,
                     *, float_labels: bool):
  logits = require_floating(fn, "logits", logits)
  labels = (require_floating if float_labels else require_numeric)(fn, "labels", labels)
  labels = broadcast_to(fn, "labels", labels, logits.shape, "logits")
  axes = normalize_axes(fn, axis, logits.ndim)
  mask = None if where is None else check_where(fn, where, logits.shape, axes)
  out_dtype = result_dtype(logits, labels)
  cdt = compute_dtype(out_dtype)
  return cast(logits, cdt), cast(labels, cdt), axes, mask, out_dtype


def softmax_cross_entropy(
    logits: ArrayLike,
    labels: ArrayLike,
    axis: Axis = -1,
    where: ArrayLike | None = None,
) -> jax.Array:
  r"""Cross entropy between the softmax of ``logits`` and target distributions ``labels``.

  .. math::
    \ell = -\sum_j y_j \log \frac{e^{x_j}}{\sum_k e^{x_k}}

  computed along ``axis`` among the entries selected by ``where``. An entry with ``logits=-inf``
  and ``labels=0`` gives NaN here (``0 \cdot \log 0``); :func:`safe_softmax_cross_entropy` treats
  it as 0.

  Args:
    logits: unnormalized log-probabilities, floating, shape ``[..., num_classes]``.
    labels: target distributions (e.g. one-hot), broadcastable to ``logits``.
    axis: the class axis or axes.
    where: optional boolean mask of ``logits``' shape, or of its batch shape (``logits`` without
      ``axis``); excluded classes take no part in the normalization or the sum, and a row with
      no included class has loss 0.

  Returns:
    The cross entropy, shape ``logits.shape`` without ``axis``, in the inputs' floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> logits = jnp.array([[1.2, -0.8, -0.5], [0.9, -1.2, 1.1]])
    >>> labels = jnp.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    >>> steadax.losses.softmax_cross_entropy(logits, labels).tolist()
    [0.2761, 2.9518]

  References:
    Goodfellow, Bengio and Courville, `Deep Learning <https://www.deeplearningbook.org>`_,
    2016, section 6.2.2.3 (softmax units for multinoulli output distributions).
  """
  fn = "softmax_cross_entropy"
  x, y, axes, mask, out_dtype = _prepare_softmax(fn, logits, labels, axis, where,
                                                 float_labels=False)
  log_probs = masked_log_softmax(x, axes, mask)
  loss = -jnp.sum(y * log_probs, axis=axes, where=mask)
  return cast(loss, out_dtype)


def safe_softmax_cross_entropy(logits: ArrayLike, labels: ArrayLike) -> jax.Array:
  r"""Softmax cross entropy over the last axis with the convention ``0 \log 0 = 0``.

  Unlike :func:`softmax_cross_entropy`, a class with ``logits=-inf`` and ``labels=0`` contributes
  0 to the loss and to its gradient, so ``-inf`` can mark impossible classes.

  Args:
    logits: unnormalized log-probabilities, floating, shape ``[..., num_classes]``.
    labels: target distributions, broadcastable to ``logits``.

  Returns:
    The cross entropy, shape ``logits.shape[:-1]``, in the inputs' floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> logits = jnp.array([[0.0, 1.0, -jnp.inf]])
    >>> labels = jnp.array([[0.0, 1.0, 0.0]])
    >>> steadax.losses.safe_softmax_cross_entropy(logits, labels).tolist()
    [0.3133]

  References:
    Goodfellow, Bengio and Courville, `Deep Learning <https://www.deeplearningbook.org>`_,
    2016, section 6.2.2.3.
  """
  fn = "safe_softmax_cross_entropy"
  x, y, axes, _, out_dtype = _prepare_softmax(fn, logits, labels, -1, None, float_labels=False)
  return cast(-jnp.sum(_safe_weighted_log_probs(x, y, axes), axis=axes), out_dtype)


def _weighted_log_probs_0log0(x: jax.Array, y: jax.Array, axes: tuple[int, ...]) -> jax.Array:
  """``y * log_softmax(x)`` with ``0 * log 0 = 0``."""
  nonzero = y != 0
  # Both operands are masked so that neither the value nor the gradient sees 0 * inf.
  log_probs = masked_log_softmax(x, axes, None)
  safe_log_probs = jnp.where(nonzero, log_probs, jnp.zeros_like(log_probs))
  return jnp.where(nonzero, y * safe_log_probs, jnp.zeros_like(y))


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _safe_weighted_log_probs(x: jax.Array, y: jax.Array, axes: tuple[int, ...]) -> jax.Array:
  return _weighted_log_probs_0log0(x, y, axes)


def _safe_weighted_log_probs_jvp(axes, primals, tangents):
  # The masks above hold for the value and the logits' derivative, not the labels': d/dy of
  # y * log p is log p wherever y is, 0 included (as in Optax). A labels' tangent that is a symbolic
  # zero (differentiating by the logits alone) adds nothing, so a -inf logit's log p = -inf is
  # never multiplied by a zero tangent into NaN.
  x, y = primals
  x_dot, y_dot = tangents
  if isinstance(x_dot, SymbolicZero):
    out = _weighted_log_probs_0log0(x, y, axes)
    out_dot = jnp.zeros_like(out)
  else:
    out, out_dot = jax.jvp(lambda v: _weighted_log_probs_0log0(v, y, axes), (x,), (x_dot,))
  if not isinstance(y_dot, SymbolicZero):
    out_dot = out_dot + y_dot * masked_log_softmax(x, axes, None)
  return out, out_dot


_safe_weighted_log_probs.defjvp(_safe_weighted_log_probs_jvp, symbolic_zeros=True)


def softmax_cross_entropy_with_integer_labels(
    logits: ArrayLike,
    labels: ArrayLike,
    axis: int | tuple[int, ...] = -1,
    where: ArrayLike | None = None,
) -> jax.Array:
  r"""Softmax cross entropy with the target given as integer class indices.

  .. math::
    \ell = \log \sum_k e^{x_k} - x_{y}

  Args:
    logits: unnormalized log-probabilities, floating, shape ``[..., num_classes]``.
    labels: integer class indices in ``[0, num_classes)``, of ``logits``' shape without ``axis``.
      With a tuple ``axis``, an index is a flat (row-major) index into those axes. Indices out of
      range give NaN.
    axis: the class axis or axes.
    where: optional boolean mask of ``logits``' shape or of its batch shape; excluded classes are
      left out of the normalization, and a row with no included class has loss 0.

  Returns:
    The cross entropy, shape ``logits.shape`` without ``axis``, in ``logits``' dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> logits = jnp.array([[1.2, -0.8, -0.5], [0.9, -1.2, 1.1]])
    >>> steadax.losses.softmax_cross_entropy_with_integer_labels(
    ...     logits, jnp.array([0, 1])).tolist()
    [0.2761, 2.9518]

  References:
    Goodfellow, Bengio and Courville, `Deep Learning <https://www.deeplearningbook.org>`_,
    2016, section 6.2.2.3.
  """
  fn = "softmax_cross_entropy_with_integer_labels"
  logits = require_floating(fn, "logits", logits)
  labels = require_integer(fn, "labels", labels)
  if axis is None:
    raise TypeError(f"{fn}: axis must be an int or a tuple of ints, got None.")
  # The class index counts over the axes in the order given (row-major over axis=(3, 2) is not over
  # (2, 3)), as in Optax: the order is kept.
  axes = normalize_axes(fn, axis, logits.ndim, keep_order=True)
  batch_axes = tuple(i for i in range(logits.ndim) if i not in axes)
  batch_shape = tuple(logits.shape[i] for i in batch_axes)
  labels = broadcast_to(fn, "labels", labels, batch_shape, "logits without axis")
  mask = None if where is None else check_where(fn, where, logits.shape, tuple(sorted(axes)))
  out_dtype = result_dtype(logits)
  x = cast(logits, compute_dtype(out_dtype))
  # Classes move to one trailing flat axis, so a tuple axis behaves like a single one.
  perm = batch_axes + axes
  x = jnp.transpose(x, perm).reshape(batch_shape + (-1,))
  if mask is not None:
    mask = jnp.transpose(mask, perm).reshape(batch_shape + (-1,))
  lse = masked_logsumexp(x, (x.ndim - 1,), mask)
  label_logit = jnp.take_along_axis(
      # Class indices in one integer dtype (uint8, int64 ... labels gather alike).
      x, cast(labels[..., None], jnp.int32), axis=-1, mode="fill", fill_value=jnp.nan
  )[..., 0]
  loss = lse - label_logit
  if mask is not None:
    loss = jnp.where(jnp.any(mask, axis=-1), loss, jnp.zeros_like(loss))
  return cast(loss, out_dtype)


def sigmoid_binary_cross_entropy(logits: ArrayLike, labels: ArrayLike) -> jax.Array:
  r"""Elementwise binary cross entropy of independent sigmoid predictions.

  .. math::
    \ell = -y \log \sigma(x) - (1 - y) \log(1 - \sigma(x))
         = y\,\mathrm{softplus}(-x) + (1 - y)\,\mathrm{softplus}(x)

  The second form has no cancellation for large ``|x|``. Use it for binary labels (then
  ``logits`` score class 1) or for several non-exclusive classes (one logit and one probability
  per class).

  Args:
    logits: unnormalized log-odds, floating.
    labels: targets in ``[0, 1]`` (binary or probabilities; boolean and integer are accepted),
      broadcastable with ``logits``.

  Returns:
    The elementwise loss, of the broadcast shape, in the inputs' floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.sigmoid_binary_cross_entropy(
    ...     jnp.array([2.0, -1.0]), jnp.array([1, 0])).tolist()
    [0.1269, 0.3133]

  References:
    Goodfellow, Bengio and Courville, `Deep Learning <https://www.deeplearningbook.org>`_,
    2016, section 6.2.2.2 (sigmoid units for Bernoulli output distributions), eq. 6.34.
  """
  fn = "sigmoid_binary_cross_entropy"
  logits = require_floating(fn, "logits", logits)
  labels = require_numeric(fn, "labels", labels)
  logits, labels = broadcast_pair(fn, "logits", logits, "labels", labels)
  out_dtype = result_dtype(logits, labels)
  cdt = compute_dtype(out_dtype)
  x, y = cast(logits, cdt), cast(labels, cdt)
  loss = y * jax.nn.softplus(-x) + (1.0 - y) * jax.nn.softplus(x)
  return cast(loss, out_dtype)


def _log_weighted_sum(w1: jax.Array, a: jax.Array, w2: jax.Array, b: jax.Array) -> jax.Array:
  """``log(w1 e^a + w2 e^b)`` for non-negative weights, without log(0) in value or gradient."""
  def safe_log(w):
    positive = w > 0
    return jnp.where(positive, jnp.log(jnp.where(positive, w, jnp.ones_like(w))), -jnp.inf)
  return jnp.logaddexp(safe_log(w1) + a, safe_log(w2) + b)


def sigmoid_focal_loss(
    logits: ArrayLike,
    labels: ArrayLike,
    *,
    alpha: ArrayLike | None = None,
    gamma: ArrayLike = 2.0,
) -> jax.Array:
  r"""Focal loss: sigmoid cross entropy scaled down on well-classified examples.

  .. math::
    FL = -\alpha_t (1 - p_t)^\gamma \log p_t,
    \quad p_t = y\,\sigma(x) + (1 - y)(1 - \sigma(x)),
    \quad \alpha_t = \alpha y + (1 - \alpha)(1 - y)

  :math:`(1 - p_t)^\gamma` is computed as ``exp(gamma * log(1 - p_t))`` with ``log(1 - p_t)``
  formed from log-sigmoids, so it stays accurate for saturated logits and for ``gamma < 1``.

  Args:
    logits: unnormalized log-odds, floating.
    labels: targets in ``[0, 1]`` (binary or soft), broadcastable with ``logits``.
    alpha: optional weight of the positive class in ``(0, 1)``; None weighs both classes by 1.
    gamma: focusing exponent (0 gives the sigmoid cross entropy).

  Returns:
    The elementwise loss, of the broadcast shape, in the inputs' floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.sigmoid_focal_loss(jnp.array([2.0, -1.0]), jnp.array([1.0, 1.0])).tolist()
    [0.0018, 0.7019]

  References:
    Lin et al., `Focal Loss for Dense Object Detection <https://arxiv.org/abs/1708.02002>`_,
    2017, eq. 5.
  """
  fn = "sigmoid_focal_loss"
  logits = require_floating(fn, "logits", logits)
  labels = require_numeric(fn, "labels", labels)
  logits, labels = broadcast_pair(fn, "logits", logits, "labels", labels)
  out_dtype = result_dtype(logits, labels)
  cdt = compute_dtype(out_dtype)
  x, y = cast(logits, cdt), cast(labels, cdt)
  log_p = jax.nn.log_sigmoid(x)
  log_q = jax.nn.log_sigmoid(-x)
  cross_entropy = -y * log_p - (1.0 - y) * log_q
  log_one_minus_pt = _log_weighted_sum(1.0 - y, log_p, y, log_q)
  loss = cross_entropy * jnp.exp(hyper(fn, "gamma", gamma, cdt) * log_one_minus_pt)
  if alpha is not None:
    a = hyper(fn, "alpha", alpha, cdt)
    loss = (a * y + (1.0 - a) * (1.0 - y)) * loss
  return cast(loss, out_dtype)


def poly_loss_cross_entropy(
    logits: ArrayLike,
    labels: ArrayLike,
    *,
    epsilon: ArrayLike = 2.0,
    axis: Axis = -1,
    where: ArrayLike | None = None,
) -> jax.Array:
  r"""Poly-1 loss: softmax cross entropy plus ``epsilon`` times the first polynomial term.

  .. math::
    L_{\text{Poly-1}} = -\sum_j y_j \log p_j + \epsilon \sum_j y_j (1 - p_j),
    \quad p = \operatorname{softmax}(x)

  Args:
    logits: unnormalized log-probabilities, floating, shape ``[..., num_classes]``.
    labels: floating target distributions, broadcastable to ``logits``.
    epsilon: coefficient of the first polynomial term (the paper suggests 2.0 for ImageNet
      classification and -1.0 for detection).
    axis: the class axis or axes.
    where: optional boolean mask of ``logits``' shape or of its batch shape (as in
      :func:`softmax_cross_entropy`).

  Returns:
    The loss, shape ``logits.shape`` without ``axis``, in the inputs' floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> logits = jnp.array([[1.2, -0.8, -0.5], [0.9, -1.2, 1.1]])
    >>> labels = jnp.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    >>> steadax.losses.poly_loss_cross_entropy(logits, labels).tolist()
    [0.7587, 4.8473]

  References:
    Leng et al., `PolyLoss: A Polynomial Expansion Perspective of Classification Loss Functions
    <https://arxiv.org/abs/2204.12511>`_, 2022, eq. 3 (Poly-1).
  """
  fn = "poly_loss_cross_entropy"
  x, y, axes, mask, out_dtype = _prepare_softmax(fn, logits, labels, axis, where,
                                                 float_labels=True)
  log_probs = masked_log_softmax(x, axes, mask)
  cross_entropy = -jnp.sum(y * log_probs, axis=axes, where=mask)
  one_minus_pt = jnp.sum(y * (1.0 - jnp.exp(log_probs)), axis=axes, where=mask)
  loss = cross_entropy + hyper(fn, "epsilon", epsilon, x.dtype) * one_minus_pt
  return cast(loss, out_dtype)

