"""Self-supervised (metric learning) losses: NT-Xent and the triplet margin loss."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core._policy import cast, compute_dtype
from ._common import (
    hyper,
    masked_max,
    normalize_axes,
    require_floating,
    require_numeric,
    require_rank,
    result_dtype,
)

__all__ = ["ntxent", "triplet_margin_loss"]


def ntxent(embeddings: ArrayLike, labels: ArrayLike, temperature: ArrayLike = 0.07) -> jax.Array:
  r"""Normalized temperature-scaled cross entropy (NT-Xent), the SimCLR contrastive loss.

  With :math:`s_{ij}` the cosine similarity of embeddings ``i`` and ``j`` divided by the
  temperature, every positive pair ``(i, j)`` (same label, ``i != j``) contributes

  .. math::
    -\log \frac{e^{s_{ij}}}{e^{s_{ij}} + \sum_{k:\, y_k \ne y_i} e^{s_{ik}}}

  and the loss is the mean over positive pairs. It is 0 when the batch has no positive pair
  (Optax returns NaN there).

  Args:
    embeddings: floating ``[batch, features]`` embeddings.
    labels: ``[batch]`` group ids; embeddings with the same id form positive pairs.
    temperature: the temperature dividing the similarities.

  Returns:
    The scalar loss in ``embeddings``' dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> emb = jnp.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> steadax.ntxent(emb, jnp.array([0, 0, 1, 1]), temperature=0.5).tolist()
    0.2965

  References:
    Chen et al., `A Simple Framework for Contrastive Learning of Visual Representations
    <https://arxiv.org/abs/2002.05709>`_, ICML 2020, eq. 1.
  """
  fn = "ntxent"
  embeddings = require_floating(fn, "embeddings", embeddings)
  labels = require_numeric(fn, "labels", labels)
  require_rank(fn, "embeddings", embeddings, 2, "[batch, features]")
  if labels.shape != embeddings.shape[:1]:
    raise ValueError(
        f"{fn}: labels must have shape {embeddings.shape[:1]} (one label per embedding), got "
        f"{labels.shape}."
    )
  out_dtype = result_dtype(embeddings)
  cdt = compute_dtype(out_dtype)
  e = cast(embeddings, cdt)
  # The norm floor is the input dtype's epsilon, as in Optax, so results agree for tiny vectors.
  floor = float(jnp.finfo(embeddings.dtype).eps)
  e = e / jnp.sqrt(jnp.maximum(jnp.sum(e * e, axis=1, keepdims=True), floor))
  sim = jnp.matmul(e, e.T, precision=jax.lax.Precision.HIGHEST) / hyper(
      fn, "temperature", temperature, cdt)
  same = labels[:, None] == labels[None, :]
  positive = same & ~jnp.eye(labels.shape[0], dtype=jnp.bool_)
  # -log(e^s / (e^s + sum_n e^n)) = softplus(lse(n) - s), with lse(n) - s taken as (m - s) +
  # log sum e^(n - m) for the row's largest negative m: two logits near 1 / temperature are never
  # subtracted after rounding (the form logaddexp(s, lse) - s lost 3-4 float32 ulps of log 3 at
  # similarities of 1 / 0.07, Optax's docstring example).
  negative = ~same
  m = masked_max(sim, (1,), negative)
  total = jnp.sum(jnp.exp(jnp.where(negative, sim - m, -jnp.inf)), axis=1, keepdims=True)
  has_negative = total > 0
  log_total = jnp.log(jnp.where(has_negative, total, jnp.ones_like(total)))
  gap = jnp.where(has_negative, (m - sim) + log_total, -jnp.inf)
  pair_loss = jax.nn.softplus(gap)
  num_pairs = jnp.sum(positive, dtype=jnp.int32)
  total = jnp.sum(jnp.where(positive, pair_loss, jnp.zeros_like(pair_loss)))
  loss = total / cast(jnp.maximum(num_pairs, 1), cdt)
  return cast(loss, out_dtype)


def triplet_margin_loss(
    anchors: ArrayLike,
    positives: ArrayLike,
    negatives: ArrayLike,
    axis: int = -1,
    norm_degree: ArrayLike = 2,
    margin: ArrayLike = 1.0,
    eps: ArrayLike = 1e-6,
) -> jax.Array:
  r"""Triplet margin loss: the positive should be closer to the anchor than the negative.

  .. math::
    \ell = \max(d(a, p) - d(a, n) + \text{margin}, 0), \quad
    d(x, y) = \Big(\sum |x - y|^q + \epsilon\Big)^{1/q}

  with ``q = norm_degree``. The absolute value makes ``d`` a distance for every degree; for even
  degrees (the default 2) this equals Optax, which raises signed differences to the power.

  Args:
    anchors: floating ``[batch, features]`` anchor embeddings.
    positives: embeddings similar to the anchors, same shape.
    negatives: embeddings dissimilar to the anchors, same shape.
    axis: the feature axis.
    norm_degree: the degree ``q`` of the distance.
    margin: the margin between the two distances.
    eps: added inside the root, so the distance is differentiable at 0.

  Returns:
    The per-triplet losses (shape without ``axis``), in the inputs' floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> anchors = jnp.array([[0.0, 0.0], [1.0, 1.0]])
    >>> positives = jnp.array([[0.1, 0.1], [1.1, 1.1]])
    >>> negatives = jnp.array([[1.0, 0.0], [0.0, 1.0]])
    >>> steadax.losses.triplet_margin_loss(anchors, positives, negatives).tolist()
    [0.1414, 0.1414]

  References:
    Balntas et al., `Learning local feature descriptors with triplets and shallow convolutional
    neural networks <https://doi.org/10.5244/C.30.119>`_, BMVC 2016, eq. 1.
  """
  fn = "triplet_margin_loss"
  anchors = require_floating(fn, "anchors", anchors)
  positives = require_floating(fn, "positives", positives)
  negatives = require_floating(fn, "negatives", negatives)
  try:
    shape = np.broadcast_shapes(anchors.shape, positives.shape, negatives.shape)
  except ValueError:
    raise ValueError(
        f"{fn}: anchors {anchors.shape}, positives {positives.shape} and negatives "
        f"{negatives.shape} do not broadcast."
    ) from None
  axes = normalize_axes(fn, axis, len(shape))
  out_dtype = result_dtype(anchors, positives, negatives)
  cdt = compute_dtype(out_dtype)
  a, p, n = (jnp.broadcast_to(cast(x, cdt), shape) for x in (anchors, positives, negatives))
  q = hyper(fn, "norm_degree", norm_degree, cdt)
  e = hyper(fn, "eps", eps, cdt)

  def distance(x, y):
    return jnp.power(jnp.sum(jnp.power(jnp.abs(x - y), q), axis=axes) + e, 1.0 / q)

  loss = jnp.maximum(distance(a, p) - distance(a, n) + hyper(fn, "margin", margin, cdt), 0.0)
  return cast(loss, out_dtype)
