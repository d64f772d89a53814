"""Gradient centralisation.

References:
  Yong et al., "Gradient Centralization: A New Optimization Technique for Deep Neural Networks",
  ECCV 2020 (arXiv:2004.01461, eq. 3).
"""

from __future__ import annotations

import jax.numpy as jnp

from .._core._base import Transformation
from .._core._policy import as_compute, compute_dtype
from .._core._tree import tree_map

__all__ = ["centralize"]


class Centralize(Transformation):
  name = "centralize"

  def update_fn(self, updates, state, params=None, **extra_args):
    def leaf(g):
      if g.ndim < 2:
        return g
      cdt = compute_dtype(g.dtype)
      gc = as_compute(g, cdt)
      # The mean in at least float32: a bfloat16 mean of a wide row loses the small deviations.
      return (gc - jnp.mean(gc, axis=tuple(range(1, g.ndim)), keepdims=True)).astype(g.dtype)

    return tree_map(leaf, updates), state


def centralize() -> Transformation:
  """Gradient centralisation: subtracts from each slice ``g[i]`` of a leaf its mean.

  Leaves with at least two axes are centred over all axes but the first (each output unit's
  incoming weights get a zero-mean update); vectors and scalars pass through.

  Returns:
    A stateless transformation.

  References:
    Yong et al., "Gradient Centralization: A New Optimization Technique for Deep Neural Networks",
    ECCV 2020 (arXiv:2004.01461), eq. 3.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.centralize()
    >>> g = jnp.array([[1.0, 2.0, 3.0], [4.0, 5.0, 9.0]])
    >>> tx.update(g, tx.init(g))[0]
    Array([[-1.,  0.,  1.],
           [-2., -1.,  3.]], dtype=float32)
  """
  return Centralize()
