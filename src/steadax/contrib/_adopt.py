"""ADOPT (Taniguchi et al., "ADOPT: Modified Adam Can Converge with Any β2 with the Optimal Rate",
NeurIPS 2024).

Adam with two changes that make it converge for any ``b2`` (Algorithm 2 of the paper): the gradient
is normalised by the *previous* second moment (so the two are independent), and the momentum
averages the normalised gradients:

    step 0:  v = |g|^2, no update;
    step t:  m = b1 m + (1 - b1) clip(g / max(sqrt(v_{t-1}), eps), c(t)),   v = b2 v + (1 - b2) |g|^2,
             u = m     (Nesterov: b1 m + (1 - b1) clip(...)).

``c(t) = clip_value_fn(t)`` (default ``t^0.25``) is the clipping of the paper's Section 4 that
stabilises the first steps. Complex normalised gradients have their modulus clipped (phase kept);
``nu`` is real for complex parameters.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike, DTypeLike

from .._core._transformation import Transformation
from .._core._checks import check_decay_below_one, check_nonnegative
from .._core._combine import chain
from .._core._leafwise import Scalars
from .._core._module import hyper_field, static_field
from .._core._policy import safe_increment
from .._core._types import ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._adam import ScaleByAdamState
from ..transforms._moments import abs_sq, moving_average
from ..transforms._scaling import scale_by_learning_rate

__all__ = ["scale_by_adopt", "adopt"]


def clip_modulus(x: jax.Array, bound: jax.Array) -> jax.Array:
  """``clip(x, -bound, bound)``; complex ``x`` has its modulus bounded and keeps its phase.

  For leaf functions (standard promotion: a complex ``x`` times its real factor stays complex).
  """
  if not jnp.iscomplexobj(x):
    return jnp.clip(x, -bound, bound)
  modulus = jnp.abs(x)
  over = modulus > bound
  one = jnp.ones_like(modulus)
  return x * jnp.where(over, bound / jnp.where(over, modulus, one), one)


def _fourth_root(count: jax.Array) -> jax.Array:
  """The default clipping bound ``t^(1/4)`` of ADOPT's Section 4."""
  return count**0.25  # as Optax's: the int32 count to a Python power, a weakly typed float


class ScaleByAdopt(Transformation):
  name = "scale_by_adopt"
  elementwise = True
  State = ScaleByAdamState
  b1: Any = hyper_field(0.9, check=check_decay_below_one)
  b2: Any = hyper_field(0.9999, check=check_decay_below_one)
  eps: Any = hyper_field(1e-06, check=check_nonnegative)
  mu_dtype: Any = static_field(default=None)
  nesterov: bool = static_field(default=False)
  use_clipping: bool = static_field(default=True)
  clip_value_fn: Callable = static_field(default=_fourth_root)

  def __post_init__(self):
    if not callable(self.clip_value_fn):
      raise TypeError(
          f"{self.name}: clip_value_fn must be a callable of the int32 count, got {self.clip_value_fn!r}.")

  def update_fn(self, updates, state, params=None, **extra_args):
    started = state.count > 0
    with jax.numpy_dtype_promotion("standard"):  # Optax's arithmetic on the scalars, as written
      clip_value = self.clip_value_fn(state.count) if self.use_clipping else None
      # The first step only records v = |g|^2 (b2 -> 0) and keeps m (b1 -> 1); Optax forms 1 - b
      # from these selected values.
      b1 = jnp.where(started, self.b1, 1)
      b2 = jnp.where(started, self.b2, 0)
      one_minus_b1, one_minus_b2 = 1 - b1, 1 - b2

    def leaf(k, g, m, v):
      # Algorithm 2: normalise by the *previous* second moment, clip (Section 4), then average.
      normalised = g / jnp.maximum(jnp.sqrt(v), k.eps)
      if k.clip is not None:
        normalised = clip_modulus(normalised, k.clip)
      # Selected, not multiplied by a zero weight: with eps = 0 the first normalisation is g / 0.
      m_new = jnp.where(started, moving_average(k.b1, m, normalised, k.one_minus_b1), m)
      v = moving_average(k.b2, v, abs_sq(g), k.one_minus_b2)
      if self.nesterov:
        return jnp.where(started, moving_average(k.b1, m_new, normalised, k.one_minus_b1), m), m_new, v
      return m_new, m_new, v

    scalars = Scalars(b1=b1, one_minus_b1=one_minus_b1, b2=b2, one_minus_b2=one_minus_b2, eps=self.eps,
                      clip=clip_value)

    out, mu, nu = self.leafwise(leaf, updates, state.mu, state.nu, params=params, scalars=scalars)
    return out, ScaleByAdamState(count=safe_increment(state.count), mu=mu, nu=nu)


@shared_args
def scale_by_adopt(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.9999,
    eps: ArrayLike = 1e-6,
    mu_dtype: DTypeLike | None = None,
    *,
    nesterov: bool = False,
    use_clipping: bool = True,
    clip_value_fn: Callable[[jax.Array], jax.Array] = _fourth_root,
) -> Transformation:
  """Rescales updates by ADOPT: momentum of gradients normalised by the previous second moment.

  The first update is zero (it only records the second moment).

  Args:
    b1: decay of the momentum.
    b2: <shared>
    eps: lower bound of ``sqrt(v)`` in the normalisation.
    mu_dtype: dtype of the momentum (default: each parameter's).
    nesterov: <shared>
    use_clipping: clip the normalised gradient to ``[-c, c]`` with ``c = clip_value_fn(count)``.
    clip_value_fn: the clipping bound as a function of the int32 count (default ``count^0.25``).

  Returns:
    A transformation with ``ScaleByAdamState(count, mu, nu)``.

  References:
    Taniguchi et al., "ADOPT: Modified Adam Can Converge with Any β2 with the Optimal Rate",
    NeurIPS 2024 (Algorithm 2).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.contrib.scale_by_adopt(b1=0.5)
    >>> s = tx.init(jnp.zeros(1))
    >>> u, s = tx.update(jnp.array([2.0]), s); u  # step 0 records v = 4
    Array([0.], dtype=float32)
    >>> tx.update(jnp.array([2.0]), s)[0]  # 0.5 * clip(2 / 2, 1)
    Array([0.5], dtype=float32)
  """
  return ScaleByAdopt(b1, b2, eps, mu_dtype=mu_dtype, nesterov=nesterov, use_clipping=use_clipping,
                      clip_value_fn=clip_value_fn)


@shared_args
def adopt(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.9999,
    eps: ArrayLike = 1e-6,
    mu_dtype: DTypeLike | None = None,
    *,
    nesterov: bool = False,
    use_clipping: bool = True,
    clip_value_fn: Callable[[jax.Array], jax.Array] = _fourth_root,
) -> Transformation:
  """ADOPT: Adam that converges for any ``b2`` (normalise first, then average).

  Args:
    learning_rate: <shared>
    b1: decay of the momentum.
    b2: <shared>
    eps: lower bound of ``sqrt(v)``.
    mu_dtype: dtype of the momentum.
    nesterov: <shared>
    use_clipping: clip the normalised gradient (recommended: stabilises the first steps).
    clip_value_fn: the clipping bound as a function of the int32 count.

  Returns:
    ``chain(scale_by_adopt, scale_by_learning_rate)``, as in Optax.

  References:
    Taniguchi et al., "ADOPT: Modified Adam Can Converge with Any β2 with the Optimal Rate",
    NeurIPS 2024.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.adopt(0.1)
    >>> p = {"w": jnp.ones(2, jnp.float16)}
    >>> opt.update(p, opt.init(p), p)[0]["w"].dtype
    dtype('float16')
  """
  return chain(ScaleByAdopt(b1, b2, eps, mu_dtype=mu_dtype, nesterov=nesterov, use_clipping=use_clipping,
                            clip_value_fn=clip_value_fn), scale_by_learning_rate(learning_rate))
