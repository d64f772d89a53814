"""Gradient centralisation.

References:
  Yong et al., "Gradient Centralization: A New Optimization Technique for Deep Neural Networks",
  ECCV 2020 (arXiv:2004.01461, eq. 3).
"""

import jax.numpy as jnp

from .._core._docs import shared_args
from .._core._transformation import Transformation

__all__ = ["centralize"]


class Centralize(Transformation):
  name = "centralize"

  def update_fn(self, updates, state, params=None, **extra_args):
    def leaf(k, g):
      if g.ndim < 2:
        return g
      # g - mean(g) over every axis but the first (eq. 3); the primitive runs it in at least
      # float32: a bfloat16 mean of a wide row would lose the small deviations.
      return g - jnp.mean(g, axis=tuple(range(1, g.ndim)), keepdims=True)

    out, = self.leafwise(leaf, updates, params=params)
    return out, state


@shared_args
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
