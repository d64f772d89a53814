"""Bit for bit with Optax 0.2.8: every registry entry that Optax has, step by step.

Each entry with an ``optax_factory`` runs three steps in each library, on its own trajectory, in
three forms (``_optax_bits.MODES``: jitted closing over the transformation, jitted with the
transformation as an argument, eagerly), and every update leaf and every state leaf Optax shares
must be equal (``np.testing.assert_array_equal``), in both x64 modes. The comparisons run in one
child process per x64 mode with JAX's and XLA's defaults, as a user's program runs
(``_optax_bits.py`` says why the suite's cheaper code generation would not do).

``EXCEPTIONS`` below is the one list of what is allowed to differ, each with its reason: where
Optax's arithmetic is wrong, where steadax documents an improvement (docs/migrating.md, "Every
documented difference from Optax 0.2.8"), or where the difference is not steadax's arithmetic
(XLA compiles a hyperparameter passed to ``jit`` as a runtime value, Optax's as a constant; a
schedule's values, which schedules/ computes). docs/migrating.md shows this table.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
import sys

import jax
import pytest

from tests.compile_flags import defaults_env

from ._optax_bits import MODES
from .registry import all_entries, entry_ids

X64 = bool(jax.config.jax_enable_x64)
DIFFERENTIAL = [e for e in all_entries() if e.optax_factory is not None]


@dataclasses.dataclass(frozen=True)
class Exception_:
  """An entry allowed to differ from Optax: in ``modes``, in the x64 mode ``x64`` (None: both)."""

  reason: str
  modes: tuple[str, ...] = MODES
  x64: bool | None = None

  def covers(self, mode: str) -> bool:
    return mode in self.modes and (self.x64 is None or self.x64 == X64)


_XLA_ARGUMENT = (
    "jit_argument: not steadax's arithmetic. The transformation passed to jit holds its "
    "hyperparameters as runtime values, where Optax's closure holds compile-time constants, and "
    "XLA compiles the same operations differently around them (it folds a constant's reciprocal "
    "into a division and reassociates products of constant scalars; a runtime value with several "
    "uses is divided by): a few ulp.")
_SCHEDULE = (
    "a schedule's value: steadax's schedules compute their value in another order than Optax's "
    "(schedules/, issue 35 §2), a few ulp under jit; the optimizer's arithmetic on it is Optax's.")

EXCEPTIONS: dict[str, Exception_] = {
}


@functools.lru_cache(maxsize=None)
def _results() -> dict:
  """``{entry: {mode: [difference, ...]}}`` from the child process (one per x64 mode)."""
  command = [sys.executable, "-m", "tests.conformance._optax_bits"] + (["--x64"] if X64 else [])
  result = subprocess.run(command, env=defaults_env(), capture_output=True, text=True, timeout=1800,
                          check=False)
  assert result.returncode == 0, result.stderr[-4000:]
  return json.loads(result.stdout)


def test_every_exception_names_an_entry_with_an_optax_counterpart():
  names = {e.name for e in DIFFERENTIAL}
  assert set(EXCEPTIONS) <= names, sorted(set(EXCEPTIONS) - names)
  for name, exception in EXCEPTIONS.items():
    assert exception.reason and set(exception.modes) <= set(MODES), name


@pytest.mark.slow
@pytest.mark.parametrize("entry", DIFFERENTIAL, ids=entry_ids(DIFFERENTIAL))
def test_bit_identical_to_optax(entry):
  found = _results()[entry.name]
  exception = EXCEPTIONS.get(entry.name)
  failures = {mode: differences for mode, differences in found.items()
              if differences and not (exception is not None and exception.covers(mode))}
  assert not failures, "\n".join(
      f"{entry.name} ({mode}, x64={X64}): {'; '.join(differences[:3])}" for mode, differences in failures.items())
