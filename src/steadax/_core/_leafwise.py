"""The one per-leaf primitive: where every elementwise optimizer's maths runs.

An optimizer writes its leaf function on inputs that are already in the compute dtype, with
per-dtype scalars computed once, and returns the update and its new state leaves:

    def leaf(k, g, m, v):
      m = k.b1 * m + (1 - k.b1) * g
      v = k.b2 * v + (1 - k.b2) * abs_sq(g)
      return m / k.c1 / (jnp.sqrt(v / k.c2) + k.eps), m, v

    updates, mu, nu = leafwise(owner, leaf, updates, state.mu, state.nu, params=params,
                               scalars=scalars)

``leafwise`` applies the dtype policy so the leaf function never does:

* **Cast in.** The compute dtype of a leaf is the promotion of its floating inputs (gradient, state
  leaves, read-only trees), at least float32. Complex inputs get it, real inputs its real part: a
  real second moment of a complex parameter stays real. Integer inputs (quantised codes) pass as
  they are.
* **Scalars once per dtype.** The hyperparameters come as a ``Scalars`` record (or a function
  ``scalars(dtype)`` that builds one, where values are computed in the dtype, such as Adam's bias
  corrections), converted once per real compute dtype, not per leaf: concrete values become Python
  literals (rounded to that dtype) and traced values strong scalars of it, so ``k.b1 * m`` takes
  m's dtype whether m is float32, float64 or complex64, and no conversion is traced per leaf.
* **Promotion.** The leaf function runs under standard dtype promotion, so a complex first
  moment divides by a real denominator without casts; nothing can widen unnoticed, because:
* **Check.** In strict mode every output must come back in the dtype it went in with (the update
  in the gradient's compute dtype, each state leaf in its compute dtype): a leaf function that
  rounds to float16 or drops an imaginary part raises a ContractError naming the transformation
  and the tree path, before anything is cast back.
* **Cast out once.** State leaves are written in their stored (declared) dtype; the update is cast
  once, to the parameter's dtype (the gradient's where ``params`` is None). A complex update for a
  real parameter always raises.
* **Traced once per leaf type.** Under tracing, the first leaf of each combination of input
  shapes and dtypes runs the leaf function; every later leaf of that combination is a ``jit`` call
  of that trace (``_reuse.py``), unless the leaf function could read per-leaf data from its
  closure (a counter it advances, an iterator): it then runs for every leaf. A model repeats a few shapes over its layers, so tracing no longer
  grows with depth at the cost of every operation of the leaf function, and XLA inlines the calls:
  the compiled program is the same.

It is also the single place where leaves could be grouped (by dtype and sharding) for fused
multi-tensor execution: every optimizer written on it gets such a strategy without changes.

**Layout.** ``place_like(reference, value)`` puts a value computed for a parameter back in that
parameter's sharding: the constructors of parameter-shaped state (``zeros_mirroring``) and the
matrix optimizers (after a gathered Newton-Schulz iteration, eigendecomposition or projection) go
through it. Elementwise leaf functions need nothing: the partitioner propagates their inputs'
layout to their outputs (docs/sharding.md).
"""

import collections
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import jax.numpy as jnp
import numpy as np
from jax.experimental.shard_alike import shard_alike

from ._config import is_strict
from ._contract import ContractError, InputMismatchError
from ._policy import cast, compute_dtype, hyper, key_path_str, real_dtype
from ._reuse import Captures, Once

__all__ = ["Scalars", "TreeScalar", "leafwise", "place_kept_axes", "place_like", "split_record", "tree_reduce"]


def _axis_kinds(sharding: Any) -> set:
  """The kinds (``AxisType`` names) of the mesh axes of a traced value's sharding; empty when the
  value is not on a mesh (single device, or automatic axes under ``jit`` without ``set_mesh``)."""
  mesh = getattr(sharding, "mesh", None)
  if mesh is None or getattr(mesh, "empty", True):
    return set()
  return {getattr(t, "name", str(t)) for t in getattr(mesh, "axis_types", ())}


def place_like(reference: Any, value: Any) -> Any:
  """``value`` with the sharding of ``reference`` (an array of the same shape: the parameter).

  The one way steadax puts a parameter-shaped result (fresh state, an update computed on a gathered
  matrix) in its parameter's layout, whatever kind of mesh holds it:

  * **Explicit mesh axes** (the sharding is in the traced type): ``reshard`` when the types differ;
    nothing is emitted when they agree.
  * **Automatic axes under ``jit``** (the layout is the compiler's choice, unknown while tracing):
    a sharding constraint to a concrete reference's layout (a parameter closed over by the traced
    function); for a traced reference ``shard_alike`` ties the two values into one sharding
    group, so the partitioner gives the result the parameter's sharding (a local slice of a
    replicated result, no collective) and a fresh zero, which depends on nothing, is not left
    replicated or on one device. With one device
    there is no layout to choose and no group is emitted: JAX numbers sharding groups from a
    process-wide counter, so a group would make the program's text depend on what the process
    lowered before, and miss the persistent compilation cache in every other process.
  * **Manual axes** (inside ``shard_map``): values are per-device blocks already; unchanged.
  * **Concrete arrays** (no tracing): ``device_put`` to the reference's sharding when it differs.

  Args:
    reference: the parameter (a jax Array, tracer or ShapeDtypeStruct), or None.
    value: an array of the same shape.

  Returns:
    ``value`` placed like ``reference`` (``value`` itself when there is nothing to do).

  Example:
    >>> import jax.numpy as jnp
    >>> place_like(jnp.ones(3), jnp.zeros(3))
    Array([0., 0., 0.], dtype=float32)
  """
  if reference is None or value is None or np.shape(reference) != np.shape(value):
    return value
  if any(hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jax.dtypes.extended)
         for x in (reference, value)):
    return value  # typed PRNG keys: no layout of their own to follow
  if isinstance(value, jax.core.Tracer) or isinstance(reference, jax.core.Tracer):
    want: Any = getattr(jax.typeof(reference), "sharding", None)
    have = getattr(jax.typeof(value), "sharding", None)
    kinds = _axis_kinds(want)
    if "Manual" in kinds:
      return value
    if "Explicit" in kinds and have is not None and want.spec != have.spec:
      value = jax.sharding.reshard(value, want)
    if (not kinds or "Auto" in kinds) and isinstance(reference, jax.core.Tracer) and jax.device_count() > 1:
      value = shard_alike(reference, value)[1]
    elif ("Auto" in kinds and isinstance(getattr(reference, "sharding", None), jax.sharding.NamedSharding)
          and jax.device_count() > 1):
      # A concrete reference (a parameter closed over by the traced function) has a known layout
      # (its own sharding: its type leaves automatic axes out).
      value = jax.lax.with_sharding_constraint(value, reference.sharding)
    return value
  want = getattr(reference, "sharding", None)
  have = getattr(value, "sharding", None)
  if (isinstance(value, jax.Array) and isinstance(want, jax.sharding.Sharding) and have is not None
      and not have.is_equivalent_to(want, np.ndim(value))):
    value = jax.device_put(value, want)
  return value

def _named_sharding(x: Any) -> Any:
  """The NamedSharding of an array, tracer or ShapeDtypeStruct (in its type when traced), or None."""
  sharding = getattr(jax.typeof(x), "sharding", None) if isinstance(x, jax.core.Tracer) else getattr(
      x, "sharding", None)
  return sharding if isinstance(sharding, jax.sharding.NamedSharding) else None


def place_kept_axes(reference: Any, value: Any, kept: tuple[int, ...]) -> Any:
  """``value``, a statistic of ``reference`` over all axes but ``kept`` (shape
  ``reference.shape[kept]``), with the sharding of ``reference``'s ``kept`` axes.

  Adafactor's row and column factors, SM3's covers and PSGD-Kron's diagonal factors live on one or
  two axes of their parameter: each takes those axes' sharding (a factor of a ``P("data", "model")``
  matrix over its columns is ``P("model")``), the layout their updates (a sum over the other axes,
  all-reduced) produce, so init and every step agree. That layout is known under explicit mesh
  axes and for concrete arrays; under automatic axes the compiler chooses it and the optimizer
  keeps the incoming one from step to step (``place_like`` of the old value).

  Args:
    reference: the parameter.
    value: the statistic.
    kept: the axes of ``reference`` that ``value`` keeps, in order.

  Returns:
    ``value``, resharded or placed when its layout differs.

  Example:
    >>> import jax.numpy as jnp
    >>> place_kept_axes(jnp.ones((2, 3)), jnp.zeros(3), (1,)).shape
    (3,)
  """
  if tuple(kept) == tuple(range(np.ndim(reference))):
    return place_like(reference, value)
  sharding = _named_sharding(reference)
  if sharding is None or value is None:
    return value
  spec = tuple(sharding.spec) + (None,) * (np.ndim(reference) - len(tuple(sharding.spec)))
  kept_spec = jax.sharding.PartitionSpec(*[spec[a] for a in kept])
  if isinstance(value, jax.core.Tracer):
    if "Explicit" not in _axis_kinds(sharding):
      return value
    have = getattr(jax.typeof(value), "sharding", None)
    if have is None or have.spec != kept_spec:
      value = jax.sharding.reshard(value, jax.sharding.NamedSharding(sharding.mesh, kept_spec))
    return value
  target = jax.sharding.NamedSharding(sharding.mesh, kept_spec)
  if isinstance(sharding.mesh, jax.sharding.Mesh) and isinstance(value, jax.Array) and not (
      value.sharding.is_equivalent_to(target, value.ndim)):
    value = jax.device_put(value, target)
  return value


class Scalars:
  """A record of per-dtype scalars for a leaf function (``k.b1``, ``k.eps``, ...).

  ``leafwise`` turns concrete values into Python literals and traced ones into strong scalars of the
  real compute dtype the record was built for (see ``_scalar``).

  Example:
    >>> k = Scalars(b1=0.9, eps=1e-8)
    >>> k.b1
    0.9
  """

  def __init__(self, **values: Any):
    self.__dict__.update(values)

  def items(self):
    return self.__dict__.items()

  def __repr__(self) -> str:
    return f"Scalars({', '.join(sorted(self.__dict__))})"

  if TYPE_CHECKING:  # the fields are the keyword arguments given: any name, any value
    def __getattr__(self, name: str) -> Any: ...
    def __setattr__(self, name: str, value: Any) -> None: ...


def _scalar(value: Any, dtype: np.dtype) -> Any:
  """One value of a Scalars record, as Optax's arithmetic meets it: rounded where it meets an array.

  * A Python number stays that number, unrounded: a weakly typed literal folded into each leaf's
    arithmetic, so ``1 - k.b2`` is the float64 ``1 - 0.999`` rounded once where it meets the
    leaf's arrays (JAX's weak typing), as Optax's closure computes it.
  * A weakly typed traced value (a Python-number hyperparameter of a transformation passed to
    ``jit``: float32, or float64 under x64) stays weak and keeps its precision: under x64 the
    float64 arithmetic on it is the Python arithmetic, and it takes the leaf's dtype where it meets
    an array.
  * Anything else (a strong array, a bias correction computed in some dtype, an injected
    hyperparameter, a numpy number) becomes a strong scalar of ``dtype`` (its complex counterpart
    for a complex value, ``hyper``): the leaf's arrays are in ``dtype`` or its complex counterpart,
    so it takes their dtype without widening them.
  """
  if value is None or isinstance(value, bool):
    return value
  if isinstance(value, TreeScalar):
    value = value.value
  if isinstance(value, jax.Array) and value.dtype == jnp.bool_:
    return value  # a condition (a clipping trigger) stays one
  if type(value) in (int, float):
    return value
  if type(value) is complex:
    return value if value.imag != 0 else value.real
  if isinstance(value, jax.Array) and getattr(value, "weak_type", False) and np.ndim(value) == 0 and (
      jnp.issubdtype(value.dtype, jnp.floating) or jnp.issubdtype(value.dtype, jnp.integer)):
    return value
  value = hyper(value, dtype)
  return value.item() if isinstance(value, np.ndarray) and value.ndim == 0 else value


def _checked_record(record: Any, owner: str = "leafwise") -> Any:
  """``record`` (a ``Scalars``, dict or NamedTuple of hyperparameters), its values checked to be
  scalars."""
  items = record.items() if isinstance(record, (dict, Scalars)) else record._asdict().items()
  for name, value in items:
    if value is not None and not isinstance(value, (bool, int, float, complex)) and np.shape(value) != ():
      # A hyperparameter or a schedule's value that is an array would broadcast against every
      # parameter (per column, or fail on some shapes): a scalar is the only meaning it can have.
      raise ValueError(
          f"{owner}: the hyperparameter {name!r} has shape {np.shape(value)}; hyperparameters and "
          "the values schedules return must be scalars (an array is not broadcast per column).")
  return record


def _converted_record(record: Any, dtype: np.dtype, leaf: Any = None, sharing: int = 1) -> Scalars:
  """The ``Scalars`` of a checked record's values for a leaf (``leaf``, of real compute dtype
  ``dtype``) among ``sharing`` leaves of that dtype."""
  items = record.items() if isinstance(record, (dict, Scalars)) else record._asdict().items()
  return Scalars(**{name: _shared(value, dtype, leaf, sharing) if isinstance(value, TreeScalar)
                    else _scalar(value, dtype) for name, value in items})


class TreeScalar:
  """A scalar Optax computes once per tree inside a jitted function, and divides every leaf by:
  its bias correction ``1 - decay**count`` (``optax.tree.bias_correction`` is jitted).

  Called eagerly, that function is one XLA program over the whole tree, and XLA divides by the
  shared scalar where several leaves use it (a true division) but multiplies by its reciprocal
  where one leaf does, or where each leaf converts it to its own dtype. steadax's leaf functions
  run operation by operation when called eagerly, and XLA compiles each division by a scalar alone
  as a multiplication by its reciprocal; so leafwise gives a ``TreeScalar`` shared by several
  leaves of its dtype to each of them already broadcast to the leaf's shape (an elementwise true
  division), and as a scalar otherwise. Under tracing the compiled program has the sharing itself.
  """

  __slots__ = ("value",)

  def __init__(self, value: Any):
    self.value = value


def _shared(scalar: TreeScalar, dtype: np.dtype, leaf: Any, sharing: int) -> Any:
  value = scalar.value
  if (sharing > 1 and leaf is not None and isinstance(value, jax.Array)
      and not isinstance(value, jax.core.Tracer) and not isinstance(leaf, jax.core.Tracer)
      and np.dtype(value.dtype) == np.dtype(dtype) and np.ndim(value) == 0):
    return jnp.broadcast_to(value, np.shape(leaf))
  return _scalar(value, dtype)  # weakly typed (one_minus_pow): converted at each use, as Optax


def _as_weak_record(record: Any, dtype: np.dtype, owner: str = "leafwise") -> Scalars:
  return _converted_record(_checked_record(record, owner), dtype)


def _record(scalars: Any, dtype: np.dtype) -> Any:
  """The record of hyperparameters for ``dtype``: ``scalars`` itself, or what it builds for it."""
  return scalars(dtype) if callable(scalars) else scalars


def split_record(record: Any) -> tuple[dict, Callable[[dict], Any]]:
  """A ``Scalars`` record's traced values, and the function rebuilding the record from new values
  of them: how a record crosses a function boundary (the ``jit`` call of a leaf function traced
  once, a manual region of ``shard_map``). Its Python numbers stay in the function as constants;
  its traced values become the function's arguments. ``None`` (no record) splits into nothing and
  rebuilds as ``None``."""
  items = dict(record.items()) if record is not None else {}
  traced = {name: v for name, v in items.items() if isinstance(v, jax.Array)}
  return traced, lambda values: None if record is None else Scalars(**{**items, **values})


def _target(x_dtype: np.dtype, cdt: np.dtype) -> np.dtype:
  """The compute dtype an input of ``x_dtype`` is cast to: ``cdt``, or its real part."""
  if not jnp.issubdtype(x_dtype, jnp.inexact):
    return x_dtype
  return cdt if jnp.issubdtype(x_dtype, jnp.complexfloating) else real_dtype(cdt)


def leafwise(
    owner: str,
    fn: Callable[..., Any],
    updates: Any,
    *states: Any,
    params: Any = None,
    reads: tuple = (),
    scalars: Any = None,
) -> tuple[Any, ...]:
  """Run ``fn(k, g, *state_leaves, *read_leaves)`` leaf by leaf under the dtype policy.

  Args:
    owner: the transformation's name, for error messages.
    fn: the leaf function. It receives the scalars record ``k`` (None when ``scalars`` is None),
      the gradient leaf, one leaf of each state tree and of each read-only tree, all in the compute
      dtype; it returns the update leaf alone (no state trees) or ``(update, *new_state_leaves)``.
    updates: the incoming updates (None leaves stay None in every output).
    *states: state trees with the structure of ``updates``; each new leaf is written in the dtype
      of the leaf it replaces.
    params: the parameters, or None; they give the dtype of each update leaf.
    reads: read-only trees (parameters, a copy of the initial parameters, ...) passed after the
      state leaves.
    scalars: the hyperparameters the leaf function reads as ``k``: a ``Scalars`` record (or dict)
      of values, each cast to every real compute dtype present in the tree; or, for values
      computed from the dtype (bias corrections ``1 - b1**t`` in that dtype), a function
      ``scalars(dtype)`` returning one, called once per dtype.

  Returns:
    ``(updates, *new_states)``: trees with the structure of ``updates``.

  Example:
    >>> import jax.numpy as jnp
    >>> def leaf(k, g, m):
    ...   m = k.decay * m + g
    ...   return m, m
    >>> u, m = leafwise("trace", leaf, jnp.ones(2, jnp.bfloat16), jnp.zeros(2, jnp.float32),
    ...                 scalars=Scalars(decay=0.9))
    >>> u.dtype, m.dtype
    (dtype(bfloat16), dtype('float32'))
  """
  treedef = jax.tree_util.tree_structure(updates, is_leaf=lambda x: x is None)
  grads = treedef.flatten_up_to(updates)
  state_leaves = [treedef.flatten_up_to(s) for s in states]
  read_leaves = [treedef.flatten_up_to(r) for r in reads]
  param_leaves = treedef.flatten_up_to(params) if params is not None else [None] * len(grads)
  n_states = len(states)
  outs: list = [None] * len(grads)
  # Per dtype signature (one or two in a model): what the policy decides for a leaf (_Plan). Tracing
  # is Python per leaf; dtype predicates are microseconds each and would dominate it.
  plans: dict = {}
  records: dict = {}
  jobs = []
  # 1. Cast in (under the caller's promotion rules: strict in the tests).
  for i, g in enumerate(grads):
    if g is None:
      outs[i] = (None,) * (1 + n_states)
      continue
    leaf_states = [s[i] for s in state_leaves]
    p = param_leaves[i]
    if p is not None and getattr(p, "shape", None) not in (None, g.shape):
      # Before the leaf function: a gradient that broadcasts against its parameter is the caller's
      # mismatch, not a leaf function returning the wrong shape (``Transformation.update`` also
      # compares the state's accumulators, which only their declared roles say mirror the params).
      raise InputMismatchError(
          f"{owner}: at {_path(treedef, i)}, the updates (gradients) have shape {tuple(g.shape)}, "
          f"the params {tuple(p.shape)}.")
    out_dtype = p.dtype if p is not None and hasattr(p, "dtype") else g.dtype
    inputs = [g, *leaf_states, *[r[i] for r in read_leaves]]
    signature = (out_dtype, *[None if x is None else x.dtype for x in inputs])
    plan = plans.get(signature)
    if plan is None:
      plan = plans[signature] = _Plan(signature, n_states)
    if not plan.optimised:
      outs[i] = _not_optimised(owner, plan, g, leaf_states, lambda: _path(treedef, i))
      continue
    if scalars is not None and plan.rdt not in records:
      records[plan.rdt] = _checked_record(_record(scalars, plan.rdt), owner)
    jobs.append((i, plan, None, [None if x is None else cast(x, t) for x, t in zip(inputs, plan.targets)]))
  if scalars is not None:
    # Converted per leaf, as Optax converts a bias correction per leaf (``t / c.astype(t.dtype)``):
    # XLA rewrites ``m / c`` into ``m * (1 / c)`` only where each leaf has its own conversion, so
    # a conversion shared by the leaves rounds differently. Free where nothing is converted.
    sharing = collections.Counter(plan.rdt for _, plan, _, _ in jobs)
    jobs = [(i, plan, _converted_record(records[plan.rdt], plan.rdt, cast_in[0], sharing[plan.rdt]), cast_in)
            for i, plan, _, cast_in in jobs]
  # 2. The leaf functions. Inside them every array is already in the compute dtype (complex or its
  # real part) and every scalar is weak, so the only promotions left are real-with-complex ones
  # (``m / denom`` for a complex m): standard promotion allows them, and step 3 still rejects any
  # dtype the policy did not expect.
  results = []
  calls: dict = {}
  captures: Captures | None = None  # what ``fn`` captures, read at its first traced leaf
  with jax.numpy_dtype_promotion("standard"):
    for i, plan, k, cast_in in jobs:
      if isinstance(cast_in[0], jax.core.Tracer):
        # Traced: a leaf whose inputs have the types of an earlier leaf's reuses that leaf's trace
        # (a call of the traced function, see _reuse.py), so a model's repeated shapes are traced
        # once; unless ``fn`` could read per-leaf data from its closure (``Captures``).
        types = (plan, *[None if x is None else x.shape for x in cast_in])
        call = calls.get(types)
        if call is None:
          calls[types] = False  # met once: traced directly
          if captures is None:
            captures = Captures(fn, records=(Scalars,))
            results.append(fn(k, *cast_in))
            captures.called()
          else:
            results.append(fn(k, *cast_in))
          continue
        if call is False:
          if not (captures is not None and captures.reusable):
            results.append(fn(k, *cast_in))
            continue
          call = calls[types] = Once(fn, *split_record(k))
        results.append(call(cast_in))
      else:
        results.append(fn(k, *cast_in))
  # 3. Check and write: each output in its stored dtype.
  strict = is_strict()
  for (i, plan, _, cast_in), result in zip(jobs, results):
    if n_states == 0:
      result = (result,)
    elif not isinstance(result, tuple) or len(result) != 1 + n_states:
      raise ContractError(
          f"{owner}: the leaf function must return (update, *{n_states} state leaves), got "
          f"{type(result).__name__} of length {len(result) if isinstance(result, tuple) else 1}."
      )
    written = []
    for j, value in enumerate(result):
      shape = getattr(cast_in[j], "shape", ())
      aval = getattr(value, "aval", None)
      if aval is not None and aval.dtype == plan.targets[j] and aval.shape == shape:
        written.append(plan.write(j, value))
      else:
        value = _checked_output(owner, plan, j, value, shape, strict, lambda: _path(treedef, i))
        written.append(saturating_cast(value, plan.stores[j]))
    outs[i] = tuple(written)
  return tuple(treedef.unflatten([o[j] for o in outs]) for j in range(1 + n_states))


def _not_optimised(owner: str, plan: "_Plan", g: Any, leaf_states: list, path: Callable[[], str]) -> tuple:
  """The outputs for a gradient leaf that is not optimised: an integer, boolean or float0 one (a
  step counter or an index kept among the parameters, as Flax's TrainState allows) gets a zero
  update in the parameter's dtype and keeps its state, so the leaf never changes."""
  if plan.inexact_gradient:
    # Optax would run the maths, drift the parameter's integer state to float and truncate the
    # update when it is applied: a result with no meaning, so say so.
    raise TypeError(
        f"{owner}: the parameter at {path()} is {plan.stores[0].name} but its gradient is "
        f"{np.dtype(g.dtype).name}; integer and boolean parameters are not optimised. Give them "
        "float0 gradients (`jax.grad(..., allow_int=True)`) or integer ones (their update is "
        "zero), or mask them out with `masked`/`set_to_zero`.")
  store = plan.stores[0]
  return (jnp.zeros(np.shape(g), store if store != jax.dtypes.float0 else g.dtype), *leaf_states)


class _Plan:
  """What the dtype policy decides for the leaves of one dtype signature ``(parameter, gradient,
  *state, *reads)``: computed once per signature, not per leaf."""

  def __init__(self, signature: tuple, n_states: int):
    out_dtype, gradient = np.dtype(signature[0]), np.dtype(signature[1])
    dtypes = [None if d is None else np.dtype(d) for d in signature[1:]]
    inexact = bool(jnp.issubdtype(gradient, jnp.inexact))
    self.inexact_gradient = inexact and not jnp.issubdtype(out_dtype, jnp.inexact)
    self.optimised = inexact and not self.inexact_gradient
    # Written: the update in the parameter's dtype, each state leaf in its own.
    self.stores: list[Any] = [out_dtype, *dtypes[1:1 + n_states]]
    if not self.optimised:
      return
    cdt = compute_dtype(*[d for d in dtypes if d is not None])
    self.rdt = real_dtype(cdt)
    self.targets = [None if d is None else _target(d, cdt) for d in dtypes]
    self.bounds = [_saturation_bound(t, s) for t, s in zip(self.targets, self.stores)]

  def write(self, j: int, value: jax.Array) -> jax.Array:
    """Output ``j``, in its compute dtype, written in its stored dtype: ``saturating_cast`` with
    the bound found once per signature."""
    return cast(_saturate(value, self.bounds[j]), self.stores[j])


def _checked_output(owner: str, plan: _Plan, j: int, value: Any, shape: tuple, strict: bool,
                    path: Callable[[], str]) -> jax.Array:
  """Output ``j`` of a leaf function that is not a jax array of the compute dtype and the leaf's
  shape: raised on (complex for a real store, a wrong dtype in strict mode, a wrong shape) or
  brought to the compute dtype."""
  what = "update" if j == 0 else f"state leaf {j - 1}"
  value = value if isinstance(value, jax.Array) else jnp.asarray(value)
  store, want = plan.stores[j], plan.targets[j]
  if jnp.issubdtype(value.dtype, jnp.complexfloating) and not jnp.issubdtype(store, jnp.complexfloating):
    raise ContractError(
        f"{owner}: the {what} at {path()} is complex ({value.dtype}) but is stored as "
        f"{store.name}; the imaginary part would be lost.")
  if strict and value.dtype != want:
    raise ContractError(
        f"{owner}: the leaf function returned the {what} at {path()} in {value.dtype}, expected "
        f"the compute dtype {want} (round only when writing: leafwise casts to the stored dtype "
        "once).")
  if np.shape(value) != shape:
    raise ContractError(
        f"{owner}: the leaf function returned shape {np.shape(value)} at {path()}, expected "
        f"{shape}.")
  return value


def saturating_cast(value: jax.Array, store: Any) -> jax.Array:
  """``value`` written in ``store``, saturating: a finite value beyond ``store``'s range is written
  as its largest finite value instead of infinity.

  A float16 second moment of a 6e4 gradient (3.6e6) or a float16 momentum summing two of them
  exceeds float16's largest value (65504); written as infinity it is absorbing (every later step
  divides by it or adds to it) and the optimizer stops for good, or turns it into NaN. Saturated,
  the step is finite and the statistic recovers as the gradients shrink. Non-finite values (a NaN
  or infinite gradient) stay non-finite, so finite guards still see them; a store at least as wide
  as the compute dtype (float32 state, float32 maths) is a plain cast.
  """
  store = np.dtype(store)
  value = value if isinstance(value, jax.Array) else jnp.asarray(value)
  return cast(_saturate(value, _saturation_bound(np.dtype(value.dtype), store)), store)


def _saturate(value: jax.Array, largest: float | None) -> jax.Array:
  """``value`` with its finite entries clipped to ``[-largest, largest]`` (unchanged for None)."""
  if largest is None:
    return value
  return jnp.where(jnp.isfinite(value), jnp.clip(value, -largest, largest), value)


@functools.lru_cache(maxsize=None)
def _saturation_bound(value_dtype: np.dtype, store: np.dtype) -> float | None:
  """``store``'s largest finite value when ``value_dtype`` reaches beyond it (floats only), else None."""
  if (jnp.issubdtype(store, jnp.floating) and jnp.issubdtype(value_dtype, jnp.floating)
      and jnp.finfo(store).max < jnp.finfo(value_dtype).max):
    return float(jnp.finfo(store).max)
  return None


def _path(treedef: Any, index: int) -> str:
  dummy = treedef.unflatten(list(range(treedef.num_leaves)))
  paths = jax.tree_util.tree_flatten_with_path(dummy)[0]
  return key_path_str(paths[index][0]) if index < len(paths) else f"leaf {index}"


def tree_reduce(fn: Callable[..., jax.Array], dtype: Any, tree: Any, *rest: Any,
                scalars: Any = None, owner: str = "tree_reduce") -> jax.Array:
  """``Σ_leaves fn(k, *leaves)``: a whole-tree reduction summed in the statistics dtype.

  Each leaf's term is computed in the compute dtype of its inputs (their promotion, at least
  float32; real inputs get its real part), under standard promotion as in ``leafwise``, and added
  in ``dtype`` (the scalar-statistics dtype fixed at init), so a bfloat16 leaf neither lowers nor a
  float64 input widens the statistic.

  Args:
    fn: ``fn(k, *leaves) -> real scalar`` (``k``: the weak scalars of ``scalars``, or None).
    dtype: the dtype of the sum.
    tree: the first tree (gradients or updates); None leaves and non-floating leaves (integer
      parameters' gradients, float0) are skipped.
    *rest: trees with the structure and the leaf shapes of ``tree`` (a leaf of another shape
      raises an ``InputMismatchError`` naming its path before ``fn`` runs).
    scalars: as ``leafwise``'s: a ``Scalars`` record, or ``scalars(real compute dtype) ->
      Scalars`` built once per dtype.
    owner: the name errors give (the transformation's).

  Returns:
    A scalar of ``dtype`` (0 for a tree without leaves).

  Example:
    >>> import jax.numpy as jnp
    >>> tree_reduce(lambda k, a, b: jnp.sum(a * b), jnp.float32, [jnp.ones(2, jnp.bfloat16)],
    ...             [jnp.full(2, 3.0)])
    Array(6., dtype=float32)
  """
  dtype = np.dtype(dtype)
  treedef = jax.tree_util.tree_structure(tree, is_leaf=lambda x: x is None)
  columns = [treedef.flatten_up_to(tree)] + [treedef.flatten_up_to(r) for r in rest]
  records: dict = {}
  total = jnp.zeros([], dtype)
  for i, leaves in enumerate(zip(*columns)):
    if leaves[0] is None:
      continue
    if any(x is not None and getattr(x, "shape", None) not in (None, leaves[0].shape) for x in leaves[1:]):
      # A leaf that broadcasts against the first tree's would be summed over the broadcast shape.
      raise InputMismatchError(
          f"{owner}: at {_path(treedef, i)}, the trees summed have shapes "
          f"{', '.join(str(tuple(np.shape(x))) for x in leaves)}.")
    if not jnp.issubdtype(leaves[0].dtype, jnp.inexact):
      # As in leafwise: an integer, boolean or float0 leaf (an integer parameter) is not
      # optimised, so it adds nothing to a statistic of the optimisation.
      continue
    cdt = compute_dtype(*[x.dtype for x in leaves])
    rdt = real_dtype(cdt)
    if scalars is not None and rdt not in records:
      records[rdt] = _as_weak_record(_record(scalars, rdt), rdt)
    # The same cast in as leafwise: the compute dtype, or its real part for a real input (an
    # integer parameter beside a floating gradient included).
    cast_in = [cast(x, cdt if jnp.issubdtype(x.dtype, jnp.complexfloating) else rdt) for x in leaves]
    with jax.numpy_dtype_promotion("standard"):
      term = fn(records.get(rdt), *cast_in)
    # The term is a real scalar in the leaf's real compute dtype; the sum is kept in ``dtype``.
    total = total + jnp.real(term).astype(dtype)
  return total
