"""QK-clip: after the update, shrink the query and key projections of heads whose attention logits
grew past a threshold (Kimi K2's MuonClip, Kimi Team 2025, §2.1).

With Muon, attention logits ``q_i . k_j`` of some heads grow without bound at scale ("MaxLogit
explosion"). QK-clip bounds them at the source: the model reports, per head ``h``, the largest logit
``S_h`` it computed in the step; for every head with ``S_h > tau``, ``gamma_h = tau / S_h`` and the
head's query and key projections are multiplied by ``sqrt(gamma_h)`` each, so that head's logits
(bilinear in the two) are multiplied by ``gamma_h`` and its largest one becomes ``tau``. With
multi-head latent attention (MLA), the per-head rotary query is multiplied by ``gamma_h`` and the
rotary key, shared by the heads, is left alone (the report's §2.1). Heads below ``tau`` are not
touched: the forward and backward passes are unchanged.

As a transformation at the end of a chain its output stays an additive update: for the parameters
``p`` and the incoming update ``u`` of a clipped leaf it returns ``(p + u) * s - p``, so that
``apply_updates(p, ...)`` gives the clipped weight ``(p + u) * s`` (``s`` the per-head factor).
"""

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core._checks import check_positive
from .._core._module import hyper_field, static_field
from .._core._policy import compute_dtype, hyper
from .._core._prefix import align_prefix
from .._core._transformation import Transformation
from .._core._updates import apply_updates
from .._core._tree import is_none
from .._core._types import Params
from .._core._docs import shared_args
from ..transforms._axes import leaf_dims, leaf_paths

__all__ = ["QKClipSpec", "qk_clip"]

# The power of gamma each kind of weight is multiplied by (Kimi K2, §2.1: alpha = 1/2 for the
# query and the key; MLA's per-head rotary query takes gamma entirely, its shared rotary key none).
_EXPONENTS = {"query": 0.5, "key": 0.5, "query_rope": 1.0}


class QKClipSpec(NamedTuple):
  """Which projection a weight is and where its heads are, for ``qk_clip``.

  Attributes:
    kind: ``"query"`` or ``"key"`` (multiplied by ``sqrt(gamma)``), or ``"query_rope"`` (MLA's
      per-head rotary query, multiplied by ``gamma``). MLA's shared rotary key is not clipped:
      give it no spec.
    head_axis: the weight's axis (or axes, in order) that the max-logits array indexes: the head
      axis of a ``(embed, heads, head_dim)`` projection; ``(layer_axis, head_axis)`` for layers
      stacked on a leading axis, with ``(layers, heads)`` logits. An axis longer than the logits'
      (a fused ``(embed, heads * head_dim)`` matrix) is read head-major, each head owning
      ``head_dim`` consecutive entries, as ``reshape(..., heads, head_dim)`` reads it.

  Example:
    >>> import steadax
    >>> steadax.contrib.QKClipSpec("query", head_axis=1)
    QKClipSpec(kind='query', head_axis=1)
  """

  kind: str = "query"
  head_axis: Sequence[int] | int = 1


def _axes(axis: Any) -> tuple[int, ...]:
  return (int(axis),) if isinstance(axis, (int, np.integer)) else tuple(int(a) for a in axis)


def _head_scale(owner: str, where: str, spec: QKClipSpec, shape: tuple[int, ...], logits: Any,
                tau: Any) -> jax.Array:
  """The factor of one weight, broadcastable to ``shape``: ``min(1, tau / S_h) ** exponent``."""
  if spec.kind not in _EXPONENTS:
    raise ValueError(f"{owner}: the spec of {where} has kind {spec.kind!r}; expected one of "
                     f"{sorted(_EXPONENTS)}.")
  ndim = len(shape)
  axes = _axes(spec.head_axis)
  if any(not -ndim <= a < ndim for a in axes) or len({a % ndim for a in axes}) != len(axes):
    raise ValueError(f"{owner}: head_axis {spec.head_axis} of {where} is not a set of distinct axes "
                     f"of its shape {shape}.")
  axes = tuple(a % ndim for a in axes)
  if logits is None:
    raise ValueError(f"{owner}: no max_logits for {where} (a {spec.kind} with a QKClipSpec): "
                     "max_logits must hold the per-head maximum logits of its attention layer.")
  logits = jnp.asarray(logits)
  if logits.ndim != len(axes) or any(
      n == 0 or shape[a] % n for a, n in zip(axes, logits.shape)):
    raise ValueError(
        f"{owner}: max_logits for {where} has shape {tuple(logits.shape)}; its axes must match the "
        f"weight's head axes {axes} (sizes {tuple(shape[a] for a in axes)}, or divisors of them "
        "for fused heads).")
  # In the logits' dtype (at least float32): tau never widens it.
  dt = compute_dtype(logits.dtype) if jnp.issubdtype(logits.dtype, jnp.floating) else np.dtype(np.float32)
  logits, limit = logits.astype(dt), hyper(tau, dt)
  gamma = jnp.where(logits > limit, limit / jnp.where(logits > limit, logits, 1), 1)
  scale = gamma if spec.kind == "query_rope" else jnp.sqrt(gamma)
  for i, (a, n) in enumerate(zip(axes, logits.shape)):
    if shape[a] != n:
      scale = jnp.repeat(scale, shape[a] // n, axis=i)
  order = sorted(range(len(axes)), key=lambda i: axes[i])
  scale = jnp.transpose(scale, order)
  kept = set(axes)
  return jnp.reshape(scale, tuple(shape[a] if a in kept else 1 for a in range(ndim)))


def _logits_per_leaf(owner: str, max_logits: Any, tree: Any) -> list[Any]:
  """The max-logits array of each leaf of ``tree``: the one at its nearest node in ``max_logits``
  (a prefix of the parameters, arrays at the attention layers), None where there is none."""
  is_leaf = lambda x: x is None or hasattr(x, "shape") or isinstance(x, (int, float))  # noqa: E731
  if is_leaf(max_logits):
    return [max_logits] * len(jax.tree_util.tree_leaves(tree, is_leaf=is_none))
  prefix = align_prefix(owner, "max_logits", max_logits, tree)
  leaves, treedef = jax.tree_util.tree_flatten(prefix, is_leaf=is_leaf)
  try:
    subtrees = treedef.flatten_up_to(tree)
  except (ValueError, TypeError) as err:
    raise ValueError(f"{owner}: `max_logits` is not a prefix of the parameters: {err}") from None
  out: list[Any] = []
  for logits, sub in zip(leaves, subtrees):
    out.extend([logits] * len(jax.tree_util.tree_leaves(sub, is_leaf=is_none)))
  return out


class QKClip(Transformation):
  name = "qk_clip"
  tau: Any = hyper_field(100.0, check=check_positive)
  spec: Any = static_field(default=None)

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError(f"{self.owner}: update needs `params`: the clipped weights are the updated "
                       "parameters rescaled.")
    if extra_args.get("max_logits_fn") is not None:
      # The logits the updated weights give (on the batch the function closes over).
      max_logits = extra_args["max_logits_fn"](apply_updates(params, updates))
    elif "max_logits" in extra_args:
      max_logits = extra_args["max_logits"]
    else:
      raise ValueError(f"{self.owner}: update needs `max_logits=`, the per-head maximum attention "
                       "logits the model computed this step (a prefix tree of the parameters "
                       "with one array per attention layer), as in "
                       "`tx.update(grads, state, params, max_logits=...)`, or "
                       "`max_logits_fn=`, a function of the parameters returning them.")
    specs = leaf_dims(self.owner, "spec", self.spec, updates, QKClipSpec, lambda x: None)
    logits = _logits_per_leaf(self.owner, max_logits, updates)
    treedef = jax.tree_util.tree_structure(updates, is_leaf=is_none)
    us, ps = treedef.flatten_up_to(updates), treedef.flatten_up_to(params)
    scales = [None if u is None or spec is None else
              _head_scale(self.owner, where, spec, tuple(u.shape), m, self.tau)
              for u, spec, m, where in zip(us, specs, logits, leaf_paths(updates))]
    (out,) = self.leafwise(lambda k, u, p, s: u if s is None else (p + u) * s - p, updates,
                           params=params, reads=(params, treedef.unflatten(scales)))
    return out, state


@shared_args
def qk_clip(spec: QKClipSpec | Params | Callable[[Params], Params | None], tau: ArrayLike = 100.0) -> Transformation:
  """Rescales the query and key projections of heads whose maximum attention logit exceeds ``tau``.

  The last stage of an optimizer (MuonClip is ``chain(muon(...), qk_clip(...))``). Its ``update``
  takes the model's per-head maximum logits of the step as ``max_logits=`` (as line searches take
  ``value=``; ``chain`` and the wrappers pass it on), or ``max_logits_fn=``, a function of the
  parameters returning them (as line searches take ``value_fn=``). For a head ``h`` with ``S_h > tau``,
  ``gamma_h = tau / S_h``; the new weights ``W = p + u`` of its query and key are multiplied by
  ``sqrt(gamma_h)`` (MLA's per-head rotary query by ``gamma_h``), so the head's largest logit
  becomes ``tau``; the update returned is ``W * s - p``, so ``apply_updates`` gives the clipped
  weights. Other heads and leaves keep their update.

  ``max_logits`` is a prefix tree of the parameters: at each attention layer's node (the subtree
  holding its query and key projections, or the projection itself), an array of per-head maxima
  with one axis per ``head_axis`` of the spec; the logits are those the model applies softmax to
  (with its ``1 / sqrt(head_dim)`` scale), maxima over the batch and positions.

  Which logits: Kimi K2 passes those of the step's forward pass, computed with the weights before
  the update, so a head whose logits the update raises ends the step above ``tau`` by that rise
  (the cap holds to one step's growth; measured in ``tests/contrib/test_qk_clip.py``: up to
  1.24 tau with a learning rate that takes unclipped logits to 30-100 tau). ``max_logits_fn``
  evaluates them at the updated parameters ``p + u`` (one more attention forward pass on the batch
  it closes over): the clipped weights' largest logit on that batch is then at most ``tau``.

  Args:
    spec: which leaves are queries and keys and where their heads are: one ``QKClipSpec``, a
      prefix tree of them and None (None: not clipped), or a callable returning one from the
      parameters.
    tau: the logit threshold (Kimi K2 used 100).

  Returns:
    A stateless transformation (``EmptyState``) whose ``update`` requires ``params`` and
    ``max_logits``.

  Raises:
    ValueError: at update, without ``max_logits`` or ``params``, or naming the parameter whose
      spec or logits do not fit its shape.

  References:
    Kimi Team, "Kimi K2: Open Agentic Intelligence", arXiv:2507.20534, 2025, §2.1 (MuonClip,
    Algorithm 1).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> params = {"q": jnp.ones((4, 2, 2)), "k": jnp.ones((4, 2, 2))}  # (embed, heads, head_dim)
    >>> spec = {"q": steadax.contrib.QKClipSpec("query", 1), "k": steadax.contrib.QKClipSpec("key", 1)}
    >>> tx = steadax.chain(steadax.sgd(0.0), steadax.contrib.qk_clip(spec, tau=10.0))
    >>> u, _ = tx.update(params, tx.init(params), params, max_logits=jnp.array([40.0, 5.0]))
    >>> steadax.apply_updates(params, u)["q"][0]  # head 0 scaled by sqrt(10 / 40), head 1 kept
    Array([[0.5, 0.5],
           [1. , 1. ]], dtype=float32)
  """
  return QKClip(tau, spec=spec)
