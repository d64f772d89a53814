"""Transformations of per-element gradients: the Aggregator type, process, averaging, accumulation.

An *aggregator* maps per-element updates (each leaf shaped ``(*batch, *param_shape)``, as from
``jax.vmap(jax.grad(loss), (None, 0))``) to one update shaped like the parameters. ``process`` runs a
preprocessor on the per-element updates, an aggregator, then a postprocessor (an ordinary optimizer)
on the aggregate, and calls the postprocessor only once the aggregator reports ``ready``.

Every state here obeys the type-stability contract: int32 counters, accumulators in the parameters'
dtype (real for sums of squares), arithmetic in at least float32.
"""

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..._core._adapters import with_extra_args_support
from ..._core._docs import shared_args
from ..._core._interface import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    _set_function_pair,
)
from ..._core._stateless import identity
from ..._core._transformation import Transformation
from ..._core._combine import Chain
from ..._core._contract import conform_init, conform_state
from ..._core._leafwise import Scalars
from ..._core._module import child_field, static_field
from ..._core._policy import cast, compute_dtype, key_path_str, safe_increment, zero_count
from ..._core._roles import COUNTER, OTHER, accumulator, state_roles
from ..._core._tree import tree_map, zeros_like
from ...tree._state import tree_get
from ..._core._types import Params

__all__ = [
    "PerElementUpdates",
    "AggregatedUpdates",
    "MaybeAxis",
    "AggregatorUpdateFn",
    "Aggregator",
    "process",
    "average_per_element_updates",
    "AccumulateAvgUpdatesState",
    "accumulate_avg_updates",
    "average_incrementally_updates",
]

PerElementUpdates = Any  # a tree whose leaves carry leading per-element (batch) axes
AggregatedUpdates = Any  # a tree shaped like the parameters
MaybeAxis = Union[int, Sequence[int], None]


class AggregatorUpdateFn(Protocol):
  """``update(per_elt_updates, state, params=None, **extra_args) -> (aggregated, state)``."""

  def __call__(
      self, per_elt_updates: PerElementUpdates, state: Any, params: Any = None, **extra_args: Any
  ) -> tuple[AggregatedUpdates, Any]:
    ...


class Aggregator(GradientTransformationExtraArgs):
  """A transformation from per-element updates to one aggregated update.

  ``Aggregator(init, update)`` builds one from two functions, as ``GradientTransformation`` does;
  the difference is only in what ``update`` receives (per-element updates, leading batch axes
  included) and returns (an update shaped like the parameters). ``process`` returns an
  ``Aggregator`` when its aggregator is one.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> from steadax.experimental import aggregating
    >>> mean = aggregating.Aggregator(
    ...     init=steadax.init_empty_state,
    ...     update=lambda u, s, p=None: (jax.tree.map(lambda x: x.mean(0), u), s))
    >>> mean.update(jnp.array([[1.0], [3.0]]), mean.init(None))[0]
    Array([2.], dtype=float32)
  """

  def __new__(cls, *args: Any, **kwargs: Any):
    if cls is Aggregator:
      return object.__new__(_FunctionAggregator)
    return object.__new__(cls)


class _FunctionAggregator(Aggregator):
  init_fn: Callable = static_field()
  update_fn: Callable = static_field()

  def __init__(self, init: Any = None, update: Any = None, **fields: Any):
    _set_function_pair(self, "Aggregator", init, update, fields)

  @property
  def owner(self) -> str:
    return f"Aggregator({getattr(self.update_fn, '__qualname__', 'update')})"

  # A function pair goes through the contract as every transformation does: a strongly typed
  # fresh state, and a new state with exactly the old one's types. The aggregated update has no
  # per-element counterpart to compare with (it drops the batch axes), as for steadax's own
  # aggregators (``updates_follow_params = False``).
  def init(self, params):
    return conform_init(self.owner, self.init_fn(params))

  def update(self, updates, state, params=None, **extra_args):
    aggregated, new_state = self.update_fn(updates, state, params, **extra_args)
    return aggregated, conform_state(self.owner, state, new_state)


# ------------------------------------------------------------------------------ helpers


def _axes(axis: Any) -> tuple[int, ...]:
  return (int(axis),) if isinstance(axis, (int, np.integer)) else tuple(int(a) for a in axis)


def _check_axis(owner: str, per_elt_axis: Any) -> Any:
  items = [per_elt_axis] if isinstance(per_elt_axis, (int, np.integer)) else per_elt_axis
  if isinstance(items, (str, bytes)) or not isinstance(items, (list, tuple)) or not all(
      isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in items):
    raise TypeError(f"{owner}: `per_elt_axis` must be an int or a sequence of ints, got {per_elt_axis!r}.")
  axes = _axes(per_elt_axis)
  if not axes:
    raise ValueError(f"{owner}: `per_elt_axis` must name at least one axis, got {per_elt_axis!r}.")
  return per_elt_axis if isinstance(per_elt_axis, (int, np.integer)) else axes


def _check_steps(owner: str, accumulation_steps: Any) -> int:
  if isinstance(accumulation_steps, bool) or not isinstance(accumulation_steps, (int, np.integer)):
    raise TypeError(f"{owner}: `accumulation_steps` must be a Python int, got {accumulation_steps!r}.")
  if accumulation_steps < 1:
    raise ValueError(f"{owner}: `accumulation_steps` must be at least 1, got {accumulation_steps}.")
  return int(accumulation_steps)


def _batch_stats(owner: str, x: jax.Array, axes: tuple[int, ...], path: Any) -> tuple[jax.Array, jax.Array]:
  """The mean over ``axes`` and the sum of squared deviations from it, in at least float32."""
  if any(not -x.ndim <= a < x.ndim for a in axes):
    raise ValueError(
        f"{owner}: per-element update at {key_path_str(path)} has shape {x.shape}, without the axes {axes}."
    )
  xc = cast(x, compute_dtype(x.dtype))
  mean = jnp.mean(xc, axis=axes, keepdims=True)
  dev = xc - mean
  sum_sq = jnp.sum(jnp.real(dev * jnp.conj(dev)) if jnp.iscomplexobj(dev) else dev * dev, axis=axes)
  return jnp.squeeze(mean, axis=axes), sum_sq


def _map_with_path(fn: Callable, tree: Any) -> tuple[Any, ...]:
  """``fn(path, leaf)`` returning a tuple; the results as a tuple of trees shaped like ``tree``."""
  flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
  results = [fn(path, leaf) for path, leaf in flat]
  if not results:
    return ()
  return tuple(treedef.unflatten([r[i] for r in results]) for i in range(len(results[0])))


# ------------------------------------------------------------------------------ process


class _Process(Transformation):
  name = "process"
  requires_float = False
  updates_follow_params = False
  preprocessor: Any = child_field()
  aggregator: Any = child_field()
  postprocessor: Any = child_field()
  aggregator_has_aux: bool = static_field(default=False)

  def init_fn(self, params):
    return (self.preprocessor.init(params), self.aggregator.init(params), self.postprocessor.init(params))

  def update_fn(self, updates, state, params=None, **extra_args):
    pre_state, agg_state, post_state = state
    updates, pre_state = self.preprocessor.update(updates, pre_state, params, **extra_args)
    aggregated, agg_state = self.aggregator.update(updates, agg_state, params, **extra_args)
    if self.aggregator_has_aux:
      aggregated, aux = aggregated
      extra_args = {**extra_args, **aux}
    ready = tree_get(agg_state, "ready", True)

    def run(operands):
      return self.postprocessor.update(operands[0], operands[1], params, **extra_args)

    if isinstance(ready, bool) and ready:
      out, post_state = run((aggregated, post_state))
    else:
      def wait(operands):
        # Zeros of the postprocessor's output types; its state is left as it was.
        shapes = jax.eval_shape(run, operands)[0]
        return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes), operands[1]

      out, post_state = lax.cond(ready, run, wait, (aggregated, post_state))
    return out, (pre_state, agg_state, post_state)


class _ProcessAggregator(_Process, Aggregator):
  pass


@shared_args
def process(
    preprocessor: GradientTransformation,
    aggregator: GradientTransformation | Aggregator,
    postprocessor: GradientTransformation,
    aggregator_has_aux: bool = False,
) -> GradientTransformation | Aggregator:
  """Chains a per-element preprocessor, an aggregator and a postprocessor.

  The postprocessor runs only when the aggregator's state has no ``ready`` field or it is true
  (accumulating aggregators set it on their emitting step); otherwise the update is zero and the
  postprocessor's state is kept.

  Args:
    preprocessor: maps per-element updates to per-element updates (e.g. per-example clipping).
    aggregator: maps per-element updates to one update shaped like the parameters.
    postprocessor: maps the aggregate to the final update (an optimizer).
    aggregator_has_aux: the aggregator returns ``(update, aux)`` with a dict ``aux`` passed to the
      postprocessor as extra keyword arguments.

  Returns:
    An ``Aggregator`` if ``aggregator`` is one, else a ``GradientTransformationExtraArgs``; its
    state is ``(preprocessor_state, aggregator_state, postprocessor_state)``.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> from steadax.experimental import aggregating
    >>> opt = aggregating.process(steadax.identity(), aggregating.average_per_element_updates(),
    ...                           steadax.sgd(1.0))
    >>> per_example_grads = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    >>> opt.update(per_example_grads, opt.init(jnp.zeros(2)))[0]
    Array([-2., -3.], dtype=float32)
  """
  if not isinstance(aggregator_has_aux, bool):
    raise TypeError(f"process: `aggregator_has_aux` must be a bool, got {aggregator_has_aux!r}.")
  pre = with_extra_args_support(preprocessor)
  post = with_extra_args_support(postprocessor)
  if isinstance(aggregator, Aggregator):
    return _ProcessAggregator(pre, aggregator, post, aggregator_has_aux=aggregator_has_aux)
  return _Process(pre, with_extra_args_support(aggregator), post, aggregator_has_aux=aggregator_has_aux)


# ------------------------------------------------------------------------------ averaging


class _AveragePerElement(Transformation, Aggregator):
  name = "average_per_element_updates"
  updates_follow_params = False
  per_elt_axis: Any = static_field(default=0)

  def update_fn(self, updates, state, params=None, **extra_args):
    axes = _axes(self.per_elt_axis)
    # A reduction over the batch axes (the result has another shape, so not leafwise): the mean is
    # taken in at least float32 and returned in the leaf's dtype.
    (means,) = _map_with_path(
        lambda path, x: (_batch_stats(self.name, x, axes, path)[0].astype(x.dtype),), updates
    ) or (updates,)
    return means, state


@shared_args
def average_per_element_updates(per_elt_axis: int | Sequence[int] = 0) -> Aggregator:
  """Averages per-element updates over their per-element axes.

  Args:
    per_elt_axis: the per-element axis (or axes) of every leaf.

  Returns:
    A stateless ``Aggregator``; the mean is taken in at least float32 and keeps each leaf's dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> from steadax.experimental import aggregating
    >>> agg = aggregating.average_per_element_updates()
    >>> agg.update(jnp.array([[1.0], [3.0]]), agg.init(None))[0]
    Array([2.], dtype=float32)
  """
  return _AveragePerElement(per_elt_axis=_check_axis("average_per_element_updates", per_elt_axis))


@state_roles(micro_step=COUNTER, ready=OTHER, avg_grad=accumulator())
class AccumulateAvgUpdatesState(NamedTuple):
  """State of ``accumulate_avg_updates``: the int32 micro-step, whether the last step emitted, and
  the running mean of the updates.

  Attributes:
    micro_step: the micro-step within the accumulation (int32).
    ready: bool scalar, True when the last step emitted the average.
    avg_grad: the running mean of the updates.
  """

  micro_step: jax.Array
  ready: jax.Array
  avg_grad: Params


class _AccumulateAvg(Transformation):
  name = "accumulate_avg_updates"
  State = AccumulateAvgUpdatesState
  accumulation_steps: int = static_field(default=1)

  def init_fn(self, params):
    return AccumulateAvgUpdatesState(
        micro_step=zero_count(), ready=jnp.zeros([], jnp.bool_), avg_grad=zeros_like(params)
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    micro_step = safe_increment(state.micro_step)
    emit = micro_step == self.accumulation_steps

    def leaf(k, u, a):
      return u, a + (u - a) / k.seen  # the running mean; the update output is unused

    scalars = Scalars(seen=micro_step)
    _, avg = self.leafwise(leaf, updates, state.avg_grad, scalars=scalars)
    # The emitted mean is the stored one (as Optax's), in the incoming updates' dtypes.
    out = tree_map(lambda m, u: jnp.where(emit, m, jnp.zeros_like(m)).astype(u.dtype), avg, updates)
    new_state = AccumulateAvgUpdatesState(
        micro_step=jnp.where(emit, jnp.zeros_like(micro_step), micro_step),
        ready=emit,
        avg_grad=tree_map(lambda m: jnp.where(emit, jnp.zeros_like(m), m), avg),
    )
    return out, new_state


@shared_args
def accumulate_avg_updates(accumulation_steps: int) -> GradientTransformation:
  """Averages updates over ``accumulation_steps`` calls, emitting the mean on every last one.

  Between emissions the update is zero and the state's ``ready`` is false (``process`` then skips
  its postprocessor). The running mean is kept in each parameter's dtype and updated in at least
  float32.

  Args:
    accumulation_steps: the number of calls averaged (1 gives ``identity()``).

  Returns:
    A transformation with ``AccumulateAvgUpdatesState``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> from steadax.experimental import aggregating
    >>> tx = aggregating.accumulate_avg_updates(2)
    >>> state = tx.init(jnp.zeros(1))
    >>> out, state = tx.update(jnp.array([1.0]), state)
    >>> tx.update(jnp.array([3.0]), state)[0]
    Array([2.], dtype=float32)
  """
  steps = _check_steps("accumulate_avg_updates", accumulation_steps)
  if steps == 1:
    return identity()
  return _AccumulateAvg(accumulation_steps=steps)


class _AggregatorChain(Chain, Aggregator):
  """``chain``'s one implementation, typed as an Aggregator (its first link drops the batch axes)."""

  name = "average_incrementally_updates"
  updates_follow_params = False


@shared_args
def average_incrementally_updates(
    per_elt_axis: MaybeAxis, accumulation_steps: int
) -> Aggregator | GradientTransformation:
  """Averages per-element updates, then averages the result over ``accumulation_steps`` calls.

  Args:
    per_elt_axis: the per-element axis (or axes), or None when updates are already aggregated.
    accumulation_steps: the number of calls averaged.

  Returns:
    ``accumulate_avg_updates(accumulation_steps)`` when ``per_elt_axis`` is None, else an
    ``Aggregator`` chaining ``average_per_element_updates`` and it (state: the pair of states).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> from steadax.experimental import aggregating
    >>> agg = aggregating.average_incrementally_updates(0, 2)
    >>> state = agg.init(jnp.zeros(1))
    >>> _, state = agg.update(jnp.array([[1.0], [3.0]]), state)
    >>> agg.update(jnp.array([[5.0], [7.0]]), state)[0]
    Array([4.], dtype=float32)
  """
  owner = "average_incrementally_updates"
  steps = _check_steps(owner, accumulation_steps)
  if per_elt_axis is None:
    return accumulate_avg_updates(steps)
  return _AggregatorChain((average_per_element_updates(_check_axis(owner, per_elt_axis)),
                           accumulate_avg_updates(steps)))
