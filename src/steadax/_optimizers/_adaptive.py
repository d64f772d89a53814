"""Adaptive optimizers that are not Adam: adadelta, novograd (layer-wise) and sm3 (low memory)."""

from typing import Any
from jax.typing import ArrayLike

from .._core._checks import check_schedule_or_scalar
from .._core._combine import Chain, chain
from .._core._types import MaskOrFn, ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._adaptive import scale_by_adadelta, scale_by_novograd, scale_by_sm3
from ..transforms._decay import add_decayed_weights
from ..transforms._scaling import scale_by_learning_rate

__all__ = ["adadelta", "novograd", "sm3"]


@shared_args
def adadelta(
    learning_rate: ScalarOrSchedule | None = None,
    rho: ArrayLike = 0.9,
    eps: ArrayLike = 1e-6,
    weight_decay: ScalarOrSchedule = 0.0,
    weight_decay_mask: MaskOrFn = None,
) -> Chain:
  """Adadelta: ``chain(add_decayed_weights(weight_decay, weight_decay_mask), scale_by_adadelta(rho,
  eps), scale_by_learning_rate(learning_rate))``.

  Args:
    learning_rate: a scalar or a schedule. None means no learning rate, as in the paper: the
      update is ``-scale_by_adadelta(g)`` (Optax 0.2.8 instead returns ``+scale_by_adadelta(g)``
      for None, i.e. gradient *ascent*; the state structure is the same).
    rho: decay of the running averages, in [0, 1).
    eps: added inside the square roots (positive; it sets the size of the first steps).
    weight_decay: weight decay added to the gradient before preconditioning (scalar or schedule).
    weight_decay_mask: where to apply weight decay.

  Returns:
    The optimizer; its state is ``(EmptyState | ..., ScaleByAdaDeltaState, EmptyState | ...)``.

  References:
    Zeiler, "ADADELTA: An Adaptive Learning Rate Method", 2012 (arXiv:1212.5701).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.adadelta()
    >>> p = jnp.array([1.0])
    >>> bool(steadax.apply_updates(p, opt.update(jnp.array([2.0]), opt.init(p), p)[0])[0] < 1.0)
    True
  """
  if learning_rate is None:
    # Descend with unit step (Zeiler's eq. 14): -1 times the preconditioned gradient.
    last = scale_by_learning_rate(1.0)
  else:
    check_schedule_or_scalar("adadelta", "learning_rate", learning_rate)
    last = scale_by_learning_rate(learning_rate)
  return chain(
      add_decayed_weights(weight_decay, mask=weight_decay_mask),
      scale_by_adadelta(rho, eps),
      last,
  )


@shared_args
def novograd(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.25,
    eps: ArrayLike = 1e-6,
    eps_root: ArrayLike = 0.0,
    weight_decay: ScalarOrSchedule = 0.0,
) -> Chain:
  """NovoGrad: ``chain(scale_by_novograd(...), scale_by_learning_rate(learning_rate))``.

  Momentum of gradients normalised by a per-layer (per-leaf) second moment, with weight decay
  inside the momentum, see ``scale_by_novograd``. ``params`` must be passed to ``update``.

  Args:
    learning_rate: <shared>
    b1: momentum, in [0, 1).
    b2: decay of the per-layer second moment, in [0, 1).
    eps: <shared>
    eps_root: <shared>
    weight_decay: weight decay (non-negative).

  Returns:
    The optimizer; its state is ``(ScaleByNovogradState, EmptyState | ScaleByScheduleState)``.

  References:
    Ginsburg et al., "Stochastic Gradient Methods with Layer-wise Adaptive Moments for Training of
    Deep Networks", 2019 (arXiv:1905.11286).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.novograd(0.1)
    >>> p = jnp.array([3.0, 4.0])
    >>> steadax.apply_updates(p, opt.update(p, opt.init(p), p)[0])
    Array([2.94, 3.92], dtype=float32)
  """
  return chain(
      scale_by_novograd(b1, b2, eps, eps_root, weight_decay),
      scale_by_learning_rate(learning_rate),
  )


@shared_args
def sm3(learning_rate: ScalarOrSchedule, momentum: ArrayLike = 0.9) -> Chain:
  """SM3: ``chain(scale_by_sm3(momentum), scale_by_learning_rate(learning_rate))``.

  Adagrad-like preconditioning with one accumulator per row and column (per axis) of each
  parameter instead of one per entry, see ``scale_by_sm3``. Scalar parameters work (their single
  accumulator is exact); Optax 0.2.8 fails on them.

  Args:
    learning_rate: a scalar (or a schedule: a steadax extension).
    momentum: momentum of the preconditioned gradients, in [0, 1).

  Returns:
    The optimizer; its state is ``(ScaleBySM3State, EmptyState)`` for a scalar learning rate.

  References:
    Anil et al., "Memory-Efficient Adaptive Optimization", NeurIPS 2019 (arXiv:1901.11150).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.sm3(1.0)
    >>> p = jnp.asarray(2.0)
    >>> steadax.apply_updates(p, opt.update(jnp.asarray(4.0), opt.init(p), p)[0])
    Array(1.9, dtype=float32)
  """
  return chain(scale_by_sm3(momentum), scale_by_learning_rate(learning_rate))

