"""Bit for bit with Optax 0.2.8: every registry entry that Optax has, step by step.

Each entry with an ``optax_factory`` runs three steps in each library, on its own trajectory, in
three forms (``_optax_bits.MODES``: jitted closing over the transformation, jitted with the
transformation as an argument, eagerly), and every update leaf and every state leaf Optax shares
must be equal (``np.testing.assert_array_equal``), in both x64 modes. The comparisons run in one
child process per x64 mode with JAX's default configuration (not the suite's strict promotion) and
the suite's code generation: the cheap flags of tests/compile_flags.py, or XLA's defaults (what
users' programs compile with) under ``STEADAX_TEST_XLA_DEFAULTS=1``. The bits depend on it: XLA's
defaults fuse ``a * b + c`` into one rounding (FMA) and the cheap flags do not, so a few entries
differ under one and not the other; the program (HLO) itself is the same under both (checked).

``NO_COUNTERPART`` lists the registry entries Optax has nothing to compare with; ``EXCEPTIONS`` is
the one list of what is allowed to differ, each with its reason and the configurations it applies
to: where Optax's arithmetic is wrong or unsafe, where steadax documents an improvement
(docs/migrating.md, "Every documented difference from Optax 0.2.8"), where Optax has no such thing
(a transformation passed to ``jit``, ``fuse``, a one-piece warmup-stable-decay schedule), and
Muon's coefficients under x64. An exception no longer needed fails the test. docs/migrating.md shows
this table.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys

import jax
import pytest

from tests.compile_flags import defaults_wanted

from ._optax_bits import MODES
from .registry import all_entries

X64 = bool(jax.config.jax_enable_x64)
FLAGS = "defaults" if defaults_wanted() else "cheap"  # the code generation the suite runs with
DIFFERENTIAL = [e for e in all_entries() if e.optax_factory is not None]

# Every registry entry without an Optax factory, and why: Optax 0.2.8 has no such thing (checked
# against its source), or the comparison waits for another change. A new entry lands in one table.
NO_COUNTERPART: dict[str, str] = {
    **dict.fromkeys(["mars", "mars_weight_decay_schedule_no_clip", "scale_by_mars_bf16_moments"],
                    "Optax has no MARS."),
    **dict.fromkeys(["psgd_kron", "psgd_kron_diagonal_half_probability",
                     "psgd_kron_dense_vectors_bf16_state"], "Optax has no PSGD."),
    **dict.fromkeys(["adam_lowmem", "adam_lowmem_nearest_weight_decay", "scale_by_adam_lowmem_float16"],
                    "Optax has no low-memory Adam (stochastically rounded low-precision moments)."),
    **dict.fromkeys(["adam8bit", "adam8bit_quantized", "adamw8bit_quantized_masked",
                     "scale_by_adam_8bit_quantized_weight_decay"], "Optax has no 8-bit Adam."),
    "cautious_adamw": "Optax has no cautious masking.",
    **dict.fromkeys(["soap", "soap_low_precision_states", "soap_max_precond_dim"],
                    "Optax has no SOAP."),
    **dict.fromkeys(["shampoo", "shampoo_blocked_sgd_graft", "shampoo_summed_no_graft"],
                    "Optax has no Shampoo."),
    **dict.fromkeys(["normuon", "normuon_plain_momentum_nu_f32_decay"], "Optax has no NorMuon."),
    "muon_qk_clip": "Optax has no QK-clip.",
    "muon_polar_express_preset": "Optax has no \"polar_express\" preset (its coefficient table is "
                                 "compared through muon_polar_express).",
    "normuon_gram_auto_polar_express": "Optax has no NorMuon.",
    "lbfgsb": "Optax has no bound-constrained L-BFGS.",
    **dict.fromkeys(["skip_spikes_adam", "skip_spikes_grad_norm_adam"], "Optax has no spike skipping."),
    "stochastic_rounding_adamw_bf16": "Optax has no stochastic rounding.",
    "kahan_summation_adamw_bf16": "Optax has no compensated summation.",
    # The stacked entries (batch axes in the dimension numbers, issue 33 §1).
    "soap_stacked": "Optax has no SOAP.",
    "shampoo_stacked": "Optax has no Shampoo.",
    "psgd_kron_stacked": "Optax has no PSGD.",
    "galore_stacked": "Optax 0.2.8's galore has no batch axes: its dimension numbers must name every axis of the "
                      "weight (a (2, 4, 3) weight with GaLoreDimensionNumbers(1, 2) raises).",
}


@dataclasses.dataclass(frozen=True)
class Exception_:
  """An entry allowed to differ from Optax, in ``modes``, where it differs in at least one of them.

  ``x64`` and ``flags`` name the configurations it applies to (None: all): the x64 mode, and the
  code generation (``"defaults"``, XLA's, as users run and as ``STEADAX_TEST_XLA_DEFAULTS=1`` runs the
  suite; ``"cheap"``, the suite's flags). An exception that applies to this run and is not used is
  stale, and fails the test.
  """

  reason: str
  modes: tuple[str, ...] = MODES
  x64: bool | None = None
  flags: str | None = None
  leaves: tuple[str, ...] = ()  # when given, only these leaves may differ ("state.step_count")

  def applies(self) -> bool:
    return (self.x64 is None or self.x64 == X64) and (self.flags is None or self.flags == FLAGS)

  def covers(self, mode: str, difference: str) -> bool:
    """Whether ``difference`` (``"step 2 updates['w']: ..."``, in ``mode``) is allowed."""
    where = difference.split(":")[0]
    return (mode in self.modes and self.applies()
            and (not self.leaves or any(leaf in where for leaf in self.leaves)))


def _many(*exceptions: Exception_) -> tuple[Exception_, ...]:
  return exceptions


_JIT_ARGUMENT = (
    "Optax has no such thing: an Optax transformation is a closure and cannot be passed to jit. "
    "Compared with Optax's closure, whose hyperparameters XLA compiles as constants (it folds them, "
    "turns a division by one into a multiplication by its reciprocal, reassociates products of "
    "constant scalars) where steadax's are runtime values: 1-3 ulp, more in a difference of nearly "
    "equal values (schedule-free's updates). Which entries differ depends "
    "on the code generation (multiply-adds fused at XLA's defaults, not with the suite's flags).")
_LOW_PRECISION_STATE = (
    "documented: arithmetic on low-precision state runs in at least float32. With mu_dtype=bfloat16 "
    "Optax multiplies the bfloat16 moment by its decay in bfloat16 (a weakly typed decay keeps the "
    "moment's type); steadax computes in float32 and rounds once on write.")
_MUON_X64_STEP3 = ("under x64 at XLA's defaults only, step 3's update (up to 1.2e3 ulp: Newton-Schulz "
                   "amplifies a smaller difference); steps 1-2, every momentum, and x64 off are identical. "
                   "Not pinned to an operation.")
_FUSE = ("Optax has no such thing (fuse is compared with the plain optimizer): fuse runs the optimizer "
         "on one flat buffer per dtype, and XLA compiles a scalar shared by one leaf (Adam's bias "
         "correction, the clipping norm) as a multiplication by its reciprocal where Optax's separate "
         "leaves divide by it (1-2 ulp).")
_LAX_COND = ("documented: steadax runs only the optimizer a step needs, under lax.cond (Optax runs "
             "both and selects); XLA compiles a conditional's branch apart from the rest of the "
             "program, and rounds its multiply-adds and divisions differently (1 ulp).")
_X64_WIDENING = ("documented: Optax's state or updates widen to float64 under x64 (their type changes "
                 "at the first update); steadax keeps the float32 fixed at init.")
_SUMS = ("steadax's inner products are sums of products (_linesearch/_common.py, contrib/_reductions.py: "
         "a contraction over sharded axes has no defined result sharding), Optax's are dots, which "
         "XLA sums in another order in some programs (1-2 ulp).")

EXCEPTIONS: dict[str, Exception_ | tuple[Exception_, ...]] = {
    # Optax's arithmetic is wrong, or steadax documents a different result.
    "rprop": Exception_("Optax 0.2.8 returns the previous step's update (optax PR 1725); steadax the "
                        "update of this step (docs/migrating.md)."),
    **{name: _many(Exception_(
        "state.step_count: steadax counts updates from 0; Optax 0.2.8 starts at 1 and skips a "
        "schedule's first value (fixed in Optax PR 1744); every other leaf is Optax's.",
        leaves=("state.step_count",)), Exception_(_JIT_ARGUMENT, modes=("jit_argument",)))
       for name in ("schedule_free_sgd", "schedule_free_adamw", "schedule_free_adam")},
    "reduce_on_plateau_accumulate_cooldown": _many(Exception_(
        "documented: best_value starts at the statistics dtype's largest value (Optax: inf) and the "
        "improvement margin is best - (rtol |best| + atol), right for negative losses too; every "
        "other leaf is Optax's.", leaves=(".best_value",)),
        Exception_(_JIT_ARGUMENT, modes=("jit_argument",), flags="defaults")),
    "adam_bf16_mu": Exception_(_LOW_PRECISION_STATE),
    "scale_by_adopt_mu_bf16": Exception_(_LOW_PRECISION_STATE),
    "scale_by_ademamix_mu_bf16": Exception_(
        "documented: Optax returns AdEMAMix's moments in float32, not in mu_dtype; steadax keeps "
        "mu_dtype."),
    "distance_over_gradients": Exception_(_X64_WIDENING, x64=True),
    "track_per_element_mean_and_variance_with_ema+adam": Exception_(_X64_WIDENING, x64=True),
    "inject_hyperparams_adam": Exception_(
        "documented: an injected Python float stays float32 (its declared dtype), where Optax's x64 "
        "inject_hyperparams holds it in float64.", x64=True),
    "lbfgs": _many(Exception_(_X64_WIDENING, x64=True),
                   Exception_(_SUMS + " Here eagerly, at XLA's defaults.", modes=("eager",), x64=False,
                              flags="defaults")),
    "lbfgs_backtracking": _many(Exception_(_X64_WIDENING, x64=True),
                                Exception_("as lbfgs.", modes=("eager",), x64=False, flags="defaults")),
    "mechanize_sgd": Exception_(_SUMS + " Here with the suite's flags.", modes=("jit", "jit_argument"),
                                flags="cheap"),
    "sgd_backtracking_store_grad": Exception_(
        "Optax 0.2.8's store_grad raises under x64 (tests/linesearch/test_backtracking.py).", x64=True),
    "mechanize_adam": Exception_(
        "documented (docs/guarantees.md): Mechanic sums its norms again, rescaled, where they "
        "overflow, behind a lax.cond; XLA then compiles the inner Adam's arithmetic differently "
        "(1 ulp) at XLA's defaults; identical with the suite's flags and eagerly.", modes=("jit", "jit_argument"),
        flags="defaults"),
    "sam": Exception_(_LAX_COND),
    "sam_adam_sync3_keep_state": Exception_(_LAX_COND),
    "multi_steps_k1_adam": Exception_(
        "documented: with k = 1 MultiSteps keeps no accumulator and runs the inner optimizer "
        "directly, where Optax runs it inside a lax.cond on every call (compiled apart even eagerly), "
        "whose branch XLA rounds differently (1-2 ulp)."),
    "apply_every_sgd": Exception_(
        "NaN guard: Optax's accumulator is keep * acc + g, NaN for good once it holds an inf "
        "(0 * inf); steadax selects the kept sum, which XLA's defaults fuse into a multiply-add with "
        "the learning rate's product where Optax's product is rounded (1 ulp).",
        modes=("jit", "jit_argument"), flags="defaults"),
    # Seen after tests/compile_flags.py gained --xla_cpu_parallel_codegen_split_count=1 (one LLVM
    # module per program): other code generation, identical at XLA's defaults (what users run).
    "radam_nesterov": _many(
        Exception_(_JIT_ARGUMENT, modes=("jit_argument",), flags="cheap"),
        Exception_("jitted, with the suite's flags only (identical at XLA's defaults): code generation "
                   "of the same program; 1 ulp, not pinned to an operation.", modes=("jit",), flags="cheap")),
    "sgd_zoom": Exception_(
        "under x64 with the suite's flags only (identical at XLA's defaults and with x64 off): the "
        "gradient the zoom search keeps for the next step, 12 ulp at step 2; updates identical; not "
        "pinned to an operation.", x64=True, flags="cheap", leaves=("grad",)),
    "acprop_schedule_weight_decay": Exception_(
        "with the suite's flags only (identical at XLA's defaults): the program (HLO) is the same "
        "under both flag sets, so the difference is code generation without fused multiply-adds; "
        "not pinned to an operation.", modes=("jit", "jit_argument"), flags="cheap"),
    # Optax has no such thing.
    "adam_warmup_stable_decay": Exception_(
        "Optax has no warmup_stable_decay_schedule: the entry compares with Optax's join of three "
        "schedules, whose values round differently (a few ulp); the optimizer's arithmetic on them "
        "is Optax's."),
    "fuse_adamw": _many(Exception_(_FUSE, flags="defaults"), Exception_(_FUSE, flags="cheap", x64=False)),
    "fuse_clip_sgd_momentum": Exception_(_FUSE, modes=("jit", "jit_argument")),
    # The transformation a jit argument (Optax has none), by the configurations it differs in.
    **{name: Exception_(_JIT_ARGUMENT, modes=("jit_argument",)) for name in (
        "adafactor", "adafactor_factored", "adafactor_momentum_weight_decay", "adam_adaptive_grad_clip")},
    **{name: Exception_(_JIT_ARGUMENT, modes=("jit_argument",), flags="defaults") for name in (
        "adadelta", "reduce_on_plateau", "simplified_ademamix", "zero_nans_sgd")},
    "dadapt_adamw_schedule_weight_decay": Exception_(_JIT_ARGUMENT, modes=("jit_argument",), x64=False,
                                                     flags="defaults"),
    "prodigy": Exception_(_JIT_ARGUMENT, modes=("jit_argument",), x64=True, flags="defaults"),
    "madgrad_schedule_weight_decay": Exception_(_JIT_ARGUMENT, modes=("jit_argument",), x64=True),
    **{name: Exception_(_JIT_ARGUMENT, modes=("jit_argument",), flags="cheap") for name in (
        "acprop", "adabelief", "adabelief_nesterov", "adopt_nesterov_no_clipping",
        "optimistic_adam", "sgd_nesterov")},
    "ademamix_schedules_weight_decay": Exception_(_JIT_ARGUMENT, modes=("jit_argument",), x64=False,
                                                  flags="cheap"),
    **{name: Exception_(_JIT_ARGUMENT, modes=("jit_argument",), x64=True, flags="cheap") for name in (
        "adam_nesterov", "adan", "adan_weight_decay", "ademamix", "nadam", "nadamw", "optimistic_adam_v2")},
    "muon_gram": Exception_("documented: Gram Newton-Schulz equals Optax's iteration in exact arithmetic, "
                            "not in rounding (within 1e-5 relative, tests/contrib/test_gram_newton_schulz.py)."),
    # Muon: identical with x64 off, and under x64 with the suite's flags.
    **{name: _many(Exception_("eagerly, " + _MUON_X64_STEP3, modes=("eager",), x64=True, flags="defaults"))
       for name in ("muon", "muon_dimension_numbers")},
    "muon_adaptive_spectral": _many(
        Exception_("as a jit argument, " + _MUON_X64_STEP3, modes=("jit_argument",), x64=True, flags="defaults")),
    "muon_stacked": Exception_(
        "eagerly at XLA's defaults only (identical jitted and as a jit argument, and eagerly with the suite's "
        "flags): Optax's eager vmap runs each operation over the stacked weight's slices on its own, steadax runs "
        "the batch in one program, and XLA's defaults contract its multiply-adds (up to 725 ulp after "
        "Newton-Schulz's amplification). Not pinned to an operation.", modes=("eager",), flags="defaults"),
}


def _exceptions(name: str) -> tuple[Exception_, ...]:
  found = EXCEPTIONS.get(name, ())
  return found if isinstance(found, tuple) else (found,)


@functools.lru_cache(maxsize=None)
def _results() -> dict:
  """``{entry: {mode: [difference, ...]}}`` from the child process (one per x64 mode)."""
  command = [sys.executable, "-m", "tests.conformance._optax_bits"] + (["--x64"] if X64 else [])
  env = dict(os.environ)  # XLA_FLAGS as the suite has them (conftest.py)
  env.pop("JAX_ENABLE_X64", None)
  result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800, check=False)
  assert result.returncode == 0, result.stderr[-4000:]
  return json.loads(result.stdout)


def test_every_entry_is_compared_or_has_no_counterpart():
  without = {e.name for e in all_entries() if e.optax_factory is None}
  assert without == set(NO_COUNTERPART), (sorted(without - set(NO_COUNTERPART)),
                                          sorted(set(NO_COUNTERPART) - without))


def test_every_exception_names_an_entry_with_an_optax_counterpart():
  names = {e.name for e in DIFFERENTIAL}
  assert set(EXCEPTIONS) <= names, sorted(set(EXCEPTIONS) - names)
  for name in EXCEPTIONS:
    for exception in _exceptions(name):
      assert exception.reason and set(exception.modes) <= set(MODES), name
      assert exception.flags in (None, "defaults", "cheap"), name


@pytest.mark.slow
def test_bit_identical_to_optax():
  # One test (not one per entry): one child process per x64 mode, whichever xdist worker runs it.
  found = _results()
  assert set(found) == {e.name for e in DIFFERENTIAL}
  failures, stale = [], []
  for entry in DIFFERENTIAL:
    exceptions = _exceptions(entry.name)
    for mode, differences in found[entry.name].items():
      left = [d for d in differences if not any(e.covers(mode, d) for e in exceptions)]
      if left:
        failures.append(f"{entry.name} ({mode}, x64={X64}, {FLAGS}): {'; '.join(left[:3])}")
    for exception in exceptions:
      used = any(exception.covers(mode, d) for mode, ds in found[entry.name].items() for d in ds)
      if exception.applies() and not used:
        stale.append(f"{entry.name} (x64={X64}, {FLAGS}): {exception.reason[:80]}")
  assert not failures, f"{len(failures)} not bit-identical to Optax:\n" + "\n".join(failures)
  assert not stale, f"{len(stale)} exceptions no longer needed (bit-identical now):\n" + "\n".join(stale)


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
