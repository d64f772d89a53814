"""Hypothesis strategies for the property tests: parameter trees, wrapper stacks, hyperparameters.

JAX traces (and compiles) once per distinct tree structure and transformation structure, so the
numeric properties draw from small fixed pools (``STRUCTURES``, ``DESCENT``) and reuse programs; only
the type-stability property, traced with ``jax.eval_shape`` (no compilation), draws trees freely.
"""

from __future__ import annotations

import dataclasses
import os
import typing

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import steadax

X64 = bool(jax.config.jax_enable_x64)
# make test runs a fixed small number of examples; make fuzz sets STEADAX_FUZZ (a multiplier).
FUZZ = int(os.environ.get("STEADAX_FUZZ", "0") or 0)


# The settings of every property test here (a settings object each test extends, not a loaded
# profile, which would change every other hypothesis test in the same pytest process): no example
# database (the suite leaves no files behind), no deadline (the first example of a structure
# compiles), derandomized in make test (fixed examples), random under make fuzz.
BASE = settings(
    deadline=None, database=None, derandomize=not FUZZ, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


def examples(n: int) -> int:
  """``n`` examples in make test, ``n * STEADAX_FUZZ`` (at least 50) under make fuzz."""
  return max(50, n * FUZZ) if FUZZ else n


class Pair(typing.NamedTuple):
  first: typing.Any
  second: typing.Any


def real_dtypes(low_precision: bool = True) -> list:
  dtypes = [jnp.float32] + ([jnp.float16, jnp.bfloat16] if low_precision else [])
  return dtypes + ([jnp.float64] if X64 else [])


def complex_dtypes() -> list:
  return [jnp.complex64] + ([jnp.complex128] if X64 else [])


# Shapes: scalars, zero-size, small and one large leaf.
SHAPES = [(), (0,), (3,), (2, 3), (0, 4), (1, 1, 2), (64, 33)]


@dataclasses.dataclass(frozen=True)
class Leaf:
  """A leaf of a tree spec (not a pytree node: tree_map stops here)."""

  shape: tuple
  dtype: typing.Any

  def __repr__(self) -> str:
    return f"Leaf({self.shape}, {jnp.dtype(self.dtype).name})"


def leaf_specs(low_precision: bool, complex_ok: bool, large: bool = True):
  dtypes = real_dtypes(low_precision) + (complex_dtypes() if complex_ok else [])
  shapes = SHAPES if large else SHAPES[:-1]
  return st.builds(Leaf, st.sampled_from(shapes), st.sampled_from(dtypes))


def tree_specs(low_precision: bool = True, complex_ok: bool = False, large: bool = True):
  """A nested spec of dicts, lists, tuples and NamedTuples with (shape, dtype) leaves, 1-6 leaves."""
  leaf = leaf_specs(low_precision, complex_ok, large)
  nested = st.recursive(
      leaf,
      lambda children: st.one_of(
          st.dictionaries(st.sampled_from(["a", "b", "w", "bias", "kernel"]), children,
                          min_size=1, max_size=3),
          st.lists(children, min_size=1, max_size=3),
          st.tuples(children, children),
          st.builds(Pair, children, children),
      ),
      max_leaves=6,
  )
  return nested


def build(spec, seed: int = 0):
  """Concrete arrays for a spec: values in [-2, 2] (finite), in the leaf's dtype."""
  rng = np.random.default_rng(seed)

  def make(leaf):
    shape, dtype = leaf.shape, leaf.dtype
    values = rng.uniform(-2.0, 2.0, size=shape)
    if jnp.issubdtype(dtype, jnp.complexfloating):
      values = values + 1j * rng.uniform(-2.0, 2.0, size=shape)
    return jnp.asarray(values, dtype=dtype)

  return jax.tree_util.tree_map(make, spec)


def abstract(spec):
  return jax.tree_util.tree_map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype), spec)


# --- Wrappers ------------------------------------------------------------------------------------

def _mask(params):
  return jax.tree_util.tree_map(lambda x: x.ndim > 0, params)


def _labels(params):
  return jax.tree_util.tree_map(lambda x: "inner" if x.ndim > 0 else "other", params)


def wrap(name: str, k: int, inner):
  """One wrapper around ``inner`` (k: its integer knob where it has one)."""
  if name == "multi_steps":
    return steadax.MultiSteps(inner, every_k_schedule=k).gradient_transformation()
  if name == "apply_if_finite":
    return steadax.apply_if_finite(inner, max_consecutive_errors=k)
  if name == "zero_nans":
    return steadax.chain(steadax.zero_nans(), inner)
  if name == "masked":
    return steadax.masked(inner, _mask)
  if name == "partition":
    return steadax.partition({"inner": inner, "other": steadax.sgd(0.05)}, _labels)
  if name == "flatten":
    return steadax.flatten(inner)
  if name == "inject_hyperparams":
    return steadax.inject_hyperparams(lambda step_size: steadax.chain(inner, steadax.scale(step_size)))(
        step_size=steadax.linear_schedule(1.0, 0.5, 10))
  if name == "clip_chain":
    return steadax.chain(steadax.clip_by_global_norm(1.0), steadax.clip(0.5 * k), inner)
  if name == "apply_every":
    return steadax.chain(inner, steadax.apply_every(k))
  if name == "groups":
    return steadax.groups({"*.bias": steadax.sgd(0.01), "*": inner})
  raise ValueError(name)


WRAPPERS = ["multi_steps", "apply_if_finite", "zero_nans", "masked", "partition", "flatten",
            "inject_hyperparams", "clip_chain", "apply_every", "groups"]
# Wrappers after which the loss of a convex problem still cannot rise: masked and partition send
# some leaves a different transformation (masked passes the raw gradient through, an ascent step).
DESCENT_WRAPPERS = ["multi_steps", "apply_if_finite", "zero_nans", "flatten", "inject_hyperparams",
                    "clip_chain", "apply_every"]


def stacks(names=WRAPPERS):
  """1-3 (wrapper, k) pairs, innermost first; lookahead is drawn separately (it changes the
  parameter tree, so it can only be outermost)."""
  return st.lists(st.tuples(st.sampled_from(names), st.integers(1, 3)), min_size=1, max_size=3)


def apply_stack(stack, inner):
  for name, k in stack:
    inner = wrap(name, k, inner)
  return inner
