"""What an optimizer applied at a step, read from the transformation and its states before and after.

``with_stats`` walks the transformation it wraps together with the inner states of the step (the
state given to ``update`` and the one it returned) and finds, without running anything again:

* every learning rate applied: a steadax transformation with a ``learning_rate`` hyperparameter
  (``scale_by_learning_rate`` and the optimizers holding their own rate) applied its number, or its
  schedule at the ``count`` of the state it was given; under ``inject_hyperparams`` the inner
  transformation is rebuilt from the values the step used (the state's ``hyperparams``), so an
  injected, overwritten or scheduled rate and a group's ``lr_mult`` are all read where they act;
* the ``clip_by_global_norm`` transformations that see the raw gradient (the first of a chain, not
  behind accumulation or a mask), whose norm ``with_stats`` recomputes with the clip's own code
  (XLA merges the two computations, so it costs nothing);
* the outermost ``partition``/``groups``, whose labels are the groups of the per-group statistics;
* whether the inner optimizer ran at this call: ``MultiSteps`` emitted, ``skip_spikes`` and
  ``apply_if_finite`` did not skip, ``conditionally_*``'s predicate held. A statistic found below
  such a wrapper keeps its last value when it did not run, so the rate is the one applied at the
  last real step.

Transformations the walk does not know (Optax's, a user's) are opaque: nothing below them is found.
"""

import dataclasses
from typing import Any

import jax.numpy as jnp

from .._core._combine import Chain, NamedChain
from .._core._module import _CHILD, _HYPER, _KIND
from .._core._policy import COUNTER_DTYPE, hyper
from .._core._roles import roles_of
from .._core._transformation import Transformation
from .._fusion._fuse import Fused
from ..schedules._inject import InjectHyperparams
from ..transforms._clipping import ClipByGlobalNorm
from ..transforms._masked import Masked
from ._accumulation import MultiSteps
from ._branching import check_predicate
from ._conditionality import _ApplyIfFinite, _Conditional
from ._flatten import Flatten
from ._partition import Partition
from ._spikes import _SkipSpikes

__all__ = ["Found", "Probe", "probe", "scope_suffix", "head_clip_norms"]


@dataclasses.dataclass
class Found:
  """One value found: where (the partition labels above it), what, and whether it acted now.

  ``ran`` is a bool scalar (the wrappers above it let the inner optimizer run at this call) or
  None (nothing above it can skip).
  """

  scope: tuple
  value: Any
  ran: Any


@dataclasses.dataclass
class Probe:
  """Everything the walk found in one transformation tree."""

  rates: list = dataclasses.field(default_factory=list)  # Found(value=learning rate)
  clips: list = dataclasses.field(default_factory=list)  # Found(value=max_norm), raw-gradient clips
  partition: Partition | None = None  # the outermost partition (the groups of the statistics)
  partition_ran: Any = None  # whether the optimizer ran above it (for the held statistics)
  top_ran: Any = None  # whether the optimizer ran, from the wrappers at the top of the tree


def scope_suffix(scope: tuple) -> str:
  """``"/label/inner_label"`` for a statistic found under partitions, ``""`` at the top."""
  return "".join(f"/{label}" for label in scope)


def _and(a: Any, b: Any) -> Any:
  if a is None:
    return b
  if b is None:
    return a
  return jnp.logical_and(a, b)


class _Walk:
  def __init__(self, extra_args: dict):
    self.extra_args = extra_args
    self.found = Probe()
    self.top_open = True  # still among the wrappers at the top of the tree

  def visit(self, tx: Any, old: Any, new: Any, scope: tuple, ran: Any, head: bool) -> None:
    """``tx`` with its states before and after; ``head``: it receives the raw gradient."""
    if isinstance(tx, (Chain, NamedChain)):
      self._close_top(ran)
      keys = tx.names if isinstance(tx, NamedChain) else range(len(tx.transforms))
      for i, (key, inner) in enumerate(zip(keys, tx.transforms)):
        self.visit(inner, old[key], new[key], scope, ran, head and i == 0)
      return
    if isinstance(tx, Partition):
      if self.found.partition is None and not scope:
        self.found.partition, self.found.partition_ran = tx, ran
      self._close_top(ran)
      for label, inner in zip(tx.labels, tx.transforms):
        self.visit(inner, old.inner_states[label].inner_state, new.inner_states[label].inner_state,
                   scope + (label,), ran, head)
      return
    if isinstance(tx, Masked):
      # The inner transformation sees a part of the gradient: a clip there bounds that part only.
      self._close_top(ran)
      self.visit(tx.inner, old.inner_state, new.inner_state, scope, ran, False)
      return
    if isinstance(tx, InjectHyperparams):
      # The values the step used are in the state it returned; rebuilding the inner transformation
      # from them is free at trace time and puts each value where the optimizer reads it.
      self.visit(tx._inner(dict(new.hyperparams)), old.inner_state, new.inner_state, scope, ran, head)
      return
    if isinstance(tx, MultiSteps):
      emitted = new.gradient_step != old.gradient_step
      self.visit(tx.opt, old.inner_opt_state, new.inner_opt_state, scope, _and(ran, emitted),
                    head and tx.period == 1)
      return
    if isinstance(tx, _SkipSpikes):
      self.visit(tx.inner, old.inner_state, new.inner_state, scope,
                    _and(ran, jnp.logical_not(new.last_skipped)), head)
      return
    if isinstance(tx, _ApplyIfFinite):
      # A non-finite update is applied anyway once more than max_consecutive_errors came in a row.
      gave_up = new.notfinite_count > hyper(tx.max_consecutive_errors, COUNTER_DTYPE)
      applied = jnp.logical_or(new.last_finite, gave_up)
      self.visit(tx.inner, old.inner_state, new.inner_state, scope, _and(ran, applied), head)
      return
    if isinstance(tx, _Conditional):
      kwargs = self.extra_args if tx.forward_extra_args else {}
      run = check_predicate(tx.owner, "should_transform_fn", tx.should_transform_fn(old.step, **kwargs))
      self.visit(tx.inner, old.inner_state, new.inner_state, scope, _and(ran, run), head)
      return
    if isinstance(tx, Flatten):  # the state is the inner one's, on the raveled parameters
      self.visit(tx.inner, old, new, scope, ran, False)
      return
    if isinstance(tx, Fused):
      # A clip inside sees flat buffers: its norm is summed in another order than the tree's.
      self.visit(tx.inner, old.inner_state, new.inner_state, scope, ran, False)
      return
    if isinstance(tx, ClipByGlobalNorm):
      if head:
        self.found.clips.append(Found(scope, tx.max_norm, ran))
      self._close_top(ran)
      return
    if isinstance(tx, Transformation):
      self._close_top(ran)
      self._leaf(tx, old, scope, ran)
      self._single_inner(tx, old, new, scope, ran)

  def _close_top(self, ran: Any) -> None:
    if self.top_open:
      self.top_open = False
      self.found.top_ran = ran

  def _leaf(self, tx: Transformation, old: Any, scope: tuple, ran: Any) -> None:
    field = next((f for f in dataclasses.fields(tx) if f.name == "learning_rate"), None)
    if field is None or field.metadata.get(_KIND) != _HYPER:
      return
    rate = getattr(tx, "learning_rate")
    if callable(rate):
      count = getattr(old, "count", None) if isinstance(old, tuple) else None
      if count is None:
        return  # a schedule whose step this walk cannot see
      rate = rate(count)
    self.found.rates.append(Found(scope, rate, ran))

  def _single_inner(self, tx: Transformation, old: Any, new: Any, scope: tuple, ran: Any) -> None:
    """Any other wrapper of one transformation whose state holds that transformation's state in one
    field (``lookahead``-style and user wrappers declared with state roles)."""
    children = [getattr(tx, f.name) for f in dataclasses.fields(tx) if f.metadata.get(_KIND) == _CHILD]
    children = [c for c in children if isinstance(c, Transformation)]
    roles = roles_of(type(old)) or {}
    inner_fields = [name for name, role in roles.items() if role.kind == "inner"]
    if len(children) == 1 and len(inner_fields) == 1 and type(new) is type(old):
      name = inner_fields[0]
      self.visit(children[0], getattr(old, name), getattr(new, name), scope, ran, False)


def probe(tx: Any, old: Any, new: Any, extra_args: dict) -> Probe:
  """Walks ``tx`` with its states before and after a step (the same state twice at init)."""
  walk = _Walk(extra_args)
  walk.visit(tx, old, new, (), None, True)
  walk._close_top(None)
  return walk.found


def head_clip_norms(found: Probe) -> dict:
  """``{scope: max_norm}`` of the raw-gradient clips at the top or in a group of the partition."""
  return {c.scope: c.value for c in found.clips if len(c.scope) <= 1}

