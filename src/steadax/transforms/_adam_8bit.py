"""Adam with 8-bit block-quantized moments, in the spirit of bitsandbytes.

Each moment of a large tensor is stored as one uint8 code per element plus one float32 scale (the
block's largest magnitude) per block of ``block_size`` elements. A step dequantizes, runs Adam's
update in at least float32, and quantizes the new moments again. The 256 codes index a *dynamic*
map: a signed one for the first moment and a non-negative one for the second, whose values span
seven decades with finer steps near the block maximum, so small entries of a block keep relative
precision instead of rounding to zero as a linear map would make them.

Tensors with fewer than ``min_8bit_size`` elements (biases, norms: a negligible share of the
memory) keep full-precision moments, as bitsandbytes does.

References:
  Dettmers, Lewis, Shleifer & Zettlemoyer, "8-bit Optimizers via Block-wise Quantization",
  ICLR 2022 (§2: block-wise quantization, dynamic quantization; §2.3: small tensors kept in 32 bits).
  Dettmers, "8-Bit Approximations for Parallelism in Deep Learning", ICLR 2016 (the dynamic data
  type).
"""

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core._transformation import Transformation
from .._core._checks import check_decay_below_one, check_nonnegative
from .._core._leafwise import place_like
from .._core._module import hyper_field, static_field
from .._core._policy import compute_dtype, real_dtype, safe_increment, zero_count
from .._core._roles import COUNTER, OTHER, state_roles
from .._core._tree import tree_map, zeros_mirroring
from .._core._docs import shared_args
from ._adam import AdamDecays, adam_scalars, adam_step
from ._matrix import replicate_whole
from .._core._types import Updates

__all__ = ["BlockQuantized", "ScaleByAdam8bitState", "scale_by_adam_8bit", "dynamic_quantization_map"]


class BlockQuantized(NamedTuple):
  """A tensor stored as uint8 codes ``[blocks, block_size]`` and a float32 scale per block.

  The value of element ``i`` is ``map[codes.flat[i]] * scale[i // block_size]``; the padding at the
  end of the last block is zero.

  Attributes:
    codes: uint8 codes, shape ``[blocks, block_size]``: indices into the quantization map.
    scale: float32 scale of each block, shape ``[blocks]``.
  """

  codes: jax.Array
  scale: jax.Array


# mu and nu are not plain accumulators: a leaf is a full-precision array (the parameter's compute
# dtype, at least float32) for a small tensor and a BlockQuantized pair of a layout of its own for a
# large one; init_fn builds them and the contract checks their drift.
@state_roles(count=COUNTER, mu=OTHER, nu=OTHER)
class ScaleByAdam8bitState(NamedTuple):
  """State of ``scale_by_adam_8bit``: the int32 count and the moments, each leaf either a
  full-precision array (small tensors) or a ``BlockQuantized`` pair.

  Attributes:
    count: the number of updates so far (int32, saturating at its maximum).
    mu: the first moment: per leaf a full-precision array or a ``BlockQuantized``.
    nu: the second moment, stored as ``mu`` is.
  """

  count: jax.Array
  mu: Updates
  nu: Updates


@functools.lru_cache(maxsize=None)
def dynamic_quantization_map(signed: bool) -> np.ndarray:
  """The 256 sorted values of the dynamic 8-bit data type, in ``[-1, 1]`` (signed) or ``[0, 1]``.

  Magnitudes fill the decades ``[10^-7, 10^-6) ... [0.1, 1)``; decade ``k`` (from the smallest)
  holds ``2^k`` evenly spaced values per sign (``2^(k+1)`` when unsigned, which has no sign bit to
  spend), the midpoints of a linear grid over the decade. 0 and 1 are exact.

  Args:
    signed: a map for signed values (first moments) or non-negative ones (second moments).

  Returns:
    A float32 numpy array of 256 increasing values.

  Example:
    >>> import steadax
    >>> m = steadax.dynamic_quantization_map(signed=False)
    >>> len(m), float(m[0]), float(m[-1])
    (256, 0.0, 1.0)
  """
  values = [0.0, 1.0]
  for decade in range(7):
    count = 2**decade if signed else 2 ** (decade + 1)
    edges = np.linspace(0.1, 1.0, count + 1)
    mids = (edges[:-1] + edges[1:]) / 2 * 10.0 ** (decade - 6)
    values.extend(mids.tolist())
    if signed:
      values.extend((-mids).tolist())
  table = np.sort(np.asarray(values, np.float64)).astype(np.float32)
  assert table.shape == (256,), table.shape
  return table


@functools.lru_cache(maxsize=None)
def _thresholds(signed: bool) -> np.ndarray:
  table = dynamic_quantization_map(signed).astype(np.float64)
  return ((table[:-1] + table[1:]) / 2).astype(np.float32)


@functools.lru_cache(maxsize=None)
def _code_lookup(signed: bool) -> tuple[np.ndarray, np.ndarray]:
  """A table from the upper 16 bits of a float32 to the code of the smallest value with those bits.

  The upper 16 bits (sign, exponent, 7 mantissa bits) cut ``[-1, 1]`` into intervals narrower than
  the gaps between the map's thresholds, so each holds at most one threshold: the nearest code is
  the table entry or the next one, found with one gather and one comparison instead of a binary
  search over the 255 thresholds (a chain of gathers, 20x slower than Adam's step on CPUs).
  """
  thresholds = _thresholds(signed)
  patterns = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
  ends = (patterns.view(np.float32), (patterns | np.uint32(0xFFFF)).view(np.float32))
  low, high = np.minimum(*ends), np.maximum(*ends)
  first = np.searchsorted(thresholds, low, side="right")
  last = np.searchsorted(thresholds, high, side="right")
  inside = np.isfinite(low) & np.isfinite(high) & (high >= -1) & (low <= 1)
  assert np.all(last[inside] - first[inside] <= 1), "a bucket holds two thresholds"
  bounds = np.append(thresholds, np.float32(np.inf)).astype(np.float32)
  return np.minimum(first, 255).astype(np.uint8), bounds


# The casts of the code functions below convert codes to indices and back (integers) or build the
# numpy tables; the float32 ones are the quantizer's bit layout, not the dtype policy.
def _nearest_codes(normalized: jax.Array, signed: bool) -> jax.Array:
  lookup, bounds = _code_lookup(signed)
  bucket = (jax.lax.bitcast_convert_type(normalized, jnp.uint32) >> 16).astype(jnp.int32)
  code = jnp.take(jnp.asarray(lookup), bucket).astype(jnp.int32)
  above = normalized >= jnp.take(jnp.asarray(bounds), code)
  return (code + above.astype(jnp.int32)).astype(jnp.uint8)


def _layout(n: int, block_size: int) -> int:
  """Number of blocks holding ``n`` values."""
  return -(-n // block_size)


def _quantize(flat: jax.Array, blocks: int, block_size: int, signed: bool) -> BlockQuantized:
  """Round a real vector to the nearest map value of its block (padding with zeros).

  The scales keep ``flat``'s dtype (the state stores them in float32).
  """
  pad = blocks * block_size - flat.shape[0]
  x = jnp.pad(flat, (0, pad)).reshape(blocks, block_size)
  absmax = jnp.max(jnp.abs(x), axis=1, initial=0.0)
  safe = jnp.where(absmax > 0, absmax, jnp.ones_like(absmax))
  # The code lookup reads the float32 bit pattern of the normalised values.
  normalized = (x / safe[:, None]).astype(jnp.float32)
  codes = _nearest_codes(normalized, signed)
  return BlockQuantized(codes=codes, scale=absmax)


def _dequantize(q: BlockQuantized, n: int, signed: bool, dtype: Any = None) -> jax.Array:
  """The first ``n`` values of ``q``, in the scales' dtype (or ``dtype``)."""
  table = jnp.asarray(dynamic_quantization_map(signed))
  values = (jnp.take(table, q.codes.astype(jnp.int32)) * q.scale[:, None]).reshape(-1)[:n]
  return values if dtype is None else values.astype(dtype)


def _as_real_vector(x: jax.Array) -> jax.Array:
  """A flat real view: complex tensors interleave their real and imaginary parts."""
  if jnp.issubdtype(x.dtype, jnp.complexfloating):
    return jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1).reshape(-1)
  return x.reshape(-1)


def _from_real_vector(v: jax.Array, shape: tuple[int, ...], complex_: bool) -> jax.Array:
  if complex_:
    pairs = v.reshape(*shape, 2)
    return jax.lax.complex(pairs[..., 0], pairs[..., 1])
  return v.reshape(shape)


def _split(moments: Any) -> tuple[Any, Any]:
  """Two trees mirroring the parameters: the codes (or full-precision values) and the per-block
  scales (an empty float32 vector for a full-precision leaf), for ``leafwise``."""
  is_leaf = lambda x: x is None or isinstance(x, BlockQuantized)  # noqa: E731
  values = jax.tree_util.tree_map(lambda q: q.codes if isinstance(q, BlockQuantized) else q, moments,
                                  is_leaf=is_leaf)
  no_scale = jnp.zeros([0], jnp.float32)
  scales = jax.tree_util.tree_map(
      lambda q: None if q is None else q.scale if isinstance(q, BlockQuantized) else no_scale, moments,
      is_leaf=is_leaf)
  return values, scales


def _join(like: Any, values: Any, scales: Any) -> Any:
  """The inverse of ``_split``: ``like``'s layout (array or BlockQuantized per leaf)."""
  is_leaf = lambda x: x is None or isinstance(x, BlockQuantized)  # noqa: E731
  return jax.tree_util.tree_map(
      lambda q, value, scale: BlockQuantized(value, scale) if isinstance(q, BlockQuantized) else value,
      like, values, scales, is_leaf=is_leaf)


class ScaleByAdam8bit(AdamDecays):
  name = "scale_by_adam_8bit"
  b1: Any = hyper_field(0.9, check=check_decay_below_one)
  b2: Any = hyper_field(0.999, check=check_decay_below_one)
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  eps_root: Any = hyper_field(0.0, check=check_nonnegative)
  block_size: int = static_field(default=256)
  min_8bit_size: int = static_field(default=4096)

  def __post_init__(self):
    for arg, low in (("block_size", 1), ("min_8bit_size", 0)):
      value = getattr(self, arg)
      if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
        raise ValueError(f"{self.name}: {arg} must be an int >= {low}, got {value!r}.")

  def _quantized(self, x: Any) -> bool:
    return math.prod(np.shape(x)) >= self.min_8bit_size

  def init_fn(self, params):
    def make(x, real):
      cdt = compute_dtype(x.dtype)
      if not self._quantized(x):
        return zeros_mirroring(x, real_dtype(cdt) if real else cdt)
      n = math.prod(np.shape(x)) * (2 if jnp.issubdtype(cdt, jnp.complexfloating) and not real else 1)
      blocks = _layout(n, self.block_size)
      return BlockQuantized(codes=jnp.full((blocks, self.block_size), self._zero_code(not real), jnp.uint8),
                            scale=jnp.zeros([blocks], jnp.float32))

    return ScaleByAdam8bitState(
        count=zero_count(), mu=tree_map(lambda x: make(x, False), params),
        nu=tree_map(lambda x: make(x, True), params))

  @staticmethod
  def _zero_code(signed: bool) -> int:
    return int(np.searchsorted(dynamic_quantization_map(signed), 0.0))

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)

    def leaf(k, g, m, m_scale, v, v_scale):
      if m.dtype != np.dtype(jnp.uint8):  # a small tensor: Adam on full-precision moments
        u, m, v = adam_step(k, g, m, v)
        return u, m, m_scale, v, v_scale
      # Dequantize, take Adam's step in the compute dtype, quantize again (Dettmers et al. 2022, §2).
      complex_ = jnp.iscomplexobj(g)
      m = _from_real_vector(_dequantize(BlockQuantized(m, m_scale), g.size * (2 if complex_ else 1), True),
                            g.shape, complex_)
      v = _dequantize(BlockQuantized(v, v_scale), g.size, False).reshape(g.shape)
      u, m, v = adam_step(k, g, m, v)
      m = _quantize(_as_real_vector(m), m_scale.shape[0], self.block_size, True)
      v = _quantize(v.reshape(-1), v_scale.shape[0], self.block_size, False)
      return u, m.codes, m.scale, v.codes, v.scale

    scalars = lambda dt: self.adam_scalars(count, dt, eps=self.eps, eps_root=self.eps_root)
    (mu, mu_scale), (nu, nu_scale) = _split(state.mu), _split(state.nu)
    # Blocks run across the whole flattened tensor, not along its shards: a sharded gradient of a
    # quantized tensor is gathered (the codes are replicated), and its update put back in the
    # parameter's layout below; full-precision moments stay sharded like their parameters.
    is_leaf = lambda x: x is None or isinstance(x, BlockQuantized)  # noqa: E731
    whole = jax.tree_util.tree_map(
        lambda q, g: replicate_whole(g)[0][0] if isinstance(q, BlockQuantized) and g is not None else g,
        state.mu, updates, is_leaf=is_leaf)
    out, mu, mu_scale, nu, nu_scale = self.leafwise(leaf, whole, mu, mu_scale, nu, nu_scale, params=params,
                                                    scalars=scalars)
    out = tree_map(place_like, updates, out)
    keep = lambda old, new: jax.tree_util.tree_map(place_like, old, new)  # noqa: E731
    return out, ScaleByAdam8bitState(count=count, mu=keep(state.mu, _join(state.mu, mu, mu_scale)),
                                     nu=keep(state.nu, _join(state.nu, nu, nu_scale)))


@shared_args
def scale_by_adam_8bit(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    *,
    block_size: int = 256,
    min_8bit_size: int = 4096,
) -> Transformation:
  """``scale_by_adam`` with 8-bit block-quantized moments (Dettmers et al. 2022).

  Tensors with at least ``min_8bit_size`` elements store each moment as uint8 codes of a dynamic
  map (signed for ``mu``, non-negative for ``nu``; ``dynamic_quantization_map``) with a float32
  absmax scale per block of ``block_size`` elements, padded to whole blocks so the state's shapes are
  fixed at init (``jax.eval_shape(tx.init, params)`` works). Each step dequantizes, updates in at
  least float32 and requantizes to the nearest code. Smaller tensors keep moments in their
  computation dtype (at least float32). Complex tensors quantize their real and imaginary parts.

  Memory for quantized tensors: ``2 + 8 / block_size`` bytes per parameter (2.03 at the default
  256), against 8 for float32 Adam.

  Args:
    b1: <shared>
    b2: <shared>
    eps: <shared>
    eps_root: <shared>
    block_size: elements per quantization block (bitsandbytes uses 256 on GPUs; smaller blocks
      are more precise, larger ones smaller).
    min_8bit_size: tensors with fewer elements keep full-precision moments.

  Returns:
    A transformation with ``ScaleByAdam8bitState(count, mu, nu)``.

  References:
    Dettmers et al., "8-bit Optimizers via Block-wise Quantization", ICLR 2022 (§2).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_adam_8bit(min_8bit_size=1)
    >>> state = tx.init(jnp.zeros(300))
    >>> state.mu.codes.shape, state.mu.codes.dtype, state.mu.scale.shape
    ((2, 256), dtype('uint8'), (2,))
    >>> tx.update(jnp.full(300, 2.0), state)[0][:2]
    Array([1., 1.], dtype=float32)
  """
  as_int = lambda x: int(x) if isinstance(x, np.integer) else x  # noqa: E731
  return ScaleByAdam8bit(b1, b2, eps, eps_root, block_size=as_int(block_size),
                         min_8bit_size=as_int(min_8bit_size))
