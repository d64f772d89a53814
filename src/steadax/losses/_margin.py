"""Margin losses: hinge, perceptron and sparsemax, binary and multiclass."""

from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._policy import cast, compute_dtype
from ._common import (
    broadcast_pair,
    broadcast_to,
    require_floating,
    require_integer,
    require_numeric,
    require_same_shape,
    result_dtype,
)

__all__ = [
    "hinge_loss",
    "perceptron_loss",
    "sparsemax_loss",
    "multiclass_hinge_loss",
    "multiclass_perceptron_loss",
    "multiclass_sparsemax_loss",
]


def _binary_inputs(outputs: jax.Array, targets: jax.Array):
  out_dtype = result_dtype(outputs, targets)
  cdt = compute_dtype(out_dtype)
  return cast(outputs, cdt), cast(targets, cdt), out_dtype


def hinge_loss(predictor_outputs: ArrayLike, targets: ArrayLike) -> jax.Array:
  r"""Binary hinge loss ``max(0, 1 - f(x) y)``.

  Args:
    predictor_outputs: outputs of the decision function.
    targets: targets in ``{-1, 1}``, broadcastable with ``predictor_outputs``.

  Returns:
    The elementwise loss, in the inputs' floating dtype (the default float dtype when both are
    integers).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.hinge_loss(jnp.array([0.5, 2.0, -0.3]), jnp.array([1.0, 1.0, 1.0]))
    Array([0.5, 0. , 1.3], dtype=float32)

  References:
    Cortes and Vapnik, `Support-Vector Networks <https://doi.org/10.1007/BF00994018>`_, 1995;
    `Hinge loss <https://en.wikipedia.org/wiki/Hinge_loss>`_, Wikipedia.
  """
  fn = "hinge_loss"
  outputs = require_numeric(fn, "predictor_outputs", predictor_outputs)
  targets = require_numeric(fn, "targets", targets)
  outputs, targets = broadcast_pair(fn, "predictor_outputs", outputs, "targets", targets)
  f, y, out_dtype = _binary_inputs(outputs, targets)
  return cast(jnp.maximum(0.0, 1.0 - f * y), out_dtype)


def perceptron_loss(predictor_outputs: ArrayLike, targets: ArrayLike) -> jax.Array:
  r"""Binary perceptron loss ``max(0, -f(x) y)``.

  Args:
    predictor_outputs: scores of the model.
    targets: targets in ``{-1, 1}``, of the same shape as ``predictor_outputs``.

  Returns:
    The elementwise loss, in the inputs' floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.losses.perceptron_loss(jnp.array([0.5, -2.0]), jnp.array([1.0, 1.0]))
    Array([0., 2.], dtype=float32)

  References:
    Rosenblatt, `The Perceptron: a probabilistic model for information storage and organization
    in the brain <https://doi.org/10.1037/h0042519>`_, 1958.
  """
  fn = "perceptron_loss"
  outputs = require_numeric(fn, "predictor_outputs", predictor_outputs)
  targets = require_numeric(fn, "targets", targets)
  require_same_shape(fn, "predictor_outputs", outputs, "targets", targets)
  f, y, out_dtype = _binary_inputs(outputs, targets)
  return cast(jnp.maximum(0.0, -f * y), out_dtype)


def sparsemax_loss(logits: ArrayLike, labels: ArrayLike) -> jax.Array:
  r"""Binary sparsemax loss: the Fenchel-Young loss of the sparse sigmoid.

  ``sparse_plus(-x)`` for positive labels and ``sparse_plus(x)`` for negative ones, where
  ``sparse_plus(z)`` is 0 below -1, ``(z + 1)^2 / 4`` on ``[-1, 1]`` and ``z`` above 1. The loss is
  zero exactly when ``jax.nn.sparse_sigmoid(logits) == labels``.

  Args:
    logits: scores of the model, floating.
    labels: binary labels (0/1, boolean, or any value where nonzero means positive),
      broadcastable with ``logits``.

  Returns:
    The elementwise loss, in ``logits``' dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.losses.sparsemax_loss(jnp.array([0.0, 2.0, -3.0]), jnp.array([1, 1, 1]))
    Array([0.25, 0.  , 3.  ], dtype=float32)

  References:
    Blondel, Martins and Niculae, `Learning with Fenchel-Young Losses
    <https://arxiv.org/abs/1901.02324>`_, JMLR 2020, section 4.4.
  """
  fn = "sparsemax_loss"
  logits = require_floating(fn, "logits", logits)
  labels = require_numeric(fn, "labels", labels)
  logits, labels = broadcast_pair(fn, "logits", logits, "labels", labels)
  out_dtype = result_dtype(logits)
  x = cast(logits, compute_dtype(out_dtype))
  z = jnp.where(labels != 0, -x, x)
  # sparse_plus, written out: jax.nn.sparse_plus is newer than the oldest JAX steadax supports.
  middle = 0.25 * jnp.square(jnp.clip(z, -1.0, 1.0) + 1.0)
  return cast(jnp.where(z >= 1.0, z, jnp.where(z <= -1.0, jnp.zeros_like(z), middle)), out_dtype)


def _multiclass_inputs(fn: str, scores: Any, labels: Any):
  scores = require_floating(fn, "scores", scores)
  labels = require_integer(fn, "labels", labels)
  if scores.ndim < 1:
    raise ValueError(f"{fn}: scores must have a class axis (shape [..., num_classes]), got a scalar.")
  labels = broadcast_to(fn, "labels", labels, scores.shape[:-1], "scores without the class axis")
  out_dtype = result_dtype(scores)
  s = cast(scores, compute_dtype(out_dtype))
  label_score = jnp.take_along_axis(
      # Class indices in one integer dtype (uint8, int64 ... labels gather alike).
      s, cast(jnp.asarray(labels)[..., None], jnp.int32), axis=-1, mode="fill", fill_value=jnp.nan
  )[..., 0]
  return s, labels, label_score, out_dtype


def multiclass_hinge_loss(scores: ArrayLike, labels: ArrayLike) -> jax.Array:
  r"""Multiclass hinge loss (Crammer-Singer): ``max_j (s_j + [j != y]) - s_y``.

  Args:
    scores: scores of the model, floating, shape ``[..., num_classes]``.
    labels: integer class indices, shape ``[...]``.

  Returns:
    The loss, shape ``[...]``, in ``scores``' dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> scores = jnp.array([[2.0, 1.5, -1.0], [0.0, 3.0, 0.0]])
    >>> steadax.losses.multiclass_hinge_loss(scores, jnp.array([0, 0]))
    Array([0.5, 4. ], dtype=float32)

  References:
    Crammer and Singer, `On the Algorithmic Implementation of Multiclass Kernel-based Vector
    Machines <https://www.jmlr.org/papers/v2/crammer01a.html>`_, JMLR 2001, eq. 5.
  """
  s, labels, label_score, out_dtype = _multiclass_inputs("multiclass_hinge_loss", scores, labels)
  classes = jnp.broadcast_to(jnp.arange(s.shape[-1], dtype=jnp.int32), s.shape)
  # Strict promotion compares int32 with int32 only: labels may be uint8 or int64.
  margin = cast(jnp.where(classes == cast(jnp.asarray(labels)[..., None], jnp.int32), 0.0, 1.0), s.dtype)
  return cast(jnp.max(s + margin, axis=-1) - label_score, out_dtype)


def multiclass_perceptron_loss(scores: ArrayLike, labels: ArrayLike) -> jax.Array:
  r"""Multiclass perceptron loss ``max_j s_j - s_y``.

  Args:
    scores: scores of the model, floating, shape ``[..., num_classes]``.
    labels: integer class indices, shape ``[...]``.

  Returns:
    The loss, shape ``[...]``, in ``scores``' dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> scores = jnp.array([[2.0, 1.5, -1.0], [0.0, 3.0, 0.0]])
    >>> steadax.losses.multiclass_perceptron_loss(scores, jnp.array([0, 0]))
    Array([0., 3.], dtype=float32)

  References:
    Collins, `Discriminative Training Methods for Hidden Markov Models: Theory and Experiments
    with Perceptron Algorithms <https://aclanthology.org/W02-1001/>`_, EMNLP 2002.
  """
  s, _, label_score, out_dtype = _multiclass_inputs("multiclass_perceptron_loss", scores, labels)
  return cast(jnp.max(s, axis=-1) - label_score, out_dtype)


def _sparsemax(s: jax.Array) -> jax.Array:
  """Euclidean projection of each row (last axis) onto the probability simplex."""
  k = s.shape[-1]
  desc = -jnp.sort(-s, axis=-1)
  ranks = jnp.broadcast_to(jnp.arange(1, k + 1, dtype=s.dtype), s.shape)
  excess = jnp.cumsum(desc, axis=-1) - 1.0
  # The support is a prefix of the sorted scores: those above the running threshold.
  in_support = desc * ranks > excess
  support_size = jnp.sum(in_support, axis=-1, keepdims=True, dtype=jnp.int32)
  tau = jnp.take_along_axis(excess, support_size - 1, axis=-1) / cast(support_size, s.dtype)
  return jnp.maximum(s - tau, 0.0)


def multiclass_sparsemax_loss(scores: ArrayLike, labels: ArrayLike) -> jax.Array:
  r"""Multiclass sparsemax loss, the Fenchel-Young loss of sparsemax.

  .. math::
    \ell = \langle p, s \rangle - s_y + \tfrac12 (1 - \|p\|^2), \quad p = \operatorname{sparsemax}(s)

  It is non-negative, zero when sparsemax puts all its mass on the label, and its gradient with
  respect to ``scores`` is ``p - onehot(y)``.

  Args:
    scores: scores of the model, floating, shape ``[..., num_classes]``.
    labels: integer class indices, shape ``[...]``.

  Returns:
    The loss, shape ``[...]``, in ``scores``' dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> scores = jnp.array([[2.0, 1.5, -1.0], [0.0, 3.0, 0.0]])
    >>> steadax.losses.multiclass_sparsemax_loss(scores, jnp.array([0, 0]))
    Array([0.0625, 3.    ], dtype=float32)

  References:
    Martins and Astudillo, `From Softmax to Sparsemax: A Sparse Model of Attention and
    Multi-Label Classification <https://arxiv.org/abs/1602.02068>`_, ICML 2016, eq. 17.
  """
  s, _, label_score, out_dtype = _multiclass_inputs("multiclass_sparsemax_loss", scores, labels)
  p = _sparsemax(s)
  # Only the support enters the inner product, so -inf scores outside it cannot make 0 * inf.
  in_support = p > 0
  gap = jnp.where(in_support, s - label_score[..., None], jnp.zeros_like(s))
  loss = jnp.sum(p * gap, axis=-1) + 0.5 * (1.0 - jnp.sum(p * p, axis=-1))
  return cast(loss, out_dtype)
