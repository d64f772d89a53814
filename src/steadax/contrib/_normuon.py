"""NorMuon: Muon's orthogonalized update normalised per neuron (Li et al. 2025).

Muon's update ``O`` (its Newton-Schulz orthogonalization of the momentum) has singular values near
one, but the norms of its rows (one per output neuron) can differ widely. NorMuon keeps, per output
neuron ``j``, a moving average of the mean square of ``O``'s entries feeding it,

    nu_j <- beta2 nu_j + (1 - beta2) mean_i O_ij^2,

divides the neuron's column by ``sqrt(nu_j) + eps`` and rescales the result to ``O``'s Frobenius
norm (the reference implementation's renormalisation, so the learning rate keeps Muon's meaning).
The normalisation reads only ``O``: NorMuon is ``scale_by_muon`` followed by this stage, a chain.
A weight is read through its dimension numbers as a stack of ``(fan_in, fan_out)`` matrices: the
neurons are the output axes, the mean runs over the reduction axes, and the statistic of a stacked
weight ``(layers, fan_in, fan_out)`` is ``(layers, fan_out)``, stacked like it.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike, DTypeLike

from .._core._checks import check_nonnegative, check_range
from .._core._combine import chain
from .._core._leafwise import Scalars, place_kept_axes, place_like
from .._core._module import hyper_field, static_field
from .._core._policy import accumulator_dtype
from .._core._roles import OTHER, state_roles
from .._core._transformation import Transformation
from .._core._tree import is_none
from .._core._types import MaskOrFn, Params, ScalarOrSchedule
from .._core._docs import shared_args
from .._optimizers._adam import adamw
from .._wrappers._partition import partition
from ..transforms._axes import leaf_dims, leaf_paths, matrix_view
from ..transforms._decay import add_decayed_weights
from ..transforms._moments import abs_sq
from ..transforms._scaling import scale_by_learning_rate
from ._muon import _STANDARD_COEFFS, CoeffsLike, DimsLike, matrix_views, scale_by_muon, with_adamw

__all__ = ["NorMuonState", "scale_by_normuon", "normuon"]

_WHAT = "NorMuon normalises the neurons of matrices"


# nu has the shape of its parameter without the reduction axes, not the parameter's: OTHER
# (drift-checked), built by hand.
@state_roles(nu=OTHER)
class NorMuonState(NamedTuple):
  """State of NorMuon's per-neuron normalisation (the second stage of ``scale_by_normuon``).

  Attributes:
    nu: per parameter, the moving average of the mean square of the orthogonalized update over
      its reduction axes: one value per output neuron (and per matrix of a stacked weight), in
      ``nu_dtype`` or the parameter's real dtype.
  """

  nu: Params


def _kept(view: Any) -> tuple[int, ...]:
  """The axes of a parameter its per-neuron statistic keeps: batch and output axes, in order."""
  return tuple(a for a in range(len(view.shape)) if a not in view.reduction_axes)


def neuron_normalize(u: jax.Array, nu: jax.Array, view: Any, b2: Any, eps: Any) -> tuple[jax.Array, jax.Array]:
  """One parameter's NorMuon stage on compute-dtype arrays: ``(normalised update, new nu)``.

  ``u`` is Muon's orthogonalized update of the parameter, ``nu`` its per-neuron statistic (the
  parameter's shape without ``view.reduction_axes``).
  """
  red = view.reduction_axes
  matrix = view.reduction_axes + view.output_axes
  sq = abs_sq(u)
  # A mean over an empty reduction (a zero-size matrix) is 0, not NaN.
  nu = b2 * nu + (1 - b2) * (jnp.sum(sq, axis=red) / max(view.fan_in, 1))
  scaled = u / jnp.expand_dims(jnp.sqrt(nu) + eps, red)
  # Back to O's Frobenius norm, matrix by matrix (a stack keeps one factor per matrix).
  norm = jnp.sqrt(jnp.sum(sq, axis=matrix, keepdims=True))
  new_norm = jnp.sqrt(jnp.sum(abs_sq(scaled), axis=matrix, keepdims=True))
  return scaled * (norm / (new_norm + eps)), nu


class ScaleByNeuronNorm(Transformation):
  """NorMuon's per-neuron normalisation of an orthogonalized update (see ``scale_by_normuon``)."""

  name = "scale_by_normuon"
  State = NorMuonState
  beta2: Any = hyper_field(0.95, check=lambda o, n, v: check_range(o, n, v, 0.0, 1.0, high_open=True))
  eps: Any = hyper_field(1e-10, check=check_nonnegative)
  nu_dtype: Any = static_field(default=None)
  weight_dimension_numbers: Any = static_field(default=None)

  def init_fn(self, params):
    views = matrix_views(self.owner, self.weight_dimension_numbers, params, _WHAT, "normuon")
    leaves, treedef = jax.tree_util.tree_flatten(params, is_leaf=is_none)
    nu = [None if p is None else place_kept_axes(p, jnp.zeros(
        tuple(p.shape[a] for a in _kept(v)), accumulator_dtype(p.dtype, self.nu_dtype, real=True)), _kept(v))
          for p, v in zip(leaves, views)]
    return NorMuonState(nu=treedef.unflatten(nu))

  def update_fn(self, updates, state, params=None, **extra_args):
    views = matrix_views(self.owner, self.weight_dimension_numbers, updates, _WHAT, "normuon")
    treedef = jax.tree_util.tree_structure(updates, is_leaf=is_none)
    us, nus = treedef.flatten_up_to(updates), treedef.flatten_up_to(state.nu)
    ps = treedef.flatten_up_to(params) if params is not None else [None] * len(us)
    out, new_nu = list(us), list(nus)
    scalars = Scalars(b2=self.beta2, eps=self.eps)
    # One leafwise call per matrix view: its leaves of equal shapes and dtypes share one trace (a
    # model's layers repeat a few shapes), so tracing does not grow with depth.
    groups: dict = {}
    for i, (u, view) in enumerate(zip(us, views)):
      if u is not None:
        groups.setdefault(view, []).append(i)
    for view, members in groups.items():
      column = lambda xs, members=members: {str(i): x for i, x in zip(members, xs)}  # noqa: E731
      leaf = lambda k, u, nu, view=view: neuron_normalize(u, nu, view, k.b2, k.eps)  # noqa: E731
      u, nu = self.leafwise(leaf, column([us[i] for i in members]), column([nus[i] for i in members]),
                            params=None if params is None else column([ps[i] for i in members]),
                            scalars=scalars)
      for i in members:
        # The statistic keeps its layout from step to step (see scale_by_factored_rms).
        out[i], new_nu[i] = u[str(i)], place_like(nus[i], nu[str(i)])
    return treedef.unflatten(out), NorMuonState(nu=treedef.unflatten(new_nu))


@shared_args
def scale_by_normuon(ns_coeffs: CoeffsLike = _STANDARD_COEFFS, ns_steps: int = 5, beta: ArrayLike = 0.95,
                     eps: ArrayLike = 1e-8, mu_dtype: DTypeLike | None = None, *, beta2: ArrayLike = 0.95,
                     normalization_eps: ArrayLike = 1e-10, nu_dtype: DTypeLike | None = None, nesterov: bool = True,
                     adaptive: bool = False, preconditioning: str = "frobenius", ns_algorithm: str = "standard",
                     weight_dimension_numbers: DimsLike = None) -> Transformation:
  """Muon's orthogonalized update normalised per output neuron (NorMuon).

  ``scale_by_muon`` gives ``O``, the orthogonalized (Nesterov) momentum of each matrix; then, per
  output neuron ``j`` (an entry of the output axes of the matrix view),
  ``nu_j <- beta2 nu_j + (1 - beta2) mean_i |O_ij|^2`` over the reduction axes,
  ``O'_ij = O_ij / (sqrt(nu_j) + normalization_eps)``, and ``O'`` is rescaled to ``O``'s
  Frobenius norm (``||O||_F / (||O'||_F + normalization_eps)``) as the reference implementation
  does, so the learning rate keeps Muon's scale. By default every parameter is a 2-D ``(input,
  output)`` matrix; any other raises at init, naming it (``normuon`` sends it to AdamW).

  Args:
    ns_coeffs: <shared>
    ns_steps: <shared>
    beta: momentum decay, in [0, 1).
    eps: added to the norm that scales the momentum before the iteration.
    mu_dtype: <shared>
    beta2: decay of the per-neuron second moment, in [0, 1).
    normalization_eps: added to the per-neuron RMS and to the norm of the normalised update.
    nu_dtype: <shared>
    nesterov: <shared>
    adaptive: <shared>
    preconditioning: <shared>
    ns_algorithm: <shared>
    weight_dimension_numbers: <shared>

  Returns:
    ``chain(scale_by_muon(...), <the normalisation>)``: the state is ``(MuonState(count, mu,
    ns_coeffs), NorMuonState(nu))``.

  References:
    Li, Liu, Tang, Zhang, Chen, Zhao, "NorMuon: Making Muon more efficient and scalable",
    arXiv:2510.05491, 2025; reference code github.com/zichongli5/NorMuon (``normuon_update``).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.contrib.scale_by_normuon(ns_coeffs="polar_express")
    >>> g = jnp.array([[3.0, 0.0, 1.0], [0.0, 0.5, 2.0]])
    >>> u, (muon_state, state) = tx.update(g, tx.init(g))
    >>> state.nu.shape  # one statistic per output neuron (the columns of an (input, output) matrix)
    (3,)
  """
  return chain(
      scale_by_muon(ns_coeffs, ns_steps, beta, eps, mu_dtype, nesterov=nesterov, adaptive=adaptive,
                    preconditioning=preconditioning, ns_algorithm=ns_algorithm,
                    weight_dimension_numbers=weight_dimension_numbers),
      ScaleByNeuronNorm(beta2, normalization_eps, nu_dtype=nu_dtype, weight_dimension_numbers=weight_dimension_numbers))


@shared_args
def normuon(learning_rate: ScalarOrSchedule, ns_coeffs: CoeffsLike = _STANDARD_COEFFS, ns_steps: int = 5,
            beta: ArrayLike = 0.95, eps: ArrayLike = 1e-8, weight_decay: ArrayLike = 0.0,
            weight_decay_mask: MaskOrFn = None, mu_dtype: DTypeLike | None = None, *, beta2: ArrayLike = 0.95,
            normalization_eps: ArrayLike = 1e-10, nu_dtype: DTypeLike | None = None, nesterov: bool = True,
            adaptive: bool = False, preconditioning: str = "frobenius", ns_algorithm: str = "standard",
            adam_b1: ArrayLike = 0.9, adam_b2: ArrayLike = 0.999, adam_eps_root: ArrayLike = 0.0,
            adam_weight_decay: ArrayLike = 0.0, adam_learning_rate: ScalarOrSchedule | None = None,
            muon_weight_dimension_numbers: DimsLike = None, consistent_rms: ArrayLike | None = None) -> Transformation:
  """NorMuon for matrices, AdamW for everything else (Li et al. 2025).

  ``muon`` with ``scale_by_normuon`` in place of ``scale_by_muon``: matrix parameters get the
  orthogonalized momentum normalised per output neuron, Muon's shape factor (the reference
  implementation's by default), decoupled weight decay and the learning rate; others ``adamw``.

  Args:
    learning_rate: <shared>
    ns_coeffs: <shared>
    ns_steps: <shared>
    beta: momentum decay, in [0, 1).
    eps: added to the norm that scales the momentum before the iteration; also AdamW's ``eps``.
    weight_decay: <shared>
    weight_decay_mask: where that weight decay applies (a tree of booleans or a callable).
    mu_dtype: dtype of the momenta (NorMuon's and AdamW's first moment; default: each parameter's).
    beta2: decay of the per-neuron second moment, in [0, 1).
    normalization_eps: added to the per-neuron RMS and to the norm of the normalised update.
    nu_dtype: <shared>
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

  Returns:
    ``partition({"muon": chain(...), "adam": adamw(...)}, labels)``, with ``muon``'s labels.

  References:
    Li et al., "NorMuon: Making Muon more efficient and scalable", arXiv:2510.05491, 2025.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.normuon(0.02)
    >>> params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
    >>> updates, _ = opt.update(params, opt.init(params), params)
    >>> updates["w"].shape, updates["b"].shape
    ((3, 2), (2,))
  """
  scale = lambda dims: scale_by_normuon(ns_coeffs, ns_steps, beta, eps, mu_dtype, beta2=beta2,  # noqa: E731
                                        normalization_eps=normalization_eps, nu_dtype=nu_dtype, nesterov=nesterov,
                                        adaptive=adaptive, preconditioning=preconditioning,
                                        ns_algorithm=ns_algorithm, weight_dimension_numbers=dims)
  adam = adamw(learning_rate if adam_learning_rate is None else adam_learning_rate, adam_b1, adam_b2, eps,
               adam_eps_root, mu_dtype, adam_weight_decay, nesterov=nesterov)
  return with_adamw(scale, learning_rate, weight_decay, weight_decay_mask, consistent_rms,
                    muon_weight_dimension_numbers, adam)
