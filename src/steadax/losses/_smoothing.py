"""Label smoothing."""

import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._policy import cast, compute_dtype
from ._common import (
    Axis,
    check_where,
    hyper,
    normalize_axes,
    require_floating,
    result_dtype,
)

__all__ = ["smooth_labels"]


def smooth_labels(labels: ArrayLike, alpha: ArrayLike, *, axis: Axis = -1, where: ArrayLike | None = None) -> jax.Array:
  r"""Label smoothing: mix the labels with the uniform distribution over the classes.

  .. math::
    \tilde y = (1 - \alpha)\, y + \alpha / K

  with ``K`` the number of classes along ``axis`` (the number of included classes when
  ``where`` is given). Every entry is smoothed, included or not; the mask only sets ``K``. A row
  with no included class gets ``(1 - alpha) y`` (Optax divides by zero there).

  Args:
    labels: floating one-hot labels (or distributions).
    alpha: the smoothing factor in ``[0, 1]``.
    axis: the class axis or axes.
    where: optional boolean mask broadcastable to ``labels`` selecting the classes that count.

  Returns:
    The smoothed labels, of ``labels``' shape and dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.smooth_labels(jnp.array([0.0, 1.0, 0.0, 0.0]), 0.2)
    Array([0.05, 0.85, 0.05, 0.05], dtype=float32)

  References:
    Szegedy et al., `Rethinking the Inception Architecture for Computer Vision
    <https://arxiv.org/abs/1512.00567>`_, CVPR 2016, section 7; Müller, Kornblith and Hinton,
    `When does label smoothing help? <https://arxiv.org/abs/1906.02629>`_, NeurIPS 2019, eq. 1.
  """
  fn = "smooth_labels"
  labels = require_floating(fn, "labels", labels)
  axes = normalize_axes(fn, axis, labels.ndim)
  out_dtype = result_dtype(labels)
  cdt = compute_dtype(out_dtype)
  y = cast(labels, cdt)
  a = hyper(fn, "alpha", alpha, cdt)
  if where is None:
    uniform = a / math.prod(labels.shape[i] for i in axes)
  else:
    mask = check_where(fn, where, labels.shape, None, target="labels")
    count = jnp.sum(mask, axis=axes, keepdims=True, dtype=jnp.int32)
    safe_count = cast(jnp.maximum(count, 1), cdt)
    uniform = jnp.where(count > 0, a / safe_count, jnp.zeros_like(safe_count))
  return cast((1.0 - a) * y + uniform, out_dtype)
