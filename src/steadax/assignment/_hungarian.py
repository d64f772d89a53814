"""The linear assignment problem, solved in JAX (jittable, static shapes, ``lax`` loops).

Both solvers grow the matching one row at a time along a shortest augmenting path in the reduced
costs ``C[i, j] - u[i] - v[j]``, keeping the dual potentials ``u``, ``v`` feasible; each row costs
O(n m), so an ``n x m`` problem costs O(n^2 m) (n <= m; taller matrices are solved transposed).
They differ in bookkeeping, and so may pick different optimal assignments when there are ties.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core._policy import cast, compute_dtype, default_float_dtype

__all__ = ["hungarian_algorithm", "base_hungarian_algorithm"]


def _index_dtype() -> np.dtype:
  return np.dtype(jax.dtypes.canonicalize_dtype(jnp.int_))


def _prepare(fname: str, cost_matrix: Any) -> tuple[jax.Array, bool] | None:
  """Validates the matrix; returns it (rows <= columns) in its arithmetic dtype, and the transpose flag."""
  cost = jnp.asarray(cost_matrix)
  if cost.ndim != 2:
    raise ValueError(f"{fname}: `cost_matrix` must be 2-D, got shape {cost.shape}")
  if jnp.issubdtype(cost.dtype, jnp.complexfloating):
    raise TypeError(f"{fname}: `cost_matrix` must be real, got {cost.dtype.name}")
  if cost.shape[0] == 0 or cost.shape[1] == 0:
    return None
  if jnp.issubdtype(cost.dtype, jnp.floating):
    dtype = compute_dtype(cost.dtype)
  else:
    # Integer costs: JAX's default float (float64 under x64, exact for integers up to 2**53).
    dtype = default_float_dtype()
  transpose = cost.shape[0] > cost.shape[1]
  if transpose:
    cost = cost.T
  return cast(cost, dtype), transpose


def _empty() -> tuple[jax.Array, jax.Array]:
  return jnp.zeros(0, _index_dtype()), jnp.zeros(0, _index_dtype())


def hungarian_algorithm(cost_matrix: ArrayLike) -> tuple[jax.Array, jax.Array]:
  """Solves the linear assignment problem: a minimum-cost matching of ``min(n, m)`` pairs.

  Finds row indices ``i`` and column indices ``j`` (each row and column used at most once, ``min(n,
  m)`` pairs) minimising ``cost_matrix[i, j].sum()``; the same problem as
  ``scipy.optimize.linear_sum_assignment``. Jittable; costs must be finite.

  Args:
    cost_matrix: an ``n x m`` real matrix (integer matrices are solved in JAX's default float).

  Returns:
    ``(i, j)``, two integer arrays of length ``min(n, m)``, ordered as Optax orders them: for a
    square matrix ``j`` is ``arange(n)`` and ``i[k]`` is the row matched to column ``k``; for a wide
    matrix the rows come in decreasing order; for a tall one the columns do.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> cost = jnp.array([[4.0, 1.0, 3.0], [2.0, 0.0, 5.0], [3.0, 2.0, 2.0]])
    >>> i, j = steadax.assignment.hungarian_algorithm(cost)
    >>> float(cost[i, j].sum())
    5.0

  References:
    Kuhn, The Hungarian method for the assignment problem, Naval Research Logistics Quarterly 2,
    1955; the O(n^2 m) potentials form as in Jonker and Volgenant, A shortest augmenting path
    algorithm for dense and sparse linear assignment problems, Computing 38, 1987.
  """
  prepared = _prepare("hungarian_algorithm", cost_matrix)
  if prepared is None:
    return _empty()
  cost, transpose = prepared
  n, m = cost.shape
  dtype = cost.dtype
  inf = jnp.asarray(jnp.inf, dtype)
  idx = _index_dtype()
  # 1-based bookkeeping: column 0 is a virtual column holding the row being inserted, row 0 means
  # "unassigned"; row_of_col[j] is the row matched to column j.
  u0 = jnp.zeros(n + 1, dtype)
  v0 = jnp.zeros(m + 1, dtype)
  row_of_col0 = jnp.zeros(m + 1, idx)

  def insert_row(carry, row):
    u, v, row_of_col = carry
    row_of_col = row_of_col.at[0].set(row)
    # Dijkstra over columns: min_slack[j] is the cheapest reduced cost seen into column j, and
    # came_from[j] the column whose row offered it (to trace the augmenting path back). The search
    # stops at the first column without a row.
    def at_assigned_column(state):
      return state[6][state[5]] != 0

    def grow(state):
      u, v, used, min_slack, came_from, col, rows = state
      used = used.at[col].set(True)
      r = rows[col]
      slack = cost[r - 1] - u[r] - v[1:]
      free = ~used[1:]
      better = free & (slack < min_slack)
      min_slack = jnp.where(better, slack, min_slack)
      came_from = came_from.at[1:].set(jnp.where(better, col, came_from[1:]))
      candidates = jnp.where(free, min_slack, inf)
      nxt = cast(jnp.argmin(candidates) + 1, idx)
      delta = candidates[nxt - 1]
      # Shift the potentials so the search tree's reduced costs stay tight and the slacks shrink.
      u = u.at[jnp.where(used, rows, n + 1)].add(delta, mode="drop")
      v = jnp.where(used, v - delta, v)
      min_slack = jnp.where(free, min_slack - delta, min_slack)
      return u, v, used, min_slack, came_from, nxt, rows

    state = (u, v, jnp.zeros(m + 1, bool), jnp.full(m, jnp.inf, dtype), jnp.zeros(m + 1, idx),
             jnp.zeros((), idx), row_of_col)
    u, v, _, _, came_from, col, _ = jax.lax.while_loop(at_assigned_column, grow, state)

    def flip(state):
      row_of_col, col = state
      prev = came_from[col]
      return row_of_col.at[col].set(row_of_col[prev]), prev

    row_of_col, _ = jax.lax.while_loop(lambda s: s[1] != 0, flip, (row_of_col, col))
    return (u, v, row_of_col), None

  (_, _, row_of_col), _ = jax.lax.scan(
      insert_row, (u0, v0, row_of_col0), jnp.arange(1, n + 1, dtype=idx)
  )
  rows = row_of_col[1:]
  if n == m:
    matched_rows, cols = rows - 1, jnp.arange(n, dtype=idx)
  else:
    # The n matched columns are those with a nonzero row; top_k finds them with static shapes.
    top_rows, cols = jax.lax.top_k(rows, n)
    matched_rows, cols = top_rows - 1, cast(cols, idx)
  if transpose:
    return cols, matched_rows
  return matched_rows, cols


def base_hungarian_algorithm(cost_matrix: ArrayLike) -> tuple[jax.Array, jax.Array]:
  """Solves the linear assignment problem with Crouse's shortest augmenting path algorithm.

  The same problem and result as ``hungarian_algorithm`` (an optimal matching of ``min(n, m)``
  pairs), with Crouse's bookkeeping (explicit visited sets, ties broken toward unassigned columns)
  and rows always returned in increasing order, as ``scipy.optimize.linear_sum_assignment`` does.

  Args:
    cost_matrix: an ``n x m`` real matrix (finite costs).

  Returns:
    ``(i, j)``: integer arrays of length ``min(n, m)`` with ``i`` increasing.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> cost = jnp.array([[8, 4, 7], [5, 2, 3], [9, 6, 7], [9, 4, 8]])
    >>> i, j = steadax.assignment.base_hungarian_algorithm(cost)
    >>> int(cost[i, j].sum()), i.tolist(), j.tolist()
    (15, [0, 1, 3], [0, 2, 1])

  References:
    Crouse, On implementing 2D rectangular assignment algorithms, IEEE Transactions on Aerospace
    and Electronic Systems 52(4), 2016, Algorithm 1 (pp. 1685-1686).
  """
  prepared = _prepare("base_hungarian_algorithm", cost_matrix)
  if prepared is None:
    return _empty()
  cost, transpose = prepared
  n, m = cost.shape
  dtype = cost.dtype
  idx = _index_dtype()
  inf = jnp.asarray(jnp.inf, dtype)

  def augment(row, carry):
    u, v, col_of_row, row_of_col = carry

    def search(state):
      row_i, min_val, seen_rows, seen_cols, shortest, pred, sink = state
      seen_rows = seen_rows.at[row_i].set(True)
      reduced = min_val + cost[row_i] - u[row_i] - v
      closer = ~seen_cols & (reduced < shortest)
      pred = jnp.where(closer, row_i, pred)
      shortest = jnp.where(closer, reduced, shortest)
      open_dist = jnp.where(seen_cols, inf, shortest)
      lowest = jnp.min(open_dist)
      ties = ~seen_cols & (open_dist == lowest)
      # Among the closest columns prefer an unassigned one: the search then ends a step earlier.
      free_ties = ties & (row_of_col < 0)
      col = cast(jnp.where(jnp.any(free_ties), jnp.argmax(free_ties), jnp.argmax(ties)), idx)
      seen_cols = seen_cols.at[col].set(True)
      is_free = row_of_col[col] < 0
      sink = jnp.where(is_free, col, sink)
      row_i = jnp.where(is_free, row_i, row_of_col[col])
      return row_i, lowest, seen_rows, seen_cols, shortest, pred, sink

    state = (row, jnp.zeros((), dtype), jnp.zeros(n, bool), jnp.zeros(m, bool),
             jnp.full(m, jnp.inf, dtype), jnp.full(m, -1, idx), jnp.asarray(-1, idx))
    _, min_val, seen_rows, seen_cols, shortest, pred, sink = jax.lax.while_loop(
        lambda s: s[6] < 0, search, state
    )
    # Dual update (Crouse, Algorithm 1, steps 4-5): keeps reduced costs non-negative and tight on
    # the matching.
    others = seen_rows & (jnp.arange(n) != row)
    safe_cols = jnp.clip(col_of_row, 0, m - 1)
    u = jnp.where(others, u + min_val - shortest[safe_cols], u)
    u = u.at[row].add(min_val)
    v = jnp.where(seen_cols, v + shortest - min_val, v)

    def flip(state):
      col, col_of_row, row_of_col, _ = state
      r = pred[col]
      previous = col_of_row[r]
      return previous, col_of_row.at[r].set(col), row_of_col.at[col].set(r), r == row

    _, col_of_row, row_of_col, _ = jax.lax.while_loop(
        lambda s: ~s[3], flip, (sink, col_of_row, row_of_col, jnp.asarray(False))
    )
    return u, v, col_of_row, row_of_col

  init = (jnp.zeros(n, dtype), jnp.zeros(m, dtype), jnp.full(n, -1, idx), jnp.full(m, -1, idx))
  _, _, col_of_row, _ = jax.lax.fori_loop(0, n, augment, init)
  if transpose:
    order = cast(jnp.argsort(col_of_row), idx)
    return col_of_row[order], order
  return jnp.arange(n, dtype=idx), col_of_row
