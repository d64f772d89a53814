"""Polar Express: the per-step minimax polynomials of Muon's orthogonalization (Amsel et al. 2025).

Muon replaces a momentum ``M`` by an approximation of its polar factor ``U V^H`` computed with odd
quintics ``p_t(x) = a x + b x^3 + c x^5`` applied to the singular values of ``M / ||M||_F``. Polar
Express chooses each ``p_t`` greedily: if the singular values lie in ``[l_t, u_t]`` before step
``t``, ``p_t`` is the odd quintic closest to 1 on that interval in the max norm (a Remez exchange
on four equioscillation points, the paper's Algorithm 3), and the next interval is its image
``[p_t(l_t), 2 - p_t(l_t)]``; the composition is then optimal among compositions of quintics
(Theorem 4.1). Three changes make it run in bfloat16 (Section 4.4): the interval's lower end is
cushioned at ``cushion * u_t`` (a wide interval's polynomial maps some values near ``u_t`` almost
to zero, a loss of precision) and the polynomial re-centred on ``[l_t, u_t]``; every polynomial
but the final Newton-Schulz one is applied as ``p_t(x / 1.01)`` (round-off above ``u_t`` would
otherwise grow without bound); and the input is divided by ``1.01 ||M||_F`` (Algorithm 1).

``polar_express_coefficients`` gives the published schedule (the paper's Algorithm 1, stored
below as data, for lower bound ``l = 1e-3``) or computes one for another lower bound with the same
procedure (the paper's Appendix G, written here from the paper); a test checks that the procedure
reproduces the stored numbers. The coefficients are ``ns_coeffs`` of Muon (one triple per step);
the input's ``1.01`` safety is folded into the first polynomial (``p_1(x / 1.01)``), so Muon's
Frobenius preconditioning computes the paper's iteration as it is.
"""

import functools
import math

import numpy as np

__all__ = ["polar_express_coefficients"]

# The paper's Algorithm 1 (l = 1e-3, cushion 0.02407327424182761), before the safety factor:
# every later step is the last one, Newton-Schulz's quintic (15 x - 10 x^3 + 3 x^5) / 8.
PAPER_POLYNOMIALS = (
    (8.28721201814563, -23.595886519098837, 17.300387312530933),
    (4.107059111542203, -2.9478499167379106, 0.5448431082926601),
    (3.9486908534822946, -2.908902115962949, 0.5518191394370137),
    (3.3184196573706015, -2.488488024314874, 0.51004894012372),
    (2.300652019954817, -1.6689039845747493, 0.4188073119525673),
    (1.891301407787398, -1.2679958271945868, 0.37680408948524835),
    (1.8750014808534479, -1.2500016453999487, 0.3750001645474248),
    (1.875, -1.25, 0.375),
)
PAPER_LOWER = 1e-3
PAPER_CUSHION = 0.02407327424182761
PAPER_SAFETY = 1.01
# The lower bound of Muon's "polar_express" preset (``polar_express_coefficients``' docstring).
PRESET_LOWER = 2e-3
NEWTON_SCHULZ = (15 / 8, -10 / 8, 3 / 8)
# A computed polynomial this close (relative) to Newton-Schulz's is Newton-Schulz's: the interval
# has converged in float64 (the paper's "subsequent coeffs equal this numerically"); it gets no
# safety factor (which would make the singular values converge to 0.999998 rather than 1).
_CONVERGED = 1e-8


def _quintic(lower: float, upper: float) -> tuple[float, float, float]:
  """The odd quintic closest to 1 on ``[lower, upper]`` in the max norm (the paper's Algorithm 3).

  Equioscillation (Lemma A.1): the optimum has error ``+E, -E, +E, -E`` at ``lower < q < r <
  upper``, the interior points being the critical points of ``p`` (roots of the quadratic
  ``a + 3 b y + 5 c y^2`` in ``y = x^2``). Solving the 4x4 system for ``(a, b, c, E)`` given the
  points and moving the points to the new critical points alternate until ``E`` settles.
  """
  if lower / upper >= 1 - 5e-6:
    # The equioscillating polynomial is numerically the Newton-Schulz quintic scaled to upper.
    return NEWTON_SCHULZ[0] / upper, NEWTON_SCHULZ[1] / upper**3, NEWTON_SCHULZ[2] / upper**5
  q, r = (3 * lower + upper) / 4, (lower + 3 * upper) / 4  # exact as lower -> upper
  error, previous = math.inf, None
  for _ in range(100):
    points = np.array([[x, x**3, x**5, sign] for x, sign in
                       ((lower, 1.0), (q, -1.0), (r, 1.0), (upper, -1.0))])
    a, b, c, error = np.linalg.solve(points, np.ones(4))
    q, r = np.sqrt((-3 * b + np.array([-1.0, 1.0]) * math.sqrt(9 * b * b - 20 * a * c)) / (10 * c))
    if previous is not None and abs(previous - error) <= 1e-15:
      return float(a), float(b), float(c)
    previous = error
  raise ArithmeticError(f"polar_express_coefficients: the exchange on [{lower}, {upper}] did not settle.")


def _polynomial(coeffs: tuple[float, float, float], x: float) -> float:
  a, b, c = coeffs
  return a * x + b * x**3 + c * x**5


@functools.lru_cache(maxsize=64)
def composition(lower: float, steps: int, cushion: float) -> tuple[tuple[float, float, float], ...]:
  """The greedy minimax composition for singular values in ``[lower, 1]`` (the paper's Algorithm 2,
  offline stage; Appendix G), before any safety factor.

  Step ``t`` takes the optimal quintic on ``[max(l_t, cushion u_t), u_t]``, rescales it so that
  ``p(l_t)`` and ``p(u_t)`` lie symmetrically around 1 on the uncushioned interval, and maps the
  interval to ``[p(l_t), 2 - p(l_t)]``.
  """
  upper = 1.0
  out = []
  for _ in range(steps):
    p = _quintic(max(lower, cushion * upper), upper)
    rescale = 2 / (_polynomial(p, lower) + _polynomial(p, upper))
    p = (p[0] * rescale, p[1] * rescale, p[2] * rescale)
    out.append(p)
    lower = _polynomial(p, lower)
    upper = 2 - lower
  return tuple(out)


def _converged(p: tuple[float, float, float]) -> bool:
  return all(abs(x - y) <= _CONVERGED * abs(y) for x, y in zip(p, NEWTON_SCHULZ))


def _safe(p: tuple[float, float, float], safety: float) -> tuple[float, float, float]:
  """``x -> p(x / safety)``."""
  return (p[0] / safety, p[1] / safety**3, p[2] / safety**5)


def polar_express_coefficients(steps: int = 5, lower: float | None = None, *, cushion: float = PAPER_CUSHION,
                               safety: float = PAPER_SAFETY, normalization_safety: float = PAPER_SAFETY,
                               ) -> tuple[tuple[float, float, float], ...]:
  """Polar Express's per-step coefficients, to pass as Muon's ``ns_coeffs``.

  Step ``t`` applies ``X <- a_t X + (b_t A + c_t A^2) X`` (``A = X X^H``) with the odd quintic
  ``p_t(x) = a_t x + b_t x^3 + c_t x^5`` closest to 1, in the max norm, on the interval the
  singular values occupy after the previous steps (Amsel et al. 2025, Theorem 4.1): optimal at
  every step for singular values in ``[lower, 1]`` after Frobenius normalisation. ``lower=None``
  gives the paper's published schedule (its Algorithm 1, for ``lower = 1e-3``; steps beyond the
  eighth repeat Newton-Schulz's quintic), a number the paper's construction (Appendix G) for it.
  Every polynomial but Newton-Schulz's is applied as ``p_t(x / safety)``, the first also as
  ``p_1(x / normalization_safety)``: with Muon's Frobenius scaling, the paper's ``M / (1.01 ||M||_F)``.

  Muon's ``ns_coeffs="polar_express"`` is ``polar_express_coefficients(ns_steps, 2e-3)``
  (``PRESET_LOWER``): 5 steps of the published schedule leave singular values in its band
  ``[0.84, 1.12]`` (exact arithmetic; measured ``[0.868, 1.126]`` in bfloat16 on random 256x1024
  matrices), outside issue 34's ``[0.9, 1.1]``; ``lower=2e-3``, the smallest of 1e-3, 2e-3, 3e-3,
  5e-3, 1e-2 that meets it, gives ``[0.955, 1.024]`` (bfloat16: ``[0.949, 1.027]``), and maps a
  singular value of ``1e-3`` to 0.61 (``lower=1e-2``: ``[0.9999, 1.0000]``, 0.26).

  Args:
    steps: number of steps (a positive int): Muon's ``ns_steps``.
    lower: the smallest singular value to design for, relative to the Frobenius norm, in (0, 1);
      None for the paper's published schedule (``1e-3``).
    cushion: each step's interval starts at ``cushion`` times its end or above (the paper's 0.024).
    safety: each polynomial (but Newton-Schulz's) is applied to ``x / safety``.
    normalization_safety: the first polynomial is also applied to ``x / normalization_safety``
      (the paper divides the input by ``1.01 ||M||_F``); 1 for the bare polynomials.

  Returns:
    ``((a, b, c), ...)``, one triple per step, as Python floats (a ValueError for an argument out
    of range).

  References:
    Amsel, Persson, Musco & Gower, "The Polar Express: Optimal Matrix Sign Methods and Their
    Application to the Muon Algorithm", arXiv:2505.16932, 2025 (Algorithms 1-3, 4.4, App. G).

  Example:
    >>> import steadax
    >>> coeffs = steadax.contrib.polar_express_coefficients(5)
    >>> [round(c, 4) for c in coeffs[0]]
    [8.1239, -22.2284, 15.6618]
    >>> opt = steadax.contrib.muon(0.02, ns_coeffs=coeffs, eps=1e-7)
  """
  owner = "polar_express_coefficients"
  if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
    raise ValueError(f"{owner}: steps must be a positive int, got {steps!r}.")
  if lower is not None and not 0 < lower < 1:
    raise ValueError(f"{owner}: lower must be in (0, 1) (relative to the Frobenius norm), got {lower!r}.")
  if not 0 <= cushion < 1:
    raise ValueError(f"{owner}: cushion must be in [0, 1), got {cushion!r}.")
  for name, value in (("safety", safety), ("normalization_safety", normalization_safety)):
    if not value >= 1:
      raise ValueError(f"{owner}: {name} must be >= 1, got {value!r}.")
  design = composition(float(lower), int(steps), float(cushion)) if lower else (
      PAPER_POLYNOMIALS + (NEWTON_SCHULZ,) * steps)[:steps]
  out = [p if _converged(p) else _safe(p, safety) for p in design]
  out[0] = _safe(out[0], normalization_safety)
  return tuple((float(a), float(b), float(c)) for a, b, c in out)
