"""Gram Newton-Schulz: the same iteration as Muon's on the small Gram matrix (issue 34 acceptance:
within 1e-3 of the standard iteration), its restarts, and its FLOP model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax
from steadax.contrib import polar_express_coefficients
from steadax.contrib._gram_newton_schulz import (default_restarts, gram_flops, gram_is_cheaper,
                                                 gram_newton_schulz, standard_flops)
from steadax.contrib._muon import newton_schulz
from steadax.transforms._axes import matrix_view

X64 = bool(jax.config.jax_enable_x64)

JORDAN = (3.4445, -4.7750, 2.0315)
DION = ((4.0848, -6.8946, 2.9270), (3.9505, -6.3029, 2.6377), (3.7418, -5.5913, 2.3037),
        (2.8769, -3.1427, 1.2046), (2.8366, -3.0525, 1.2012))


def _matrix(kind, shape, seed=0):
  """A Gaussian matrix, or one with a power-law (1/i^2) or nearly low-rank (1/8 of the values at
  1, the rest at 1e-4) spectrum: the spectra that make the Gram iteration's Q ill-conditioned."""
  rng = np.random.default_rng(seed)
  n, m = sorted(shape)
  if kind == "gauss":
    x = rng.normal(size=(n, m))
  else:
    u, _ = np.linalg.qr(rng.normal(size=(n, n)))
    v, _ = np.linalg.qr(rng.normal(size=(m, n)))
    s = 1.0 / np.arange(1, n + 1) ** 2 if kind == "power" else np.where(np.arange(n) < n // 8, 1.0, 1e-4)
    x = (u * s) @ v.T
  return x if shape[0] <= shape[1] else x.T


def _rel(a, b):
  a, b = np.asarray(a).astype(np.complex128), np.asarray(b).astype(np.complex128)
  return np.linalg.norm(a - b) / np.linalg.norm(b)


CASES = [
    # (shape, spectrum, coefficients, preconditioning)
    ((256, 1024), "gauss", JORDAN, "frobenius"),
    ((64, 256), "power", "polar_express", "frobenius"),
    ((256, 64), "lowrank", "polar_express", "frobenius"),
    ((64, 256), "power", DION, "spectral"),
    ((256, 64), "gauss", JORDAN, "aol"),
    ((64, 256), "lowrank", DION, "schatten"),
    ((48, 48), "gauss", "polar_express", "frobenius"),
    ((32, 256), "power", "polar_express_8", "frobenius"),
]


@pytest.fixture(scope="module")
def pairs():
  """(standard, Gram) results of every case in float32, one jitted program."""
  def coeffs(name):
    if name == "polar_express":
      return polar_express_coefficients(5)
    if name == "polar_express_8":
      return polar_express_coefficients(8)
    return name
  inputs = [(jnp.asarray(_matrix(kind, shape), jnp.float32), jnp.asarray(coeffs(c), jnp.float32), pre)
            for shape, kind, c, pre in CASES]

  @jax.jit
  def run(xs):
    out = []
    for x, (_, c, pre) in zip(xs, inputs):
      out.append((newton_schulz(x, c, 5, pre, 1e-7), gram_newton_schulz(x, c, 5, pre, 1e-7)))
    return out
  return run([x for x, _, _ in inputs])


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{s[0]}x{s[1]}-{k}-{p}" for s, k, _, p in CASES])
def test_gram_agrees_with_the_standard_iteration(pairs, case):
  # Acceptance: within 1e-3 (relative Frobenius difference) in float32; measured at most 1e-4 with
  # the default restarts, about 2e-6 on Gaussian matrices.
  standard, gram = pairs[case]
  assert _rel(gram, standard) < 1e-3
  assert gram.shape == standard.shape


def test_complex_matrices_agree():
  rng = np.random.default_rng(3)
  dt = jnp.complex128 if X64 else jnp.complex64
  x = jnp.asarray(rng.normal(size=(12, 40)) + 1j * rng.normal(size=(12, 40)), dt)
  c = jnp.asarray(JORDAN, jnp.float64 if X64 else jnp.float32)
  with jax.numpy_dtype_promotion("standard"):  # real coefficients times complex matrices, as in Muon
    gram, standard = gram_newton_schulz(x, c, 5, "frobenius", 1e-7), newton_schulz(x, c, 5, "frobenius", 1e-7)
  assert _rel(gram, standard) < 1e-4


def test_restarts_are_what_keeps_it_accurate():
  # In float32 on a nearly low-rank matrix, 5 Polar Express steps without a restart are 1e-2 away
  # from the standard iteration (Q_T ~ V S^{-1} V^T magnifies round-off in the small directions);
  # with the default restart (before step 2) 3e-5. A restart before every step is the standard
  # iteration itself (to float32 rounding).
  x = jnp.asarray(_matrix("lowrank", (128, 512)), jnp.float32)
  c = jnp.asarray(polar_express_coefficients(5), jnp.float32)
  run = jax.jit(lambda x: [newton_schulz(x, c, 5, "frobenius", 1e-7)] + [
      gram_newton_schulz(x, c, 5, "frobenius", 1e-7, r) for r in ((), None, (1, 2, 3, 4))])
  standard, bare, default, every = run(x)
  assert _rel(bare, standard) > 3e-3
  assert _rel(default, standard) < 3e-4
  assert _rel(every, standard) < 1e-4


def test_default_restarts():
  assert default_restarts(5) == (2,)
  assert default_restarts(8) == (2, 5)
  assert default_restarts(2) == ()


def test_flop_model():
  # 5 steps, one restart: (4a + 14) n^3 against (10a + 5) n^3, a = m / n (the module's docstring).
  for n, m in ((256, 1024), (512, 4096), (1024, 1024), (64, 96)):
    a = m / n
    assert gram_flops((n, m), 5) == pytest.approx((4 * a + 14) * n**3)
    assert gram_flops((m, n), 5) == gram_flops((n, m), 5)
    assert standard_flops((n, m), 5) == pytest.approx((10 * a + 5) * n**3)
  assert gram_is_cheaper((256, 1024), 5) and gram_is_cheaper((4096, 512), 5)
  assert not gram_is_cheaper((1024, 1024), 5) and not gram_is_cheaper((64, 96), 5)


def test_empty_matrix():
  x = jnp.zeros((0, 3), jnp.float32)
  assert gram_newton_schulz(x, jnp.asarray(JORDAN, jnp.float32), 5, "frobenius", 1e-7).shape == (0, 3)


@pytest.fixture(scope="module")
def muon_runs():
  """Three steps of ``contrib.muon`` per ``ns_algorithm`` on a wide, a tall, a square matrix and a
  stacked weight (batch axis 0, so the runner vmaps the iteration over its slices), one jit each."""
  rng = np.random.default_rng(5)
  params = {"wide": rng.normal(size=(32, 128)), "tall": rng.normal(size=(96, 24)),
            "square": rng.normal(size=(16, 16)), "stack": rng.normal(size=(3, 16, 64)), "b": rng.normal(size=(8,))}
  params = {k: jnp.asarray(v, jnp.float32) for k, v in params.items()}
  dims = {k: steadax.contrib.MuonDimensionNumbers(1, 2) if k == "stack" else
          (None if k == "b" else steadax.contrib.MuonDimensionNumbers()) for k in params}

  def run(algorithm):
    opt = steadax.contrib.muon(0.1, ns_coeffs="polar_express", ns_algorithm=algorithm,
                               muon_weight_dimension_numbers=dims)

    @jax.jit
    def steps(params):
      state, out = opt.init(params), []
      for i in range(3):
        u, state = opt.update(jax.tree.map(lambda p: jnp.sin(p * (i + 1)), params), state, params)
        out.append(u)
      return out
    return steps(params)
  return {a: run(a) for a in ("standard", "gram", "auto")}


def test_muon_with_gram_agrees_with_the_standard_iteration(muon_runs):
  # Acceptance (issue 34): within 1e-3 of the standard iteration, through muon, every step, on
  # every matrix (a stacked weight's slices vmapped by the runner); measured at most 1e-5.
  for step, (standard, gram) in enumerate(zip(muon_runs["standard"], muon_runs["gram"])):
    for k in ("wide", "tall", "square", "stack"):
      assert _rel(gram[k], standard[k]) < 1e-3, (step, k, _rel(gram[k], standard[k]))
    np.testing.assert_array_equal(gram["b"], standard["b"])  # AdamW's part


def test_auto_picks_the_cheaper_iteration_per_shape(muon_runs):
  tx = steadax.contrib.scale_by_muon(ns_algorithm="auto")
  view = lambda shape: matrix_view("t", "w", shape, steadax.contrib.MuonDimensionNumbers())  # noqa: E731
  assert tx.algorithm(view((32, 128))) == tx.algorithm(view((96, 24))) == "gram"  # aspect 4: Gram
  assert tx.algorithm(view((16, 16))) == "standard"
  for k, algorithm in (("wide", "gram"), ("tall", "gram"), ("stack", "gram"), ("square", "standard")):
    np.testing.assert_allclose(muon_runs["auto"][-1][k], muon_runs[algorithm][-1][k], rtol=0, atol=1e-7)
  # The two iterations differ by more than that where they both run: the check above can tell.
  assert _rel(muon_runs["gram"][-1]["wide"], muon_runs["standard"][-1]["wide"]) > 1e-7


def test_bad_ns_algorithm_is_named():
  with pytest.raises(ValueError, match=r"muon: ns_algorithm must be one of \('standard', 'gram', 'auto'\)"):
    steadax.contrib.muon(0.1, ns_algorithm="fast")
