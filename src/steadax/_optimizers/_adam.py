"""The Adam family: adam, adamw, nadam, nadamw, amsgrad, adamax, adamaxw.

Each is a chain of ``scale_by_*`` blocks, optional decoupled weight decay, and the learning rate;
see ``steadax.transforms`` for the maths and references.
"""

from jax.typing import ArrayLike, DTypeLike

from .._core._checks import check_nonnegative
from .._core._combine import Chain, chain
from .._core._types import MaskOrFn, ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._adam import scale_by_adam, scale_by_adamax, scale_by_amsgrad
from ..transforms._decay import add_decayed_weights
from ..transforms._scaling import scale_by_learning_rate

__all__ = ["adam", "adamw", "nadam", "nadamw", "amsgrad", "adamax", "adamaxw"]


@shared_args
def adam(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: DTypeLike | None = None,
    *,
    nesterov: bool = False,
    nu_dtype: DTypeLike | None = None,
) -> Chain:
  """Adam (Kingma & Ba 2015): ``chain(scale_by_adam(...), scale_by_learning_rate(lr))``.

  Args:
    learning_rate: <shared>
    b1: <shared>
    b2: <shared>
    eps: <shared>
    eps_root: <shared>
    mu_dtype: dtype of the first moment (e.g. ``jnp.bfloat16`` to halve its memory).
    nesterov: Nesterov momentum (NAdam).
    nu_dtype: dtype of the second moment (steadax extension).

  Returns:
    The optimizer; its state is ``(ScaleByAdamState, EmptyState | ScaleByScheduleState)``.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> opt = steadax.adam(0.1)
    >>> params = {"w": jnp.array([1.0, -1.0])}
    >>> state = opt.init(params)
    >>> grads = jax.grad(lambda p: jnp.sum(p["w"] ** 2))(params)
    >>> updates, state = opt.update(grads, state, params)
    >>> steadax.apply_updates(params, updates)["w"]
    Array([ 0.9, -0.9], dtype=float32)
  """
  return chain(
      scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov, nu_dtype=nu_dtype),
      scale_by_learning_rate(learning_rate),
  )


@shared_args
def adamw(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: DTypeLike | None = None,
    weight_decay: ScalarOrSchedule | ArrayLike = 1e-4,
    mask: MaskOrFn = None,
    *,
    nesterov: bool = False,
    nu_dtype: DTypeLike | None = None,
) -> Chain:
  """AdamW: Adam with decoupled weight decay (Loshchilov & Hutter, ICLR 2019).

  ``chain(scale_by_adam(...), add_decayed_weights(weight_decay, mask), scale_by_learning_rate(lr))``.

  Args:
    learning_rate: <shared>
    b1: <shared>
    b2: <shared>
    eps: <shared>
    eps_root: <shared>
    mu_dtype: <shared>
    weight_decay: decay coefficient (scalar or schedule), multiplied by the learning rate.
    mask: <shared>
    nesterov: Nesterov momentum (NAdamW).
    nu_dtype: dtype of the second moment (steadax extension).

  Returns:
    The optimizer.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.adamw(0.1, weight_decay=0.0)
    >>> p = jnp.array([1.0])
    >>> steadax.apply_updates(p, opt.update(jnp.array([3.0]), opt.init(p), p)[0])
    Array([0.9], dtype=float32)
  """
  # AdamW's decay shrinks the weights; add_decayed_weights itself takes either sign (fromage).
  check_nonnegative("adamw", "weight_decay", weight_decay)
  return chain(
      scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov, nu_dtype=nu_dtype),
      add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate),
  )


@shared_args
def nadam(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: DTypeLike | None = None,
    *,
    nesterov: bool = True,
    nu_dtype: DTypeLike | None = None,
) -> Chain:
  """NAdam (Dozat 2016): ``adam`` with Nesterov momentum.

  Args:
    learning_rate: <shared>
    b1: <shared>
    b2: <shared>
    eps: <shared>
    eps_root: <shared>
    mu_dtype: <shared>
    nesterov: Nesterov momentum (True here; False gives ``adam``).
    nu_dtype: <shared>

  Returns:
    The optimizer, ``adam``'s chain.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.nadam(0.1)
    >>> opt.init(jnp.zeros(2))[0].count
    Array(0, dtype=int32)
  """
  return adam(learning_rate, b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov, nu_dtype=nu_dtype)


@shared_args
def nadamw(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: DTypeLike | None = None,
    weight_decay: ScalarOrSchedule = 1e-4,
    mask: MaskOrFn = None,
    *,
    nesterov: bool = True,
    nu_dtype: DTypeLike | None = None,
) -> Chain:
  """NAdamW: ``adamw`` with Nesterov momentum.

  Args:
    learning_rate: <shared>
    b1: <shared>
    b2: <shared>
    eps: <shared>
    eps_root: <shared>
    mu_dtype: <shared>
    weight_decay: <shared>
    mask: <shared>
    nesterov: Nesterov momentum (True here; False gives ``adamw``).
    nu_dtype: <shared>

  Returns:
    The optimizer, ``adamw``'s chain.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> len(steadax.nadamw(0.1).init(jnp.zeros(2)))
    3
  """
  return adamw(learning_rate, b1, b2, eps, eps_root, mu_dtype, weight_decay, mask,
               nesterov=nesterov, nu_dtype=nu_dtype)


@shared_args
def amsgrad(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: DTypeLike | None = None,
    bias_correction_mu: bool = True,
    bias_correction_nu: bool = True,
) -> Chain:
  """AMSGrad (Reddi et al. 2018): ``chain(scale_by_amsgrad(...), scale_by_learning_rate(lr))``.

  Args:
    learning_rate: <shared>
    b1: <shared>
    b2: <shared>
    eps: <shared>
    eps_root: <shared>
    mu_dtype: <shared>
    bias_correction_mu: bias-correct the first moment.
    bias_correction_nu: bias-correct the second moment.

  Returns:
    The optimizer.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.amsgrad(0.1)
    >>> p = jnp.array([1.0])
    >>> steadax.apply_updates(p, opt.update(jnp.array([3.0]), opt.init(p), p)[0])
    Array([0.9], dtype=float32)
  """
  return chain(
      scale_by_amsgrad(b1, b2, eps, eps_root, mu_dtype, bias_correction_mu, bias_correction_nu),
      scale_by_learning_rate(learning_rate),
  )


@shared_args
def adamax(learning_rate: ScalarOrSchedule, b1: ArrayLike = 0.9, b2: ArrayLike = 0.999, eps: ArrayLike = 1e-8) -> Chain:
  """Adamax (Kingma & Ba 2015, §7.1): Adam with the infinity norm.

  Args:
    learning_rate: <shared>
    b1: <shared>
    b2: decay of the infinity-norm moment.
    eps: added to ``|g|``.

  Returns:
    The optimizer.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.adamax(0.1)
    >>> p = jnp.array([1.0])
    >>> steadax.apply_updates(p, opt.update(jnp.array([3.0]), opt.init(p), p)[0])
    Array([0.9], dtype=float32)
  """
  return chain(scale_by_adamax(b1, b2, eps), scale_by_learning_rate(learning_rate))


@shared_args
def adamaxw(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 1e-4,
    mask: MaskOrFn = None,
) -> Chain:
  """AdamaxW: Adamax with decoupled weight decay.

  Args:
    learning_rate: <shared>
    b1: <shared>
    b2: decay of the infinity-norm moment.
    eps: added to ``|g|``.
    weight_decay: decay coefficient (scalar or schedule).
    mask: where to apply weight decay.

  Returns:
    The optimizer.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> len(steadax.adamaxw(0.1).init(jnp.zeros(2)))
    3
  """
  return chain(
      scale_by_adamax(b1, b2, eps),
      add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate),
  )
