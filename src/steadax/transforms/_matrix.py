"""Matrix helpers shared by the orthogonalized and Kronecker-factored optimizers (private).

Muon, GaLore, SOAP and Shampoo treat a parameter as a matrix (or a tensor with one small matrix per
axis). What they share lives here: mode products and per-axis Gram statistics of tensors, Hermitian
eigendecompositions and inverse roots in at least float32, the blocking of large axes, and the
gathering of a sharded matrix before an iterative algorithm runs on it.

Complex parameters are handled with conjugate transposes throughout: the statistic of axis ``k`` is
``X_(k) X_(k)^H`` (``X_(k)`` the mode-``k`` unfolding), which is Hermitian, so ``eigh`` applies and
its eigenvalues are real.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__: list[str] = []


# --------------------------------------------------------------------------------------------------
# Sharding: gather a matrix once, not once per iteration.


def _identity(x: jax.Array) -> jax.Array:
  return x


def replicate_axes(x: jax.Array, axes: Sequence[int]) -> tuple[jax.Array, Callable[[jax.Array], jax.Array]]:
  """``x`` with ``axes`` gathered onto every device, and a function restoring ``x``'s sharding.

  Iterative matrix algorithms (Newton-Schulz) on a matrix sharded along a contracted axis make the
  SPMD partitioner insert a collective in every iteration. Gathering the matrix axes once up front
  (one all-gather) and computing redundantly on each device makes the collective count independent
  of the number of iterations; axes not in ``axes`` (batch axes of stacked weights) keep their
  sharding, so each device orthogonalizes its own blocks.

  * No mesh (single device, or an unsharded value): nothing changes.
  * Explicit mesh axes (``jax.sharding.AxisType.Explicit``): ``reshard`` to a spec with ``None`` on
    ``axes`` and back afterwards (the way back is a local slice, no collective).
  * Auto mesh axes: a sharding constraint with ``None`` on ``axes`` and ``UNCONSTRAINED`` elsewhere;
    the partitioner propagates the rest. Meshes mixing both kinds get both.
  * Inside ``shard_map`` (manual axes) values are per-device blocks already: nothing changes.

  Args:
    x: an array (or tracer).
    axes: the axes that must be whole on every device.

  Returns:
    ``(gathered, restore)``; ``restore`` maps a result shaped like ``x`` back to ``x``'s sharding.
  """
  typeof = getattr(jax, "typeof", None)
  aval = typeof(x) if typeof is not None else getattr(x, "aval", None)
  sharding = getattr(aval, "sharding", None)
  mesh = getattr(sharding, "mesh", None)
  axis_type = getattr(jax.sharding, "AxisType", None)
  if mesh is None or axis_type is None or getattr(mesh, "empty", True) or mesh.size <= 1:
    return x, _identity
  types = tuple(getattr(mesh, "axis_types", ()))
  if any(t == axis_type.Manual for t in types):
    return x, _identity
  axes = {a % x.ndim for a in axes}
  named = jax.sharding.NamedSharding
  spec = tuple(sharding.spec) + (None,) * (x.ndim - len(tuple(sharding.spec)))
  restore = _identity
  if any(t == axis_type.Explicit for t in types):
    new_spec = tuple(None if i in axes else s for i, s in enumerate(spec))
    if new_spec != spec:
      x = jax.sharding.reshard(x, named(mesh, jax.sharding.PartitionSpec(*new_spec)))
      restore = lambda y: jax.sharding.reshard(y, sharding)
    spec = new_spec
  if any(t == axis_type.Auto for t in types):
    # Auto axes do not appear in the type: constrain the matrix axes to be whole and leave the
    # partitioner free elsewhere (a constraint may not name explicit axes).
    unconstrained = jax.sharding.PartitionSpec.UNCONSTRAINED
    wanted = tuple(None if i in axes else unconstrained for i in range(x.ndim))
    x = jax.lax.with_sharding_constraint(x, named(mesh, jax.sharding.PartitionSpec(*wanted)))
  return x, restore


def replicate_whole(*arrays: jax.Array) -> tuple[tuple[jax.Array, ...], tuple[Callable, ...]]:
  """``replicate_axes`` over every axis of each array: the arrays whole on every device (one
  all-gather each when sharded) and, per array, the function restoring its sharding."""
  pairs = [replicate_axes(x, range(x.ndim)) for x in arrays]
  return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


# --------------------------------------------------------------------------------------------------
# Tensors as Kronecker products of per-axis matrices.


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


def eigh_dtype(dtype: Any) -> np.dtype:
  """Dtype of an eigendecomposition of a statistic stored in ``dtype``: at least float32."""
  dtype = np.dtype(dtype)
  if jnp.issubdtype(dtype, jnp.complexfloating):
    return np.dtype(jnp.complex128) if dtype == np.dtype(jnp.complex128) else np.dtype(jnp.complex64)
  return np.dtype(jnp.float64) if dtype == np.dtype(jnp.float64) else np.dtype(jnp.float32)


def symmetrize(s: jax.Array) -> jax.Array:
  """``(S + S^H) / 2``: removes the rounding asymmetry of accumulated Gram matrices."""
  half = jnp.asarray(0.5, jnp.finfo(s.dtype).dtype)
  return (s + conj_t(s)) * half.astype(s.dtype)


def eigenbasis(s: jax.Array) -> jax.Array:
  """Eigenvectors of the Hermitian ``s`` (batched over leading axes), by decreasing eigenvalue."""
  _, vectors = jnp.linalg.eigh(symmetrize(s.astype(eigh_dtype(s.dtype))))
  return vectors[..., ::-1]


def inverse_root(s: jax.Array, exponent: Any, relative_eps: Any) -> jax.Array:
  """``(S + eps * lambda_max * I)^(-1/exponent)`` of the Hermitian PSD ``s``, batched.

  The regularisation is relative to the largest eigenvalue, so the result does not depend on the
  scale of the statistics (grafting restores the scale). A zero matrix (no gradient seen yet) gives
  the identity. Negative eigenvalues (rounding) are clipped to zero.

  Args:
    s: ``(..., d, d)`` Hermitian positive semi-definite matrices.
    exponent: the root (``4`` for a matrix's left and right Shampoo factors).
    relative_eps: the regulariser, relative to the largest eigenvalue.

  Returns:
    The inverse roots in the eigendecomposition dtype (at least float32).
  """
  dtype = eigh_dtype(s.dtype)
  rdt = jnp.finfo(dtype).dtype
  values, vectors = jnp.linalg.eigh(symmetrize(s.astype(dtype)))
  values = jnp.maximum(values, jnp.zeros([], rdt))
  if values.shape[-1]:
    top = jnp.max(values, axis=-1, keepdims=True)
  else:
    top = jnp.zeros(values.shape[:-1] + (1,), rdt)
  positive = top > 0
  reg = values + jnp.asarray(relative_eps).astype(rdt) * top
  safe = jnp.where(positive, reg, jnp.ones_like(reg))
  power = jnp.where(positive, safe ** (-1 / jnp.asarray(exponent).astype(rdt)), jnp.ones_like(reg))
  root = (vectors * power[..., None, :].astype(dtype)) @ conj_t(vectors)
  return symmetrize(root)


# --------------------------------------------------------------------------------------------------
# Blocking of large axes (Anil et al. 2020, §3.3): every axis longer than ``block_size`` is cut into
# blocks of ``block_size`` (the last one zero-padded), and every block gets its own preconditioners.
# Blocks are stacked on one leading axis so that statistics, eigendecompositions and products run
# batched. Zero padding is exact: a padded row of the gradient is zero, so the statistics are block
# diagonal between real and padded coordinates and the padded part never mixes into the real one.


def block_sizes(shape: Sequence[int], block_size: int) -> tuple[int, ...]:
  """Per-axis block length: the axis itself when it fits in a block, else ``block_size``."""
  return tuple(d if d <= block_size else block_size for d in shape)


def to_blocks(x: jax.Array, sizes: Sequence[int]) -> jax.Array:
  """``x`` cut into blocks of ``sizes``: shape ``(num_blocks, *sizes)`` (zero-padded)."""
  counts = [-(-d // b) if b else 1 for d, b in zip(x.shape, sizes)]
  pads = [(0, n * b - d) for d, n, b in zip(x.shape, counts, sizes)]
  if any(p for _, p in pads):
    x = jnp.pad(x, pads)
  split = [v for n, b in zip(counts, sizes) for v in (n, b)]
  x = x.reshape(split)
  k = len(sizes)
  x = x.transpose([2 * i for i in range(k)] + [2 * i + 1 for i in range(k)])
  return x.reshape((math.prod(counts), *sizes))


def from_blocks(blocks: jax.Array, shape: Sequence[int], sizes: Sequence[int]) -> jax.Array:
  """The inverse of ``to_blocks``: the stacked blocks reassembled into ``shape``."""
  counts = [-(-d // b) if b else 1 for d, b in zip(shape, sizes)]
  k = len(sizes)
  x = blocks.reshape((*counts, *sizes))
  order = [v for i in range(k) for v in (i, k + i)]
  x = x.transpose(order).reshape([n * b for n, b in zip(counts, sizes)])
  if tuple(x.shape) != tuple(shape):
    x = x[tuple(slice(0, d) for d in shape)]
  return x


def num_blocks(shape: Sequence[int], sizes: Sequence[int]) -> int:
  return math.prod(-(-d // b) if b else 1 for d, b in zip(shape, sizes))
