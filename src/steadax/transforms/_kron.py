"""Kronecker algebra of the matrix optimizers (private): the maths of one matrix or tensor.

Mode products and per-axis Gram statistics of tensors, Hermitian eigendecompositions, inverse
roots, triangular solves and SVDs, and the blocking of long axes. These functions take their inputs
in one compute dtype (the optimizers call them inside leaf functions, where every input is already
cast by ``leafwise``) and do no casting of their own. Complex tensors use conjugate transposes: the
statistic of axis ``k`` is ``X_(k) X_(k)^H`` (Hermitian), so ``eigh`` applies with real eigenvalues.
"""

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

__all__: list[str] = []


def conj_t(m: jax.Array) -> jax.Array:
  """The conjugate transpose of the last two axes."""
  m = jnp.swapaxes(m, -1, -2)
  return jnp.conj(m) if jnp.iscomplexobj(m) else m


def mode_product(x: jax.Array, m: jax.Array, axis: int) -> jax.Array:
  """``x ×_axis m``: ``m`` applied to every mode-``axis`` fibre of ``x`` (``m @ X_(axis)``)."""
  return jnp.moveaxis(jnp.tensordot(m, x, axes=((1,), (axis,))), 0, axis)


def axis_statistic(x: jax.Array, axis: int) -> jax.Array:
  """``X_(axis) X_(axis)^H``: the Gram matrix of ``x``'s mode-``axis`` unfolding (Hermitian)."""
  others = tuple(i for i in range(x.ndim) if i != axis)
  return jnp.tensordot(x, jnp.conj(x) if jnp.iscomplexobj(x) else x, axes=(others, others))


def symmetrize(s: jax.Array) -> jax.Array:
  """``(S + S^H) / 2``: removes the rounding asymmetry of accumulated Gram matrices."""
  return (s + conj_t(s)) * 0.5


def _one_matrix_per_call(fn: Callable[..., Any]) -> Callable[..., Any]:
  """``fn`` of one matrix per argument (the last two axes), batched over leading axes; on a CPU
  backend a batch (leading axes, or a ``vmap`` around the call) runs one matrix per call.

  jaxlib's CPU LAPACK kernels (``eigh``, ``svd``, ``trsm``) split a batch over the CPU client's
  thread pool and block a pool thread until the pieces are done. XLA runs independent operations
  of a program on that same pool, so two batched calls in flight (a group's left and right factors,
  two groups, several virtual devices) can occupy every thread as waiters and the step never
  returns (seen with SOAP on 2 cores, Shampoo and PSGD-Kron on 8 virtual devices). One matrix per
  call (``lax.map``) runs inline on the thread that reached it. Accelerators have no such pool.
  """

  @jax.custom_batching.custom_vmap
  def per_matrix(*xs: jax.Array) -> Any:
    lead = xs[0].shape[:-2]
    if not lead:
      return fn(*xs)
    out = jax.lax.map(lambda args: per_matrix(*args), tuple(x.reshape(-1, *x.shape[-2:]) for x in xs))
    return jax.tree.map(lambda o: o.reshape(*lead, *o.shape[1:]), out)

  @per_matrix.def_vmap
  def _(axis_size: int, in_batched: list, *xs: jax.Array) -> tuple:
    xs = tuple(x if b else jnp.broadcast_to(x, (axis_size, *x.shape)) for x, b in zip(xs, in_batched))
    out = per_matrix(*xs)
    return out, jax.tree.map(lambda _: True, out)

  return lambda *xs: per_matrix(*xs) if jax.default_backend() == "cpu" else fn(*xs)


hermitian_eigh = _one_matrix_per_call(lambda s: tuple(jnp.linalg.eigh(s)))
thin_svd = _one_matrix_per_call(lambda x: tuple(jnp.linalg.svd(x, full_matrices=False)))
# ``Q^{-H} B`` for an upper-triangular ``q``.
upper_solve_h = _one_matrix_per_call(
    lambda q, b: jax.scipy.linalg.solve_triangular(q, b, trans="C", lower=False))


def eigenbasis(s: jax.Array) -> jax.Array:
  """Eigenvectors of the Hermitian ``s`` (batched over leading axes), by decreasing eigenvalue.

  Example:
    >>> import jax.numpy as jnp
    >>> eigenbasis(jnp.diag(jnp.array([1.0, 3.0])))
    Array([[0., 1.],
           [1., 0.]], dtype=float32)
  """
  return hermitian_eigh(symmetrize(s))[1][..., ::-1]


def inverse_root(s: jax.Array, exponent: Any, relative_eps: Any) -> jax.Array:
  """``(S + eps * lambda_max * I)^(-1/exponent)`` of the Hermitian PSD ``s``, batched.

  The regulariser is relative to the largest eigenvalue, so the result does not depend on the
  scale of the statistics (grafting restores the scale); a zero matrix (no gradient seen yet) gives
  the identity; negative eigenvalues (rounding) are clipped to zero.

  Example:
    >>> import jax.numpy as jnp
    >>> inverse_root(jnp.diag(jnp.array([16.0, 1.0])), 4, 0.0)
    Array([[0.5, 0. ],
           [0. , 1. ]], dtype=float32)
  """
  values, vectors = hermitian_eigh(symmetrize(s))
  values = jnp.maximum(values, 0)
  top = (jnp.max(values, axis=-1, keepdims=True) if values.shape[-1]
         else jnp.zeros(values.shape[:-1] + (1,), values.dtype))
  positive = top > 0
  safe = jnp.where(positive, values + relative_eps * top, jnp.ones_like(values))
  power = jnp.where(positive, safe ** (-1 / exponent), jnp.ones_like(values))
  return symmetrize((vectors * power[..., None, :]) @ conj_t(vectors))


# Blocking of long axes (Anil et al. 2020, §3.3): every axis longer than ``block_size`` is cut into
# blocks (the last one zero-padded), each with its own preconditioners, stacked on one leading axis.
# Zero padding is exact: padded rows of the gradient are zero, so the statistics are block diagonal
# between real and padded coordinates.


def block_sizes(shape: Sequence[int], block_size: int) -> tuple[int, ...]:
  """Per-axis block length: the axis itself when it fits in a block, else ``block_size``."""
  return tuple(d if d <= block_size else block_size for d in shape)


def _counts(shape: Sequence[int], sizes: Sequence[int]) -> list[int]:
  return [-(-d // b) if b else 1 for d, b in zip(shape, sizes)]


def num_blocks(shape: Sequence[int], sizes: Sequence[int]) -> int:
  return math.prod(_counts(shape, sizes))


def to_blocks(x: jax.Array, sizes: Sequence[int]) -> jax.Array:
  """``x`` cut into blocks of ``sizes``: shape ``(num_blocks, *sizes)`` (zero-padded)."""
  counts, k = _counts(x.shape, sizes), len(sizes)
  pads = [(0, n * b - d) for d, n, b in zip(x.shape, counts, sizes)]
  if any(p for _, p in pads):
    x = jnp.pad(x, pads)
  x = x.reshape([v for n, b in zip(counts, sizes) for v in (n, b)])
  x = x.transpose([2 * i for i in range(k)] + [2 * i + 1 for i in range(k)])
  return x.reshape((math.prod(counts), *sizes))


def from_blocks(blocks: jax.Array, shape: Sequence[int], sizes: Sequence[int]) -> jax.Array:
  """The inverse of ``to_blocks``: the stacked blocks reassembled into ``shape``."""
  counts, k = _counts(shape, sizes), len(sizes)
  x = blocks.reshape((*counts, *sizes)).transpose([v for i in range(k) for v in (i, k + i)])
  x = x.reshape([n * b for n, b in zip(counts, sizes)])
  return x if tuple(x.shape) == tuple(shape) else x[tuple(slice(0, d) for d in shape)]
