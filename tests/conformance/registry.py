"""The conformance registry: one entry per optimizer and stateful transformation.

Entries live in ``entries_*.py`` files beside this one (one file per family, so adding an optimizer
is one line and parallel work does not collide); each file defines ``ENTRIES: list[Entry]``. Every
entry runs in:

- test_matrix.py: parameter dtypes, both x64 modes, jit / lax.scan / lax.cond / lax.while_loop;
- test_progress_and_optax.py: progress on its problem, and Optax's numbers where Optax has it;
- test_composition.py: inside the wrappers (MultiSteps, masked, apply_if_finite, ...);
- tests/integration/test_registry_clients.py: nnx.Optimizer, Linen TrainState, Equinox, flat_params
  and fuse;
- tests/checkpoint (Orbax round trip), tests/sharding, tests/property, tests/errors/test_low_precision.py.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Entry", "all_entries", "entry_ids", "Problem", "quadratic", "QUADRATIC"]


@dataclasses.dataclass(frozen=True)
class Problem:
  """A small minimisation problem: ``loss(params) -> scalar`` and its initial parameters."""

  name: str
  loss: Callable[[Any], jax.Array]
  init: Callable[[], Any]


def _quadratic_init():
  return {"w": jnp.array([1.0, -1.5, 2.0, 0.5], jnp.float32), "b": jnp.array([0.8, -0.6], jnp.float32)}


_TARGET_W = np.array([0.3, 0.1, -0.2, 0.4], np.float32)
_SCALES_W = np.array([1.0, 2.0, 0.5, 1.5], np.float32)


def _quadratic_loss(params):
  w = params["w"].astype(jnp.float32)
  b = params["b"].astype(jnp.float32)
  return 0.5 * jnp.sum(jnp.asarray(_SCALES_W) * (w - jnp.asarray(_TARGET_W)) ** 2) + 0.5 * jnp.sum(b**2)


QUADRATIC = Problem("quadratic", _quadratic_loss, _quadratic_init)


def quadratic() -> Problem:
  return QUADRATIC


@dataclasses.dataclass(frozen=True)
class Entry:
  """How to build, feed and judge one optimizer or stateful transformation.

  Attributes:
    name: unique id (the public factory name, plus a variant suffix if needed).
    factory: builds the transformation under test (a learning rate suited to ``problem``).
    optax_factory: builds the Optax equivalent from the ``optax`` module, or None.
    optax_agrees: whether its numbers are Optax's to within ``optax_rtol`` over the differential
      test's steps (False where Optax is wrong or steadax differs on purpose: the reason is the
      entry's exception in test_optax_bits.py, which compares it bit for bit all the same).
    complex_ok: supports complex parameters.
    extra_args: ``(loss_fn, params, grads) -> dict`` of keyword extras for ``update`` (value, grad,
      value_fn ...), or None.
    problem: the problem it must make progress on.
    steps: steps of the progress and differential tests.
    progress: the final loss must be below ``progress * initial loss``.
    optax_rtol: tolerance of the differential test.
    optax_atol: absolute tolerance of the differential test.
    low_precision_ok: runs on float16/bfloat16 leaves (checked in the matrix).
    notes: why an entry deviates from the defaults.
  """

  name: str
  factory: Callable[[], Any]
  optax_factory: Callable[[Any], Any] | None = None
  optax_agrees: bool = True
  complex_ok: bool = True
  extra_args: Callable[[Callable, Any, Any], dict] | None = None
  problem: Problem = QUADRATIC
  steps: int = 50
  progress: float = 0.5
  optax_rtol: float = 1e-4
  optax_atol: float = 2e-5  # parameters are O(1); coordinates near 0 make a pure rtol meaningless
  low_precision_ok: bool = True
  notes: str = ""


def value_extra_args(loss_fn, params, grads):
  """Extras for line searches and Polyak-type steps: value, grad and value_fn."""
  return {"value": loss_fn(params), "grad": grads, "value_fn": loss_fn}


def all_entries() -> list[Entry]:
  """Collect ``ENTRIES`` from every ``entries_*`` module of this package."""
  entries: list[Entry] = []
  package = importlib.import_module(__package__)
  for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
    if info.name.startswith("entries_"):
      module = importlib.import_module(f"{__package__}.{info.name}")
      entries.extend(module.ENTRIES)
  names = [e.name for e in entries]
  duplicates = {n for n in names if names.count(n) > 1}
  if duplicates:
    raise ValueError(f"duplicate registry entries: {sorted(duplicates)}")
  return entries


def entry_ids(entries: list[Entry]) -> list[str]:
  return [e.name for e in entries]
