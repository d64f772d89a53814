r"""Euclidean projections of pytrees onto convex sets (and the l1 and l2 spheres).

Each function returns :math:`\arg\min_{p \in C} \|x - p\|_2`, where the tree is treated as one
vector (the l1, l2 and simplex sets couple all the leaves). Every leaf keeps its dtype (integer
leaves become JAX's default floating dtype where the projection is not integral), and the
arithmetic runs in at least float32, in the widest floating dtype present when leaves are coupled.
Complex leaves are supported by the sets defined by moduli (l1, l2, l-infinity balls and spheres)
and by the vector and hyperplane projections; the others need real leaves.

References:
  Duchi, Shalev-Shwartz, Singer & Chandra, "Efficient Projections onto the l1-Ball for Learning in
  High Dimensions", ICML 2008 (the sort-based simplex projection, Figure 1 and Lemma 3).
  Bauschke & Combettes, "Convex Analysis and Monotone Operator Theory in Hilbert Spaces", 2nd ed.,
  2017, Example 29.18 (hyperplanes and half-spaces) and Proposition 29.10 (balls).
"""


from typing import Any

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core._policy import (
    cast,
    compute_dtype,
    hyper,
    key_path_str,
    promote_types,
    real_dtype,
    with_weak,
)
from .._linalg._common import concrete_number
from ..tree._leafwise import flatten_like
from .._core._types import Params
from .._core._tree import safe_sqrt

__all__ = [
    "projection_non_negative",
    "projection_box",
    "projection_hypercube",
    "projection_simplex",
    "projection_l1_sphere",
    "projection_l1_ball",
    "projection_l2_sphere",
    "projection_l2_ball",
    "projection_linf_ball",
    "projection_vector",
    "projection_hyperplane",
    "projection_halfspace",
]


# ------------------------------------------------------------------------------ argument checks


def _leaves(owner: str, name: str, tree: Any, *, complex_ok: bool) -> tuple[list[jax.Array], Any]:
  """The leaves of ``tree`` as arrays and its treedef; raises naming the leaf's path."""
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  arrays = []
  for i, leaf in enumerate(leaves):
    if not hasattr(leaf, "dtype") and not isinstance(leaf, (bool, int, float, complex)):
      path = key_path_str(jax.tree_util.tree_flatten_with_path(tree)[0][i][0])
      raise TypeError(f"{owner}: `{name}` at {path} is not an array ({type(leaf).__name__}).")
    leaf = jnp.asarray(leaf)
    if not complex_ok and jnp.issubdtype(leaf.dtype, jnp.complexfloating):
      path = key_path_str(jax.tree_util.tree_flatten_with_path(tree)[0][i][0])
      raise TypeError(f"{owner}: `{name}` at {path} is complex; this set is defined for real vectors.")
    arrays.append(leaf)
  return arrays, treedef


def _out_dtype(x: jax.Array) -> np.dtype:
  return with_weak(x.dtype, 0.0)


def _common_dtype(leaves: list[jax.Array]) -> np.dtype:
  """The arithmetic dtype of coupled leaves: the widest floating dtype present, at least float32."""
  return compute_dtype(*[_out_dtype(x) for x in leaves])


def _check_scalar(owner: str, name: str, value: Any, *, nonnegative: bool = True,
                  complex_ok: bool = False) -> None:
  if callable(value) or isinstance(value, (str, bytes, bool)) or value is None:
    raise TypeError(f"{owner}: `{name}` must be a real scalar, got {value!r}.")
  if np.shape(value) != ():
    raise ValueError(f"{owner}: `{name}` must be a scalar, got an array of shape {np.shape(value)}.")
  if not complex_ok and jnp.issubdtype(jnp.result_type(value), jnp.complexfloating):
    raise TypeError(f"{owner}: `{name}` must be real, got {value!r}.")
  concrete = concrete_number(value)
  if nonnegative and concrete is not None and not concrete >= 0:
    raise ValueError(f"{owner}: `{name}` must be non-negative, got {value!r}.")


def _check_same_shapes(owner: str, name: str, tree: Any, xs: list[jax.Array], ys: list[jax.Array]) -> None:
  for i, (x, y) in enumerate(zip(xs, ys)):
    if x.shape != y.shape:
      path = key_path_str(jax.tree_util.tree_flatten_with_path(tree)[0][i][0])
      raise ValueError(f"{owner}: `{name}` at {path} has shape {y.shape}, expected {x.shape}.")


def _pair(owner: str, x: Any, a: Any, *, complex_ok: bool) -> tuple[list[jax.Array], list[jax.Array], Any]:
  xs, treedef = _leaves(owner, "x", x, complex_ok=complex_ok)
  _, _, (a_leaves,) = flatten_like(owner, x, [a], ["a"])
  a_tree = treedef.unflatten(a_leaves)
  as_, _ = _leaves(owner, "a", a_tree, complex_ok=complex_ok)
  _check_same_shapes(owner, "a", x, xs, as_)
  return xs, as_, treedef


# ------------------------------------------------------------------------------ reductions


def _vdot(xs: list[jax.Array], ys: list[jax.Array], cdt: Any) -> jax.Array:
  """``sum(conj(x) * y)`` over the leaves, in ``cdt``."""
  total = jnp.zeros([], cdt)
  for x, y in zip(xs, ys):
    x, y = cast(x, cdt), cast(y, cdt)
    total = total + jnp.sum(jnp.conj(x) * y if jnp.iscomplexobj(x) else x * y)
  return total


def _sum_sq(xs: list[jax.Array], cdt: Any) -> jax.Array:
  rdt = real_dtype(cdt)
  total = jnp.zeros([], rdt)
  for x in xs:
    x = cast(x, cdt)
    total = total + jnp.sum(jnp.real(x * jnp.conj(x)) if jnp.iscomplexobj(x) else x * x)
  return total


def _modulus_and_phase(x: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``|x|`` and a unit ``phase`` with ``x = phase * |x|``; zeros get the phase 1 (any would do)."""
  modulus = jnp.abs(x)
  if not jnp.iscomplexobj(x):
    return modulus, jnp.where(x < 0, -jnp.ones_like(x), jnp.ones_like(x))
  nonzero = modulus > 0
  safe = jnp.where(nonzero, modulus, jnp.ones_like(modulus))
  return modulus, jnp.where(nonzero, x / cast(safe, x.dtype), jnp.ones_like(x))


def _simplex_threshold(values: jax.Array, scale: jax.Array) -> jax.Array:
  """``tau`` such that ``sum(max(values - tau, 0)) = scale`` (Duchi et al. 2008, Figure 1).

  Differentiable as written: ``tau`` is the mean of the largest ``rho`` values minus
  ``scale / rho``, and ``rho`` is integral, so the gradient flows through the sort.
  """
  n = values.shape[0]
  ordered = jnp.sort(values)[::-1]
  partial_sums = jnp.cumsum(ordered)
  counts = jnp.arange(1, n + 1, dtype=values.dtype)
  rho = jnp.maximum(jnp.count_nonzero(ordered * counts > partial_sums - scale), 1)
  return (partial_sums[rho - 1] - scale) / cast(rho, values.dtype)


def _split_like(flat: jax.Array, leaves: list[jax.Array]) -> list[jax.Array]:
  out, start = [], 0
  for x in leaves:
    out.append(flat[start:start + x.size].reshape(x.shape))
    start += x.size
  return out


# ------------------------------------------------------------------------------ projections


def projection_non_negative(tree: Params) -> Any:
  r"""Projection onto the non-negative orthant: :math:`\max(x, 0)` elementwise.

  Args:
    tree: the tree to project (real leaves).

  Returns:
    A tree like ``tree``, each leaf in its own dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.projections.projection_non_negative({"w": jnp.array([-1.0, 2.0])})
    {'w': Array([0., 2.], dtype=float32)}
  """
  leaves, treedef = _leaves("projection_non_negative", "tree", tree, complex_ok=False)
  return treedef.unflatten([jnp.maximum(x, jnp.zeros_like(x)) for x in leaves])


def _bounds(owner: str, name: str, bound: Any, tree: Any, treedef: Any) -> list[Any]:
  """``bound`` as one value per leaf: a scalar (or array) for every leaf, or a tree like ``tree``."""
  if jax.tree_util.tree_structure(bound) == treedef:
    values = jax.tree_util.tree_leaves(bound)
  elif jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(bound)) and bound is not None:
    values = [bound] * treedef.num_leaves
  else:
    _, _, (values,) = flatten_like(owner, tree, [bound], [name.strip("`")])
  for i, value in enumerate(values):
    if callable(value) or isinstance(value, (str, bytes)) or value is None:
      raise TypeError(f"{owner}: {name} must be a number, an array or a tree of them, got {value!r}.")
    if jnp.issubdtype(jnp.result_type(value), jnp.complexfloating):
      path = key_path_str(jax.tree_util.tree_flatten_with_path(tree)[0][i][0])
      raise TypeError(f"{owner}: {name} at {path} is complex; bounds must be real.")
  return values


def _box(owner: str, names: tuple[str, str], tree: Any, lower: Any, upper: Any) -> Any:
  leaves, treedef = _leaves(owner, "tree", tree, complex_ok=False)
  lows = _bounds(owner, names[0], lower, tree, treedef)
  highs = _bounds(owner, names[1], upper, tree, treedef)
  out = []
  for i, (x, lo, hi) in enumerate(zip(leaves, lows, highs)):
    def where() -> str:
      return key_path_str(jax.tree_util.tree_flatten_with_path(tree)[0][i][0])

    for name, bound in zip(names, (lo, hi)):
      try:
        fits = jnp.broadcast_shapes(np.shape(bound), x.shape) == x.shape
      except ValueError:
        fits = False
      if not fits:
        raise ValueError(
            f"{owner}: {name} at {where()} has shape {np.shape(bound)}, which does not broadcast to "
            f"the leaf's shape {x.shape}."
        )
    lo_value, hi_value = (b if not isinstance(b, jax.core.Tracer) else None for b in (lo, hi))
    if lo_value is not None and hi_value is not None and np.any(np.asarray(lo_value) > np.asarray(hi_value)):
      raise ValueError(f"{owner}: {names[0]} exceeds {names[1]} at {where()}; the box is empty.")
    out_dtype = with_weak(x.dtype, lo, hi)
    cdt = compute_dtype(out_dtype) if jnp.issubdtype(out_dtype, jnp.inexact) else out_dtype
    lo_b = jnp.broadcast_to(cast(lo, cdt), x.shape)
    hi_b = jnp.broadcast_to(cast(hi, cdt), x.shape)
    out.append(cast(jnp.minimum(jnp.maximum(cast(x, cdt), lo_b), hi_b), out_dtype))
  return treedef.unflatten(out)


def projection_box(tree: Params, lower: Any, upper: Any) -> Any:
  r"""Projection onto the box :math:`\{p : \text{lower} \le p \le \text{upper}\}` (elementwise clip).

  Args:
    tree: the tree to project (real leaves).
    lower: the lower bound: a scalar (or an array broadcastable to every leaf) or a tree like
      ``tree``.
    upper: the upper bound, likewise.

  Returns:
    A tree like ``tree``; each leaf keeps its dtype (an integer leaf with floating bounds becomes
    floating).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.projections.projection_box({"w": jnp.array([-1.0, 0.5, 2.0])}, 0.0, 1.0)
    {'w': Array([0. , 0.5, 1. ], dtype=float32)}
  """
  return _box("projection_box", ("`lower`", "`upper`"), tree, lower, upper)


def projection_hypercube(tree: Params, scale: ArrayLike = 1) -> Any:
  r"""Projection onto the hypercube :math:`\{p : 0 \le p \le \text{scale}\}`.

  Args:
    tree: the tree to project (real leaves).
    scale: the side of the hypercube: a scalar or a tree like ``tree``.

  Returns:
    A tree like ``tree``, each leaf in its own dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.projections.projection_hypercube(jnp.array([-1.0, 0.5, 2.0]))
    Array([0. , 0.5, 1. ], dtype=float32)
  """
  return _box("projection_hypercube", ("the lower bound 0", "`scale`"), tree, 0, scale)


def projection_simplex(tree: Params, scale: ArrayLike = 1) -> Any:
  r"""Projection onto the simplex :math:`\{p : p \ge 0, \sum_i p_i = \text{scale}\}`.

  All the leaves together form one vector (sorted once, in the widest floating dtype present, at
  least float32). Differentiable almost everywhere.

  Args:
    tree: the tree to project (real leaves).
    scale: the sum of the projection (a non-negative scalar; 1 gives the probability simplex).

  Returns:
    A tree like ``tree``, each leaf in its own floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> p = steadax.projections.projection_simplex({"w": jnp.array([2.5, 3.2]), "b": 0.5})
    >>> print(f"{steadax.tree.sum(p):.4f}")
    1.0000

  References:
    Duchi, Shalev-Shwartz, Singer & Chandra, "Efficient Projections onto the l1-Ball for Learning
    in High Dimensions", ICML 2008, Figure 1.
  """
  owner = "projection_simplex"
  _check_scalar(owner, "scale", scale)
  leaves, treedef = _leaves(owner, "tree", tree, complex_ok=False)
  if not leaves or sum(x.size for x in leaves) == 0:
    return treedef.unflatten([cast(x, _out_dtype(x)) for x in leaves])
  cdt = _common_dtype(leaves)
  flat = jnp.concatenate([cast(x, cdt).ravel() for x in leaves])
  tau = _simplex_threshold(flat, hyper(scale, cdt))
  out = _split_like(jnp.maximum(flat - tau, 0), leaves)
  return treedef.unflatten([cast(p, _out_dtype(x)) for p, x in zip(out, leaves)])


def _l1(owner: str, tree: Any, scale: Any, *, ball: bool) -> Any:
  _check_scalar(owner, "scale", scale)
  leaves, treedef = _leaves(owner, "tree", tree, complex_ok=True)
  if not leaves or sum(x.size for x in leaves) == 0:
    return treedef.unflatten([cast(x, _out_dtype(x)) for x in leaves])
  cdt = _common_dtype(leaves)
  rdt = real_dtype(cdt)
  parts = [_modulus_and_phase(cast(x, compute_dtype(_out_dtype(x)))) for x in leaves]
  moduli = jnp.concatenate([cast(m, rdt).ravel() for m, _ in parts])
  tau = _simplex_threshold(moduli, hyper(scale, rdt))
  if ball:
    # Inside the ball the simplex threshold is non-positive: the point is its own projection.
    tau = jnp.maximum(tau, 0)
  shrunk = _split_like(jnp.maximum(moduli - tau, 0), leaves)
  out = []
  for x, (_, phase), m in zip(leaves, parts, shrunk):
    p = phase * cast(m, phase.dtype)
    if ball:
      p = jnp.where(tau > 0, p, cast(x, p.dtype))
    out.append(cast(p, _out_dtype(x)))
  return treedef.unflatten(out)


def projection_l1_sphere(tree: Params, scale: ArrayLike = 1) -> Any:
  r"""Projection onto the l1 sphere :math:`\{p : \|p\|_1 = \text{scale}\}`.

  The moduli are projected onto the simplex and the signs (phases) kept; zero entries take the
  sign +1, so the result always lies on the sphere.

  Args:
    tree: the tree to project (real or complex leaves).
    scale: the radius (a non-negative scalar).

  Returns:
    A tree like ``tree``, each leaf in its own floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.projections.projection_l1_sphere(jnp.array([0.5, -0.25]), 3.0)
    Array([ 1.625, -1.375], dtype=float32)
  """
  return _l1("projection_l1_sphere", tree, scale, ball=False)


def projection_l1_ball(tree: Params, scale: ArrayLike = 1) -> Any:
  r"""Projection onto the l1 ball :math:`\{p : \|p\|_1 \le \text{scale}\}` (soft thresholding).

  Args:
    tree: the tree to project (real or complex leaves).
    scale: the radius (a non-negative scalar).

  Returns:
    A tree like ``tree``, each leaf in its own floating dtype; a tree inside the ball is returned
    unchanged.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> p = steadax.projections.projection_l1_ball({"w": jnp.array([2.5, 3.2]), "b": 0.5})
    >>> print(f"{steadax.tree.norm(p, ord=1):.4f}")
    1.0000

  References:
    Duchi, Shalev-Shwartz, Singer & Chandra, "Efficient Projections onto the l1-Ball for Learning
    in High Dimensions", ICML 2008, §4.
  """
  return _l1("projection_l1_ball", tree, scale, ball=True)


def _l2(owner: str, tree: Any, scale: Any, *, ball: bool) -> Any:
  _check_scalar(owner, "scale", scale)
  leaves, treedef = _leaves(owner, "tree", tree, complex_ok=True)
  cdt = _common_dtype(leaves)
  rdt = real_dtype(cdt)
  # ||x|| = peak * ||x / peak||: squares of tiny entries (1e-38 in float32) underflow to zero and
  # squares of huge ones overflow, so the norm is taken of the tree scaled by its largest modulus.
  peak = jnp.zeros([], rdt)
  for x in leaves:
    if np.size(x):
      peak = jnp.maximum(peak, jnp.max(jnp.abs(cast(x, cdt))).astype(rdt))
  unit = jnp.where(peak > 0, peak, jnp.ones_like(peak))
  squares = _sum_sq([cast(x, cdt) / cast(unit, cdt) for x in leaves], cdt)
  # sqrt's derivative at 0 is infinite: times the zero that `maximum` gives the untaken branch it
  # would make the ball's gradient at a zero tree NaN, where it is the identity's (1).
  norm = unit * safe_sqrt(squares)
  radius = hyper(scale, rdt)
  # The ball keeps the tree when ||x|| <= scale; the sphere divides by ||x|| (NaN for a zero tree,
  # whose projection onto the sphere is not unique).
  factor = radius / (jnp.maximum(norm, radius) if ball else norm)
  out = []
  for x in leaves:
    out_dtype = _out_dtype(x)
    cdt = compute_dtype(out_dtype, rdt)
    out.append(cast(cast(x, cdt) * cast(factor, cdt), out_dtype))
  return treedef.unflatten(out)


def projection_l2_sphere(tree: Params, scale: ArrayLike = 1) -> Any:
  r"""Projection onto the l2 sphere :math:`\{p : \|p\|_2 = \text{scale}\}`: ``scale * x / ||x||``.

  Args:
    tree: the tree to project (real or complex leaves; not all zero, else the result is NaN).
    scale: the radius (a non-negative scalar).

  Returns:
    A tree like ``tree``, each leaf in its own floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.projections.projection_l2_sphere(jnp.array([3.0, 4.0]), 10.0)
    Array([6., 8.], dtype=float32)
  """
  return _l2("projection_l2_sphere", tree, scale, ball=False)


def projection_l2_ball(tree: Params, scale: ArrayLike = 1) -> Any:
  r"""Projection onto the l2 ball :math:`\{p : \|p\|_2 \le \text{scale}\}`.

  Args:
    tree: the tree to project (real or complex leaves).
    scale: the radius (a non-negative scalar).

  Returns:
    A tree like ``tree``, each leaf in its own floating dtype; a tree inside the ball is returned
    unchanged.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.projections.projection_l2_ball(jnp.array([3.0, 4.0]))
    Array([0.6, 0.8], dtype=float32)
  """
  return _l2("projection_l2_ball", tree, scale, ball=True)


def projection_linf_ball(tree: Params, scale: ArrayLike = 1) -> Any:
  r"""Projection onto the l-infinity ball :math:`\{p : \max_i |p_i| \le \text{scale}\}`.

  Real entries are clipped to ``[-scale, scale]``; complex entries keep their phase and have their
  modulus clipped.

  Args:
    tree: the tree to project (real or complex leaves).
    scale: the radius (a non-negative scalar).

  Returns:
    A tree like ``tree``, each leaf in its own dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.projections.projection_linf_ball(jnp.array([-3.0, 0.5, 2.0]))
    Array([-1. ,  0.5,  1. ], dtype=float32)
  """
  owner = "projection_linf_ball"
  _check_scalar(owner, "scale", scale)
  leaves, treedef = _leaves(owner, "tree", tree, complex_ok=True)
  out = []
  for x in leaves:
    out_dtype = _out_dtype(x) if not jnp.issubdtype(x.dtype, jnp.integer) else with_weak(x.dtype, scale)
    cdt = compute_dtype(out_dtype) if jnp.issubdtype(out_dtype, jnp.inexact) else out_dtype
    radius = jnp.asarray(hyper(scale, real_dtype(cdt)))
    xc = cast(x, cdt)
    if jnp.iscomplexobj(xc):
      modulus = jnp.abs(xc)
      over = modulus > radius
      factor = jnp.where(over, radius / jnp.where(over, modulus, jnp.ones_like(modulus)), jnp.ones_like(modulus))
      out.append(cast(xc * cast(factor, cdt), out_dtype))
    else:
      out.append(cast(jnp.minimum(jnp.maximum(xc, -radius), radius), out_dtype))
  return treedef.unflatten(out)


def projection_vector(x: ArrayLike, a: Any) -> Any:
  r"""Projection onto the line spanned by ``a``: :math:`\frac{\langle a, x \rangle}{\langle a, a \rangle} a`.

  Args:
    x: the tree to project.
    a: a non-zero tree with the structure and shapes of ``x``.

  Returns:
    A tree like ``x``; each leaf has the promoted floating dtype of the ``x`` and ``a`` leaves.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.projections.projection_vector(jnp.array([2.0, 3.0]), jnp.array([1.0, 0.0]))
    Array([2., 0.], dtype=float32)
  """
  xs, as_, treedef = _pair("projection_vector", x, a, complex_ok=True)
  cdt = _common_dtype(xs + as_)
  coef = _vdot(as_, xs, cdt) / _vdot(as_, as_, cdt)
  return treedef.unflatten(_combine(False, coef, xs, as_))


def _combine(add_x: bool, coef: jax.Array, xs: list[jax.Array], as_: list[jax.Array]) -> list[jax.Array]:
  """``x + coef * a`` (``coef * a`` without ``add_x``) leaf by leaf, in the promoted dtypes."""
  out = []
  for x, a in zip(xs, as_):
    out_dtype = promote_types(_out_dtype(x), _out_dtype(a))
    cdt = compute_dtype(out_dtype, coef.dtype)
    term = cast(coef, cdt) * cast(a, cdt)
    if add_x:
      term = cast(x, cdt) + term
    out.append(cast(term, out_dtype))
  return out


def projection_hyperplane(x: ArrayLike, a: Any, b: ArrayLike) -> Any:
  r"""Projection onto the hyperplane :math:`\{y : \langle a, y \rangle = b\}`.

  Args:
    x: the tree to project.
    a: the normal: a non-zero tree with the structure and shapes of ``x``.
    b: the offset (a scalar).

  Returns:
    ``x + (b - <a, x>) / <a, a> * a``, a tree like ``x`` in the promoted floating dtypes.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.projections.projection_hyperplane(jnp.array([2.0, 3.0]), jnp.array([1.0, 1.0]), 1.0)
    Array([0., 1.], dtype=float32)

  References:
    Bauschke & Combettes, "Convex Analysis and Monotone Operator Theory in Hilbert Spaces", 2nd ed.,
    2017, Example 29.18.
  """
  owner = "projection_hyperplane"
  _check_scalar(owner, "b", b, nonnegative=False, complex_ok=True)
  xs, as_, treedef = _pair(owner, x, a, complex_ok=True)
  cdt = _common_dtype(xs + as_)
  if jnp.issubdtype(jnp.result_type(b), jnp.complexfloating) and not jnp.issubdtype(cdt, jnp.complexfloating):
    raise TypeError(f"{owner}: `b` is complex but `x` and `a` are real; <a, y> is then real.")
  coef = (jnp.asarray(hyper(b, cdt)) - _vdot(as_, xs, cdt)) / _vdot(as_, as_, cdt)
  return treedef.unflatten(_combine(True, coef, xs, as_))


def projection_halfspace(x: ArrayLike, a: Any, b: ArrayLike) -> Any:
  r"""Projection onto the half-space :math:`\{y : \langle a, y \rangle \le b\}`.

  Args:
    x: the tree to project (real leaves).
    a: the outward normal: a non-zero tree with the structure and shapes of ``x``.
    b: the offset (a real scalar).

  Returns:
    ``x + min(0, (b - <a, x>) / <a, a>) * a``, a tree like ``x`` in the promoted floating dtypes.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.projections.projection_halfspace(jnp.array([2.0, 3.0]), jnp.array([1.0, 1.0]), 1.0)
    Array([0., 1.], dtype=float32)

  References:
    Bauschke & Combettes, "Convex Analysis and Monotone Operator Theory in Hilbert Spaces", 2nd ed.,
    2017, Example 29.20.
  """
  owner = "projection_halfspace"
  _check_scalar(owner, "b", b, nonnegative=False)
  xs, as_, treedef = _pair(owner, x, a, complex_ok=False)
  cdt = _common_dtype(xs + as_)
  coef = (jnp.asarray(hyper(b, cdt)) - _vdot(as_, xs, cdt)) / _vdot(as_, as_, cdt)
  return treedef.unflatten(_combine(True, jnp.minimum(coef, 0), xs, as_))
