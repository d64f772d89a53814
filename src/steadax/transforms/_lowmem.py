"""Adam with narrow (bfloat16) moments written by stochastic rounding.

Round-to-nearest loses every increment smaller than half a unit in the last place: with
``b2 = 0.999`` a bfloat16 second moment (8 significant bits) cannot decay at all, since
``0.999 v`` rounds back to ``v``. Stochastic rounding rounds up with probability equal to the
fractional distance to the next representable value, so the stored moment is unbiased and tracks the
float32 one on average.

The random bits are a counter-based hash of (seed, step count, leaf index, element index), not a PRNG
key in the state: the state stays Adam's ``(count, mu, nu)``, two runs give identical results, and
nothing extra is checkpointed.

References:
  Gupta, Agrawal, Gopalakrishnan & Narayanan, "Deep Learning with Limited Numerical Precision",
  ICML 2015 (stochastic rounding, eq. 2).
  Zamirai, Zhang, Aberger & De Sa, "Revisiting BFloat16 Training", arXiv:2010.06192, 2020 (moments
  and weights in bfloat16 with stochastic rounding).
"""

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .._core._transformation import Transformation
from .._core._checks import check_decay_below_one, check_nonnegative, check_one_of
from .._core._module import hyper_field, static_field
from .._core._policy import real_dtype, safe_increment
from .._core._tree import is_none
from .._core._docs import shared_args
from ._adam import AdamDecays, ScaleByAdamState, adam_scalars, adam_step

__all__ = ["scale_by_adam_lowmem"]

_ROUNDINGS = ("stochastic", "nearest")

# murmur3's 32-bit finaliser constants and the golden-ratio increment (Weyl sequence).
_M1 = np.uint32(0x85EBCA6B)
_M2 = np.uint32(0xC2B2AE35)
_GOLDEN = np.uint32(0x9E3779B9)


def _fmix32(h: jax.Array) -> jax.Array:
  """A bijective avalanche mix of uint32 values (murmur3's finaliser)."""
  h = h ^ (h >> 16)
  h = h * _M1
  h = h ^ (h >> 13)
  h = h * _M2
  return h ^ (h >> 16)


def stream_salt(seed: int, leaf: int, stream: int) -> np.uint32:
  """The salt of ``dither_bits`` for one random stream (a moment, a rounding) of one leaf: distinct
  seeds, leaves and streams give independent bits."""
  return np.uint32((seed * 0x27D4EB2F + leaf * 0x165667B1 + stream * 0x61C88647 + 1) & 0xFFFFFFFF)


def dither_bits(shape: tuple[int, ...], count: jax.Array, salt: Any) -> jax.Array:
  """Pseudo-random uint32 bits for every element of ``shape``, a function of (count, salt, index)."""
  n = math.prod(shape)
  index = jax.lax.iota(jnp.uint32, n).reshape(shape)
  stream = _fmix32(count.astype(jnp.uint32) * _GOLDEN ^ jnp.asarray(salt, jnp.uint32))
  return _fmix32(_fmix32(index * _GOLDEN ^ stream) + stream)


# The casts of the rounding functions below are the rounding itself (between the wide value and its
# narrow neighbours, and from random bits to a uniform draw), not the dtype policy of an optimizer.
def _round_real(x: jax.Array, dtype: np.dtype, bits: jax.Array) -> jax.Array:
  # Saturating, as leafwise writes: a finite value beyond dtype's range (a float16 moment of a
  # 1e15 gradient) becomes its largest finite value, not infinity; NaN and inf stay as they are.
  largest = float(jnp.finfo(dtype).max)
  x = jnp.where(jnp.isfinite(x), jnp.clip(x, -largest, largest), x)
  if x.dtype == np.dtype(jnp.float32) and dtype == np.dtype(jnp.bfloat16):
    # bfloat16 is float32's upper half: add 16 random bits below the cut and truncate. The carry
    # happens with probability (discarded bits) / 2^16, exactly the stochastic-rounding rule.
    raw = jax.lax.bitcast_convert_type(x, jnp.uint32)
    raw = (raw + (bits >> 16)) & np.uint32(0xFFFF0000)
    rounded = jax.lax.bitcast_convert_type(raw, jnp.float32).astype(dtype)
    return jnp.where(jnp.isnan(x), x.astype(dtype), rounded)
  nearest = x.astype(dtype)
  back = nearest.astype(x.dtype)
  toward = jnp.where(back < x, jnp.asarray(jnp.inf, dtype), jnp.asarray(-jnp.inf, dtype))
  other = jnp.nextafter(nearest, toward)
  # Distance to the nearest value as a fraction of the gap (in [0, 1/2]); NaN for inf/NaN inputs,
  # which then keep the nearest value.
  frac = (x - back) / (other.astype(x.dtype) - back)
  uniform = (bits >> 8).astype(x.dtype) * np.asarray(2.0**-24, x.dtype)
  return jnp.where(uniform < frac, other, nearest)


def stochastic_round(x: jax.Array, dtype: Any, bits: jax.Array) -> jax.Array:
  """``x`` rounded to ``dtype`` up or down at random, unbiased: ``E[round(x)] = x``.

  Args:
    x: values in a wider floating (or complex) dtype.
    dtype: the narrower target dtype; a dtype at least as precise as ``x``'s is a plain cast.
    bits: uint32 random bits of ``x``'s shape (``dither_bits``).

  Returns:
    ``x`` in ``dtype``.
  """
  dtype = np.dtype(dtype)
  if x.dtype == dtype or jnp.finfo(dtype).nmant >= jnp.finfo(x.dtype).nmant:
    return x.astype(dtype)
  if jnp.issubdtype(x.dtype, jnp.complexfloating):
    part = real_dtype(dtype)
    re = _round_real(jnp.real(x), part, bits)
    im = _round_real(jnp.imag(x), part, _fmix32(bits ^ _GOLDEN))
    return jax.lax.complex(re, im).astype(dtype)
  return _round_real(x, dtype, bits)


def rounded_stochastically(x: jax.Array, dtype: Any, bits: jax.Array) -> jax.Array:
  """``stochastic_round(x, dtype, bits)`` kept in ``x``'s dtype: a value of ``dtype``, exactly.

  For a leaf function, which returns state in the compute dtype: ``leafwise`` then stores the value
  in ``dtype`` without rounding it a second time.
  """
  return stochastic_round(x, dtype, bits).astype(x.dtype)  # widening a value of dtype: exact


class ScaleByAdamLowmem(AdamDecays):
  name = "scale_by_adam_lowmem"
  State = ScaleByAdamState
  b1: Any = hyper_field(0.9, check=check_decay_below_one)
  b2: Any = hyper_field(0.999, check=check_decay_below_one)
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  eps_root: Any = hyper_field(0.0, check=check_nonnegative)
  mu_dtype: Any = static_field(default=jnp.bfloat16)
  nu_dtype: Any = static_field(default=jnp.bfloat16)
  rounding: str = static_field(default="stochastic")
  seed: int = static_field(default=0)

  def __post_init__(self):
    owner = self.name
    check_one_of(*_ROUNDINGS)(owner, "rounding", self.rounding)
    if not isinstance(self.seed, (int, np.integer)) or isinstance(self.seed, bool):
      raise TypeError(f"{owner}: seed must be a Python int, got {type(self.seed).__name__}.")
    for arg in ("mu_dtype", "nu_dtype"):
      value = getattr(self, arg)
      if value is not None and not jnp.issubdtype(np.dtype(value), jnp.inexact):
        raise TypeError(f"{owner}: {arg} must be a floating dtype, got {np.dtype(value).name}.")

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)
    scalars = lambda dt: self.adam_scalars(count, dt, eps=self.eps, eps_root=self.eps_root)
    if self.rounding == "nearest":  # leafwise writes the moments rounded to nearest
      out, mu, nu = self.leafwise(adam_step, updates, state.mu, state.nu, params=params, scalars=scalars)
      return out, ScaleByAdamState(count=count, mu=mu, nu=nu)

    def storing(mu_dtype, nu_dtype):
      def leaf(k, g, m, v, salt):
        u, m, v = adam_step(k, g, m, v)
        # Each moment lands on a neighbouring value of its stored dtype, drawn so that the stored
        # moment is unbiased (Gupta et al. 2015, eq. 2).
        m = rounded_stochastically(m, mu_dtype, dither_bits(m.shape, count, salt[0]))
        v = rounded_stochastically(v, nu_dtype, dither_bits(v.shape, count, salt[1]))
        return u, m, v
      return leaf

    # The leaf function must know the stored dtypes it rounds to (leafwise gives it compute-dtype
    # values), so leaves are grouped by their moments' dtypes: one leafwise call per group, usually
    # one. The dither of leaf i is salted by (seed, i, moment): a read-only tree of uint32 salts.
    treedef = jax.tree_util.tree_structure(updates, is_leaf=is_none)
    grads, mus, nus = (treedef.flatten_up_to(tree) for tree in (updates, state.mu, state.nu))
    salts = treedef.unflatten([jnp.asarray([stream_salt(self.seed, i, 0), stream_salt(self.seed, i, 1)], jnp.uint32)
                               for i in range(len(grads))])
    groups: dict = {}
    for i, (g, m, v) in enumerate(zip(grads, mus, nus)):
      if g is not None:
        groups.setdefault((np.dtype(m.dtype), np.dtype(v.dtype)), []).append(i)
    results = [[None] * len(grads) for _ in range(3)]
    for dtypes, members in groups.items():
      only = treedef.unflatten([g if i in members else None for i, g in enumerate(grads)])
      trees = self.leafwise(storing(*dtypes), only, state.mu, state.nu, params=params, reads=(salts,),
                            scalars=scalars)
      for result, tree in zip(results, trees):
        leaves = treedef.flatten_up_to(tree)
        for i in members:
          result[i] = leaves[i]
    out, mu, nu = (treedef.unflatten(result) for result in results)
    return out, ScaleByAdamState(count=count, mu=mu, nu=nu)


@shared_args
def scale_by_adam_lowmem(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    *,
    mu_dtype: DTypeLike | None = jnp.bfloat16,
    nu_dtype: DTypeLike = jnp.bfloat16,
    rounding: str = "stochastic",
    seed: int = 0,
) -> Transformation:
  """``scale_by_adam`` with narrow moments (bfloat16 by default) written by stochastic rounding.

  The moments are computed in at least float32 as in ``scale_by_adam``; only the write back to the
  narrow state dtype differs. With ``rounding="stochastic"`` each element is rounded up with
  probability equal to its fractional distance to the next representable value, using bits hashed
  from ``(seed, count, leaf, element)`` (no key in the state: the state is ``ScaleByAdamState``).
  ``rounding="nearest"`` is ``scale_by_adam(mu_dtype=..., nu_dtype=...)``. Moments of a dtype at
  least as precise as the computation are written exactly.

  Memory: 2 bytes per parameter and moment in bfloat16, 4 bytes per parameter in all (8 for float32
  Adam).

  Args:
    b1: <shared>
    b2: <shared>
    eps: <shared>
    eps_root: <shared>
    mu_dtype: dtype of the first moment (complex parameters keep a complex moment).
    nu_dtype: dtype of the second moment.
    rounding: ``"stochastic"`` or ``"nearest"``.
    seed: salt of the dither (runs with different seeds round independently).

  Returns:
    A transformation with ``ScaleByAdamState(count, mu, nu)``.

  References:
    Gupta et al., "Deep Learning with Limited Numerical Precision", ICML 2015 (eq. 2);
    Zamirai et al., "Revisiting BFloat16 Training", arXiv:2010.06192, 2020.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_adam_lowmem()
    >>> state = tx.init(jnp.zeros(2))
    >>> state.mu.dtype
    dtype(bfloat16)
    >>> tx.update(jnp.array([2.0, -2.0]), state)[0]
    Array([ 1., -1.], dtype=float32)
  """
  if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
    seed = int(seed)
  return ScaleByAdamLowmem(b1, b2, eps, eps_root, mu_dtype=mu_dtype, nu_dtype=nu_dtype, rounding=rounding,
                           seed=seed)
