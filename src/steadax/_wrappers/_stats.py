"""with_stats: the statistics a training loop logs, kept in the state by a wrapper (opt-in).

Optax's ``clip_by_global_norm`` keeps no norm and its state is ``EmptyState``; changing that would
change Optax's state structure, so the statistics live in a wrapper's state instead:
``WithStatsState(statistics, inner_state)``, where ``inner_state`` is exactly the wrapped
optimizer's state and ``statistics`` a dict of scalars whose keys are fixed at ``init``. The
updates are the wrapped optimizer's, bit for bit: the wrapper only reads.

``steadax.stats(state)`` (``_stats_reader.py``) is the one reader: it finds these records, and the
counters other wrappers keep (``skip_spikes``, ``apply_if_finite``, ``MultiSteps``,
``inject_hyperparams``, ``monitor``), anywhere in a state tree.

Cost. What the optimizer computes anyway is free: a learning rate is a scalar, and the norm a
``clip_by_global_norm`` at the head of the optimizer takes is recomputed here with the clip's own
code, which XLA merges with the clip's (common subexpressions). Norms of the whole tree are not:
they read the gradient, the updates and the parameters once more, and the updates, which XLA
otherwise fuses into the parameter update, must be written out. They are opt-in (``norms=True``);
docs/wrappers.md gives the measured cost. On one CPU device they are summed over the small leaves
concatenated into one buffer per group (one kernel instead of one per leaf: on XLA's CPU backend a
reduction per leaf doubled a step on 400 leaves and its compile time), large leaves one by one;
with several devices (sharded leaves) or on an accelerator each leaf is reduced where it lies.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core._adapters import as_inner
from .._core._interface import GradientTransformation
from .._core._module import child_field, static_field
from .._core._policy import compute_dtype, hyper, scalar_stat_dtype
from .._core._roles import INNER, OTHER, state_roles
from .._core._transformation import Transformation
from .._core._tree import is_none, l2_norm, tree_sum_of_squares, unwrap_variables
from .._core._types import OptState
from .._core._docs import shared_args
from ..transforms._masked import MaskedNode
from ._branching import manual_axes
from ._stats_probe import Probe, head_clip_norms, probe, scope_suffix

__all__ = ["WithStatsState", "with_stats"]

@state_roles(statistics=OTHER, inner_state=INNER)
class WithStatsState(NamedTuple):
  """State of ``with_stats``.

  Attributes:
    statistics: ``{name: scalar}``, the statistics of the last step (see ``with_stats`` for the
      names); floating values in the widest floating dtype of the parameters (at least float32),
      ``clipped`` entries bool. The keys are fixed at ``init``.
    inner_state: the wrapped optimizer's state, exactly as it makes it.
  """

  statistics: dict[str, jax.Array]
  inner_state: OptState


def _usable(x: Any) -> bool:
  return (x is not None and not isinstance(x, MaskedNode) and hasattr(x, "dtype")
          and jnp.issubdtype(x.dtype, jnp.inexact) and x.dtype != jax.dtypes.float0)


def _squares(x: jax.Array, dtype: Any) -> jax.Array:
  x = x.astype(compute_dtype(x.dtype))
  sq = jnp.real(x * jnp.conj(x)) if jnp.iscomplexobj(x) else x * x
  return sq.astype(dtype)


# On one CPU device, leaves up to this many elements are concatenated before their squares are
# summed: one kernel for all of them, at the cost of a copy (large leaves are reduced in place).
_CONCAT_MAX = 1 << 16


def _concatenates() -> bool:
  """Whether small leaves are concatenated: only where it pays and nothing can be sharded.

  XLA's CPU backend compiles one kernel per reduction (on 400 leaves that doubled a step and its
  compile time), so there one buffer is summed instead; with one device no leaf is sharded, so the
  copy gathers nothing. With several devices a concatenation of sharded leaves would gather them
  onto every device (an all-gather per leaf under automatic sharding, an error under explicit
  sharding), and GPU and TPU backends fuse sibling reductions themselves: each leaf is reduced where
  it lies.
  """
  return jax.default_backend() == "cpu" and jax.device_count() == 1


def sum_of_squares(leaves: list, dtype: Any) -> jax.Array:
  """``sum |x|^2`` over ``leaves`` in ``dtype`` (see ``_concatenates`` for how).

  Inside ``shard_map`` the partial sums of the leaves that vary over the same mesh axes are added
  first and summed over those axes once.
  """
  concatenate = _concatenates()
  parts: dict[tuple, jax.Array] = {}
  small: dict[tuple, list] = {}
  for x in leaves:
    if not _usable(x) or x.size == 0:
      continue
    if concatenate and x.size <= _CONCAT_MAX:
      small.setdefault(manual_axes(x), []).append(_squares(x, dtype).ravel())
      continue
    part = jnp.sum(_squares(x, dtype))
    axes = manual_axes(part)
    parts[axes] = parts[axes] + part if axes in parts else part
  for axes, pieces in small.items():
    part = jnp.sum(jnp.concatenate(pieces)) if len(pieces) > 1 else jnp.sum(pieces[0])
    parts[axes] = parts[axes] + part if axes in parts else part
  total = jnp.zeros([], dtype)
  for axes, part in parts.items():
    total = total + (jax.lax.psum(part, axes) if axes else part)
  return total


def _norm(squares: jax.Array) -> jax.Array:
  return jnp.sqrt(squares)


def _ratio(numerator: jax.Array, denominator: jax.Array) -> jax.Array:
  """``numerator / denominator``; 0 when both are 0, inf when only the denominator is; NaN in, NaN out."""
  positive = denominator > 0
  safe = jnp.where(positive, denominator, jnp.ones_like(denominator))
  zero_case = jnp.where(numerator > 0, jnp.full_like(numerator, jnp.inf), jnp.zeros_like(numerator))
  nan = jnp.full_like(numerator, jnp.nan)
  return jnp.where(positive, numerator / safe, jnp.where(denominator == 0, zero_case, nan))


def _held(value: Any, ran: Any, old: jax.Array) -> jax.Array:
  value = jnp.asarray(value).astype(old.dtype)
  return value if ran is None else jnp.where(ran, value, old)


def _keyed(found: list, name: str) -> list[tuple[str, Any]]:
  """``(key, Found)`` pairs: ``name/scope``, numbered ``name.1/scope``... when a scope holds more."""
  seen: dict[tuple, int] = {}
  out = []
  for item in found:
    index = seen.get(item.scope, 0)
    seen[item.scope] = index + 1
    out.append((f"{name}{'' if index == 0 else f'.{index}'}{scope_suffix(item.scope)}", item))
  return out


class _Groups(NamedTuple):
  """The per-group view of the parameters: each group's leaf positions and its masked view."""

  labels: tuple  # the partition's labels, in order
  positions: dict  # label -> positions in the flattened updates
  label_tree: Any  # the labels as the partition resolves them (a prefix tree of the updates)


def _groups(found: Probe, updates: Any) -> _Groups | None:
  partition = found.partition
  if partition is None:
    return None
  labels = partition.label_tree(updates)
  label_def = jax.tree_util.tree_structure(labels, is_leaf=is_none)
  label_leaves = jax.tree_util.tree_leaves(labels, is_leaf=is_none)
  positions: dict = {label: [] for label in partition.labels}
  index = 0
  for label, subtree in zip(label_leaves, label_def.flatten_up_to(updates)):
    count = len(jax.tree_util.tree_leaves(subtree))
    if label is not None:
      positions[label].extend(range(index, index + count))
    index += count
  return _Groups(partition.labels, positions, labels)


def _masked_view(updates: Any, label_tree: Any, label: Any) -> Any:
  """The updates as ``partition`` gives them to the group ``label`` (``MaskedNode()`` elsewhere)."""
  return jax.tree_util.tree_map(
      lambda l, sub: sub if (l is not None and l == label) else MaskedNode(), label_tree, updates,
      is_leaf=is_none)


class WithStats(Transformation):
  """The transformation ``with_stats`` returns."""

  name = "with_stats"
  elementwise = "children"  # norms are whole-tree reductions; the inner decides the rest
  requires_float = False
  State = WithStatsState
  inner: Any = child_field()
  norms: bool = static_field(default=False)

  def _keys(self, found: Probe, groups: _Groups | None, clips: dict) -> dict[str, str]:
    """Every statistic's key and kind ("float" or "bool"), in a fixed order."""
    keys = {}
    scopes = [()] + ([(label,) for label in groups.labels] if groups is not None else [])
    for scope in scopes:
      suffix = scope_suffix(scope)
      if scope in clips:
        keys["grad_norm" + suffix] = "float"
        keys["clipped" + suffix] = "bool"
        keys["clip_factor" + suffix] = "float"
      if self.norms:
        for name in _TREE_NAMES:
          keys[name + suffix] = "float"
    for key, _ in _keyed(found.rates, "learning_rate"):
      keys[key] = "float"
    return keys

  def init_fn(self, params):
    inner_state = self.inner.init(params)
    found = probe(self.inner, inner_state, inner_state, {})
    groups = _groups(found, params)
    dtype = scalar_stat_dtype(params)
    statistics = {}
    for key, kind in self._keys(found, groups, head_clip_norms(found)).items():
      statistics[key] = jnp.zeros([], jnp.bool_ if kind == "bool" else dtype)
    for key in statistics:
      if key.split("/")[0] == "clip_factor":
        statistics[key] = jnp.ones([], dtype)  # nothing clipped yet
    # Before the first step, each learning rate is the one the first step will apply.
    for key, item in _keyed(found.rates, "learning_rate"):
      statistics[key] = jnp.asarray(item.value).astype(dtype)
    return WithStatsState(statistics=statistics, inner_state=inner_state)

  def update_fn(self, updates, state, params=None, **extra_args):
    new_updates, inner_state = self.inner.update(updates, state.inner_state, params, **extra_args)
    found = probe(self.inner, state.inner_state, inner_state, extra_args)
    groups = _groups(found, updates)
    old = state.statistics
    stats: dict[str, jax.Array] = {}
    for key, item in _keyed(found.rates, "learning_rate"):
      stats[key] = _held(item.value, item.ran, old[key])

    # The clips' norms, computed as the clips compute them: XLA merges both computations.
    clips = head_clip_norms(found)
    clip_ran = {c.scope: c.ran for c in found.clips}
    for scope, max_norm in clips.items():
      suffix = scope_suffix(scope)
      view = updates
      if groups is not None and scope:
        view = _masked_view(updates, groups.label_tree, scope[0])
      norm = l2_norm(view)  # the clip's norm (NaN for a tree holding a NaN), and its decision below
      bound = hyper(max_norm, norm.dtype)
      below = norm <= bound
      one = jnp.ones([], norm.dtype)
      factor = jnp.where(below, one, bound / jnp.where(below, one, norm))
      # The logged norm is NaN for a NaN gradient; the sum of squares is the clip's as well.
      stats["grad_norm" + suffix] = _norm(tree_sum_of_squares(view))
      stats["clipped" + suffix] = _held(jnp.logical_not(below), clip_ran[scope], old["clipped" + suffix])
      stats["clip_factor" + suffix] = _held(factor, clip_ran[scope], old["clip_factor" + suffix])

    if self.norms:
      stats.update(self._tree_statistics(updates, new_updates, params, groups, found, old, set(clips)))
    statistics = {k: stats[k].astype(old[k].dtype) for k in old}
    return new_updates, WithStatsState(statistics=statistics, inner_state=inner_state)

  def _tree_statistics(self, updates, new_updates, params, groups, found, old, clipped) -> dict:
    """grad_norm (where no clip gave it), update_norm, param_norm, update_rms_ratio per scope."""
    dtype = old["update_norm"].dtype
    grads = jax.tree_util.tree_leaves(updates)
    outs = jax.tree_util.tree_leaves(new_updates)
    weights = None if params is None else jax.tree_util.tree_leaves(unwrap_variables(params))
    if weights is not None and len(weights) != len(grads):
      raise ValueError(
          f"{self.owner}: params has {len(weights)} leaves, the updates {len(grads)}; pass the "
          "parameters the updates are for.")
    scopes: list[tuple[tuple, list, Any]] = [((), list(range(len(grads))), found.top_ran)]
    if groups is not None:
      scopes += [((label,), groups.positions[label], found.partition_ran) for label in groups.labels]
    stats = {}
    for scope, positions, ran in scopes:
      suffix = scope_suffix(scope)
      if scope not in clipped:
        stats["grad_norm" + suffix] = _norm(sum_of_squares([grads[i] for i in positions], dtype))
      update_norm = _norm(sum_of_squares([outs[i] for i in positions], dtype))
      if weights is None:
        param_norm = jnp.full([], jnp.nan, dtype)
      else:
        param_norm = _norm(sum_of_squares([weights[i] for i in positions], dtype))
      stats["update_norm" + suffix] = _held(update_norm, ran, old["update_norm" + suffix])
      stats["param_norm" + suffix] = _held(param_norm, ran, old["param_norm" + suffix])
      stats["update_rms_ratio" + suffix] = _held(
          _ratio(update_norm, param_norm), ran, old["update_rms_ratio" + suffix])
    return {k: v.astype(old[k].dtype) for k, v in stats.items()}


_TREE_NAMES = ("grad_norm", "update_norm", "param_norm", "update_rms_ratio")


@shared_args
def with_stats(inner: GradientTransformation, *, norms: bool = False) -> WithStats:
  """Keeps the statistics a training loop logs in the state; read them with ``steadax.stats``.

  The updates are ``inner``'s, bit for bit, and ``inner``'s state is kept as it is (in
  ``WithStatsState.inner_state``). The statistics, by key (``/label`` suffixes are the groups of the
  outermost ``partition``/``groups`` in ``inner``, one entry per group):

  * ``learning_rate``: the learning rate applied, read where the optimizer reads it: the number,
    the schedule at the step's count, the ``inject_hyperparams`` value the step used (overwritten
    or scheduled), a group's ``lr_mult`` included; ``learning_rate.1`` ... when a scope applies
    several;
  * ``grad_norm``, ``clipped``, ``clip_factor``: for a ``clip_by_global_norm`` that sees the
    gradient given to ``update`` (the first transformation of ``inner``, or of a group): the
    gradient's global norm before clipping, whether it was clipped and the factor it was multiplied
    by (1 when it was not), from the clip's own computation (free);

  and with ``norms=True``, at every scope (the whole tree and each group):

  * ``grad_norm`` (where no clip gives it), ``update_norm``, ``param_norm``: the l2 norms of the
    gradient given to ``update``, of the updates returned and of the parameters given (before the
    update; NaN without ``params``);
  * ``update_rms_ratio``: ``update_norm / param_norm``, the ratio of their root mean squares: the
    relative size of the step (0 when both are 0, inf when only the parameters' norm is).

  Statistics of the step the optimizer takes (all but ``grad_norm``) keep their last value on a call
  where it did not run: ``MultiSteps`` accumulating, ``skip_spikes`` or ``apply_if_finite``
  skipping, ``conditionally_*`` not transforming. So under ``MultiSteps`` the learning rate is the
  one applied at the last real step. Put ``with_stats`` inside ``MultiSteps`` instead to see the
  accumulated gradient's norm and its clipping, once per real step.

  Args:
    inner: the optimizer (any transformation; learning rates and clips are found in steadax's own
      transformations, not inside foreign ones).
    norms: also compute the norms and ratios. They cost a pass over the gradient, the updates and
      the parameters (docs/wrappers.md, "Training statistics", gives the measured cost). Static.

  Returns:
    A transformation with state ``WithStatsState(statistics, inner_state)``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.with_stats(
    ...     steadax.chain(steadax.clip_by_global_norm(1.0), steadax.sgd(0.1)), norms=True)
    >>> params = {"w": jnp.ones(2)}
    >>> state = opt.init(params)
    >>> updates, state = opt.update({"w": jnp.array([3.0, 4.0])}, state, params)
    >>> logs = steadax.stats(state)
    >>> float(logs["grad_norm"]), bool(logs["clipped"]), float(logs["clip_factor"])
    (5.0, True, 0.2)
    >>> round(float(logs["learning_rate"]), 6), round(float(logs["update_rms_ratio"]), 6)
    (0.1, 0.070711)

  References:
    Optax issues `#326 <https://github.com/google-deepmind/optax/issues/326>`_ (logging the
    gradient norm) and Flax `#4320 <https://github.com/google/flax/issues/4320>`_ (reading the
    learning rate from ``nnx.Optimizer``).
  """
  return WithStats(as_inner(inner, "with_stats", "inner"), norms=bool(norms))
