"""Connectionist temporal classification (CTC): the loss and its forward variables."""

import operator
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._policy import cast, compute_dtype
from ._common import (
    hyper,
    require_floating,
    require_integer,
    require_numeric,
    require_rank,
    result_dtype,
)

__all__ = ["ctc_loss", "ctc_loss_with_forward_probs"]


def _logaddexp3(a: jax.Array, b: jax.Array, c: jax.Array) -> jax.Array:
  return jnp.logaddexp(jnp.logaddexp(a, b), c)


def _ctc_forward(fn, logits, logit_paddings, labels, label_paddings, blank_id, log_epsilon):
  logits = require_floating(fn, "logits", logits)
  logit_paddings = require_numeric(fn, "logit_paddings", logit_paddings)
  labels = require_integer(fn, "labels", labels)
  label_paddings = require_numeric(fn, "label_paddings", label_paddings)
  require_rank(fn, "logits", logits, 3, "[batch, time, classes]")
  require_rank(fn, "labels", labels, 2, "[batch, max_label_length]")
  batch, _, num_classes = logits.shape
  if logit_paddings.shape != logits.shape[:2]:
    raise ValueError(
        f"{fn}: logit_paddings must have shape {logits.shape[:2]} (logits without the class "
        f"axis), got {logit_paddings.shape}."
    )
  if label_paddings.shape != labels.shape:
    raise ValueError(
        f"{fn}: label_paddings must have the shape of labels {labels.shape}, got "
        f"{label_paddings.shape}."
    )
  if labels.shape[0] != batch:
    raise ValueError(f"{fn}: labels must have batch size {batch}, got {labels.shape[0]}.")
  try:
    blank_id = operator.index(blank_id)
  except TypeError:
    raise TypeError(f"{fn}: blank_id must be a Python int, got {blank_id!r}.") from None
  if not 0 <= blank_id < num_classes:
    raise ValueError(f"{fn}: blank_id={blank_id} is not a class index in [0, {num_classes}).")

  out_dtype = result_dtype(logits)
  cdt = compute_dtype(out_dtype)
  eps = hyper(fn, "log_epsilon", log_epsilon, cdt)
  max_label_len = labels.shape[1]
  log_probs = jax.nn.log_softmax(cast(logits, cdt), axis=-1)
  # Paddings are 0/1 floats: the label lengths are counted exactly in int32.
  label_len = max_label_len - jnp.sum(cast(label_paddings, jnp.int32), axis=1)

  # Time-major scan inputs: log-probability of the blank and of each label position.
  blank_lp = jnp.transpose(log_probs[:, :, blank_id])                              # [T, B]
  gather_idx = jnp.broadcast_to(cast(labels[:, None, :], jnp.int32),
                                (batch, logits.shape[1], max_label_len))
  # Out-of-range ids (often found in padding) read log-probability 0 instead of NaN.
  label_lp = jnp.take_along_axis(log_probs, gather_idx, axis=2, mode="fill", fill_value=0)
  label_lp = jnp.transpose(label_lp, (1, 0, 2))                                    # [T, B, N]
  pad = jnp.transpose(cast(logit_paddings, cdt))[:, :, None]                    # [T, B, 1]

  # A label may follow the previous label directly only if they differ (Graves et al., fig. 3);
  # the forbidden transition gets log_epsilon, the library's stand-in for log 0.
  repeat = cast(labels[:, 1:] == labels[:, :-1], cdt)                           # [B, N-1]
  first = min(1, max_label_len)  # no label positions at all: every array below is empty
  skip_penalty = jnp.concatenate([jnp.ones((batch, first), cdt), repeat], axis=1) * eps

  def step(carry, inputs):
    blank, label = carry                       # [B, N+1] after n labels; [B, N] on label n
    lp_blank, lp_label, p = inputs
    from_previous_label = jnp.concatenate(
        [jnp.full((batch, first), eps, cdt), label[:, :-1]], axis=1) + skip_penalty
    new_label = lp_label + _logaddexp3(label, blank[:, :-1], from_previous_label)
    new_blank = lp_blank[:, None] + jnp.concatenate(
        [blank[:, :1], jnp.logaddexp(blank[:, 1:], label)], axis=1)
    # Padded frames carry the variables through unchanged (paddings are 0 or 1).
    new_blank = p * blank + (1.0 - p) * new_blank
    new_label = p * label + (1.0 - p) * new_label
    return (new_blank, new_label), (new_blank, new_label)

  init_blank = jnp.full((batch, max_label_len + 1), eps, cdt).at[:, 0].set(0.0)
  init_label = jnp.full((batch, max_label_len), eps, cdt)
  (last_blank, last_label), (alpha_blank, alpha_label) = jax.lax.scan(
      step, (init_blank, init_label), (blank_lp, label_lp, pad))
  # A path may end on a blank or on its last label: fold the label into the blank slot.
  final = jnp.concatenate(
      [last_blank[:, :1], jnp.logaddexp(last_blank[:, 1:], last_label)], axis=1)
  alpha_blank = alpha_blank.at[-1].set(final)
  loss = -jnp.take_along_axis(final, label_len[:, None], axis=1)[:, 0]
  return cast(loss, out_dtype), cast(alpha_blank, out_dtype), cast(alpha_label, out_dtype)


def ctc_loss_with_forward_probs(
    logits: ArrayLike,
    logit_paddings: ArrayLike,
    labels: ArrayLike,
    label_paddings: ArrayLike,
    *,
    blank_id: int = 0,
    log_epsilon: ArrayLike = -1e5,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  r"""CTC loss together with the log forward variables of the CTC recursion.

  A path emits at each unpadded frame either the blank or a label; collapsing repeats and
  removing blanks must give the label sequence. The loss is minus the log-probability of all
  such paths under the frame-wise softmax of ``logits``. The forward variables are

  .. math::
    \alpha_{\text{blank}}(t, n) = \log P(\text{first } n \text{ labels emitted by frame } t,
      \text{ frame } t \text{ is blank}),\\
    \alpha_{\text{label}}(t, n) = \log P(\text{first } n+1 \text{ labels emitted by frame } t,
      \text{ frame } t \text{ is label } n),

  with :math:`\alpha_{\text{blank}}` at the last frame also counting paths that end on
  label ``n - 1``. Impossible events get values near ``log_epsilon`` instead of ``-inf`` so that
  gradients stay finite.

  Args:
    logits: floating ``[B, T, K]`` logits, ``K`` classes including the blank.
    logit_paddings: ``[B, T]`` array, 1 where a frame is padding and 0 otherwise.
    labels: integer ``[B, N]`` label ids, right-padded.
    label_paddings: ``[B, N]`` array, 1 for padded label positions (a run of 0 then a run of 1).
    blank_id: the class index of the blank.
    log_epsilon: the stand-in for ``log 0``.

  Returns:
    ``(loss, logalpha_blank, logalpha_label)``: the ``[B]`` losses and the ``[T, B, N + 1]`` and
    ``[T, B, N]`` log forward variables, all in ``logits``' dtype (computed in at least float32).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> logits = jnp.zeros((1, 3, 3))
    >>> labels, paddings = jnp.array([[1, 2]]), jnp.zeros((1, 2))
    >>> loss, blank, label = steadax.ctc_loss_with_forward_probs(
    ...     logits, jnp.zeros((1, 3)), labels, paddings)
    >>> loss.tolist(), blank.shape, label.shape
    ([1.6864], (3, 1, 3), (3, 1, 2))

  References:
    Graves et al., `Connectionist Temporal Classification: Labelling Unsegmented Sequence Data
    with Recurrent Neural Networks <https://doi.org/10.1145/1143844.1143891>`_, ICML 2006,
    eqs. 6-8.
  """
  return _ctc_forward("ctc_loss_with_forward_probs", logits, logit_paddings, labels,
                      label_paddings, blank_id, log_epsilon)


def ctc_loss(
    logits: ArrayLike,
    logit_paddings: ArrayLike,
    labels: ArrayLike,
    label_paddings: ArrayLike,
    *,
    blank_id: int = 0,
    log_epsilon: ArrayLike = -1e5,
) -> jax.Array:
  r"""CTC loss: minus the log-probability of the label sequence, summed over alignments.

  See :func:`ctc_loss_with_forward_probs` for the definition and the arguments.

  Args:
    logits: floating ``[B, T, K]`` logits, ``K`` classes including the blank.
    logit_paddings: ``[B, T]`` array, 1 where a frame is padding and 0 otherwise.
    labels: integer ``[B, N]`` label ids, right-padded.
    label_paddings: ``[B, N]`` array, 1 for padded label positions.
    blank_id: the class index of the blank.
    log_epsilon: the stand-in for ``log 0``.

  Returns:
    The ``[B]`` losses in ``logits``' dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> logits = jnp.zeros((1, 3, 3))
    >>> steadax.ctc_loss(logits, jnp.zeros((1, 3)), jnp.array([[1, 2]]),
    ...                  jnp.zeros((1, 2))).tolist()
    [1.6864]

  References:
    Graves et al., `Connectionist Temporal Classification: Labelling Unsegmented Sequence Data
    with Recurrent Neural Networks <https://doi.org/10.1145/1143844.1143891>`_, ICML 2006, eq. 14.
  """
  loss, _, _ = _ctc_forward("ctc_loss", logits, logit_paddings, labels, label_paddings,
                            blank_id, log_epsilon)
  return loss
