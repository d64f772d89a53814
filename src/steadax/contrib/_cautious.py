"""cautious: any optimizer's update, kept only where it descends (Liang et al. 2024)."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core._adapters import as_inner
from .._core._checks import check_range
from .._core._docs import shared_args
from .._core._interface import GradientTransformation
from .._core._leafwise import Scalars
from .._core._module import child_field, hyper_field
from .._core._roles import INNER, state_roles
from .._core._transformation import Transformation
from .._core._types import OptState

__all__ = ["CautiousState", "cautious"]


@state_roles(inner_state=INNER)
class CautiousState(NamedTuple):
  """State of ``cautious``: the wrapped optimizer's state.

  Attributes:
    inner_state: the inner optimizer's state.
  """

  inner_state: OptState


def _check_min_fraction(owner: Any, name: str, value: Any) -> None:
  check_range(owner, name, value, 0.0, 1.0, low_open=True)


class Cautious(Transformation):
  name = "cautious"
  State = CautiousState
  # A mean over each tensor's kept coordinates: not a function of each coordinate alone, so flat
  # buffers (which would take the mean over all leaves at once) are refused.
  elementwise = False
  inner: Any = child_field()
  min_fraction: Any = hyper_field(1e-3, check=_check_min_fraction)

  def init_fn(self, params):
    return CautiousState(inner_state=self.inner.init(params))

  def update_fn(self, updates, state, params=None, **extra_args):
    proposed, inner_state = self.inner.update(updates, state.inner_state, params, **extra_args)

    def leaf(k, u, g):
      # Liang et al. 2024, Algorithm 1 (C-AdamW) and its reference code: keep the coordinates where
      # the update agrees with the descent direction, and divide by the fraction kept (at least
      # min_fraction) so the update's mean magnitude is kept. Optax adds updates to the
      # parameters, so descent is an update of the opposite sign to the gradient; for complex
      # leaves, Re(u conj(g)) < 0.
      keep = jnp.real(u * jnp.conj(g)) < 0
      fraction = jnp.mean(keep, dtype=jnp.real(u).dtype) if keep.size else jnp.ones([], jnp.real(u).dtype)
      return jnp.where(keep, u / jnp.maximum(fraction, k.min_fraction), jnp.zeros_like(u))

    out, = self.leafwise(leaf, proposed, params=params, reads=(updates,),
                         scalars=Scalars(min_fraction=self.min_fraction))
    return out, CautiousState(inner_state=inner_state)


@shared_args
def cautious(inner: GradientTransformation, min_fraction: float = 1e-3) -> Cautious:
  """Masks the coordinates of ``inner``'s update that would not descend, and rescales the rest.

  The Cautious Optimizer (C-AdamW, C-Lion, ...) of Liang et al. (2024): for each parameter tensor,
  the update ``u`` of ``inner`` is kept only where it points against the gradient ``g`` (a descent
  direction coordinate by coordinate: ``u * g < 0``, since updates are added to the parameters),
  set to zero elsewhere, and divided by the fraction of coordinates kept (at least
  ``min_fraction``) so its average magnitude does not shrink:

  ``u <- u * 1[u g < 0] / max(mean(1[u g < 0]), min_fraction)``

  Every kept coordinate decreases the loss to first order, so the masked update is a descent
  direction whenever ``inner``'s is not orthogonal to the gradient. The inner optimizer's state
  is updated as it would be unwrapped (its momentum still sees every gradient). Wrap the whole
  optimizer (``cautious(adamw(...))``), so that ``g`` is the gradient: inside a chain,
  ``cautious`` compares with whatever updates reach it.

  Args:
    inner: the optimizer whose updates are masked (any ``init``/``update`` pair).
    min_fraction: the smallest fraction the rescale divides by, in (0, 1]; bounds the rescale of
      a tensor whose coordinates almost all disagree (the reference code's ``1e-3``).

  Returns:
    A transformation whose state is ``CautiousState(inner_state)``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.contrib.cautious(steadax.sgd(0.1, momentum=0.9))
    >>> params = jnp.array([1.0, 1.0])
    >>> state = tx.init(params)
    >>> u, state = tx.update(jnp.array([1.0, 1.0]), state, params)   # builds momentum
    >>> tx.update(jnp.array([1.0, -0.05]), state, params)[0]   # the second coordinate would ascend
    Array([-0.38, 0.  ], dtype=float32)

  References:
    Liang, Chen, Liu & Liu, `Cautious Optimizers: Improving Training with One Line of Code
    <https://arxiv.org/abs/2411.16085>`_, 2024 (Algorithm 1 and the authors' code).
  """
  return Cautious(as_inner(inner, "cautious", "inner"), min_fraction)
