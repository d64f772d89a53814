"""Hessian-vector products and diagonal curvature estimates (Optax's ``optax.second_order``).

Optax 0.2.8 deprecates these three functions (removal in Optax 0.2.9); steadax keeps them, with
Optax's warning when called, for as long as it mirrors Optax 0.2.8's surface, and removes them with it.

The loss functions have Optax's signature ``loss(params, inputs, targets) -> scalar``. Flat vectors
(``v`` and the returned diagonals) follow the order of ``jax.flatten_util.ravel_pytree``: the leaves
in tree order, each raveled in C order, in the promoted dtype of the parameters.

References:
  Pearlmutter, "Fast Exact Multiplication by the Hessian", Neural Computation 6(1), 1994 (the
  forward-over-reverse Hessian-vector product, §3).
  Martens, "New insights and perspectives on the natural gradient method", JMLR 21, 2020, §9.2 (the
  empirical Fisher information).
"""

import abc
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from .._core._deprecations import warn_deprecated_call
from .._core._policy import cast, compute_dtype, key_path_str, promote_types, real_dtype
from .._core._types import Params

__all__ = ["hvp", "hessian_diag", "fisher_diag"]


class LossFn(Protocol):
  """A loss ``loss(params, inputs, targets) -> scalar``."""

  @abc.abstractmethod
  def __call__(self, params: Any, inputs: jax.Array, targets: jax.Array) -> jax.Array:
    ...


def _param_leaves(owner: str, params: Any) -> tuple[list[jax.Array], Any, np.dtype]:
  """The parameters' leaves (floating or complex), their treedef and their promoted dtype."""
  leaves, treedef = jax.tree_util.tree_flatten(params)
  arrays = []
  for i, leaf in enumerate(leaves):
    leaf = jnp.asarray(leaf)
    if not jnp.issubdtype(leaf.dtype, jnp.inexact):
      path = key_path_str(jax.tree_util.tree_flatten_with_path(params)[0][i][0])
      raise TypeError(
          f"{owner}: `params` at {path} has dtype {leaf.dtype}; derivatives need floating parameters."
      )
    arrays.append(leaf)
  dtype = promote_types(*[x.dtype for x in arrays]) if arrays else compute_dtype()
  return arrays, treedef, dtype


def _check_callable(owner: str, name: str, fn: Any) -> None:
  if not callable(fn):
    raise TypeError(f"{owner}: `{name}` must be a callable loss(params, inputs, targets), got {fn!r}.")


def _ravel(leaves: list[jax.Array], dtype: Any) -> jax.Array:
  if not leaves:
    return jnp.zeros((0,), dtype)
  return jnp.concatenate([cast(jnp.ravel(x), dtype) for x in leaves])


def _unravel(flat: jax.Array, leaves: list[jax.Array], treedef: Any) -> Any:
  """``flat`` cut into the parameters' shapes, each piece in its parameter's dtype."""
  out, start = [], 0
  for x in leaves:
    piece = flat[start:start + x.size]
    if jnp.iscomplexobj(piece) and not jnp.issubdtype(x.dtype, jnp.complexfloating):
      piece = jnp.real(piece)
    out.append(cast(piece.reshape(x.shape), x.dtype))
    start += x.size
  return treedef.unflatten(out)


def _hvp_tree(loss: Any, v_tree: Any, params: Any, inputs: Any, targets: Any) -> Any:
  grad_fn = jax.grad(lambda p: loss(p, inputs, targets))
  return jax.jvp(grad_fn, (params,), (v_tree,))[1]


def hvp(loss: LossFn, v: jax.Array, params: Params, inputs: jax.Array, targets: jax.Array) -> Any:
  """The Hessian of ``loss`` (in the parameters) times the flat vector ``v``.

  Computed forward-over-reverse (a JVP of the gradient), without forming the Hessian.

  Args:
    loss: the loss, ``loss(params, inputs, targets) -> scalar``.
    v: a flat vector with as many entries as the parameters (``ravel_pytree`` order).
    params: the parameters (a tree of floating arrays).
    inputs: the inputs passed to ``loss``.
    targets: the targets passed to ``loss``.

  Returns:
    ``H v`` as a tree shaped like ``params``, each leaf in its parameter's dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> loss = lambda p, x, y: jnp.sum((x @ p["w"] - y) ** 2)
    >>> x, y = jnp.array([[1.0, 2.0]]), jnp.array([0.0])
    >>> import warnings
    >>> with warnings.catch_warnings():  # deprecated, as in Optax 0.2.8
    ...   warnings.simplefilter("ignore", DeprecationWarning)
    ...   steadax.second_order.hvp(loss, jnp.array([1.0, 0.0]), {"w": jnp.zeros(2)}, x, y)
    {'w': Array([2., 4.], dtype=float32)}

  References:
    Pearlmutter, "Fast Exact Multiplication by the Hessian", Neural Computation 6(1), 1994, §3.
  """
  owner = "hvp"
  warn_deprecated_call("The function hvp is deprecated. This function will be/was removed in "
                       "optax 0.2.9 (and in steadax with it).", at_caller=True)
  _check_callable(owner, "loss", loss)
  leaves, treedef, _ = _param_leaves(owner, params)
  size = sum(x.size for x in leaves)
  v = jnp.asarray(v)
  if v.ndim != 1 or v.shape[0] != size:
    raise ValueError(
        f"{owner}: `v` must be a flat vector of the {size} parameter entries, got shape {v.shape}."
    )
  return _hvp_tree(loss, _unravel(v, leaves, treedef), treedef.unflatten(leaves), inputs, targets)


def hessian_diag(loss: LossFn, params: Params, inputs: jax.Array, targets: jax.Array) -> jax.Array:
  """The diagonal of the Hessian of ``loss`` in the parameters, as a flat vector.

  Exact: one Hessian-vector product per parameter entry (batched with ``vmap``), so it suits small
  models; for large ones use a stochastic estimate (Hutchinson's, as in ``contrib.sophia``).

  Args:
    loss: the loss, ``loss(params, inputs, targets) -> scalar``.
    params: the parameters (a tree of floating arrays).
    inputs: the inputs passed to ``loss``.
    targets: the targets passed to ``loss``.

  Returns:
    A vector with one entry per parameter entry (``ravel_pytree`` order), in the parameters'
    promoted dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> loss = lambda p, x, y: jnp.sum((x @ p["w"] - y) ** 2)
    >>> x, y = jnp.array([[1.0, 2.0]]), jnp.array([0.0])
    >>> import warnings
    >>> with warnings.catch_warnings():  # deprecated, as in Optax 0.2.8
    ...   warnings.simplefilter("ignore", DeprecationWarning)
    ...   steadax.second_order.hessian_diag(loss, {"w": jnp.zeros(2)}, x, y)
    Array([2., 8.], dtype=float32)
  """
  owner = "hessian_diag"
  warn_deprecated_call("The function hessian_diag is deprecated. This function will be/was removed in "
                       "optax 0.2.9 (and in steadax with it).", at_caller=True)
  _check_callable(owner, "loss", loss)
  leaves, treedef, dtype = _param_leaves(owner, params)
  size = sum(x.size for x in leaves)
  if size == 0:
    return jnp.zeros((0,), dtype)
  params = treedef.unflatten(leaves)

  def entry(i):
    basis = jax.nn.one_hot(i, size, dtype=dtype)
    column = _hvp_tree(loss, _unravel(basis, leaves, treedef), params, inputs, targets)
    return _ravel(jax.tree_util.tree_leaves(column), dtype)[i]

  return jax.vmap(entry)(jnp.arange(size))


def fisher_diag(negative_log_likelihood: LossFn, params: Params, inputs: jax.Array, targets: jax.Array) -> jax.Array:
  """The diagonal of the (empirical, observed) Fisher information: the squared gradient.

  Args:
    negative_log_likelihood: ``nll(params, inputs, targets) -> scalar``.
    params: the parameters (a tree of floating arrays).
    inputs: the inputs passed to ``negative_log_likelihood``.
    targets: the targets passed to ``negative_log_likelihood``.

  Returns:
    ``|grad|^2`` as a flat vector (``ravel_pytree`` order), squared in at least float32 and returned
    in the parameters' promoted dtype (its real counterpart for complex parameters).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> nll = lambda p, x, y: jnp.sum((x @ p["w"] - y) ** 2)
    >>> x, y = jnp.array([[1.0, 2.0]]), jnp.array([1.0])
    >>> import warnings
    >>> with warnings.catch_warnings():  # deprecated, as in Optax 0.2.8
    ...   warnings.simplefilter("ignore", DeprecationWarning)
    ...   steadax.second_order.fisher_diag(nll, {"w": jnp.zeros(2)}, x, y)
    Array([ 4., 16.], dtype=float32)

  References:
    Martens, "New insights and perspectives on the natural gradient method", JMLR 21, 2020, §9.2.
  """
  owner = "fisher_diag"
  warn_deprecated_call("The function fisher_diag is deprecated. This function will be/was removed in "
                       "optax 0.2.9 (and in steadax with it).", at_caller=True)
  _check_callable(owner, "negative_log_likelihood", negative_log_likelihood)
  leaves, treedef, dtype = _param_leaves(owner, params)
  grads = jax.grad(negative_log_likelihood)(treedef.unflatten(leaves), inputs, targets)
  flat = _ravel(jax.tree_util.tree_leaves(grads), dtype)
  cdt = compute_dtype(dtype)
  flat = cast(flat, cdt)
  squared = jnp.real(flat * jnp.conj(flat)) if jnp.iscomplexobj(flat) else flat * flat
  return cast(squared, real_dtype(dtype))
