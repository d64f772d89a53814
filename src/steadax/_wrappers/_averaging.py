"""Parameter averaging: an exponential moving average (EMA) or a uniform (SWA) average of the
parameters, kept in the optimizer's state as the inner optimizer runs.

The wrapper passes the inner optimizer's updates through unchanged and folds the parameters those
updates produce, ``apply_updates(params, updates)``, into an average held in its state. The
average lives beside the optimizer's other state: it is checkpointed, sharded and restored with
it, and ``nnx.Optimizer`` / ``TrainState`` loops carry it without any change; ``averaged_params``
reads it back to evaluate or export.

References:
  Polyak & Juditsky, "Acceleration of stochastic approximation by averaging", SIAM J. Control
  Optim. 30(4), 1992 (the uniform average of the iterates).
  Izmailov et al., "Averaging Weights Leads to Wider Optima and Better Generalization" (SWA),
  UAI 2018, arXiv:1803.05407.
  TensorFlow's ``tf.train.ExponentialMovingAverage`` (``num_updates``: the decay warmup
  ``min(decay, (1 + t) / (10 + t))``); timm's ``ModelEmaV3.get_decay`` (after K. Crowson: the
  warmup ``1 - (1 + t / gamma) ** -power``).
  Hägele et al., "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations",
  NeurIPS 2024, arXiv:2405.18392 (averaging at a constant learning rate against a cooldown).
"""

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .._core._adapters import as_inner
from .._core._checks import check_decay, check_nonnegative, check_positive, check_range
from .._core._interface import GradientTransformation
from .._core._leafwise import Scalars, place_like
from .._core._module import child_field, hyper_field, static_field
from .._core._policy import (
    COUNTER_DTYPE,
    accumulator_dtype,
    hyper,
    promote_types,
    safe_increment,
    zero_count,
)
from .._core._roles import COUNTER, INNER, Role, state_roles
from .._core._state_tree import tree_get_all_with_path
from .._core._transformation import Transformation
from .._core._tree import array_leaf, is_none, tree_map, unwrap_variables
from .._core._types import OptState, Params
from .._core._docs import shared_args
from ._low_precision import by_param_dtype

__all__ = ["ParamAveragingState", "ema_params", "swa_params", "averaged_params"]

_WARMUPS = (None, "power", "num_updates")


@dataclasses.dataclass(frozen=True)
class _AverageRole(Role):
  """The average's dtype: ``average_dtype`` when given, else the parameter's widened to at least
  float32 (a bfloat16 average cannot take a 1e-4 share of a step: it would stall like the
  parameters themselves). Integer parameters are not averaged: their entry keeps their dtype."""

  def leaf_dtype(self, param_dtype: Any, tx: Any) -> np.dtype:
    param_dtype = np.dtype(param_dtype)
    if not jnp.issubdtype(param_dtype, jnp.inexact):
      return param_dtype
    override = tx.average_dtype
    if override is not None:
      return accumulator_dtype(param_dtype, override)
    return accumulator_dtype(promote_types(param_dtype, jnp.float32))


_AVERAGE = _AverageRole("accumulator")


@state_roles(count=COUNTER, num_averaged=COUNTER, average=_AVERAGE, inner_state=INNER)
class ParamAveragingState(NamedTuple):
  """State of ``ema_params`` and ``swa_params``.

  Attributes:
    count: int32, the inner optimizer's steps seen (a ``MultiSteps`` inner: the steps that
      emitted an update).
    num_averaged: int32, the steps folded into ``average`` (SWA's ``n``).
    average: the averaged parameters, a tree mirroring the parameters (shapes and shardings) in
      ``average_dtype``; read it with ``averaged_params``.
    inner_state: the inner optimizer's state.
  """

  count: jax.Array
  num_averaged: jax.Array
  average: Params
  inner_state: OptState


def _check_warmup(owner: str, name: str, value: Any) -> None:
  if value not in _WARMUPS:
    raise ValueError(f"{owner}: {name} must be one of {_WARMUPS}, got {value!r}.")


def _check_average_dtype(owner: str, name: str, value: Any) -> None:
  if value is not None and not jnp.issubdtype(np.dtype(value), jnp.inexact):
    raise TypeError(f"{owner}: {name} must be a floating dtype, got {np.dtype(value).name}.")


def _check_steps(owner: str, name: str, value: Any) -> None:
  if isinstance(value, bool) or (isinstance(value, (int, np.integer)) and value < 0):
    raise ValueError(f"{owner}: {name} must be a non-negative int, got {value!r}.")


class _ParamAveraging(Transformation):
  """The shared machinery: run the inner optimizer, fold ``params + updates`` into the average."""

  elementwise = "children"
  State = ParamAveragingState
  inner: Any = child_field()
  average_dtype: Any = static_field(default=None, check=_check_average_dtype)

  def init_fn(self, params):
    def copy(x):
      x = array_leaf(x)
      # A copy (distinct buffers, so params and state can both be donated), in the parameter's
      # layout: under jit with automatic axes the copy is tied to the parameter's sharding.
      return place_like(x, jnp.array(x, dtype=_AVERAGE.leaf_dtype(x.dtype, self), copy=True))

    return ParamAveragingState(count=zero_count(), num_averaged=zero_count(),
                               average=tree_map(copy, params), inner_state=self.inner.init(params))

  def _fold(self, t: jax.Array, n: jax.Array) -> tuple[Any, jax.Array, Any]:
    """``(leaf, folds, scalars)``: the averaging leaf function, whether this step changes the
    average (a bool scalar), and the leaf function's scalars, for step ``t`` (1-based) with ``n``
    steps averaged before it."""
    raise NotImplementedError

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError(
          f"{self.owner}: update needs the parameters (`update(grads, state, params)`): the average "
          "is taken of `params + updates`.")
    new_updates, inner_state = self.inner.update(updates, state.inner_state, params, **extra_args)
    has_updated = getattr(self.inner, "has_updated", None)
    # A MultiSteps inner emits zero updates on k - 1 mini-steps out of k: only the steps that move
    # the parameters (the real optimizer steps) count and are averaged.
    stepped = jnp.asarray(has_updated(inner_state) if callable(has_updated) else True)
    t = safe_increment(state.count)
    leaf, folds, scalars = self._fold(t, state.num_averaged)

    def make_leaf(dtype):
      def gated(k, u, average, p):
        # The parameters as the caller will have them after this step: apply_updates's sum,
        # rounded to the parameter's dtype by an explicit cast (by_param_dtype says why).
        x = (p + u).astype(dtype).astype(p.dtype)
        # Boolean decisions are closed over (a Scalars record holds numbers, cast to each dtype).
        return u, jnp.where(stepped, leaf(k, x, average), average)
      return gated

    _, average = by_param_dtype(self, make_leaf, new_updates, state.average, params=params,
                                reads=(params,), scalars=scalars)
    averaged = jnp.logical_and(stepped, folds)
    return new_updates, ParamAveragingState(
        count=jnp.where(stepped, t, state.count),
        num_averaged=jnp.where(averaged, safe_increment(state.num_averaged), state.num_averaged),
        average=average,
        inner_state=inner_state,
    )


class _EmaParams(_ParamAveraging):
  name = "ema_params"
  decay: Any = hyper_field(default=0.9999, check=check_decay)
  warmup: str | None = static_field(default=None, check=_check_warmup)
  warmup_gamma: Any = hyper_field(default=1.0, check=check_positive)
  warmup_power: Any = hyper_field(default=2.0 / 3.0, check=check_positive)
  start_step: Any = hyper_field(default=0, check=_check_steps)

  def decay_at(self, t: jax.Array, dtype: Any) -> jax.Array:
    """The decay applied at step ``t`` (1-based, an int32 scalar), in ``dtype``."""
    dtype = np.dtype(dtype)
    # timm's get_decay: s = t - start_step - 1; s <= 0 copies the parameters (decay 0).
    s = (t - hyper(self.start_step, COUNTER_DTYPE) - jnp.asarray(1, COUNTER_DTYPE)).astype(dtype)
    decay = hyper(self.decay, dtype)
    one = jnp.asarray(1, dtype)
    if self.warmup == "power":
      gamma, power = hyper(self.warmup_gamma, dtype), hyper(self.warmup_power, dtype)
      decay = jnp.minimum(one - (one + s / gamma) ** -power, decay)
    elif self.warmup == "num_updates":
      decay = jnp.minimum((one + s) / (jnp.asarray(10, dtype) + s), decay)
    return jnp.where(s > 0, decay, jnp.zeros([], dtype))

  def _fold(self, t, n):
    def leaf(k, x, average):
      return k.decay * average + (1 - k.decay) * x

    return leaf, jnp.asarray(True), lambda dtype: Scalars(decay=self.decay_at(t, dtype))


class _SwaParams(_ParamAveraging):
  name = "swa_params"
  start_step: Any = hyper_field(default=0, check=_check_steps)
  every_k_steps: Any = hyper_field(default=1, check=lambda owner, name, value: check_range(
      owner, name, value, 1, np.inf))

  def _fold(self, t, n):
    since = t - hyper(self.start_step, COUNTER_DTYPE)
    folds = jnp.logical_and(since > 0, since % hyper(self.every_k_steps, COUNTER_DTYPE) == 0)
    before = since <= 0

    first = n == 0
    seen = n + jnp.asarray(1, COUNTER_DTYPE)

    def leaf(k, x, average):
      # Before the start the average follows the parameters; then x_1 is taken as it is and the
      # n-th average is a + (x - a) / n (the running mean of the folded steps).
      mean = jnp.where(first, x, average + (x - average) / k.seen)
      return jnp.where(before, x, jnp.where(folds, mean, average))

    def scalars(dtype):
      return Scalars(seen=seen.astype(dtype))

    return leaf, folds, scalars


@shared_args
def ema_params(
    inner: GradientTransformation,
    decay: ArrayLike = 0.9999,
    *,
    warmup: str | None = None,
    warmup_gamma: ArrayLike = 1.0,
    warmup_power: ArrayLike = 2.0 / 3.0,
    start_step: int = 0,
    average_dtype: DTypeLike | None = None,
) -> Transformation:
  r"""Keeps an exponential moving average (EMA) of the parameters as ``inner`` trains them.

  The updates are ``inner``'s, unchanged. At the ``t``-th step of ``inner`` (``t = 1, 2, ...``)
  the parameters after the step, ``x_t = apply_updates(params, updates)``, are folded into the
  average:

      a_t = d_t a_{t-1} + (1 - d_t) x_t,      a_0 = the initial parameters,

  with ``s = t - start_step - 1`` and

  * ``d_t = 0`` while ``s <= 0``: the first step after ``start_step`` copies the parameters
    (timm's ``ModelEmaV3`` and Keras's ``use_ema`` do the same);
  * ``warmup=None``: ``d_t = decay``;
  * ``warmup="power"``: ``d_t = min(1 - (1 + s / warmup_gamma) ** -warmup_power, decay)``
    (timm's ``use_warmup``, after K. Crowson; ``gamma=1, power=2/3`` reaches 0.999 at 31.6k
    steps, ``power=3/4`` at 10k);
  * ``warmup="num_updates"``: ``d_t = min((1 + s) / (10 + s), decay)`` (TensorFlow's
    ``ExponentialMovingAverage(num_updates=...)``).

  Read the average with ``averaged_params(state)``.

  ``update`` needs ``params`` (a ValueError says so without them). With ``inner`` a
  ``MultiSteps``, only the mini-steps that emit an update count (``t`` and the average move once
  per ``k`` calls); ``MultiSteps(ema_params(opt), k)`` is the same. Steps skipped by
  ``apply_if_finite`` or ``skip_spikes`` inside ``inner`` count, and fold in the unchanged
  parameters.

  Args:
    inner: the optimizer whose parameters are averaged.
    decay: the largest decay, in [0, 1] (a leaf: a new value does not recompile).
    warmup: None, ``"power"`` or ``"num_updates"`` (static).
    warmup_gamma: ``"power"``'s ``gamma`` (timm's ``warmup_gamma``, diffusers' ``inv_gamma``).
    warmup_power: ``"power"``'s exponent.
    start_step: steps of ``inner`` before the average starts (timm's ``update_after_step``);
      until one step after it the average is a copy of the parameters.
    average_dtype: the average's dtype; None (the default) stores each parameter's dtype widened to
      at least float32 (a float32 average of bfloat16 parameters). An average narrower than
      float32 loses the small shares of each step, as the parameters do.

  Returns:
    A transformation with state ``ParamAveragingState(count, num_averaged, average,
    inner_state)``; counters int32, ``average`` mirrors the parameters (shapes and shardings).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.ema_params(steadax.sgd(1.0), decay=0.5)
    >>> params = jnp.zeros(1)
    >>> state = tx.init(params)
    >>> for _ in range(3):
    ...   updates, state = tx.update(-jnp.ones(1), state, params)  # each step adds 1
    ...   params = steadax.apply_updates(params, updates)
    >>> params, steadax.averaged_params(state)   # 1 (copied), then 0.5 * 1 + 0.5 * 2, ...
    (Array([3.], dtype=float32), Array([2.25], dtype=float32))

  References:
    timm, ``ModelEmaV3.get_decay`` (warmup ``"power"``, the first-step copy); TensorFlow,
    ``tf.train.ExponentialMovingAverage`` (``"num_updates"``); Polyak & Juditsky, SIAM J.
    Control Optim. 1992.
  """
  return _EmaParams(as_inner(inner, "ema_params", "inner"), average_dtype, decay, warmup,
                    warmup_gamma, warmup_power, start_step)


@shared_args
def swa_params(
    inner: GradientTransformation,
    start_step: int = 0,
    every_k_steps: int = 1,
    *,
    average_dtype: DTypeLike | None = None,
) -> Transformation:
  r"""Keeps a uniform average of the parameters (stochastic weight averaging, SWA) as ``inner``
  trains them.

  The updates are ``inner``'s, unchanged. At the ``t``-th step of ``inner`` (``t = 1, 2, ...``)
  with ``x_t = apply_updates(params, updates)``:

  * ``t <= start_step``: the average follows the parameters, ``a_t = x_t``;
  * ``t - start_step`` a positive multiple of ``every_k_steps``: ``x_t`` is folded in,
    ``a = x_t`` for the first one and ``a + (x_t - a) / n`` for the ``n``-th
    (``torch.optim.swa_utils.AveragedModel``'s running mean);
  * other steps leave the average as it is.

  After ``T`` steps the average is the mean of ``x_{start+k}, x_{start+2k}, ..., `` up to ``T``.
  Read it with ``averaged_params(state)``. ``update`` needs ``params``; with ``inner`` a
  ``MultiSteps`` only the steps that emit an update count, as in ``ema_params``.

  Args:
    inner: the optimizer whose parameters are averaged.
    start_step: steps of ``inner`` before averaging starts (SWA's start).
    every_k_steps: fold in every ``k``-th step after it (at least 1).
    average_dtype: the average's dtype; None stores each parameter's dtype widened to at least
      float32.

  Returns:
    A transformation with state ``ParamAveragingState(count, num_averaged, average,
    inner_state)``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.swa_params(steadax.sgd(1.0), start_step=1)
    >>> params = jnp.zeros(1)
    >>> state = tx.init(params)
    >>> for _ in range(4):
    ...   updates, state = tx.update(-jnp.ones(1), state, params)
    ...   params = steadax.apply_updates(params, updates)
    >>> params, steadax.averaged_params(state)   # the mean of 2, 3 and 4
    (Array([4.], dtype=float32), Array([3.], dtype=float32))

  References:
    Izmailov et al., `Averaging Weights Leads to Wider Optima and Better Generalization
    <https://arxiv.org/abs/1803.05407>`_, UAI 2018; Polyak & Juditsky, SIAM J. Control Optim.
    1992.
  """
  return _SwaParams(as_inner(inner, "swa_params", "inner"), average_dtype, start_step, every_k_steps)


def averaged_params(state: OptState, params: Params | None = None) -> Any:
  """The averaged parameters held by ``ema_params`` or ``swa_params``.

  Args:
    state: a ``ParamAveragingState``, or any state holding one (inside ``chain``, ``MultiSteps``,
      ``inject_hyperparams``, Flax NNX's ``nnx.Optimizer.opt_state``): the outermost one is read.
    params: optional parameters: the average is then returned in each parameter's dtype (a float32
      average of bfloat16 parameters rounded to bfloat16, to evaluate the model as it runs).
      Without them, the stored average, in ``average_dtype``.

  Returns:
    The average, with the structure the optimizer's ``init`` was given (NNX variables read through
    to their arrays).

  Raises:
    ValueError: when ``state`` holds no ``ParamAveragingState``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.chain(steadax.clip(1.0), steadax.ema_params(steadax.sgd(0.1)))
    >>> state = tx.init({"w": jnp.ones(2, jnp.bfloat16)})
    >>> steadax.averaged_params(state)["w"].dtype
    dtype('float32')
  """
  found = tree_get_all_with_path(state, "ParamAveragingState")
  if not found:
    raise ValueError(
        "averaged_params: `state` holds no ParamAveragingState; build the optimizer with "
        "steadax.ema_params(...) or steadax.swa_params(...).")
  average = unwrap_variables(found[0][1].average)
  if params is None:
    return average
  return jax.tree_util.tree_map(
      lambda a, p: None if a is None else a.astype(array_leaf(p).dtype), average,
      unwrap_variables(params), is_leaf=is_none)
