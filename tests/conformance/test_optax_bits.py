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
from .registry import all_entries

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

_LOW_PRECISION_STATE = (
    "documented: arithmetic on low-precision state runs in at least float32. With mu_dtype=bfloat16 "
    "Optax multiplies the bfloat16 moment by its decay in bfloat16 (a weakly typed decay keeps the "
    "moment's type); steadax computes in float32 and rounds once on write.")
_MUON = ("contrib/_muon.py is being rewritten (issue 33); its matrix path keeps its own arithmetic "
         "until the lead applies this mechanism (derived constants, Optax's order) to it.")
_WRAPPERS = ("in _wrappers/ (not changed by issue 35 §1): the wrapper's compiled program rounds its "
             "inner optimizer's multiply-adds differently from Optax's (1 ulp); left to the lead.")
_FUSE = ("documented extra: fuse runs the optimizer on one flat buffer per dtype, and XLA compiles a "
         "scalar shared by one leaf (Adam's bias correction, the clipping norm) as a multiplication by "
         "its reciprocal where Optax's separate leaves divide by it (1-2 ulp).")
_LAX_COND = ("documented: steadax runs only the optimizer a step needs, under lax.cond (Optax runs "
             "both and selects); XLA compiles a conditional's branch apart from the rest of the "
             "program, and rounds its fused multiply-adds differently (1 ulp).")
_X64_WIDENING = ("documented: Optax's state or updates widen to float64 under x64 (their type changes "
                 "at the first update); steadax keeps the float32 fixed at init.")

EXCEPTIONS: dict[str, Exception_] = {
    # Optax's arithmetic is wrong, or steadax documents a different result.
    "rprop": Exception_("Optax 0.2.8 returns the previous step's update (optax PR 1725); steadax the "
                        "update of this step (docs/migrating.md)."),
    "schedule_free_sgd": Exception_(
        "state.step_count: steadax counts updates from 0; Optax 0.2.8 starts at 1 and skips a "
        "schedule's first value (fixed in Optax PR 1744). The updates are Optax's, except with the "
        "transformation a jit argument: " + _XLA_ARGUMENT),
    "schedule_free_adamw": Exception_("as schedule_free_sgd."),
    "schedule_free_adam": Exception_("as schedule_free_sgd."),
    "reduce_on_plateau_accumulate_cooldown": Exception_(
        "documented: best_value starts at the statistics dtype's largest value (Optax: inf) and the "
        "improvement margin is best - (rtol |best| + atol), right for negative losses too."),
    "adam_bf16_mu": Exception_(_LOW_PRECISION_STATE),
    "scale_by_adopt_mu_bf16": Exception_(_LOW_PRECISION_STATE),
    "scale_by_ademamix_mu_bf16": Exception_(
        "documented: Optax returns AdEMAMix's moments in float32, not in mu_dtype; steadax keeps "
        "mu_dtype."),
    "distance_over_gradients": Exception_(_X64_WIDENING, x64=True),
    "track_per_element_mean_and_variance_with_ema+adam": Exception_(
        "experimental/aggregating (not changed by issue 35 §1) computes its averages' 1 - decay in "
        "float32 and in another order than Optax's (a few ulp); under x64 " + _X64_WIDENING),
    "lbfgs": Exception_(
        "x64: " + _X64_WIDENING + " x64 off, eagerly: steadax's inner products are sums of products "
        "(_linesearch/_common.py: a contraction over sharded axes has no defined result sharding), "
        "Optax's tensordots, which an eager dot rounds differently (1 ulp; compiled, both reduce "
        "alike).", modes=MODES),
    "lbfgs_backtracking": Exception_("as lbfgs."),
    "sgd_backtracking_store_grad": Exception_(
        "Optax 0.2.8's store_grad raises under x64 (tests/linesearch/test_backtracking.py).", x64=True),
    "mechanize_adam": Exception_(
        "documented (docs/guarantees.md): Mechanic sums its norms again, rescaled, where they "
        "overflow, behind a lax.cond; XLA then fuses the inner Adam's arithmetic with the gradient "
        "differently (1 ulp). Eagerly identical.", modes=("jit", "jit_argument")),
    "sam": Exception_(_LAX_COND, modes=("eager",)),
    "sam_adam_sync3_keep_state": Exception_(_LAX_COND),
    "fuse_adamw": Exception_(_FUSE),
    "fuse_clip_sgd_momentum": Exception_(_FUSE, modes=("jit", "jit_argument")),
    # Not this change's files: listed for their owners.
    "muon": Exception_(_MUON),
    "muon_adaptive_spectral": Exception_(_MUON),
    "muon_aol_consistent_rms": Exception_(_MUON),
    "muon_schatten_dion": Exception_(_MUON),
    "muon_dimension_numbers": Exception_(_MUON),
    "multi_steps_k1_adam": Exception_(_WRAPPERS),
    "apply_every_sgd": Exception_(_WRAPPERS, modes=("jit", "jit_argument")),
    "adam_warmup_cosine": Exception_(_SCHEDULE, modes=("jit",)),
    "adam_warmup_stable_decay": Exception_(
        "steadax's warmup_stable_decay_schedule is one schedule where Optax joins three (Optax has no "
        "such schedule: the entry compares with the join), so its values round differently (a few "
        "ulp); the optimizer's arithmetic on them is Optax's."),
    "inject_hyperparams_adam": Exception_(
        _SCHEDULE + " Under x64, documented: an injected Python float stays float32 (its declared "
        "dtype), where Optax's x64 inject_hyperparams holds it in float64."),
    "acprop_schedule_weight_decay": Exception_(_SCHEDULE, modes=("jit",)),
    "ademamix_schedules_weight_decay": Exception_(_SCHEDULE, modes=("jit_argument", "eager")),
    "scale_by_simplified_ademamix_schedule": Exception_(_SCHEDULE, modes=("jit", "jit_argument")),
    "madgrad_schedule_weight_decay": Exception_(_SCHEDULE),
    "dadapt_adamw_schedule_weight_decay": Exception_(_SCHEDULE + " " + _XLA_ARGUMENT, modes=("jit_argument",)),
    # The transformation a jit argument (its hyperparameters runtime values).
    "simplified_ademamix": Exception_(_XLA_ARGUMENT, modes=("jit_argument",)),
    "reduce_on_plateau": Exception_(_XLA_ARGUMENT, modes=("jit_argument",)),
    "adafactor": Exception_(_XLA_ARGUMENT, modes=("jit_argument",)),
    "adafactor_factored": Exception_(_XLA_ARGUMENT, modes=("jit_argument",)),
    "adafactor_momentum_weight_decay": Exception_(_XLA_ARGUMENT, modes=("jit_argument",)),
    "zero_nans_sgd": Exception_(_XLA_ARGUMENT, modes=("jit_argument",)),
    "adam_adaptive_grad_clip": Exception_(_XLA_ARGUMENT, modes=("jit_argument",)),
    "adadelta": Exception_(_XLA_ARGUMENT, modes=("jit_argument",)),
    "prodigy": Exception_(_XLA_ARGUMENT, modes=("jit_argument",), x64=True),
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
def test_bit_identical_to_optax():
  # One test (not one per entry): one child process per x64 mode, whichever xdist worker runs it.
  found = _results()
  assert set(found) == {e.name for e in DIFFERENTIAL}
  failures = []
  for entry in DIFFERENTIAL:
    exception = EXCEPTIONS.get(entry.name)
    for mode, differences in found[entry.name].items():
      if differences and not (exception is not None and exception.covers(mode)):
        failures.append(f"{entry.name} ({mode}, x64={X64}): {'; '.join(differences[:3])}")
  assert not failures, f"{len(failures)} not bit-identical to Optax:\n" + "\n".join(failures)


def test_the_migration_guide_lists_the_exceptions():
  """docs/migrating.md shows this table ("Optax's numbers, bit for bit"): the same entries."""
  import pathlib
  import re

  text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "migrating.md").read_text()
  section = text[text.index("**Optax's numbers, bit for bit.**"):]
  section = section[:section.index("\n\n**")]
  rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
  listed = {name for row in rows for name in re.findall(r"`([^`]+)`", row)}
  assert listed == set(EXCEPTIONS), (sorted(listed - set(EXCEPTIONS)), sorted(set(EXCEPTIONS) - listed))
