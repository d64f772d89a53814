"""stats: the one reader of training statistics, a flat dict of scalars from anywhere in a state.

It walks a state tree (an optimizer state, or an object holding one as ``opt_state``: Flax's
``nnx.Optimizer`` and Linen's ``TrainState``), reads the records it knows and returns their scalars
under stable names. Statistics found under a ``partition``/``groups`` label get ``/label`` after
their name (``learning_rate/embed.*``), so a logger groups them by name.
"""

from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from .._core._tree import unwrap_variables
from .._core._types import OptState
from ..schedules._inject import InjectHyperparamsState, InjectStatefulHyperparamsState
from ._accumulation import MultiStepsState
from ._conditionality import ApplyIfFiniteState
from ._monitoring import MonitorState, SnapshotState
from ._partition import PartitionState
from ._spikes import SkipSpikesState
from ._stats import WithStatsState
from ._stats_probe import scope_suffix

__all__ = ["stats"]


class HoldsOptState(Protocol):
  """An object holding an optimizer state as ``opt_state`` (``nnx.Optimizer``, ``TrainState``)."""

  opt_state: Any


def _is_scalar(x: Any) -> bool:
  return hasattr(x, "dtype") and hasattr(x, "shape") and np.shape(x) == () and not (
      jnp.issubdtype(x.dtype, jax.dtypes.prng_key))


def _scoped(key: str, scope: tuple) -> str:
  """``name/outer/inner``: the reader's scope goes between a key's name and its own groups."""
  name, sep, rest = key.partition("/")
  return name + scope_suffix(scope) + sep + rest


class _Reader:
  def __init__(self):
    self.out: dict[str, jax.Array] = {}

  def put(self, key: str, value: Any, scope: tuple) -> None:
    if not _is_scalar(value):
      return
    key = _scoped(key, scope)
    if key in self.out:  # a second record of the same kind in the same group: numbered
      name, sep, rest = key.partition("/")
      n = 1
      while f"{name}.{n}{sep}{rest}" in self.out:
        n += 1
      key = f"{name}.{n}{sep}{rest}"
    self.out[key] = value

  def visit(self, node: Any, scope: tuple) -> None:
    if isinstance(node, WithStatsState):
      for key, value in node.statistics.items():
        self.put(key, value, scope)
      self.visit(node.inner_state, scope)
      return
    if isinstance(node, PartitionState):
      for label, inner in node.inner_states.items():
        self.visit(inner, scope + (label,))
      return
    if isinstance(node, SkipSpikesState):
      self.put("spike_skipped", node.last_skipped, scope)
      self.put("spike_skips", node.total_skips, scope)
    elif isinstance(node, ApplyIfFiniteState):
      self.put("not_finite", jnp.logical_not(node.last_finite), scope)
      self.put("not_finite_total", node.total_notfinite, scope)
    elif isinstance(node, MultiStepsState):
      self.put("mini_step", node.mini_step, scope)
      self.put("gradient_step", node.gradient_step, scope)
      if isinstance(node.skip_state, dict):
        for key, value in node.skip_state.items():
          self.put(str(key), value, scope)
    elif isinstance(node, (InjectStatefulHyperparamsState, InjectHyperparamsState)):
      for key, value in node.hyperparams.items():
        self.put(f"hyperparams.{key}", value, scope)
    elif isinstance(node, MonitorState):
      for key, value in node.measurements.items():
        self.put(f"monitor.{key}", value, scope)
    elif isinstance(node, SnapshotState):
      for key, value in node.measurement.items():
        self.put(f"snapshot.{key}", value, scope)
    self._children(node, scope)

  def _children(self, node: Any, scope: tuple) -> None:
    if isinstance(node, dict):
      children = list(node.values())
    elif isinstance(node, (tuple, list)):
      children = list(node)
    else:
      return  # an array, None, a MaskedNode's emptiness or an object the reader does not open
    for child in children:
      self.visit(child, scope)


def stats(state: OptState | HoldsOptState) -> dict[str, jax.Array]:
  """The training statistics in an optimizer state, as a flat dict of scalars for a logger.

  Finds, anywhere in ``state`` (inside ``chain``, ``named_chain``, ``MultiSteps``,
  ``partition``/``groups``, ``inject_hyperparams``, other wrappers):

  * ``with_stats``'s statistics: ``grad_norm``, ``clipped``, ``clip_factor``, ``learning_rate``,
    ``update_norm``, ``param_norm``, ``update_rms_ratio`` (see ``with_stats``);
  * ``skip_spikes``: ``spike_skipped`` (the last step was skipped) and ``spike_skips`` (steps
    skipped since init);
  * ``apply_if_finite``: ``not_finite`` (the last update held a NaN or an infinity: it was skipped,
    unless more than ``max_consecutive_errors`` came in a row) and ``not_finite_total``;
  * ``MultiSteps``: ``mini_step``, ``gradient_step`` and the scalars of its ``skip_state``
    (``should_skip``, ``num_not_finite`` ...);
  * ``inject_hyperparams``: ``hyperparams.<name>``, the values the last step used;
  * ``monitor`` and ``snapshot``: ``monitor.<name>``, ``snapshot.<name>`` (scalar measurements).

  Under a ``partition``/``groups`` label a name gets ``/label`` (``learning_rate/embed.*``); a
  second record of the same kind in one place is numbered (``spike_skipped.1``). Non-scalar
  values are left out. The values are the state's arrays (it works inside ``jit`` too): call
  ``jax.device_get`` (or ``float``) on them to log.

  Args:
    state: an optimizer state, or an object holding one as ``opt_state`` (``nnx.Optimizer``,
      Linen's ``TrainState``); Flax NNX variables are read through.

  Returns:
    ``{name: scalar array}``, in the order found.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> adamw = steadax.chain(steadax.clip_by_global_norm(1.0), steadax.adamw(1e-3))
    >>> opt = steadax.with_stats(steadax.skip_spikes(adamw, warmup_steps=1))
    >>> params = {"w": jnp.ones(4)}
    >>> state = opt.init(params)
    >>> _, state = opt.update({"w": jnp.ones(4)}, state, params, value=jnp.asarray(1.0))
    >>> logs = jax.device_get(steadax.stats(state))
    >>> sorted(logs)  # doctest: +NORMALIZE_WHITESPACE
    ['clip_factor', 'clipped', 'grad_norm', 'learning_rate', 'spike_skipped', 'spike_skips']
    >>> float(logs["grad_norm"]), float(logs["clip_factor"]), float(logs["learning_rate"])
    (2.0, 0.5, 0.001)
  """
  holder = getattr(state, "opt_state", None)
  if holder is not None and not isinstance(state, (tuple, dict, list)):
    state = holder
  reader = _Reader()
  reader.visit(unwrap_variables(state), ())
  return reader.out
