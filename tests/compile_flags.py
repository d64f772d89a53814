"""XLA's cheapest CPU code generation, which the test suite compiles with (one source for the flags).

Most of the suite's time is XLA compiling thousands of small programs, and most of a compilation is
code generation: LLVM's optimization passes and the MLIR fusion emitters' pass pipeline (run once per
fused computation). The suite's arrays are tiny, so optimized machine code buys nothing, and the flags
below leave what the tests look at unchanged: the program (HLO), its fusion, layouts, shardings,
collectives and buffer sizes are decided before code generation. The values are IEEE arithmetic either
way, but not always the same bits: XLA's defaults fuse ``a * b + c`` inside a fusion into one rounding
(FMA) and these flags do not, so a result can differ by an ulp between the two (both sides of a
comparison with Optax are compiled alike; tests/conformance/test_optax_bits.py lists the entries whose
bits differ under one flag set only). They halve the suite's time on a 2-core CPU (x64 pass of
tests/wrappers, losses and linesearch: 196 s -> 103 s). The last one keeps each program's LLVM module
in one piece: by default XLA splits it into up to 32 parts to generate code on several threads, and
for the suite's small programs the parts' fixed costs exceed the work (80 registry update and init
programs: 4.26 -> 2.70 CPU-s of compilation; the same functions are compiled, inlined before any split
either way).

``conftest.py`` adds them to ``XLA_FLAGS`` before JAX starts (the child processes the tests start
inherit them), unless ``STEADAX_TEST_XLA_DEFAULTS=1``. What users run is compiled with XLA's
defaults, and so is a part of the suite: every docs block runs alone in a child process without
these flags (``defaults_env``), as does examples/fsdp.py; ``make bench`` measures with the defaults.
"""

from __future__ import annotations

import os

FLAGS = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true",
         "--xla_cpu_use_fusion_emitters=false", "--xla_cpu_parallel_codegen_split_count=1")


def defaults_wanted() -> bool:
  """Whether ``STEADAX_TEST_XLA_DEFAULTS=1`` asks for XLA's default code generation."""
  return os.environ.get("STEADAX_TEST_XLA_DEFAULTS", "0").lower() in ("1", "true")


def with_flags(flags: str) -> str:
  """``flags`` (an ``XLA_FLAGS`` value) with the cheap flags it does not set already added (none
  when ``STEADAX_TEST_XLA_DEFAULTS=1``)."""
  if defaults_wanted():
    return flags.strip()
  return " ".join([flags.strip(), *(f for f in FLAGS if f.split("=")[0] not in flags)]).strip()


def device_env(devices: int) -> dict[str, str]:
  """The environment of a child process on ``devices`` virtual CPU devices with x64 off (JAX's
  default) and the cheap flags."""
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS=with_flags(f"--xla_force_host_platform_device_count={devices}"))
  env.pop("JAX_ENABLE_X64", None)
  return env


def defaults_env() -> dict[str, str]:
  """The environment of a child process that runs as a user's would: JAX's and XLA's defaults (no
  ``XLA_FLAGS``, no ``JAX_ENABLE_X64``)."""
  env = dict(os.environ)
  env.pop("JAX_ENABLE_X64", None)
  env.pop("XLA_FLAGS", None)
  return env
