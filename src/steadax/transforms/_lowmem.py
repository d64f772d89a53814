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

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._core._base import Transformation
from .._core._checks import check_nonnegative, check_range
from .._core._module import hyper_field, static_field
from .._core._policy import as_compute, compute_dtype, hyper, per_dtype, real_dtype, safe_increment, zero_count
from .._core._tree import is_none, zeros_like
from ._adam import ScaleByAdamState, one_minus_pow
from ._moments import abs_sq

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


def _salt(seed: int, leaf: int, moment: int) -> np.uint32:
  return np.uint32((seed * 0x27D4EB2F + leaf * 0x165667B1 + moment * 0x61C88647 + 1) & 0xFFFFFFFF)


def dither_bits(shape: tuple[int, ...], count: jax.Array, salt: Any) -> jax.Array:
  """Pseudo-random uint32 bits for every element of ``shape``, a function of (count, salt, index)."""
  n = math.prod(shape)
  index = jax.lax.iota(jnp.uint32, n).reshape(shape)
  stream = _fmix32(count.astype(jnp.uint32) * _GOLDEN ^ np.uint32(salt))
  return _fmix32(_fmix32(index * _GOLDEN ^ stream) + stream)


def _round_real(x: jax.Array, dtype: np.dtype, bits: jax.Array) -> jax.Array:
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


class ScaleByAdamLowmem(Transformation):
  name = "scale_by_adam_lowmem"
  b1: Any = hyper_field(0.9)
  b2: Any = hyper_field(0.999)
  eps: Any = hyper_field(1e-08)
  eps_root: Any = hyper_field(0.0)
  mu_dtype: Any = static_field(default=jnp.bfloat16)
  nu_dtype: Any = static_field(default=jnp.bfloat16)
  rounding: str = static_field(default="stochastic")
  seed: int = static_field(default=0)

  def init_fn(self, params):
    return ScaleByAdamState(
        count=zero_count(),
        mu=zeros_like(params, self.mu_dtype),
        nu=zeros_like(params, self.nu_dtype, real=True),
    )

  def _write(self, x, like, count, leaf, moment):
    if self.rounding == "nearest":
      return x.astype(like.dtype)
    return stochastic_round(x, like.dtype, dither_bits(x.shape, count, _salt(self.seed, leaf, moment)))

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)

    @per_dtype
    def scalars(cdt):
      rdt = real_dtype(cdt)
      b1, b2 = hyper(self.b1, cdt), hyper(self.b2, rdt)
      one = np.asarray(1, rdt)
      return dict(
          b1=b1, b2=b2, one_minus_b1=np.asarray(1, cdt) - b1, one_minus_b2=one - b2,
          c1=one_minus_pow(self.b1, count, rdt).astype(cdt),
          c2=one_minus_pow(self.b2, count, rdt), eps=hyper(self.eps, rdt), eps_root=hyper(self.eps_root, rdt))

    def leaf(i, g, m, v):
      cdt = compute_dtype(g.dtype, m.dtype)
      rdt = real_dtype(cdt)
      k = scalars(cdt)
      gc = as_compute(g, cdt)
      m_new = k["b1"] * as_compute(m, cdt) + k["one_minus_b1"] * gc
      v_new = k["b2"] * as_compute(v, rdt) + k["one_minus_b2"] * abs_sq(gc).astype(rdt)
      denom = jnp.sqrt(v_new / k["c2"] + k["eps_root"]) + k["eps"]
      out = (m_new / k["c1"]) / denom.astype(cdt)
      return out.astype(g.dtype), self._write(m_new, m, count, i, 0), self._write(v_new, v, count, i, 1)

    treedef = jax.tree_util.tree_structure(updates, is_leaf=is_none)
    grads = treedef.flatten_up_to(updates)
    mus = treedef.flatten_up_to(state.mu)
    nus = treedef.flatten_up_to(state.nu)
    outs = [(None, None, None) if g is None else leaf(i, g, m, v)
            for i, (g, m, v) in enumerate(zip(grads, mus, nus))]
    out, mu, nu = (treedef.unflatten([o[j] for o in outs]) for j in range(3))
    return out, ScaleByAdamState(count=count, mu=mu, nu=nu)


def scale_by_adam_lowmem(
    b1: Any = 0.9,
    b2: Any = 0.999,
    eps: Any = 1e-8,
    eps_root: Any = 0.0,
    *,
    mu_dtype: Any = jnp.bfloat16,
    nu_dtype: Any = jnp.bfloat16,
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
    b1: decay of the first moment.
    b2: decay of the second moment.
    eps: added to the denominator outside the square root.
    eps_root: added inside the square root.
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
  owner = "scale_by_adam_lowmem"
  check_range(owner, "b1", b1, 0.0, 1.0, high_open=True)
  check_range(owner, "b2", b2, 0.0, 1.0, high_open=True)
  check_nonnegative(owner, "eps", eps)
  check_nonnegative(owner, "eps_root", eps_root)
  if rounding not in _ROUNDINGS:
    raise ValueError(f"{owner}: rounding must be one of {_ROUNDINGS}, got {rounding!r}.")
  if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
    raise TypeError(f"{owner}: seed must be a Python int, got {type(seed).__name__}.")
  for arg, value in (("mu_dtype", mu_dtype), ("nu_dtype", nu_dtype)):
    if value is not None and not jnp.issubdtype(np.dtype(value), jnp.inexact):
      raise TypeError(f"{owner}: {arg} must be a floating dtype, got {np.dtype(value).name}.")
  return ScaleByAdamLowmem(b1, b2, eps, eps_root, mu_dtype=mu_dtype, nu_dtype=nu_dtype,
                           rounding=rounding, seed=int(seed))
