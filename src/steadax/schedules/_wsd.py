"""warmup_stable_decay_schedule: linear warmup, a long constant stretch, a short cooldown; cycles.

The schedule of most 2024-2026 language-model reports (MiniCPM's "WSD"; Hägele et al.'s "constant
learning rate with cooldown"). Every number, the phase lengths and fractions included, is a pytree
leaf: ``steadax.sweep`` stacks configurations that differ in the cooldown fraction (or the
warmup, a length, a value) and runs them as one program; only the decay shape and the number of
cycles shape the computation. The phases are found with selects on the count, never with Python
control flow, so the lengths can be traced.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._module import Module, hyper_field, static_field
from .._core._docs import shared_args
from ._common import as_count, concrete_number, divide, standard_promotion

__all__ = ["warmup_stable_decay_schedule"]

_SHAPES = ("linear", "cosine", "1-sqrt")
_CYCLE_KEYS = ("rewarmup_steps", "stable_steps", "decay_steps", "peak_value", "end_value")


def _cooldown(shape: str, progress: Any) -> Any:
  """The cooldown factor f(p), from 1 at the start (p = 0) to 0 at the end (p = 1)."""
  if shape == "linear":
    return 1 - progress
  if shape == "cosine":
    return 0.5 * (1 + jnp.cos(jnp.pi * progress))
  # Hägele et al. 2024, Section 3: f = 1 - sqrt((n - (N - N_decay)) / N_decay).
  return 1 - jnp.sqrt(progress)


def _fraction_of(t: Any, length: Any) -> Any:
  """``clip(t / length, 0, 1)``, and 1 for a zero length (the phase is over as soon as it starts)."""
  positive = length > 0
  return jnp.where(positive, jnp.clip(divide(t, jnp.where(positive, length, 1)), 0, 1), 1.0)


def _blend(high: Any, low: Any, weight: Any) -> Any:
  """``high * weight + low * (1 - weight)``: exactly ``high`` at weight 1 and ``low`` at 0."""
  return high * weight + low * (1 - weight)


class WarmupStableDecayCycle(Module):
  """A further cycle of a ``warmup_stable_decay_schedule``: re-warm, hold, cool down again.

  ``peak_value`` and ``end_value`` of None take the schedule's.
  """

  rewarmup_steps: Any = hyper_field(as_given=True)
  stable_steps: Any = hyper_field(as_given=True)
  decay_steps: Any = hyper_field(as_given=True)
  peak_value: Any = hyper_field(None, as_given=True)
  end_value: Any = hyper_field(None, as_given=True)


class WarmupStableDecay(Module):
  """Warmup from ``init_value`` to ``peak_value``, hold, cool down to ``end_value``; then cycles."""

  peak_value: Any = hyper_field(as_given=True)
  init_value: Any = hyper_field(0.0, as_given=True)
  end_value: Any = hyper_field(0.0, as_given=True)
  total_steps: Any = hyper_field(None, as_given=True)
  warmup_steps: Any = hyper_field(None, as_given=True)
  warmup_fraction: Any = hyper_field(None, as_given=True)
  stable_steps: Any = hyper_field(None, as_given=True)
  decay_steps: Any = hyper_field(None, as_given=True)
  decay_fraction: Any = hyper_field(None, as_given=True)
  cycles: tuple = hyper_field((), as_given=True)
  decay_shape: str = static_field(default="linear")

  def phases(self) -> tuple[Any, Any, Any]:
    """The first cycle's warmup length, decay start and end (steps; traced when the leaves are).

    Returns:
      ``(warmup, decay_start, end)``: the warmup lasts ``[0, warmup)``, the value is
      ``peak_value`` on ``[warmup, decay_start]``, and the cooldown ends at ``end``.
    """
    with standard_promotion():
      if self.warmup_fraction is not None:
        warmup = self.warmup_fraction * self.total_steps
      else:
        warmup = 0 if self.warmup_steps is None else self.warmup_steps
      if self.decay_fraction is not None:
        decay = self.decay_fraction * self.total_steps
      else:
        decay = self.decay_steps
      if self.total_steps is not None:
        return warmup, self.total_steps - decay, self.total_steps
      decay_start = warmup + self.stable_steps
      return warmup, decay_start, decay_start + decay

  def _cycle(self, t: Any, warmup: Any, decay_start: Any, end: Any, start_value: Any,
             peak: Any, end_value: Any) -> Any:
    """The value ``t`` steps into a cycle whose phases end at ``warmup``, ``decay_start``, ``end``."""
    rising = _blend(peak, start_value, _fraction_of(t, warmup))
    cooling = _blend(peak, end_value,
                     _cooldown(self.decay_shape, _fraction_of(t - decay_start, end - decay_start)))
    # The peak and the end value exactly (XLA may divide by multiplying with the reciprocal, and a
    # fractional length's progress may round a hair below 1 at the end).
    cooling = jnp.where(t < end, cooling, end_value)
    return jnp.where(t < warmup, rising, jnp.where(t <= decay_start, peak, cooling))

  def __call__(self, count: Any) -> jax.Array:
    with standard_promotion():
      # As a weak float (an int count meets a Python float): the value is weakly typed, like Optax's
      # cosine schedule's, unless an argument is a strongly typed array; the step offsets are
      # exact in this float up to 2**24 steps (float32), 2**53 (float64 under x64).
      n = jnp.asarray(as_count(count)) * 1.0
      warmup, decay_start, end = self.phases()
      value = self._cycle(n, warmup, decay_start, end, self.init_value, self.peak_value,
                          self.end_value)
      start, previous_end = end, self.end_value
      for cycle in self.cycles:
        peak = self.peak_value if cycle.peak_value is None else cycle.peak_value
        end_value = self.end_value if cycle.end_value is None else cycle.end_value
        rewarm = cycle.rewarmup_steps
        decay_start = rewarm + cycle.stable_steps
        length = decay_start + cycle.decay_steps
        # Re-warm from the value the previous cooldown reached, as continued pretraining does.
        later = self._cycle(n - start, rewarm, decay_start, length, previous_end, peak, end_value)
        value = jnp.where(n < start, value, later)
        start, previous_end = start + length, end_value
      return value


def _length(owner: str, name: str, value: Any) -> Any:
  """A phase length: a non-negative number (a leaf: checked when concrete, traced ones pass)."""
  if value is None:
    return None
  if isinstance(value, bool) or isinstance(value, str):
    raise TypeError(f"{owner}: {name} must be a number of steps, got {value!r}.")
  v = concrete_number(value)
  if v is not None and not v >= 0:
    raise ValueError(f"{owner}: {name} must be a non-negative number of steps, got {value!r}.")
  if v is None and jnp.ndim(value) != 0:
    raise ValueError(f"{owner}: {name} must be a scalar, got shape {jnp.shape(value)}.")
  return value


def _fraction(owner: str, name: str, value: Any) -> Any:
  if value is None:
    return None
  v = concrete_number(value)
  if isinstance(value, bool) or (v is None and jnp.ndim(value) != 0):
    raise TypeError(f"{owner}: {name} must be a number in [0, 1], got {value!r}.")
  if v is not None and not 0 <= v <= 1:
    raise ValueError(f"{owner}: {name} must lie in [0, 1], got {value!r}.")
  return value


def _cycles(owner: str, cycles: Any) -> tuple:
  if isinstance(cycles, Mapping) or not isinstance(cycles, Sequence):
    raise TypeError(f"{owner}: cycles must be a sequence of dicts (one per further cycle), got "
                    f"{type(cycles).__name__}.")
  built = []
  for i, cycle in enumerate(cycles):
    where = f"cycles[{i}]"
    if not isinstance(cycle, Mapping):
      raise TypeError(f"{owner}: {where} must be a dict with keys {list(_CYCLE_KEYS)}, got "
                      f"{type(cycle).__name__}.")
    unknown = sorted(set(cycle) - set(_CYCLE_KEYS))
    if unknown:
      raise ValueError(f"{owner}: {where} has unknown keys {unknown}; the keys are {list(_CYCLE_KEYS)}.")
    missing = [k for k in ("stable_steps", "decay_steps") if k not in cycle]
    if missing:
      raise ValueError(f"{owner}: {where} needs {' and '.join(repr(k) for k in missing)}.")
    built.append(WarmupStableDecayCycle(
        _length(owner, f"{where}['rewarmup_steps']", cycle.get("rewarmup_steps", 0)),
        _length(owner, f"{where}['stable_steps']", cycle["stable_steps"]),
        _length(owner, f"{where}['decay_steps']", cycle["decay_steps"]),
        cycle.get("peak_value"), cycle.get("end_value")))
  return tuple(built)


@shared_args
def warmup_stable_decay_schedule(
    peak_value: ArrayLike,
    total_steps: ArrayLike | None = None,
    warmup_steps: ArrayLike | None = None,
    decay_steps: ArrayLike | None = None,
    *,
    stable_steps: ArrayLike | None = None,
    warmup_fraction: ArrayLike | None = None,
    decay_fraction: ArrayLike | None = None,
    init_value: ArrayLike = 0.0,
    end_value: ArrayLike = 0.0,
    decay_shape: str = "linear",
    cycles: Sequence[Mapping[str, ArrayLike]] = (),
) -> WarmupStableDecay:
  r"""Warmup-stable-decay: linear warmup, a constant stretch at the peak, then a short cooldown.

  With ``W`` the warmup length, ``N_d`` the cooldown length and ``N`` the total length, the value
  at step ``n`` is

  .. math::
    \begin{cases}
      I + (P - I)\, n / W, & n < W \\
      P, & W \le n \le N - N_d \\
      E + (P - E)\, f\bigl((n - (N - N_d)) / N_d\bigr), & N - N_d < n \le N \\
      E, & n > N
    \end{cases}

  with ``I``, ``P``, ``E`` the init, peak and end values and the cooldown shape ``f``:
  ``"linear"`` ``1 - p``, ``"cosine"`` ``(1 + cos(pi p)) / 2`` or ``"1-sqrt"`` ``1 - sqrt(p)``
  (Hägele et al.'s best cooldown). The lengths are given in steps or as fractions of
  ``total_steps`` (not rounded: the cooldown ends at ``total_steps`` exactly); the stable stretch
  is what the others leave. Without ``total_steps``, give ``stable_steps`` instead.

  **Cycles, for continued pretraining.** Each entry of ``cycles`` appends a cycle after the
  previous one ends: a linear re-warmup over ``rewarmup_steps`` (default 0) from the value the
  previous cooldown reached to the cycle's ``peak_value``, ``stable_steps`` at that peak, then a
  cooldown of ``decay_steps`` to its ``end_value`` (both default to the schedule's). The schedule is
  a function of the step count since the start of the first run, so an optimizer restored from a
  checkpoint at step ``N`` (its count is ``N``) continues with the right value: to continue a
  finished run, rebuild it with one more cycle; to cool down a run from a checkpoint taken in its
  stable stretch, rebuild it with ``total_steps = N + decay_steps``. Values before the new cycle
  do not change.

  Every argument except ``decay_shape`` and the number of cycles is a pytree leaf, phase lengths
  and fractions included: ``steadax.sweep`` runs schedules that differ only in, say,
  ``decay_fraction`` as one program (``docs/sweeps.md``).

  Args:
    peak_value: the value of the stable stretch.
    total_steps: the length of the first cycle (warmup, stable stretch and cooldown).
    warmup_steps: the length of the warmup (default 0); or give ``warmup_fraction``.
    decay_steps: the length of the cooldown; or give ``decay_fraction`` (one of the two is needed).
    stable_steps: the length of the stable stretch, when ``total_steps`` is not given.
    warmup_fraction: the warmup's length as a fraction of ``total_steps``.
    decay_fraction: the cooldown's length as a fraction of ``total_steps`` (Hägele et al. find
      0.2 matches a cosine schedule's loss).
    init_value: the value at step 0.
    end_value: the value the cooldown reaches (and keeps).
    decay_shape: ``"linear"``, ``"cosine"`` or ``"1-sqrt"``.
    cycles: further cycles: dicts with keys ``stable_steps`` and ``decay_steps`` (required),
      ``rewarmup_steps``, ``peak_value``, ``end_value``.

  Returns:
    A schedule (a callable of the step count). Its value is weakly typed (JAX's default float:
    float32, float64 under x64) for any integer count, as ``cosine_decay_schedule``'s is, unless an
    argument is a strongly typed array; so multiplying bfloat16 parameters by it keeps them
    bfloat16.

  Example:
    >>> import steadax
    >>> sched = steadax.warmup_stable_decay_schedule(
    ...     1.0, total_steps=100, warmup_steps=10, decay_fraction=0.2, decay_shape="1-sqrt")
    >>> print(sched(5), sched(50), sched(85), sched(100))
    0.5 1.0 0.5 0.0
    >>> more = steadax.warmup_stable_decay_schedule(
    ...     1.0, total_steps=100, warmup_steps=10, decay_fraction=0.2, decay_shape="1-sqrt",
    ...     cycles=[dict(rewarmup_steps=10, stable_steps=30, decay_steps=20)])
    >>> print(more(100), more(105), more(130), more(160))
    0.0 0.5 1.0 0.0

  References:
    Hägele et al., `Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations
    <https://arxiv.org/abs/2405.18392>`_, NeurIPS 2024, Section 3 (constant learning rate with
    cooldown; the (1-sqrt) cooldown). Hu et al., `MiniCPM: Unveiling the Potential of Small
    Language Models with Scalable Training Strategies <https://arxiv.org/abs/2404.06395>`_, 2024,
    Section 4 (the WSD schedule, and restarting its stable stretch from a checkpoint).
  """
  owner = "warmup_stable_decay_schedule"
  if decay_shape not in _SHAPES:
    raise ValueError(f"{owner}: decay_shape must be one of {list(_SHAPES)}, got {decay_shape!r}.")
  for name, value in (("peak_value", peak_value), ("init_value", init_value), ("end_value", end_value)):
    if value is None or isinstance(value, (bool, str)) or callable(value):
      raise TypeError(f"{owner}: {name} must be a number, got {value!r}.")
  if warmup_steps is not None and warmup_fraction is not None:
    raise ValueError(f"{owner}: give warmup_steps or warmup_fraction, not both.")
  if (decay_steps is None) == (decay_fraction is None):
    raise ValueError(f"{owner}: give exactly one of decay_steps and decay_fraction (the cooldown's "
                     "length, in steps or as a fraction of total_steps).")
  if total_steps is None:
    if warmup_fraction is not None or decay_fraction is not None:
      raise ValueError(f"{owner}: warmup_fraction and decay_fraction are fractions of total_steps; "
                       "give total_steps.")
    if stable_steps is None:
      raise ValueError(f"{owner}: give total_steps, or stable_steps (the length of the stretch at "
                       "peak_value).")
  elif stable_steps is not None:
    raise ValueError(f"{owner}: give total_steps or stable_steps, not both (the stable stretch is "
                     "what the warmup and the cooldown leave of total_steps).")
  total_steps = _length(owner, "total_steps", total_steps)
  warmup_steps = _length(owner, "warmup_steps", warmup_steps)
  decay_steps = _length(owner, "decay_steps", decay_steps)
  stable_steps = _length(owner, "stable_steps", stable_steps)
  warmup_fraction = _fraction(owner, "warmup_fraction", warmup_fraction)
  decay_fraction = _fraction(owner, "decay_fraction", decay_fraction)
  schedule = WarmupStableDecay(
      peak_value, init_value, end_value, total_steps, warmup_steps, warmup_fraction, stable_steps,
      decay_steps, decay_fraction, _cycles(owner, cycles), decay_shape)
  if total_steps is not None:
    warmup, decay_start, total = (concrete_number(x) for x in schedule.phases())
    if warmup is not None and decay_start is not None and total is not None and warmup > decay_start:
      raise ValueError(
          f"{owner}: the warmup ({warmup:g} steps) and the cooldown ({total - decay_start:g} steps) "
          f"together exceed total_steps ({total:g}).")
  return schedule
