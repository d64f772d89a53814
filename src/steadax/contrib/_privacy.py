"""Differentially private aggregation and DP-SGD (Abadi et al., "Deep Learning with Differential
Privacy", CCS 2016, Algorithm 1).

The incoming updates are *per-example* gradients (every leaf has the batch on axis 0). Each example's
gradient is clipped to global norm ``C = l2_norm_clip``, the clipped gradients are summed, Gaussian
noise of standard deviation ``σ C`` (``σ = noise_multiplier``) is added and the sum is divided by the
batch size. The returned updates have the parameters' shapes.

The PRNG key lives in the state as a typed key (its dtype never changes); one key per leaf is split
off per step exactly as in Optax, so float32 leaves get Optax's noise for the same key. The noise is
drawn in at least float32 and added before rounding, so bfloat16 and float16 leaves get properly
distributed noise (Optax draws it in the leaf's dtype).
"""

import warnings
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.typing import ArrayLike

from .._core._stateless import identity
from .._core._transformation import Transformation
from .._core._checks import check_nonnegative, check_positive, check_range, check_schedule_or_scalar
from .._core._combine import Chain
from .._core._contract import conform_updates
from .._core._leafwise import Scalars
from .._core._policy import hyper
from .._core._roles import OTHER, state_roles
from .._core._types import ScalarOrSchedule
from ..transforms._noise import _typed_key
from ..transforms._scaling import scale_by_learning_rate, trace
from .._wrappers._unitwise import per_example_global_norm_clip
from .._core._module import hyper_field, child_field
from .._core._docs import shared_args

__all__ = ["DifferentiallyPrivateAggregateState", "differentially_private_aggregate", "dpsgd"]


@state_roles(rng_key=OTHER)
class DifferentiallyPrivateAggregateState(NamedTuple):
  """State of ``differentially_private_aggregate``: the typed PRNG key of the noise.

  Attributes:
    rng_key: the typed PRNG key of the next noise draw.
  """

  rng_key: jax.Array


def _follow_params(owner: str, params: Any, updates: Any) -> Any:
  """Per-example inputs change shape, so the contract's check is made against ``params`` here."""
  if params is None:
    return updates
  return conform_updates(owner, params, params, updates)


class DifferentiallyPrivateAggregate(Transformation):
  name = "differentially_private_aggregate"
  State = DifferentiallyPrivateAggregateState
  updates_follow_params = False
  l2_norm_clip: Any = hyper_field(check=check_positive)
  noise_multiplier: Any = hyper_field(check=check_nonnegative)
  key: Any = hyper_field(0)

  def init_fn(self, params):
    # A typed key from the seed: not a role's zero, built here.
    return DifferentiallyPrivateAggregateState(rng_key=_typed_key(self.name, self.key))

  def update_fn(self, updates, state, params=None, **extra_args):
    leaves, treedef = jax.tree_util.tree_flatten(updates)
    if not leaves:
      return updates, state
    if any(np.ndim(g) == 0 for g in leaves):
      raise ValueError(f"{self.name}: the updates must be per-example gradients (batch on axis 0); got a "
                       "scalar leaf.")
    batch = np.shape(leaves[0])[0]
    clipped, _ = per_example_global_norm_clip(leaves, self.l2_norm_clip)
    new_key, *keys = jax.random.split(state.rng_key, len(leaves) + 1)

    def scalars(dt):
      return Scalars(std=hyper(self.l2_norm_clip, dt) * hyper(self.noise_multiplier, dt), size=np.asarray(batch, dt))

    impl = jax.random.key_impl(state.rng_key)

    def leaf(k, g, key_data):
      # Algorithm 1: (Σ clipped g + N(0, σ² C²)) / B; the noise is drawn in the compute dtype.
      noise = jax.random.normal(jax.random.wrap_key_data(key_data, impl=impl), g.shape, g.dtype)
      return (g + k.std * noise) / k.size

    # Each leaf's key enters as its raw uint32 data (integer inputs pass leafwise unchanged; the
    # policy's dtype helpers do not take typed key dtypes).
    out, = self.leafwise(leaf, clipped, reads=([jax.random.key_data(k) for k in keys],), scalars=scalars)
    out = treedef.unflatten(out)
    return _follow_params(self.name, params, out), DifferentiallyPrivateAggregateState(rng_key=new_key)


def _check(owner: str, l2_norm_clip: Any, noise_multiplier: Any) -> None:
  check_positive(owner, "l2_norm_clip", l2_norm_clip)
  check_nonnegative(owner, "noise_multiplier", noise_multiplier)


@shared_args
def differentially_private_aggregate(
    l2_norm_clip: ArrayLike,
    noise_multiplier: ArrayLike,
    key: jax.Array | int | None = None,
    *,
    seed: int | None = None,
) -> Transformation:
  """Aggregates per-example gradients with clipping and Gaussian noise (the DP-SGD gradient).

  Args:
    l2_norm_clip: the largest global l2 norm of one example's gradient.
    noise_multiplier: the noise's standard deviation, in units of ``l2_norm_clip``.
    key: a ``jax.random.key``, raw ``uint32[2]`` key data or an integer seed. None warns and uses
      0, as Optax does.
    seed: deprecated spelling of an integer ``key``.

  Returns:
    A transformation with ``DifferentiallyPrivateAggregateState(rng_key)``; its ``update`` takes
    per-example gradients (batch on axis 0) and returns updates shaped like the parameters.

  References:
    Abadi et al., "Deep Learning with Differential Privacy", CCS 2016 (arXiv:1607.00133,
    Algorithm 1).

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> tx = steadax.contrib.differentially_private_aggregate(1.0, 0.0, key=jax.random.key(0))
    >>> per_example = jnp.array([[3.0, 4.0], [0.3, 0.4]])  # two examples; norms 5 and 0.5
    >>> tx.update(per_example, tx.init(jnp.zeros(2)))[0]  # (0.6 + 0.3, 0.8 + 0.4) / 2
    Array([0.45000002, 0.6       ], dtype=float32)
  """
  owner = "differentially_private_aggregate"
  if seed is not None:
    warnings.warn(f"{owner}: `seed` is deprecated; pass `key` instead.", DeprecationWarning, stacklevel=2)
    if key is not None:
      raise ValueError(f"{owner}: pass either key or seed, not both.")
    key = seed
  if key is None:
    warnings.warn(f"{owner}: no `key` given; using 0. Pass `key` for reproducible, independent noise.",
                  UserWarning, stacklevel=2)
    key = 0
  _typed_key(owner, key)  # fail at construction, not at init
  return DifferentiallyPrivateAggregate(l2_norm_clip, noise_multiplier, key)


class PerExampleChain(Transformation):
  """``chain`` whose first link turns per-example gradients into parameter-shaped updates.

  It runs the one ``Chain`` (same state, same checks of each link); only the check of its own
  updates differs: they are compared with the parameters, since the incoming per-example gradients
  have another shape.
  """

  name = "dpsgd"
  requires_float = True
  updates_follow_params = False
  transforms: tuple = child_field(())

  def init_fn(self, params):
    return Chain(self.transforms).init_fn(params)

  def update_fn(self, updates, state, params=None, **extra_args):
    updates, state = Chain(self.transforms).update_fn(updates, state, params, **extra_args)
    return _follow_params(self.name, params, updates), state


@shared_args
def dpsgd(
    learning_rate: ScalarOrSchedule,
    l2_norm_clip: ArrayLike,
    noise_multiplier: ArrayLike,
    seed: int,
    momentum: ArrayLike | None = None,
    nesterov: bool = False,
) -> Transformation:
  """DP-SGD: SGD (optionally with momentum) on differentially private aggregated gradients.

  Feed it per-example gradients, e.g. ``jax.vmap(jax.grad(loss), in_axes=(None, 0))(params, batch)``.

  Args:
    learning_rate: <shared>
    l2_norm_clip: the largest global l2 norm of one example's gradient.
    noise_multiplier: the noise's standard deviation, in units of ``l2_norm_clip``.
    seed: the integer seed of the noise (or a ``jax.random.key``).
    momentum: heavy-ball momentum (None: none).
    nesterov: <shared>

  Returns:
    A transformation with the state ``(DifferentiallyPrivateAggregateState, TraceState or
    EmptyState, learning-rate state)``, as Optax's chain.

  References:
    Abadi et al., "Deep Learning with Differential Privacy", CCS 2016 (arXiv:1607.00133).

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.dpsgd(0.1, l2_norm_clip=1.0, noise_multiplier=0.0, seed=0)
    >>> params = {"w": jnp.ones(2, jnp.bfloat16)}
    >>> per_example = {"w": jnp.ones((4, 2), jnp.bfloat16)}
    >>> u, s = opt.update(per_example, opt.init(params), params)
    >>> u["w"].shape, u["w"].dtype, s[0].rng_key.dtype
    ((2,), dtype(bfloat16), key<fry>)
  """
  owner = "dpsgd"
  check_schedule_or_scalar(owner, "learning_rate", learning_rate)
  _check(owner, l2_norm_clip, noise_multiplier)
  if momentum is not None:
    check_range(owner, "momentum", momentum, 0.0, 1.0)
  _typed_key(owner, seed)
  momentum_tx = trace(decay=momentum, nesterov=nesterov) if momentum is not None else identity()
  return PerExampleChain((DifferentiallyPrivateAggregate(l2_norm_clip, noise_multiplier, seed), momentum_tx,
                          scale_by_learning_rate(learning_rate)))
