"""Muon: momentum orthogonalized by a Newton-Schulz iteration (Jordan et al. 2024).

The update of a weight matrix is its (Nesterov) momentum ``M`` replaced by an approximation of the
orthogonal factor ``U V^H`` of ``M = U S V^H``: steepest descent under the spectral norm
(Bernstein & Newhouse 2024). The factor comes from an odd matrix polynomial iterated a few times,
``X <- a X + (b A + c A^2) X`` with ``A = X X^H``, on ``M`` scaled to spectral norm at most one; the
default quintic coefficients (3.4445, -4.7750, 2.0315) push singular values into roughly
[0.7, 1.2] in five steps rather than to exactly one.

Sharding: on a weight sharded along a contracted axis, each polynomial step would need its own
collective. The matrix axes are gathered once before the iteration (or, for a group of matrices on
a mesh, each device orthogonalizes its own share of them) and the result goes back to the weight's
sharding (``transforms/_runner.py``), so a step holds a fixed number of collectives whatever
``ns_steps`` is; batch axes of stacked weights keep their sharding.

The momentum is updated elementwise in the parameters' layout and its look-ahead, in the compute
dtype (at least float32, float64 for float64 parameters; Optax runs the polynomial in the
momentum's dtype), goes to the runner; the update is cast once to the parameter's dtype.
"""

import functools
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .._core._transformation import Transformation
from .._core._checks import check_nonnegative, check_range
from .._core._combine import chain
from .._core._leafwise import Scalars
from .._core._module import derived, derived_field, hyper_field, static_field
from .._core._policy import compute_dtype, hyper, safe_increment, zero_count
from .._core._roles import COUNTER, OTHER, accumulator, role_zeros, state_roles
from .._core._tree import is_none
from .._core._types import MaskOrFn, Params, ScalarOrSchedule, Updates
from .._core._docs import shared_args
from .._optimizers._adam import adamw
from ..transforms._adam import debiased_mu, one_minus_pow
from ..transforms._moments import moving_average
from ..transforms._axes import WeightDimensionNumbers, leaf_dims, leaf_paths, matrix_view
from ..transforms._decay import add_decayed_weights
from ..transforms._kron import conj_t
from ..transforms._runner import MatrixExecution, run_matrices
from ..transforms._scaling import scale_by_learning_rate
from .._wrappers._partition import partition

__all__ = ["MuonDimensionNumbers", "MuonState", "scale_by_muon", "muon"]

_PRECONDITIONINGS = ("frobenius", "spectral", "aol", "schatten")
_STANDARD_COEFFS = ((3.4445, -4.7750, 2.0315),)
# Ahn et al. 2025 (Dion), one quintic per step.
_DION_COEFFS = (
    (4.0848, -6.8946, 2.9270),
    (3.9505, -6.3029, 2.6377),
    (3.7418, -5.5913, 2.3037),
    (2.8769, -3.1427, 1.2046),
    (2.8366, -3.0525, 1.2012),
)
_PRESETS = {"standard": _STANDARD_COEFFS[0], "dion": _DION_COEFFS}


# Optax's name for the one dimension-numbers type (``steadax.WeightDimensionNumbers``).
MuonDimensionNumbers = WeightDimensionNumbers


@state_roles(count=COUNTER, mu=accumulator("mu_dtype"), ns_coeffs=OTHER)
class MuonState(NamedTuple):
  """State of ``scale_by_muon``.

  Attributes:
    count: int32 number of updates.
    mu: the momentum, one leaf per parameter (``mu_dtype`` or the parameter's dtype).
    ns_coeffs: the Newton-Schulz coefficients, float32, shape ``(3,)`` or ``(steps, 3)``.
  """

  count: jax.Array
  mu: Updates
  ns_coeffs: jax.Array


def _coefficients(owner: str, ns_coeffs: Any, ns_steps: int) -> tuple:
  """The coefficients as a hashable tuple: a triple, or one triple per step."""
  if isinstance(ns_coeffs, str):
    if ns_coeffs not in _PRESETS:
      raise ValueError(f"{owner}: unknown ns_coeffs preset {ns_coeffs!r}; known: {sorted(_PRESETS)}.")
    ns_coeffs = _PRESETS[ns_coeffs]
  arr = np.asarray(ns_coeffs, dtype=np.float64)
  if arr.ndim not in (1, 2) or arr.shape[-1] != 3:
    raise ValueError(f"{owner}: ns_coeffs must have shape (3,) or (n, 3), got {arr.shape}.")
  if arr.ndim == 2:
    if arr.shape[0] > ns_steps:
      raise ValueError(f"{owner}: ns_coeffs holds {arr.shape[0]} steps, more than ns_steps={ns_steps}.")
    return tuple(tuple(float(c) for c in row) for row in arr)
  return tuple(float(c) for c in arr)


def _gram(x: jax.Array) -> jax.Array:
  return x @ conj_t(x)


def _polynomial(x: jax.Array, a: jax.Array, c: jax.Array) -> jax.Array:
  """``c0 X + (c1 A + c2 A^2) X`` for the Gram matrix ``A`` of ``X`` (Jordan et al. 2024)."""
  b = c[1] * a + (c[2] * a) @ a  # Optax's ``c2 * a @ a``: ``*`` and ``@`` bind alike, left to right
  return c[0] * x + b @ x


def _first_step_aol(x: jax.Array, c: jax.Array, eps: jax.Array) -> jax.Array:
  """The first step with AOL row rescaling (Boissin et al. 2025): ``X <- D^{-1/2} X`` with ``D`` the
  absolute row sums of ``X X^H``, which bounds the spectral norm by one without a norm computation."""
  a = _gram(x)
  rows = jnp.maximum(jnp.sum(jnp.abs(a), axis=-1), eps)
  s = jax.lax.rsqrt(rows)[:, None]
  return _polynomial(x * s, a * s * s.T, c)


def _first_step_schatten(x: jax.Array, c: jax.Array, eps: jax.Array) -> jax.Array:
  """The first step with Schatten-4 rescaling (Grishina et al. 2025): ``X / ||X X^H||_F^{1/2}``."""
  a = _gram(x)
  norm = jnp.maximum(jnp.sqrt(jnp.sum(jnp.real(a * jnp.conj(a)))) if jnp.iscomplexobj(a)
                     else jnp.sqrt(jnp.sum(a * a)), eps)
  # ``s * s`` is ``1 / norm``: what XLA makes of Optax's ``s ** 2`` (its ``eps`` a constant, the
  # norm provably positive), written out so a traced ``eps`` or an eager call rounds alike.
  s = jax.lax.rsqrt(norm)
  return _polynomial(x * s, a * (1 / norm), c)


def _frobenius(x: jax.Array) -> jax.Array:
  sq = jnp.real(x * jnp.conj(x)) if jnp.iscomplexobj(x) else x * x
  return jnp.sqrt(jnp.sum(sq))


def newton_schulz(x: jax.Array, coeffs: jax.Array, ns_steps: int, preconditioning: str,
                  eps: jax.Array) -> jax.Array:
  """Approximate orthogonal factor of one matrix ``x`` (2-D, compute dtype).

  ``f(X^T) = f(X)^T`` for the odd polynomial, so a tall matrix is transposed first and the Gram
  matrix is the smaller of the two. Runs inside Muon's leaf function: ``x`` and the (real)
  coefficients are in the compute dtype, ``eps`` is weakly typed, and real scales multiply a
  complex ``x`` by standard promotion.
  """
  if x.size == 0:
    return x
  transposed = x.shape[0] > x.shape[1]
  if transposed:
    x = x.T
  if preconditioning == "frobenius":
    x = x / (_frobenius(x) + eps)
  elif preconditioning == "spectral":
    x = x / (jnp.linalg.norm(x, ord=2) + eps)
  x = _iterate(x, coeffs, eps, ns_steps, preconditioning)
  return x.T if transposed else x


# The steps as one compiled program, as Optax's loop (``lax.fori_loop``/``lax.scan``) is even when
# called eagerly: XLA fuses (at its default flags, into FMAs) the multiply-adds as in Optax's.
@functools.partial(jax.jit, static_argnames=("ns_steps", "preconditioning"))
def _iterate(x: jax.Array, coeffs: jax.Array, eps: Any, ns_steps: int, preconditioning: str) -> jax.Array:
  rows = [coeffs] * ns_steps if coeffs.ndim == 1 else [coeffs[i] for i in range(coeffs.shape[0])]
  for i, c in enumerate(rows):
    if i == 0 and preconditioning == "aol":
      x = _first_step_aol(x, c, eps)
    elif i == 0 and preconditioning == "schatten":
      x = _first_step_schatten(x, c, eps)
    else:
      x = _polynomial(x, _gram(x), c)
  return x


def _check_ns_steps(owner: str, ns_steps: Any) -> None:
  if not isinstance(ns_steps, (int, np.integer)) or isinstance(ns_steps, bool) or ns_steps < 1:
    raise ValueError(f"{owner}: ns_steps must be a positive Python int, got {ns_steps!r}.")


def _check_preconditioning(owner: str, preconditioning: Any) -> None:
  if preconditioning not in _PRECONDITIONINGS:
    raise ValueError(f"{owner}: preconditioning must be one of {_PRECONDITIONINGS}, got {preconditioning!r}.")


# At beta = 1 the bias correction divides by zero.
_check_beta = lambda owner, name, value: check_range(owner, name, value, 0.0, 1.0, high_open=True)


class ScaleByMuon(Transformation):
  name = "scale_by_muon"
  State = MuonState
  cpu_chunks: ClassVar[tuple | None] = None  # one batch per group: chunks did not pay (docs/performance.md)
  two_d: ClassVar[bool] = True  # a matrix per slice, even where a field of its dimension numbers is empty
  beta: Any = hyper_field(0.95, check=_check_beta)
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  one_minus_beta: Any = derived_field(lambda t: 1 - t.beta)
  ns_coeffs: tuple = static_field(default=_STANDARD_COEFFS[0])
  ns_steps: int = static_field(default=5)
  mu_dtype: Any = static_field(default=None)
  nesterov: bool = static_field(default=True)
  adaptive: bool = static_field(default=False)
  preconditioning: str = static_field(default="frobenius")
  weight_dimension_numbers: Any = static_field(default=None)
  execution: MatrixExecution = static_field(default=MatrixExecution())

  def __post_init__(self):
    # Static fields have no hyper_field check: validated here, so the class, the factory and
    # .replace all raise.
    _check_ns_steps(self.owner, self.ns_steps)
    _check_preconditioning(self.owner, self.preconditioning)
    _coefficients(self.owner, self.ns_coeffs, self.ns_steps)

  def init_fn(self, params):
    return MuonState(count=zero_count(), mu=role_zeros(params, accumulator("mu_dtype"), self),
                     ns_coeffs=jnp.asarray(np.asarray(self.ns_coeffs, np.float32)))

  def matrix_step(self, plan, k, shared, m_hat):
    # A tall matrix (transposed for the iteration) as a batch of one, as Optax runs every matrix
    # (``vmap`` over a (1, m, n) stack): XLA lowers a batched product of a transposed matrix
    # differently from a plain one, and rounds differently. Square and wide ones round alike either
    # way and run unbatched: on CPU the batch of one costs 1.5x a step.
    ns = lambda x: newton_schulz(x, shared[0], self.ns_steps, self.preconditioning, k.eps)  # noqa: E731
    out = jax.vmap(ns)(m_hat[None])[0] if m_hat.shape[0] > m_hat.shape[1] else ns(m_hat)
    # Adaptive: scaled by the dual norm <M, O> of the momentum (Bernstein & Newhouse 2024, §4).
    return jnp.sum(jnp.conj(m_hat) * out) * out if self.adaptive else out

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)
    dims = leaf_dims(self.owner, "weight_dimension_numbers", self.weight_dimension_numbers, updates,
                     MuonDimensionNumbers, lambda x: MuonDimensionNumbers() if len(x.shape) == 2 else None)
    grads = jax.tree_util.tree_leaves(updates, is_leaf=is_none)
    views = []
    for g, where, dn in zip(grads, leaf_paths(updates), dims):
      if g is not None and dn is None:
        raise ValueError(
            f"{self.owner}: the parameter at {where} has shape {tuple(g.shape)}; Muon orthogonalizes "
            "matrices: pass MuonDimensionNumbers for it or optimize it with another transformation "
            "(muon() sends it to AdamW).")
      views.append(None if g is None else matrix_view(self.owner, where, tuple(g.shape), dn))

    @functools.cache  # once per real compute dtype
    def scalars(dt):
      # As Optax computes them: ``1 - beta`` exact (a derived constant), the bias corrections
      # per leaf (``one_minus_pow``'s tree scalars).
      return Scalars(b1=self.beta, one_minus_b1=derived(self, "one_minus_beta"), c1=one_minus_pow(self.beta, count),
                     c1_next=one_minus_pow(self.beta, safe_increment(count)))

    def look_ahead(k, g, m, held):
      # The new momentum and the (Nesterov) bias-corrected one that Newton-Schulz orthogonalizes,
      # written in the compute dtype (``held``'s): the momentum is updated in the parameters' own
      # layout, only the look-ahead goes to the matrices' (on a mesh, to their owners).
      m = moving_average(k.b1, m, g, k.one_minus_b1)
      return g, m, debiased_mu(k, m, g, self.nesterov)

    like = updates if params is None else params
    held = jax.tree.map(lambda g, m, p: None if g is None else jnp.zeros(g.shape, compute_dtype(
        g.dtype, m.dtype, p.dtype)), updates, state.mu, like, is_leaf=is_none)
    zero, mu, m_hat = self.leafwise(look_ahead, updates, state.mu, held, params=params, scalars=scalars)
    m_hat = jax.tree.map(lambda g, h: h if g is not None and jnp.issubdtype(g.dtype, jnp.inexact) else None,
                         updates, m_hat, is_leaf=is_none)
    (out,) = run_matrices(self, self.matrix_step, m_hat, like, views=views, plans=[True] * len(views),
                          scalars=lambda dt: Scalars(eps=hyper(self.eps, dt)), shared=(state.ns_coeffs,))
    # Parameters that are not optimised (integers) keep the zero update of ``look_ahead``.
    out = jax.tree.map(lambda u, z: z if u is None else u, out, zero, is_leaf=is_none)
    return out, MuonState(count=count, mu=mu, ns_coeffs=state.ns_coeffs)


@shared_args
def scale_by_muon(
    ns_coeffs: tuple[ArrayLike, ArrayLike, ArrayLike] | tuple[tuple[ArrayLike, ArrayLike, ArrayLike], ...] = _STANDARD_COEFFS[0],
    ns_steps: int = 5,
    beta: ArrayLike = 0.95,
    eps: ArrayLike = 1e-8,
    mu_dtype: DTypeLike | None = None,
    *,
    nesterov: bool = True,
    adaptive: bool = False,
    preconditioning: str = "frobenius",
    weight_dimension_numbers: MuonDimensionNumbers | Params | Callable[[Params], Params | None] | None = None,
    execution: MatrixExecution = MatrixExecution(),
) -> Transformation:
  """Replaces each matrix's momentum by an approximation of its orthogonal factor (Muon).

  ``m = beta m + (1 - beta) g``; the bias-corrected (Nesterov by default) momentum of every matrix
  goes through ``ns_steps`` Newton-Schulz steps ``X <- a X + (b A + c A^2) X``, ``A = X X^H``,
  after scaling (``preconditioning``) so that its singular values lie in [0, 1]. The result has
  singular values near one: steepest descent under the spectral norm.

  Args:
    ns_coeffs: ``(a, b, c)`` used at every step, ``((a, b, c), ...)`` one triple per step (at most
      ``ns_steps`` of them; their number sets the steps), or a preset name (``"standard"``,
      ``"dion"``).
    ns_steps: number of Newton-Schulz steps (a Python int).
    beta: momentum decay.
    eps: added to the norm that scales the matrix before the iteration.
    mu_dtype: dtype of the momentum (default: each parameter's dtype).
    nesterov: <shared>
    adaptive: scale each update by ``<M, O>``, the dual norm of the momentum (Bernstein &
      Newhouse 2024).
    preconditioning: the scaling before the iteration: ``"frobenius"`` (divide by the Frobenius
      norm), ``"spectral"`` (by the spectral norm, an SVD), ``"aol"`` (AOL row rescaling in the
      first step), ``"schatten"`` (Schatten-4 norm in the first step).
    weight_dimension_numbers: None (every parameter is a 2-D ``(input, output)`` matrix), one
      ``MuonDimensionNumbers`` for all, a prefix tree of them, or a callable returning one from
      the updates. Axes in neither field are batch axes (each slice orthogonalized alone).
    execution: <shared>

  Returns:
    A transformation with ``MuonState(count, mu, ns_coeffs)``.

  Raises:
    ValueError: at update, naming the parameter, for a parameter without dimension numbers that is
      not a matrix.

  References:
    Jordan et al., "Muon: An optimizer for hidden layers in neural networks", 2024
    (https://kellerjordan.github.io/posts/muon/), the Newton-Schulz quintic.
    Bernstein & Newhouse, "Old Optimizer, New Norm: An Anthology", arXiv:2409.20325, 2024.
    Boissin et al., "Turbo-Muon", arXiv:2512.04632, 2025 (AOL); Grishina et al.,
    arXiv:2506.10935, 2025 (Schatten-4); Ahn et al., "Dion", arXiv:2504.05295, 2025.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.contrib.scale_by_muon()
    >>> g = jnp.array([[3.0, 0.0], [0.0, 0.5]])
    >>> u, _ = tx.update(g, tx.init(g))
    >>> bool(jnp.all(jnp.abs(jnp.linalg.svd(u)[1] - 1.0) < 0.35))
    True
  """
  _check_ns_steps("scale_by_muon", ns_steps)
  coeffs = _coefficients("scale_by_muon", ns_coeffs, ns_steps)
  return ScaleByMuon(beta, eps, ns_coeffs=coeffs, ns_steps=int(ns_steps), mu_dtype=mu_dtype,
                     nesterov=nesterov, adaptive=adaptive, preconditioning=preconditioning,
                     weight_dimension_numbers=weight_dimension_numbers, execution=execution)


class ScaleByShape(Transformation):
  """Muon's shape-dependent step scale (stateless)."""

  name = "scale_by_shape"
  consistent_rms: Any = hyper_field(None)
  weight_dimension_numbers: Any = static_field(default=None)

  def update_fn(self, updates, state, params=None, **extra_args):
    dims = leaf_dims(self.owner, "weight_dimension_numbers", self.weight_dimension_numbers, updates,
                     MuonDimensionNumbers, lambda x: MuonDimensionNumbers())
    treedef = jax.tree_util.tree_structure(updates, is_leaf=is_none)
    out = []
    for g, where, dn in zip(treedef.flatten_up_to(updates), leaf_paths(updates), dims):
      if g is None:
        out.append(None)
        continue
      view = matrix_view(self.owner, where, tuple(g.shape), dn)
      # As Optax computes the scale: in JAX's default float (float32, float64 under x64), rounded
      # once where it meets the update.
      default = jnp.asarray(0.0).dtype
      if self.consistent_rms is None:
        scale = np.sqrt(np.maximum(1, np.asarray(view.fan_out / max(view.fan_in, 1), default)))
      else:
        scale = np.sqrt(np.asarray(max(view.fan_in, view.fan_out), default)) * self.consistent_rms
      scalars = Scalars(scale=float(scale) if isinstance(scale, np.ndarray | np.floating) else scale)
      (u,) = self.leafwise(lambda k, g: g * k.scale, g, scalars=scalars)
      out.append(u)
    return treedef.unflatten(out), state


class _MuonLabels:
  """``param_labels`` of ``muon``: "muon" where dimension numbers are given (2-D by default)."""

  def __init__(self, dims: Any):
    self.dims = dims

  def __call__(self, params: Any) -> Any:
    treedef = jax.tree_util.tree_structure(params, is_leaf=lambda x: x is None)
    leaves = jax.tree_util.tree_leaves(params, is_leaf=lambda x: x is None)
    if self.dims is None:
      labels = [None if x is None else ("muon" if len(x.shape) == 2 else "adam") for x in leaves]
    else:
      dims = leaf_dims("muon", "muon_weight_dimension_numbers", self.dims, params, MuonDimensionNumbers,
                       lambda x: None)
      labels = [None if x is None else ("adam" if d is None else "muon") for x, d in zip(leaves, dims)]
    return treedef.unflatten(labels)

  def __eq__(self, other: object) -> bool:
    return isinstance(other, _MuonLabels) and _same(self.dims, other.dims)

  def __hash__(self) -> int:
    try:
      return hash(("muon_labels", self.dims))
    except TypeError:
      return hash("muon_labels")


def _same(a: Any, b: Any) -> bool:
  if a is b:
    return True
  try:
    return bool(a == b)
  except Exception:  # pragma: no cover - exotic __eq__
    return False


@shared_args
def muon(
    learning_rate: ScalarOrSchedule,
    ns_coeffs: tuple[ArrayLike, ArrayLike, ArrayLike] | tuple[tuple[ArrayLike, ArrayLike, ArrayLike], ...] | str = _STANDARD_COEFFS[0],
    ns_steps: int = 5,
    beta: ArrayLike = 0.95,
    eps: ArrayLike = 1e-8,
    weight_decay: ArrayLike = 0.0,
    weight_decay_mask: MaskOrFn = None,
    mu_dtype: DTypeLike | None = None,
    *,
    nesterov: bool = True,
    adaptive: bool = False,
    preconditioning: str = "frobenius",
    adam_b1: ArrayLike = 0.9,
    adam_b2: ArrayLike = 0.999,
    adam_eps_root: ArrayLike = 0.0,
    adam_weight_decay: ArrayLike = 0.0,
    adam_learning_rate: ScalarOrSchedule | None = None,
    muon_weight_dimension_numbers: MuonDimensionNumbers | Params | Callable[[Params], Params | None] | None = None,
    consistent_rms: ArrayLike | None = None,
    execution: MatrixExecution = MatrixExecution(),
) -> Transformation:
  """Muon for matrices, AdamW for everything else (Jordan et al. 2024).

  Matrix parameters get ``scale_by_muon``, a shape factor (``sqrt(max(1, fan_out / fan_in))``, or
  ``consistent_rms * sqrt(max(fan_in, fan_out))`` to match AdamW's update RMS as in Liu et al.
  2025), weight decay (multiplied by the learning rate) and the learning rate. Other parameters
  (vectors, scalars, and by default tensors of rank other than 2) get ``adamw``.

  Args:
    learning_rate: Muon's learning rate (scalar or schedule).
    ns_coeffs: Newton-Schulz coefficients or a preset name (see ``scale_by_muon``).
    ns_steps: number of Newton-Schulz steps.
    beta: momentum decay of Muon.
    eps: Muon's normalisation epsilon, also AdamW's ``eps``.
    weight_decay: decoupled weight decay of the Muon parameters.
    weight_decay_mask: where Muon's weight decay applies (tree of booleans or a callable).
    mu_dtype: dtype of the momenta (Muon's and AdamW's first moment).
    nesterov: Nesterov momentum (both parts).
    adaptive: scale Muon updates by the momentum's dual norm.
    preconditioning: Muon's scaling before the iteration (see ``scale_by_muon``).
    adam_b1: AdamW's first-moment decay.
    adam_b2: AdamW's second-moment decay.
    adam_eps_root: AdamW's ``eps_root``.
    adam_weight_decay: AdamW's weight decay.
    adam_learning_rate: AdamW's learning rate (default: ``learning_rate``).
    muon_weight_dimension_numbers: None (2-D parameters use Muon), or a prefix tree of
      ``MuonDimensionNumbers`` and None (None: AdamW), or a callable returning one.
    consistent_rms: None, or the target update RMS (e.g. 0.2) of the shape factor.
    execution: <shared>

  Returns:
    ``partition({"muon": chain(...), "adam": adamw(...)}, labels)``; the state has Optax's
    structure (``PartitionState`` of ``MaskedState``s).

  References:
    Jordan et al., "Muon: An optimizer for hidden layers in neural networks", 2024.
    Liu et al., "Muon is Scalable for LLM Training", arXiv:2502.16982, 2025 (consistent RMS).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.muon(0.1)
    >>> params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
    >>> updates, _ = opt.update(params, opt.init(params), params)
    >>> updates["w"].shape, updates["b"].shape
    ((3, 2), (2,))
  """
  _check_ns_steps("muon", ns_steps)
  coeffs = _coefficients("muon", ns_coeffs, ns_steps)
  if adam_learning_rate is None:
    adam_learning_rate = learning_rate
  dims = MuonDimensionNumbers() if muon_weight_dimension_numbers is None else muon_weight_dimension_numbers
  muon_part = chain(
      scale_by_muon(coeffs, ns_steps, beta, eps, mu_dtype, nesterov=nesterov, adaptive=adaptive,
                    preconditioning=preconditioning, weight_dimension_numbers=dims, execution=execution),
      ScaleByShape(consistent_rms, weight_dimension_numbers=dims),
      add_decayed_weights(weight_decay, weight_decay_mask),
      scale_by_learning_rate(learning_rate),
  )
  adam_part = adamw(adam_learning_rate, adam_b1, adam_b2, eps, adam_eps_root, mu_dtype,
                    adam_weight_decay, nesterov=nesterov)
  return partition({"muon": muon_part, "adam": adam_part},
                   _MuonLabels(muon_weight_dimension_numbers))
