"""Low-precision parameters that still learn: stochastic rounding and Kahan-compensated updates.

With bfloat16 parameters and no float32 master copy, ``params + updates`` is rounded to the nearest
bfloat16 value: an update smaller than half the spacing of the parameter (2^-9 of it) is lost every
step, and training stalls. Two final stages of a chain fix that without touching the training loop:

* ``stochastic_rounding()`` rewrites the updates so that ``params + updates``, added by any plain
  ``apply_updates`` (steadax's, Optax's, the one ``nnx.Optimizer`` and ``TrainState`` call), is
  ``p + u`` rounded up or down at random: unbiased on average, at no memory cost.
* ``kahan_summation()`` keeps what each rounding lost in a per-parameter compensation (bfloat16 for
  bfloat16 parameters: 4 bytes per parameter in all) and adds it back at the next step.

Both need the parameters (``update(grads, state, params)``): the new value is computed from them.

References:
  Gupta, Agrawal, Gopalakrishnan & Narayanan, "Deep Learning with Limited Numerical Precision",
  ICML 2015 (stochastic rounding, eq. 2).
  Zamirai, Zhang, Aberger & De Sa, "Revisiting BFloat16 Training", arXiv:2010.06192, 2020
  (stochastic rounding and Kahan summation of the weight update in pure bfloat16 training).
  Kahan, "Further remarks on reducing truncation errors", Comm. ACM 8(1), 1965.
  Sterbenz, "Floating-Point Computation", 1974 (Theorem 4.3.1: ``y / 2 <= x <= 2 y`` makes
  ``x - y`` exact).
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from .._core._module import static_field
from .._core._policy import safe_increment
from .._core._roles import COUNTER, accumulator, state_roles
from .._core._transformation import Transformation
from .._core._tree import is_none
from .._core._types import Updates
from .._core._docs import shared_args
from ..transforms._lowmem import dither_bits, rounded_stochastically, stream_salt

__all__ = [
    "StochasticRoundingState",
    "stochastic_rounding",
    "KahanSummationState",
    "kahan_summation",
]

_SALT_STREAM = 2  # scale_by_adam_lowmem's moments use streams 0 and 1 of the same seed


def _narrower(param_dtype: np.dtype, compute: np.dtype) -> bool:
  """Whether a parameter of ``param_dtype`` holds fewer significant bits than ``compute``."""
  return bool(jnp.issubdtype(param_dtype, jnp.floating)
              and jnp.finfo(param_dtype).nmant < jnp.finfo(compute).nmant)


def by_param_dtype(tx: Transformation, make_leaf: Callable[[np.dtype], Callable], updates: Any,
                   *states: Any, params: Any, reads: tuple = (), scalars: Any = None) -> tuple[Any, ...]:
  """``tx.leafwise`` once per parameter dtype, with the leaf function ``make_leaf(dtype)``: a
  leaf function sees compute-dtype values only and must be told the dtype it rounds to.

  A leaf function rounds with an explicit cast (``x.astype(dtype).astype(x.dtype)``), never by
  computing in the narrow dtype and widening the result: XLA (``xla_allow_excess_precision``, on
  by default) may skip the rounding of a bfloat16 addition whose result is widened, but keeps
  explicit conversions.
  """
  treedef = jax.tree_util.tree_structure(updates, is_leaf=is_none)
  grads, leaves = treedef.flatten_up_to(updates), treedef.flatten_up_to(params)
  groups: dict = {}
  for i, (g, p) in enumerate(zip(grads, leaves)):
    if g is not None and p is not None:
      groups.setdefault(np.dtype(p.dtype), []).append(i)
  results: list[list] = [[None] * len(grads) for _ in range(1 + len(states))]
  for dtype, members in groups.items():
    chosen = set(members)
    only = treedef.unflatten([g if i in chosen else None for i, g in enumerate(grads)])
    trees = tx.leafwise(make_leaf(dtype), only, *states, params=params, reads=reads,
                        scalars=scalars)
    for result, tree in zip(results, trees):
      out = treedef.flatten_up_to(tree)
      for i in members:
        result[i] = out[i]
  return tuple(treedef.unflatten(result) for result in results)


def _needs_params(owner: str, params: Any) -> None:
  if params is None:
    raise ValueError(
        f"{owner}: update needs the parameters (`update(grads, state, params)`): the new value of "
        "each parameter is rounded from them.")


@state_roles(count=COUNTER)
class StochasticRoundingState(NamedTuple):
  """State of ``stochastic_rounding``.

  Attributes:
    count: int32, the steps taken; with the seed and each element's position it selects the
      random bits of the step.
  """

  count: jax.Array


def _check_seed(owner: str, name: str, value: Any) -> None:
  if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
    raise TypeError(f"{owner}: {name} must be a Python int, got {type(value).__name__}.")


class _StochasticRounding(Transformation):
  name = "stochastic_rounding"
  # The random bits are drawn per leaf and element: flat buffers would round with other bits.
  elementwise = False
  State = StochasticRoundingState
  seed: int = static_field(default=0, check=_check_seed)

  def update_fn(self, updates, state, params=None, **extra_args):
    _needs_params(self.owner, params)
    count = safe_increment(state.count)
    treedef = jax.tree_util.tree_structure(updates, is_leaf=is_none)
    salts = treedef.unflatten([jnp.asarray([stream_salt(self.seed, i, _SALT_STREAM)], jnp.uint32)
                               for i in range(treedef.num_leaves)])

    def make_leaf(dtype):
      def leaf(k, u, p, salt):
        if not _narrower(dtype, np.dtype(p.dtype)):
          return u  # the addition is exact in the parameter's dtype already: nothing to round
        # The new value, rounded to one of its two neighbours in the parameter's dtype with
        # probabilities that make it unbiased (Gupta et al. 2015, eq. 2); returned as the
        # difference to the parameter, which apply_updates adds back exactly (Sterbenz).
        new = rounded_stochastically(p + u, dtype, dither_bits(p.shape, count, salt[0]))
        return new - p
      return leaf

    (new_updates,) = by_param_dtype(self, make_leaf, updates, params=params, reads=(params, salts))
    return new_updates, StochasticRoundingState(count=count)


@shared_args
def stochastic_rounding(*, seed: int = 0) -> Transformation:
  r"""Updates that make ``params + updates`` the stochastically rounded new value.

  The last stage of a chain for low-precision (bfloat16, float16) parameters. For each such
  parameter ``p`` and incoming update ``u`` it computes ``x = p + u`` in float32 and picks one of
  the two neighbours ``lo <= x <= hi`` in the parameter's dtype, ``hi`` with probability
  ``(x - lo) / (hi - lo)``, so ``E[new] = x``: updates far below the spacing of ``p`` still move it
  on average, where round-to-nearest drops them every step. It returns ``new - p`` in the
  parameter's dtype, so a plain ``apply_updates`` (steadax's or Optax's, as ``nnx.Optimizer`` and
  Flax's ``TrainState`` call it) lands exactly on ``new``:

  * ``new - p`` is exact when ``new`` and ``p`` are within a factor of two of each other with the
    same sign (Sterbenz's lemma), which every step smaller than half the parameter satisfies, and
    then ``p + (new - p)`` is ``new`` exactly under any rounding;
  * a larger step (a parameter crossing zero, or growing more than twice) is added as the update's
    value rounded to the parameter's dtype: the size of the step dwarfs the rounding there.

  Parameters of float32 and wider pass their updates through unchanged. The random bits are a
  counter-based hash of ``(seed, count, leaf index, element index)``, as in
  ``scale_by_adam_lowmem``: the state is one int32 counter, runs are reproducible, and nothing but
  the counter is checkpointed. Probabilities are resolved to 2^-16 of the spacing (float32 to
  bfloat16 adds 16 random bits below the cut and truncates).

  Args:
    seed: salt of the random bits (runs with different seeds round independently).

  Returns:
    A transformation with state ``StochasticRoundingState(count)``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.chain(steadax.sgd(1e-3), steadax.stochastic_rounding())
    >>> params = jnp.ones(10_000, jnp.bfloat16)           # spacing above 1: 2^-7
    >>> state = tx.init(params)
    >>> updates, state = tx.update(-jnp.ones_like(params), state, params)   # a step of 1e-3
    >>> new = steadax.apply_updates(params, updates).astype(jnp.float32)
    >>> sorted(set(new.tolist())), round(float(new.mean() - 1), 3)   # 1 or 1 + 2^-7; 1e-3 on average
    ([1.0, 1.0078125], 0.001)
    >>> float(steadax.apply_updates(params, 1e-3 * jnp.ones_like(params))[0] - 1)  # to nearest
    0.0

  References:
    Gupta et al., `Deep Learning with Limited Numerical Precision
    <https://arxiv.org/abs/1502.02551>`_, ICML 2015 (eq. 2); Zamirai et al., `Revisiting BFloat16
    Training <https://arxiv.org/abs/2010.06192>`_, 2020.
  """
  return _StochasticRounding(seed=int(seed) if isinstance(seed, (int, np.integer)) else seed)


@state_roles(compensation=accumulator("compensation_dtype"))
class KahanSummationState(NamedTuple):
  """State of ``kahan_summation``.

  Attributes:
    compensation: per parameter, what the rounding of the last step lost (the parameter's true
      value is ``params + compensation``), in ``compensation_dtype`` (default: the parameter's).
  """

  compensation: Updates


def _check_compensation_dtype(owner: str, name: str, value: Any) -> None:
  if value is not None and not jnp.issubdtype(np.dtype(value), jnp.inexact):
    raise TypeError(f"{owner}: {name} must be a floating dtype, got {np.dtype(value).name}.")


class _KahanSummation(Transformation):
  name = "kahan_summation"
  elementwise = True
  State = KahanSummationState
  compensation_dtype: Any = static_field(default=None, check=_check_compensation_dtype)

  def update_fn(self, updates, state, params=None, **extra_args):
    _needs_params(self.owner, params)

    def make_leaf(dtype):
      def leaf(k, u, c, p):
        # Kahan's compensated sum, in the compute dtype (at least float32): the parameter's true
        # value is p + c. y is the step plus what the last rounding lost; the new parameter is
        # p + y rounded to the parameter's dtype; e is what this rounding loses, kept for the next
        # step. For a parameter narrower than the compute dtype p - new is exact (Sterbenz) and so
        # is e up to the compute dtype's rounding; for a parameter as wide, e is Fast2Sum's exact
        # error term whenever |p| >= |y|.
        y = u + c
        s = p + y
        new = s.astype(dtype).astype(s.dtype)  # round to nearest: the parameter's dtype, kept wide
        e = (p - new) + y
        return new - p, e
      return leaf

    new_updates, compensation = by_param_dtype(
        self, make_leaf, updates, state.compensation, params=params, reads=(params,))
    return new_updates, KahanSummationState(compensation=compensation)


@shared_args
def kahan_summation(*, compensation_dtype: DTypeLike | None = None) -> Transformation:
  r"""Updates that apply the step with Kahan's compensated summation: a low-precision parameter
  plus a compensation of the same precision track the full-precision sum.

  The last stage of a chain for bfloat16 (or float16) parameters without a float32 master copy.
  Each parameter ``p`` keeps a compensation ``c`` (its true value is ``p + c``). At every step, in
  float32 (at least the compute dtype):

      y = u + c,     new = round_to_nearest(p + y),     c' = (p - new) + y   (stored rounded),

  and the updates are ``new - p``, which a plain ``apply_updates`` (steadax's or Optax's, as
  ``nnx.Optimizer`` and Flax's ``TrainState`` call it) adds back exactly: ``new - p`` is exact by
  Sterbenz's lemma for every step smaller than half the parameter, and ``p + (new - p) = new``.
  The rounding error of each step is carried to the next instead of lost, so updates far below the
  spacing of ``p`` accumulate in ``c`` until they move ``p``.

  Precision: ``p + c`` with a bfloat16 ``c`` holds about 16 significant bits (bfloat16 alone: 8,
  float32: 24); what is lost per step is the rounding of ``c`` (at most 2^-9 of it, and ``|c|`` is
  at most half the spacing of ``p``). Memory: 2 bytes per bfloat16 parameter, so 4 bytes per
  parameter with it, as a float32 parameter. Parameters of float32 and wider are compensated too
  (Fast2Sum in their own dtype: what float32 addition loses is carried).

  Args:
    compensation_dtype: the compensation's dtype; None (the default) stores each parameter's own.

  Returns:
    A transformation with state ``KahanSummationState(compensation)``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.chain(steadax.sgd(1e-3), steadax.kahan_summation())
    >>> params = jnp.ones(1, jnp.bfloat16)
    >>> state = tx.init(params)
    >>> for _ in range(100):              # 100 steps of 1e-3 each: below half the spacing (2^-8)
    ...   updates, state = tx.update(-jnp.ones_like(params), state, params)
    ...   params = steadax.apply_updates(params, updates)
    >>> params                            # round to nearest alone would stay at 1
    Array([1.10156], dtype=bfloat16)

  References:
    Kahan, "Further remarks on reducing truncation errors", Comm. ACM 8(1), 1965; Zamirai et al.,
    `Revisiting BFloat16 Training <https://arxiv.org/abs/2010.06192>`_, 2020 (Kahan summation of
    the weight update).
  """
  return _KahanSummation(compensation_dtype=compensation_dtype)
