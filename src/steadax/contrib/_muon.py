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
from .._core._checks import check_nonnegative, check_one_of, check_positive_int, check_range
from .._core._combine import chain
from .._core._leafwise import Scalars
from .._core._module import derived, derived_field, hyper_field, static_field
from .._core._policy import compute_dtype, default_float_dtype, hyper, real_dtype, safe_increment, zero_count
from .._core._roles import COUNTER, OTHER, accumulator, role_zeros, state_roles
from .._core._tree import is_none
from .._core._types import MaskOrFn, Params, ScalarOrSchedule, Updates
from .._core._docs import shared_args
from .._optimizers._adam import adamw
from ..transforms._adam import debiased_mu, one_minus_pow
from ..transforms._moments import moving_average
from ..transforms._axes import MatrixView, WeightDimensionNumbers, leaf_dims, leaf_paths, leaf_views, matrix_view
from ..transforms._decay import add_decayed_weights
from ..transforms._runner import MatrixExecution, run_matrices
from ..transforms._scaling import scale_by_learning_rate
from .._wrappers._partition import partition
from ._gram_newton_schulz import gram_is_cheaper, gram_newton_schulz, newton_schulz
from ._polar_express import PRESET_LOWER, polar_express_coefficients

__all__ = ["MuonDimensionNumbers", "MuonState", "scale_by_muon", "muon"]

_STANDARD_COEFFS = (3.4445, -4.7750, 2.0315)
# Ahn et al. 2025 (Dion), one quintic per step.
_DION_COEFFS = (
    (4.0848, -6.8946, 2.9270),
    (3.9505, -6.3029, 2.6377),
    (3.7418, -5.5913, 2.3037),
    (2.8769, -3.1427, 1.2046),
    (2.8366, -3.0525, 1.2012),
)
# Preset name -> coefficients for ``ns_steps`` steps.
_PRESETS: dict[str, Callable[[int], Any]] = {
    "standard": lambda steps: _STANDARD_COEFFS, "dion": lambda steps: _DION_COEFFS,
    "polar_express": lambda steps: polar_express_coefficients(steps, PRESET_LOWER)}
_PRECONDITIONINGS = ("frobenius", "spectral", "aol", "schatten")
CoeffsLike = tuple[ArrayLike, ArrayLike, ArrayLike] | tuple[tuple[ArrayLike, ArrayLike, ArrayLike], ...] | str
DimsLike = WeightDimensionNumbers | Params | Callable[[Params], Params | None] | None

# Optax's name for the one dimension-numbers type (``steadax.WeightDimensionNumbers``).
MuonDimensionNumbers = WeightDimensionNumbers


@state_roles(count=COUNTER, mu=accumulator("mu_dtype"), ns_coeffs=OTHER)
class MuonState(NamedTuple):
  """State of ``scale_by_muon``.

  Attributes:
    count: int32 number of updates.
    mu: the momentum, one leaf per parameter (``mu_dtype`` or the parameter's dtype).
    ns_coeffs: the Newton-Schulz coefficients, shape ``(3,)`` or ``(steps, 3)``, in JAX's default
      float (float32; float64 under x64, as Optax's); each matrix's iteration casts them to its
      compute dtype.
  """

  count: jax.Array
  mu: Updates
  ns_coeffs: jax.Array


def _coefficients(owner: str, ns_coeffs: Any, ns_steps: int) -> tuple:
  """The coefficients as a hashable tuple: a triple, or one triple per step."""
  if isinstance(ns_coeffs, str):
    if ns_coeffs not in _PRESETS:
      raise ValueError(f"{owner}: unknown ns_coeffs preset {ns_coeffs!r}; known: {sorted(_PRESETS)}.")
    ns_coeffs = _PRESETS[ns_coeffs](ns_steps)
  arr = np.asarray(ns_coeffs, dtype=np.float64)
  if arr.ndim not in (1, 2) or arr.shape[-1] != 3:
    raise ValueError(f"{owner}: ns_coeffs must have shape (3,) or (n, 3), got {arr.shape}.")
  if arr.ndim == 2 and arr.shape[0] > ns_steps:
    raise ValueError(f"{owner}: ns_coeffs holds {arr.shape[0]} steps, more than ns_steps={ns_steps}.")
  return tuple(tuple(float(c) for c in row) for row in arr) if arr.ndim == 2 else tuple(float(c) for c in arr)


# At beta = 1 the bias correction divides by zero.
_check_beta = lambda owner, name, value: check_range(owner, name, value, 0.0, 1.0, high_open=True)


def matrix_views(owner: str, spec: Any, tree: Any, what: str, optimizer: str) -> list[MatrixView | None]:
  """Per leaf of ``tree``, its ``MatrixView`` (None for a None leaf); 2-D leaves are ``(input,
  output)`` matrices without ``spec``. Raises, naming the leaf, for one that is not a matrix:
  ``what`` says why it must be, ``optimizer`` is the factory that sends it to AdamW."""
  return leaf_views(owner, spec, tree, default=MuonDimensionNumbers(), required=(what, optimizer))


class ScaleByMuon(Transformation):
  name = "scale_by_muon"
  State = MuonState
  cpu_chunks: ClassVar[tuple | None] = None  # one batch per group: chunks did not pay (docs/performance.md)
  two_d: ClassVar[bool] = True  # a matrix per slice, even where a field of its dimension numbers is empty
  beta: Any = hyper_field(0.95, check=_check_beta)
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  one_minus_beta: Any = derived_field(lambda t: 1 - t.beta)
  ns_coeffs: tuple = static_field(default=_STANDARD_COEFFS)
  ns_steps: int = static_field(default=5, check=check_positive_int)
  mu_dtype: Any = static_field(default=None)
  nesterov: bool = static_field(default=True)
  adaptive: bool = static_field(default=False)
  preconditioning: str = static_field(default="frobenius", check=check_one_of(*_PRECONDITIONINGS))
  ns_algorithm: str = static_field(default="standard", check=check_one_of("standard", "gram", "auto"))
  weight_dimension_numbers: Any = static_field(default=None)
  execution: MatrixExecution = static_field(default=MatrixExecution())

  def __post_init__(self):
    # A preset name or an array becomes the tuple of floats the program is compiled for.
    object.__setattr__(self, "ns_coeffs", _coefficients(self.owner, self.ns_coeffs, self.ns_steps))

  def init_fn(self, params):
    return MuonState(count=zero_count(), mu=role_zeros(params, accumulator("mu_dtype"), self),
                     ns_coeffs=jnp.asarray(self.ns_coeffs, default_float_dtype()))

  def algorithm(self, view: MatrixView) -> str:
    """The iteration a matrix of ``view`` runs: ``ns_algorithm``, "auto" decided by the FLOP count."""
    if self.ns_algorithm != "auto":
      return self.ns_algorithm
    steps = len(self.ns_coeffs) if isinstance(self.ns_coeffs[0], tuple) else self.ns_steps
    return "gram" if gram_is_cheaper((view.fan_in, view.fan_out), steps) else "standard"

  def matrix_step(self, plan, k, shared, m_hat):
    iteration = gram_newton_schulz if plan == "gram" else newton_schulz
    coeffs = shared[0].astype(real_dtype(m_hat.dtype))  # as Optax: in the matrix's (compute) dtype
    ns = lambda x: iteration(x, coeffs, self.ns_steps, self.preconditioning, k.eps)  # noqa: E731
    # A tall matrix (transposed for the iteration) as a batch of one, as Optax runs every matrix
    # (``vmap`` over a (1, m, n) stack): XLA lowers a batched product of a transposed matrix
    # differently from a plain one, and rounds differently. Square and wide ones round alike either
    # way and run unbatched: on CPU the batch of one costs 1.5x a step.
    out = jax.vmap(ns)(m_hat[None])[0] if m_hat.shape[0] > m_hat.shape[1] else ns(m_hat)
    # Adaptive: scaled by the dual norm <M, O> of the momentum (Bernstein & Newhouse 2024, §4).
    return jnp.sum(jnp.conj(m_hat) * out) * out if self.adaptive else out

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)
    views = matrix_views(self.owner, self.weight_dimension_numbers, updates, "Muon orthogonalizes matrices", "muon")

    @functools.cache  # once per real compute dtype
    def scalars(dt):
      # As Optax computes them: ``1 - beta`` exact (a derived constant), the bias corrections
      # per leaf (``one_minus_pow``'s tree scalars).
      return Scalars(b1=self.beta, one_minus_b1=derived(self, "one_minus_beta"),
                     c1=one_minus_pow(self.beta, count), c1_next=one_minus_pow(self.beta, safe_increment(count)))

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
    plans = [None if v is None else self.algorithm(v) for v in views]
    (out,) = run_matrices(self, self.matrix_step, m_hat, like, views=views, plans=plans,
                          scalars=lambda dt: Scalars(eps=hyper(self.eps, dt)), shared=(state.ns_coeffs,))
    # Parameters that are not optimised (integers) keep the zero update of ``look_ahead``.
    out = jax.tree.map(lambda u, z: z if u is None else u, out, zero, is_leaf=is_none)
    return out, MuonState(count=count, mu=mu, ns_coeffs=state.ns_coeffs)


@shared_args
def scale_by_muon(ns_coeffs: CoeffsLike = _STANDARD_COEFFS, ns_steps: int = 5, beta: ArrayLike = 0.95,
                  eps: ArrayLike = 1e-8, mu_dtype: DTypeLike | None = None, *, nesterov: bool = True,
                  adaptive: bool = False, preconditioning: str = "frobenius", ns_algorithm: str = "standard",
                  weight_dimension_numbers: DimsLike = None, execution: MatrixExecution = MatrixExecution(),
                  ) -> Transformation:
  """Replaces each matrix's momentum by an approximation of its orthogonal factor (Muon).

  ``m = beta m + (1 - beta) g``; the bias-corrected (Nesterov by default) momentum of every matrix,
  scaled so that its singular values lie in [0, 1] (``preconditioning``), goes through
  ``ns_steps`` Newton-Schulz steps ``X <- a X + (b A + c A^2) X``, ``A = X X^H``. The result has
  singular values near one: steepest descent under the spectral norm. By default every parameter
  is a 2-D ``(input, output)`` matrix; any other raises at update, naming it.

  Args:
    ns_coeffs: <shared>
    ns_steps: <shared>
    beta: momentum decay, in [0, 1).
    eps: added to the norm that scales the matrix before the iteration.
    mu_dtype: <shared>
    nesterov: <shared>
    adaptive: <shared>
    preconditioning: <shared>
    ns_algorithm: <shared>
    weight_dimension_numbers: <shared>
    execution: <shared>

  Returns:
    A transformation with ``MuonState(count, mu, ns_coeffs)``.

  References:
    Jordan et al., "Muon: An optimizer for hidden layers in neural networks", 2024
    (https://kellerjordan.github.io/posts/muon/), the Newton-Schulz quintic.
    Bernstein & Newhouse, "Old Optimizer, New Norm: An Anthology", arXiv:2409.20325, 2024.
    Boissin et al., "Turbo-Muon", arXiv:2512.04632, 2025 (AOL); Grishina et al.,
    arXiv:2506.10935, 2025 (Schatten-4); Ahn et al., "Dion", arXiv:2504.05295, 2025;
    Amsel et al., "The Polar Express", arXiv:2505.16932, 2025 (Polar Express; Gram, Appendix F).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.contrib.scale_by_muon(ns_coeffs="polar_express", ns_algorithm="auto")
    >>> g = jnp.array([[3.0, 0.0], [0.0, 0.5]])
    >>> u, _ = tx.update(g, tx.init(g))
    >>> bool(jnp.all(jnp.abs(jnp.linalg.svd(u)[1] - 1.0) < 0.05))
    True
  """
  return ScaleByMuon(beta, eps, ns_coeffs=ns_coeffs, ns_steps=ns_steps, mu_dtype=mu_dtype, nesterov=nesterov,
                     adaptive=adaptive, preconditioning=preconditioning, ns_algorithm=ns_algorithm,
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
      default = default_float_dtype()
      if self.consistent_rms is None:
        scale = np.sqrt(np.maximum(1, np.asarray(view.fan_out / max(view.fan_in, 1), default)))
      else:
        scale = np.sqrt(np.asarray(max(view.fan_in, view.fan_out), default)) * self.consistent_rms
      scalars = Scalars(scale=float(scale) if isinstance(scale, np.ndarray | np.floating) else scale)
      (u,) = self.leafwise(lambda k, g: g * k.scale, g, scalars=scalars)
      out.append(u)
    return treedef.unflatten(out), state


def scale_by_shape(weight_dimension_numbers: DimsLike = None, consistent_rms: ArrayLike | None = None,
                   ) -> Transformation:
  """Optax's ``optax.contrib._muon.scale_by_shape``: Muon's shape factor (``muon``'s
  ``consistent_rms``) of each parameter read through its dimension numbers (None: every parameter
  is a 2-D ``(input, output)`` matrix). Reached through ``steadax.as_optax``."""
  return ScaleByShape(consistent_rms, weight_dimension_numbers=weight_dimension_numbers)


def orthogonalize_via_newton_schulz(x: jax.Array, ns_coeffs: jax.Array, ns_steps: int = 5,
                                    preconditioning: str = "frobenius", eps: ArrayLike = 1e-8,
                                    dimension_numbers: WeightDimensionNumbers | None = None) -> jax.Array:
  """Optax's ``optax.contrib._muon.orthogonalize_via_newton_schulz``: Muon's iteration on a matrix
  ``x`` (or, with ``dimension_numbers``, on each matrix of a tensor, the other axes batch axes),
  in ``x``'s dtype as Optax computes it; ``ns_steps`` is ignored for ``(n, 3)`` coefficients.
  Reached through ``steadax.as_optax``; Muon itself runs the same iteration (``scale_by_muon``)."""
  owner = "orthogonalize_via_newton_schulz"
  x, coeffs = jnp.asarray(x), jnp.asarray(ns_coeffs)
  if x.ndim != 2 and not isinstance(dimension_numbers, WeightDimensionNumbers):
    raise ValueError(f"{owner}: x must be a matrix or dimension numbers given, got shape {x.shape} "
                     f"and dimension_numbers={dimension_numbers!r}.")
  if coeffs.ndim not in (1, 2) or coeffs.shape[-1] != 3:
    raise ValueError(f"{owner}: ns_coeffs must have shape (3,) or (n, 3), got {coeffs.shape}.")
  check_one_of(*_PRECONDITIONINGS)(owner, "preconditioning", preconditioning)
  dims = MuonDimensionNumbers() if x.ndim == 2 else dimension_numbers
  view = matrix_view(owner, "x", tuple(x.shape), dims)
  rows = view.to_matrices(x).reshape((-1, view.fan_in, view.fan_out))
  step = lambda m: newton_schulz(m, coeffs.astype(m.dtype), int(ns_steps), preconditioning, eps)  # noqa: E731
  return view.from_matrices(jax.vmap(step)(rows))


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


def with_adamw(scale: Callable[[Any], Transformation], learning_rate: Any, weight_decay: Any,
               weight_decay_mask: Any, consistent_rms: Any, dims: Any, adam: Transformation) -> Transformation:
  """Muon's optimizer around a matrix transformation ``scale(dimension numbers)``: on the matrices
  ``scale``, the shape factor, decoupled weight decay and the learning rate; ``adam`` elsewhere."""
  spec = MuonDimensionNumbers() if dims is None else dims
  matrices = chain(scale(spec), ScaleByShape(consistent_rms, weight_dimension_numbers=spec),
                   add_decayed_weights(weight_decay, weight_decay_mask), scale_by_learning_rate(learning_rate))
  return partition({"muon": matrices, "adam": adam}, _MuonLabels(dims))


@shared_args
def muon(learning_rate: ScalarOrSchedule, ns_coeffs: CoeffsLike = _STANDARD_COEFFS, ns_steps: int = 5,
         beta: ArrayLike = 0.95, eps: ArrayLike = 1e-8, weight_decay: ArrayLike = 0.0,
         weight_decay_mask: MaskOrFn = None, mu_dtype: DTypeLike | None = None, *, nesterov: bool = True,
         adaptive: bool = False, preconditioning: str = "frobenius", ns_algorithm: str = "standard",
         adam_b1: ArrayLike = 0.9, adam_b2: ArrayLike = 0.999, adam_eps_root: ArrayLike = 0.0,
         adam_weight_decay: ArrayLike = 0.0, adam_learning_rate: ScalarOrSchedule | None = None,
         muon_weight_dimension_numbers: DimsLike = None, consistent_rms: ArrayLike | None = None,
         execution: MatrixExecution = MatrixExecution()) -> Transformation:
  """Muon for matrices, AdamW for everything else (Jordan et al. 2024).

  Matrix parameters get ``scale_by_muon``, a shape factor (``consistent_rms``), weight decay
  (multiplied by the learning rate) and the learning rate; the others (vectors, scalars, and by
  default tensors of rank other than 2) get ``adamw``.

  Args:
    learning_rate: <shared>
    ns_coeffs: <shared>
    ns_steps: <shared>
    beta: Muon's momentum decay, in [0, 1).
    eps: added to the norm that scales the momentum before the iteration; also AdamW's ``eps``.
    weight_decay: <shared>
    weight_decay_mask: where Muon's weight decay applies (a tree of booleans or a callable).
    mu_dtype: dtype of the momenta (Muon's and AdamW's first moment; default: each parameter's).
    nesterov: Nesterov momentum (both parts).
    adaptive: <shared>
    preconditioning: <shared>
    ns_algorithm: <shared>
    adam_b1: AdamW's first-moment decay.
    adam_b2: AdamW's second-moment decay.
    adam_eps_root: AdamW's ``eps_root``.
    adam_weight_decay: AdamW's weight decay.
    adam_learning_rate: AdamW's learning rate (default: ``learning_rate``).
    muon_weight_dimension_numbers: <shared>
    consistent_rms: <shared>
    execution: <shared>

  Returns:
    ``partition({"muon": chain(...), "adam": adamw(...)}, labels)``; the state has Optax's
    structure (``PartitionState`` of ``MaskedState``s).

  References:
    Jordan et al., "Muon: An optimizer for hidden layers in neural networks", 2024.
    Liu et al., "Muon is Scalable for LLM Training", arXiv:2502.16982, 2025 (consistent RMS).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.muon(0.1, ns_coeffs="polar_express", ns_algorithm="gram")
    >>> params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
    >>> updates, _ = opt.update(params, opt.init(params), params)
    >>> updates["w"].shape, updates["b"].shape
    ((3, 2), (2,))
  """
  scale = lambda dims: scale_by_muon(ns_coeffs, ns_steps, beta, eps, mu_dtype, nesterov=nesterov,  # noqa: E731
                                     adaptive=adaptive, preconditioning=preconditioning, ns_algorithm=ns_algorithm,
                                     weight_dimension_numbers=dims, execution=execution)
  adam = adamw(learning_rate if adam_learning_rate is None else adam_learning_rate, adam_b1, adam_b2, eps,
               adam_eps_root, mu_dtype, adam_weight_decay, nesterov=nesterov)
  return with_adamw(scale, learning_rate, weight_decay, weight_decay_mask, consistent_rms,
                    muon_weight_dimension_numbers, adam)
