"""Microbatching: evaluate a function on slices of a batch in a loop and combine the results.

A batch axis of size ``B`` is split into ``B // microbatch_size`` microbatches by a column-major
reshape to ``(num_microbatches, microbatch_size)``: microbatch ``i`` holds rows ``i, i + n, i + 2n,
...``, so a sharding of the batch axis carries over to the ``microbatch_size`` axis and every
microbatch stays spread over the devices. ``CONCAT`` undoes the reshape, so outputs come back in
the original row order.

Type stability: floating sums and means accumulate in at least float32 (so bfloat16 outputs do not
lose the small terms) and are cast back to the output's dtype once, at the end; every loop carry
keeps one dtype, so the loop never retraces.
"""

import collections
import dataclasses
import enum
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._core._policy import cast, compute_dtype
from .._core._types import Params

__all__ = [
    "AccumulationType",
    "Accumulator",
    "microbatch",
    "micro_vmap",
    "micro_grad",
    "reshape_batch_axis",
]

# The per-example outputs of ``micro_grad`` (Optax's record, named "Aux").
IndividualOutputs = collections.namedtuple("Aux", ["values", "metrics", "aux"])


@dataclasses.dataclass(frozen=True)
class Accumulator:
  """How the results of the microbatches combine.

  For evaluations ``x_0 ... x_{n-1}`` the result is ``finalize(update(...update(init(spec), x_0, 0)
  ..., x_{n-1}, n-1))`` where ``spec`` is the shape and dtype of one evaluation; ``aggregate``
  reduces a stack of values along axis 0 in one go (``micro_vmap`` uses it inside a microbatch).

  Attributes:
    init: ``spec -> carry``.
    update: ``(carry, value, index) -> carry`` (must keep the carry's types).
    finalize: ``carry -> result``.
    aggregate: ``stacked values -> result``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> last = steadax.microbatching.Accumulator(
    ...     init=lambda s: jnp.zeros(s.shape, s.dtype), update=lambda c, v, i: v,
    ...     finalize=lambda c: c, aggregate=lambda v: v[-1])
    >>> steadax.microbatch(lambda x: x, 0, 1, last)(jnp.arange(3.0))
    Array([2.], dtype=float32)
  """

  init: Callable[[Params], Params]
  update: Callable[[Params, Params, int], Params]
  finalize: Callable[[Params], Params]
  aggregate: Callable[[Params], Params]


class AccumulationType(enum.Enum):
  """The built-in ways to combine microbatch results."""

  MEAN = enum.auto()
  """The mean over the microbatches."""
  SUM = enum.auto()
  """The sum over the microbatches."""
  RUNNING_MEAN = enum.auto()
  """The mean over the microbatches actually run (see ``num_real_microbatches``)."""
  CONCAT = enum.auto()
  """The outputs concatenated along axis 0, in the original row order."""


def _acc_dtype(dtype: Any) -> np.dtype:
  dtype = np.dtype(dtype)
  if jnp.issubdtype(dtype, jnp.inexact):
    return np.dtype(jax.dtypes.canonicalize_dtype(compute_dtype(dtype)))
  return dtype


def _require_inexact(kind: str, spec: Any) -> None:
  if not jnp.issubdtype(spec.dtype, jnp.inexact):
    raise ValueError(
        f"microbatching: the {kind} accumulator needs floating outputs, got {np.dtype(spec.dtype).name}."
    )


@jax.tree_util.register_pytree_node_class
class _Carry:
  """A loop-carry leaf in a wider accumulation dtype, remembering the output dtype (static)."""

  def __init__(self, value: jax.Array, out_dtype: np.dtype):
    self.value = value
    self.out_dtype = out_dtype

  def tree_flatten(self):
    return (self.value,), self.out_dtype

  @classmethod
  def tree_unflatten(cls, out_dtype, children):
    return cls(children[0], out_dtype)


def _is_carry(x: Any) -> bool:
  return isinstance(x, _Carry)


def _leafwise(init, update, finalize, aggregate) -> Accumulator:
  """An accumulator for a whole tree from functions of one leaf."""
  def tree_init(spec):
    return jax.tree_util.tree_map(init, spec)

  def tree_update(carry, value, index):
    return jax.tree_util.tree_map(lambda c, v: update(c, v, index), carry, value, is_leaf=_is_carry)

  def tree_finalize(carry):
    return jax.tree_util.tree_map(finalize, carry, is_leaf=_is_carry)

  def tree_aggregate(values):
    return jax.tree_util.tree_map(aggregate, values)

  return Accumulator(tree_init, tree_update, tree_finalize, tree_aggregate)


def _wide_zeros(spec: Any) -> _Carry:
  # zeros_like keeps the spec's sharding: under an explicit mesh it is part of the carry's type.
  return _Carry(jnp.zeros_like(spec, dtype=_acc_dtype(spec.dtype)), np.dtype(spec.dtype))


def _add(carry: _Carry, value: Any, index: Any) -> _Carry:
  del index
  return _Carry(carry.value + cast(value, carry.value.dtype), carry.out_dtype)


def _wide_reduce(reduce: Callable[..., jax.Array]) -> Callable[[jax.Array], jax.Array]:
  # Reduced in the accumulation dtype (at least float32), returned in the values' own.
  return lambda v: cast(reduce(cast(v, _acc_dtype(v.dtype)), axis=0), v.dtype)


def _sum() -> Accumulator:
  return _leafwise(
      _wide_zeros, _add, lambda c: cast(c.value, c.out_dtype), _wide_reduce(jnp.sum))


def _mean(num_microbatches: int) -> Accumulator:
  if num_microbatches <= 0:
    raise ValueError(f"microbatching: the number of microbatches must be positive, got {num_microbatches}.")

  def init(spec):
    _require_inexact("MEAN", spec)
    return _wide_zeros(spec)

  return _leafwise(
      init, _add, lambda c: cast(c.value / num_microbatches, c.out_dtype), _wide_reduce(jnp.mean))


def _running_mean() -> Accumulator:
  def init(spec):
    _require_inexact("RUNNING_MEAN", spec)
    return _wide_zeros(spec)

  def update(carry, value, index):
    acc = carry.value
    index = jnp.asarray(index)
    # mean_{i+1} = mean_i * i / (i + 1) + x_i / (i + 1): exact whatever the number of steps run.
    keep = cast(index / (index + 1), acc.dtype)
    new = acc * keep + cast(value, acc.dtype) * (1 - keep)
    return _Carry(new, carry.out_dtype)

  return _leafwise(init, update, lambda c: cast(c.value, c.out_dtype), _wide_reduce(jnp.mean))


def _merged_sharding(x: jax.Array) -> dict:
  """``out_sharding`` for merging the two leading axes of ``x`` under an explicit mesh."""
  sharding: Any = getattr(jax.typeof(x), "sharding", None)
  mesh = getattr(sharding, "mesh", None)
  if mesh is None or not getattr(mesh, "are_all_axes_explicit", False):
    return {}
  spec = tuple(sharding.spec)[1:] if sharding.spec else ()
  return {"out_sharding": jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))}


def _concat(num_microbatches: int) -> Accumulator:
  if num_microbatches <= 0:
    raise ValueError(f"microbatching: the number of microbatches must be positive, got {num_microbatches}.")

  def init(spec):
    return jnp.broadcast_to(jnp.zeros_like(spec), (num_microbatches, *spec.shape))

  def update(carry, value, index):
    return carry.at[index].set(cast(value, carry.dtype))

  def finalize(carry):
    # Undo the column-major split: row i + j * n of the batch came from microbatch i, position j.
    return carry.reshape((-1, *carry.shape[2:]), order="F", **_merged_sharding(carry))

  return _leafwise(init, update, finalize, lambda v: v)


def _builtin(kind: Any, num_microbatches: int) -> Accumulator:
  if isinstance(kind, Accumulator):
    return kind
  if kind is AccumulationType.SUM:
    return _sum()
  if kind is AccumulationType.MEAN:
    return _mean(num_microbatches)
  if kind is AccumulationType.RUNNING_MEAN:
    return _running_mean()
  if kind is AccumulationType.CONCAT:
    return _concat(num_microbatches)
  raise ValueError(f"microbatching: unknown accumulator {kind!r}.")


def _is_spec(x: Any) -> bool:
  return isinstance(x, (Accumulator, AccumulationType))


def _compose(accumulator: Any, num_microbatches: int) -> Accumulator:
  """One accumulator from a prefix tree of accumulators/accumulation types over the outputs."""
  if _is_spec(accumulator):
    return _builtin(accumulator, num_microbatches)
  parts = jax.tree_util.tree_map(lambda a: _builtin(a, num_microbatches), accumulator, is_leaf=_is_spec)
  is_acc = lambda x: isinstance(x, Accumulator)  # noqa: E731

  def over(fn, *trees):
    return jax.tree_util.tree_map(fn, parts, *trees, is_leaf=is_acc)

  def init(spec):
    return over(lambda a, s: a.init(s), spec)

  def update(carry, value, index):
    return over(lambda a, c, v: a.update(c, v, index), carry, value)

  def finalize(carry):
    return over(lambda a, c: a.finalize(c), carry)

  def aggregate(values):
    return over(lambda a, v: a.aggregate(v), values)

  return Accumulator(init, update, finalize, aggregate)


def reshape_batch_axis(tree: Params, microbatch_size: int, axis: int = 0) -> Any:
  """Splits the batch axis of every leaf into ``(num_microbatches, microbatch_size)``.

  The reshape is column-major, so a sharding of the batch axis moves to the ``microbatch_size``
  axis (under an explicit mesh the new sharding is set accordingly).

  Args:
    tree: a tree of arrays sharing a batch axis.
    microbatch_size: the rows per microbatch (must divide the batch size).
    axis: the batch axis.

  Returns:
    The reshaped tree; leaf ``x`` gets shape ``x.shape[:axis] + (n, microbatch_size) +
    x.shape[axis + 1:]``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.microbatching.reshape_batch_axis(jnp.arange(6), 2)
    Array([[0, 3],
           [1, 4],
           [2, 5]], dtype=int32)
  """
  def leaf(x):
    shape = (*x.shape[:axis], -1, microbatch_size, *x.shape[axis + 1:])
    sharding: Any = getattr(jax.typeof(x), "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if mesh is None or not getattr(mesh, "are_all_axes_explicit", False):
      return x.reshape(shape, order="F")
    spec = tuple(sharding.spec)
    if len(spec) <= axis:  # the batch axis is not sharded
      new_spec = spec
    else:
      new_spec = (*spec[:axis], None, spec[axis], *spec[axis + 1:])
    shards = x.shape[axis] // sharding.shard_shape(x.shape)[axis]
    if microbatch_size % shards:
      raise ValueError(
          f"reshape_batch_axis: the batch axis is split over {shards} devices, which must divide "
          f"microbatch_size={microbatch_size}."
      )
    target = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*new_spec))
    return x.reshape(shape, order="F", out_sharding=target)

  return jax.tree_util.tree_map(leaf, tree)


def _as_tuple(x: Any) -> tuple:
  return (x,) if isinstance(x, (int, str)) else tuple(x)


def microbatch(
    fun: Callable[..., Any],
    argnums: int | Sequence[int],
    microbatch_size: int | None,
    accumulator: Accumulator | AccumulationType | Any = AccumulationType.SUM,
    *,
    argnames: str | Sequence[str] = (),
    in_axes: int | Sequence[int] = 0,
    num_real_microbatches: int | jax.Array | None = None,
) -> Callable[..., Any]:
  """``fun`` evaluated on microbatches of its batch arguments in a loop, results combined.

  ``microbatch(f, 0, m)(x)`` runs ``f`` on ``B // m`` slices of ``x`` with a ``lax.fori_loop`` (so
  one slice's intermediates are alive at a time) and combines the results with ``accumulator``:
  ``SUM`` (the default) gives ``f(x)`` for functions that sum over the batch, ``MEAN`` for those that
  average, ``CONCAT`` for per-example outputs.

  Args:
    fun: the function.
    argnums: the positions of the arguments with a batch axis.
    microbatch_size: the rows per microbatch (must divide the batch size); None returns ``fun``.
    accumulator: an ``AccumulationType``, an ``Accumulator``, or a prefix tree of them over
      ``fun``'s outputs.
    argnames: the names of keyword arguments with a batch axis.
    in_axes: the batch axis of each batch argument (``argnums`` then ``argnames``), or one for all.
    num_real_microbatches: stop after this many microbatches (may be traced: variable batch
      sizes without recompiling).

  Returns:
    A function with ``fun``'s signature.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> f = lambda x: (x + 1, jnp.sum(3 * x))
    >>> kinds = steadax.microbatching.AccumulationType
    >>> steadax.microbatch(f, 0, 2, (kinds.CONCAT, kinds.SUM))(jnp.array([1, 2, 3, 4]))
    (Array([2, 3, 4, 5], dtype=int32), Array(30, dtype=int32))
  """
  if microbatch_size is None:
    return fun
  argnums, argnames = _as_tuple(argnums), _as_tuple(argnames)
  axes = (in_axes,) * (len(argnums) + len(argnames)) if isinstance(in_axes, int) else tuple(in_axes)
  if len(axes) != len(argnums) + len(argnames):
    raise ValueError(
        f"microbatch: in_axes has {len(axes)} entries for {len(argnums) + len(argnames)} batch "
        "arguments (argnums then argnames)."
    )
  pos_axes, kw_axes = axes[:len(argnums)], axes[len(argnums):]

  def microbatched(*args, **kwargs):
    batch = [(args[i], ax) for i, ax in zip(argnums, pos_axes)]
    batch += [(kwargs[n], ax) for n, ax in zip(argnames, kw_axes)]
    sizes = {x.shape[ax] for tree, ax in batch for x in jax.tree_util.tree_leaves(tree)}
    if len(sizes) != 1:
      raise ValueError(f"microbatch: the batch arguments need one batch size, got {sorted(sizes)}.")
    batch_size = sizes.pop()
    if batch_size % microbatch_size:
      raise ValueError(
          f"microbatch: the batch size {batch_size} is not divisible by microbatch_size={microbatch_size}."
      )
    num_microbatches = batch_size // microbatch_size
    split_args = list(args)
    split_kwargs = dict(kwargs)
    for i, ax in zip(argnums, pos_axes):
      split_args[i] = reshape_batch_axis(args[i], microbatch_size, ax)
    for n, ax in zip(argnames, kw_axes):
      split_kwargs[n] = reshape_batch_axis(kwargs[n], microbatch_size, ax)

    def call(index):
      take = lambda ax: functools.partial(jnp.take, indices=index, axis=ax)  # noqa: E731
      a, k = list(split_args), dict(split_kwargs)
      for i, ax in zip(argnums, pos_axes):
        a[i] = jax.tree_util.tree_map(take(ax), a[i])
      for n, ax in zip(argnames, kw_axes):
        k[n] = jax.tree_util.tree_map(take(ax), k[n])
      return fun(*a, **k)

    acc = _compose(accumulator, num_microbatches)
    carry = acc.init(jax.eval_shape(call, jnp.zeros([], jnp.int32)))
    stop = num_microbatches if num_real_microbatches is None else num_real_microbatches
    carry = jax.lax.fori_loop(0, stop, lambda i, c: acc.update(c, call(i), i), carry)
    return acc.finalize(carry)

  return microbatched


def micro_vmap(
    fun: Callable[..., Any],
    in_axes: int | Sequence[int | None] = 0,
    out_axes: Any = 0,
    *,
    microbatch_size: int | None = None,
    vmap_fn: Callable[..., Any] = jax.vmap,
    accumulator: Accumulator | AccumulationType | Any = AccumulationType.CONCAT,
    num_real_microbatches: int | jax.Array | None = None,
) -> Callable[..., Any]:
  """``jax.vmap`` over microbatches: vmapped within a microbatch, looped across them.

  With the default ``CONCAT`` it returns what ``jax.vmap(fun)`` does, holding only one microbatch's
  intermediates at a time; ``SUM``/``MEAN`` reduce over the batch without materialising it.

  Args:
    fun: the function to map.
    in_axes: the mapped axis of each positional argument (None: not mapped), or one for all.
    out_axes: must be 0.
    microbatch_size: the rows per loop iteration; None vmaps the whole batch at once.
    vmap_fn: the vmap to use (``jax.vmap`` or a wrapper with its signature).
    accumulator: how to combine: an ``AccumulationType``, ``Accumulator`` or prefix tree of them.
    num_real_microbatches: stop after this many microbatches.

  Returns:
    The mapped function (keyword arguments are mapped along axis 0).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.microbatching.micro_vmap(lambda x: x ** 2, microbatch_size=2)(jnp.arange(4))
    Array([0, 1, 4, 9], dtype=int32)
  """
  if out_axes != 0:
    raise NotImplementedError("micro_vmap: only out_axes=0 is supported.")
  in_axes = (in_axes,) if isinstance(in_axes, int) else tuple(in_axes)

  def vmapped_and_reduced(*args, kwargs):
    outputs = vmap_fn(fun, in_axes, out_axes)(*args, **kwargs)
    rows = jax.tree_util.tree_leaves(outputs)[0].shape[0]
    return _compose(accumulator, rows).aggregate(outputs)

  mapped = tuple(i for i, ax in enumerate(in_axes) if ax is not None)
  looped = microbatch(
      vmapped_and_reduced,
      argnums=mapped,
      argnames="kwargs",
      microbatch_size=microbatch_size,
      accumulator=accumulator,
      in_axes=tuple(ax for ax in in_axes if ax is not None) + (0,),
      num_real_microbatches=num_real_microbatches,
  )

  def wrapped(*args, **kwargs):
    return looped(*args, kwargs=kwargs)

  return wrapped


def micro_grad(
    fun: Callable[..., Any],
    has_aux: bool = False,
    argnums: int | Sequence[int] = 0,
    *,
    batch_argnums: int | Sequence[int] = 1,
    keep_batch_dim: bool = True,
    microbatch_size: int | None = None,
    accumulator: Accumulator | AccumulationType | Any = AccumulationType.SUM,
    transform_fn: Callable[[Params], Params] = lambda g: g,
    metrics_fn: Callable[[Params], Params | None] = lambda g: None,
    num_real_microbatches: int | jax.Array | None = None,
) -> Callable[..., tuple[Any, Any]]:
  """Per-example gradients, transformed (clipped, squared...) and combined, with per-example outputs.

  ``micro_grad(loss, batch_argnums=1)(params, batch)`` computes the gradient of ``loss`` for each
  example of ``batch`` separately, applies ``transform_fn`` to each, and combines them with
  ``accumulator`` (``SUM`` by default), looping over microbatches of ``microbatch_size`` examples.

  Args:
    fun: the loss, ``fun(*args) -> value`` (``(value, aux)`` with ``has_aux``).
    has_aux: ``fun`` returns ``(value, aux)``.
    argnums: the argument(s) to differentiate.
    batch_argnums: the argument(s) with a batch axis 0.
    keep_batch_dim: ``fun`` expects a batch axis (each example is passed as a batch of one).
    microbatch_size: examples per loop iteration (None: all at once).
    accumulator: how to combine the transformed per-example gradients.
    transform_fn: applied to each example's gradient before combining.
    metrics_fn: applied to each example's gradient; returned per example.
    num_real_microbatches: stop after this many microbatches.

  Returns:
    A function returning ``(combined, Aux(values, metrics, aux))`` where ``values``, ``metrics`` and
    ``aux`` have one entry per example.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> loss = lambda w, x: 0.5 * jnp.mean((x @ w) ** 2)
    >>> grads, aux = steadax.microbatching.micro_grad(loss)(jnp.ones(1), jnp.array([[1.0], [2.0]]))
    >>> grads, aux.values
    (Array([5.], dtype=float32), Array([0.5, 2. ], dtype=float32))

  References:
    Denison et al., `Beyond per-example gradients: microbatching in Optax
    <https://arxiv.org/abs/2510.00236>`_, 2025.
  """
  batch_argnums = _as_tuple(batch_argnums)
  with_aux = fun if has_aux else (lambda *a, **k: (fun(*a, **k), None))
  value_and_grad = jax.value_and_grad(with_aux, argnums, has_aux=True)

  def per_example(*args, **kwargs):
    (value, aux), grad = value_and_grad(*args, **kwargs)
    return transform_fn(grad), IndividualOutputs(values=value, metrics=metrics_fn(grad), aux=aux)

  in_axes = [None] * (max(batch_argnums) + 1)
  for i in batch_argnums:
    in_axes[i] = 0
  mapped = micro_vmap(
      per_example,
      in_axes=in_axes,
      accumulator=(accumulator, AccumulationType.CONCAT),
      microbatch_size=microbatch_size,
      num_real_microbatches=num_real_microbatches,
  )
  if not keep_batch_dim:
    return mapped

  def with_batch_of_one(*args, **kwargs):
    args = list(args)
    for i in batch_argnums:
      args[i] = jax.tree_util.tree_map(lambda x: jnp.expand_dims(x, 1), args[i])
    return mapped(*args, **kwargs)

  return with_batch_of_one
