"""The model structures of the shape grid (``cases/grid.py``) and the user's steps over them.

A *cell* of the grid is a structure and two numbers: ``depth`` (leaves for ``elementwise``, layers
for the MLPs, blocks for ``transformer``) and ``width`` (a leaf's elements for ``elementwise``, a
layer's width or ``d_model`` otherwise). The structures:

* ``elementwise``: ``depth`` float32 leaves of ``width / 2 .. 2 * width`` elements (seeded), each
  in one elementwise layer reading its own slice of the batch (``cases/train.py``'s model): no two
  leaves share a kernel, per leaf or not;
* ``mlp``: ``depth`` dense layers ``tanh(h @ w + b)`` of ``width x width``, plain JAX dicts;
* ``transformer``: ``depth`` pre-norm blocks (layer norms, attention with ``width // 16`` heads,
  a GELU MLP of ``4 * width``), 16 leaves each, plain JAX dicts;
* ``nnx``: the ``mlp`` as a Flax NNX module, trained through ``nnx.Optimizer`` under ``nnx.jit``;
* ``equinox``: ``eqx.nn.MLP`` of ``depth`` layers, its arrays partitioned out
  (``eqx.partition(model, eqx.is_inexact_array)``), under ``eqx.filter_jit``.

Each column of a cell (``optax``, ``steadax`` per leaf, ``steadax fused``, ``steadax flat params``)
gets two steps: the whole training step (loss, gradient, update, apply) and the update step
(gradients passed in: update and apply). ``build`` returns them as ``Runner`` objects holding their
own arguments (params and state donated where the framework donates).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import steadax

from . import harness

STRUCTURES = ("elementwise", "mlp", "transformer", "nnx", "equinox")
# The paths as a user gets them, then without their limit on leaves of one shape (``max_same_shape=
# None``: every small leaf in a buffer), measured where that limit changes the layout.
FUSED_ALL = "steadax fused, no shape limit"
FLAT_ALL = "steadax flat params, no shape limit"
COLUMNS = ("optax", "steadax", harness.FUSED, harness.FLAT, FUSED_ALL, FLAT_ALL)
# Each library's step once more, compiled and timed as a column of its own: the noise of the
# figures (which buffers and place in the process an instance gets moves its time too).
OPTAX_AGAIN = "optax again"
STEADAX_AGAIN = "steadax again"
FLAT_COLUMNS = (harness.FLAT, FLAT_ALL)


@dataclasses.dataclass(frozen=True)
class Cell:
  """One point of the grid; ``depth`` and ``width`` mean what the structure makes of them."""

  structure: str
  depth: int
  width: int

  @property
  def name(self) -> str:
    return f"{self.structure} {self.depth}x{self.width}"


# -- the structures --------------------------------------------------------------------------------

def _elementwise_loss(params: dict, batch: jax.Array) -> jax.Array:
  """One elementwise layer per leaf on its slice of ``batch`` (``cases/train.py``'s model)."""
  leaves = [params[key] for key in sorted(params)]
  offsets = np.cumsum([leaf.size for leaf in leaves])[:-1].tolist()
  return sum(jnp.sum(jnp.tanh(leaf * x)) for leaf, x in zip(leaves, jnp.split(batch, offsets)))


def _mlp_params(depth: int, width: int) -> dict:
  return {f"layer{i:04d}": {"b": harness.filled((width,), 0.0, jnp.float32),
                            "w": harness.filled((width, width), 1.0 / width, jnp.float32)}
          for i in range(depth)}


def _row(v: jax.Array, ndim: int) -> jax.Array:
  """A vector broadcast explicitly against ``ndim``-dimensional activations (the tests run with
  rank promotion "raise")."""
  return v.reshape((1,) * (ndim - 1) + v.shape)


def _mlp_loss(params: dict, x: jax.Array) -> jax.Array:
  h = x
  for key in sorted(params):
    h = jnp.tanh(h @ params[key]["w"] + _row(params[key]["b"], h.ndim))
  return jnp.mean(h ** 2)


def _dense(width_in: int, width_out: int) -> dict:
  return {"b": harness.filled((width_out,), 0.0, jnp.float32),
          "w": harness.filled((width_in, width_out), 1.0 / width_in, jnp.float32)}


def _norm(width: int) -> dict:
  return {"bias": harness.filled((width,), 0.0, jnp.float32),
          "scale": harness.filled((width,), 1.0, jnp.float32)}


def _transformer_params(depth: int, width: int) -> dict:
  """16 leaves a block: two norms, four attention projections and two MLP layers, with biases."""
  return {f"block{i:04d}": {
      "ln1": _norm(width), "q": _dense(width, width), "k": _dense(width, width),
      "v": _dense(width, width), "o": _dense(width, width), "ln2": _norm(width),
      "up": _dense(width, 4 * width), "down": _dense(4 * width, width)} for i in range(depth)}


def _layer_norm(p: dict, h: jax.Array) -> jax.Array:
  mean = jnp.mean(h, axis=-1, keepdims=True)
  var = jnp.mean((h - mean) ** 2, axis=-1, keepdims=True)
  return (h - mean) * jax.lax.rsqrt(var + 1e-5) * _row(p["scale"], h.ndim) + _row(p["bias"], h.ndim)


def _transformer_loss(params: dict, x: jax.Array) -> jax.Array:
  batch, seq, width = x.shape
  heads = max(1, width // 16)
  h = x
  for key in sorted(params):
    p = params[key]
    a = _layer_norm(p["ln1"], h)
    q, k, v = ((a @ p[n]["w"] + _row(p[n]["b"], 3)).reshape(batch, seq, heads, width // heads)
               for n in ("q", "k", "v"))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(width // heads)
    attended = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
    h = h + attended.reshape(batch, seq, width) @ p["o"]["w"] + _row(p["o"]["b"], 3)
    m = _layer_norm(p["ln2"], h)
    up = jax.nn.gelu(m @ p["up"]["w"] + _row(p["up"]["b"], 3))
    h = h + up @ p["down"]["w"] + _row(p["down"]["b"], 3)
  return jnp.mean(h ** 2)


@dataclasses.dataclass
class Model:
  """A structure made concrete: fresh parameters (or an NNX module), the loss and a batch.

  ``loss(params, batch)`` for the JAX and Equinox structures (``params`` as ``make_params`` gives
  them); ``loss(model, batch)`` for NNX.
  """

  framework: str                # "jax", "equinox" or "nnx"
  make_params: Callable[[], Any]
  loss: Callable[[Any, Any], jax.Array]
  batch: Any


def model(cell: Cell) -> Model:
  s, d, w = cell.structure, cell.depth, cell.width
  if s == "elementwise":
    sizes = _elementwise_sizes(d, w)
    return Model("jax", lambda: {f"p{i:04d}": harness.filled((n,), 1.0, jnp.float32)
                                 for i, n in enumerate(sizes)},
                 _elementwise_loss, harness.filled((sum(sizes),), 0.5, jnp.float32))
  if s == "mlp":
    return Model("jax", lambda: _mlp_params(d, w), _mlp_loss, harness.filled((8, w), 0.5, jnp.float32))
  if s == "transformer":
    return Model("jax", lambda: _transformer_params(d, w), _transformer_loss,
                 harness.filled((2, 8, w), 0.5, jnp.float32))
  if s == "equinox":
    import equinox as eqx  # the bench extra; only this structure needs it

    def make_model():
      return eqx.nn.MLP(w, w, w, d - 1, activation=jnp.tanh, key=jax.random.PRNGKey(0))

    static = eqx.partition(make_model(), eqx.is_inexact_array)[1]

    def eqx_loss(params, x):
      return jnp.mean(jax.vmap(eqx.combine(params, static))(x) ** 2)

    return Model("equinox", lambda: eqx.partition(make_model(), eqx.is_inexact_array)[0],
                 eqx_loss, harness.filled((8, w), 0.5, jnp.float32))
  if s == "nnx":
    from flax import nnx  # the bench extra; only this structure needs it

    class MLP(nnx.Module):
      def __init__(self, rngs):
        for i in range(d):
          setattr(self, f"layer{i:04d}", nnx.Linear(w, w, rngs=rngs))

      def __call__(self, x):
        for i in range(d):
          x = jnp.tanh(getattr(self, f"layer{i:04d}")(x))
        return x

    return Model("nnx", lambda: MLP(nnx.Rngs(0)), lambda m, x: jnp.mean(m(x) ** 2),
                 harness.filled((8, w), 0.5, jnp.float32))
  raise ValueError(f"unknown structure {s!r}; choose from {', '.join(STRUCTURES)}")


def _elementwise_sizes(depth: int, width: int) -> list[int]:
  """``depth`` sizes drawn from ``width / 2 .. 2 * width`` (seeded): leaves of many shapes, as
  biases, norms and small layers of different widths (a size repeats only when there are more
  leaves than sizes to draw from)."""
  return [int(n) for n in np.random.default_rng(0).integers(max(1, width // 2), 2 * width, depth)]


def leaf_shapes(cell: Cell) -> list[tuple]:
  """The parameters' leaf shapes, without building them (for the tables)."""
  s, d, w = cell.structure, cell.depth, cell.width
  if s == "elementwise":
    return [(n,) for n in _elementwise_sizes(d, w)]
  if s in ("mlp", "nnx", "equinox"):
    return [(w, w), (w,)] * d
  return [(w,)] * 4 * d + [(w, w), (w,)] * 4 * d + [(w, 4 * w), (4 * w,), (4 * w, w), (w,)] * d


# -- the steps -------------------------------------------------------------------------------------

class Runner:
  """One compiled step with its own arguments: ``run(n)`` runs n steps, returns (wall, CPU) s/step."""

  def __init__(self, step: Callable[[], None], sync: Callable[[], Any]):
    self.step = step
    self.sync = sync

  def run(self, steps: int) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
      self.step()
    self.sync()
    return (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps


def transformation(label: str, optimizer: Callable[[Any], Any]) -> tuple[Any, Any]:
  """(library for apply_updates, transformation) of a column; ``optimizer(lib)`` builds it."""
  import optax  # benchmarks only: the grid compares against it

  if label in ("optax", OPTAX_AGAIN):
    return optax, optimizer(optax)
  tx = optimizer(steadax)  # "steadax" and STEADAX_AGAIN
  if label == harness.FUSED:
    return steadax, steadax.fuse(tx)
  if label == FUSED_ALL:
    return steadax, steadax.fuse(tx, max_same_shape=None)
  return steadax, tx


def flatten(label: str, params: Any) -> Any:
  """The parameters as the column holds them: as they are, or ``steadax.flat_params``."""
  if label == harness.FLAT:
    return steadax.flat_params(params)
  if label == FLAT_ALL:
    return steadax.flat_params(params, max_same_shape=None)
  return params


def available(structure: str, label: str) -> bool:
  """NNX's ``nnx.Optimizer`` holds the model's variables leaf by leaf: no flat parameters there."""
  return not (structure == "nnx" and label in FLAT_COLUMNS)


def _tree_steps(m: Model, lib: Any, tx: Any, label: str, kind: str) -> tuple[Callable, tuple]:
  """The jitted step and its arguments for the JAX and Equinox structures."""
  params = flatten(label, m.make_params())
  flat = isinstance(params, steadax.FlatParams)
  state = harness.init_state(tx, params)
  if kind == "update":
    return harness.step_fn(lib, tx), (params, state, harness.gradients_like(params))

  def step(params, state, batch):
    grads = jax.grad(lambda p: m.loss(p.tree() if flat else p, batch))(params)
    updates, state = tx.update(grads, state, params)
    return lib.apply_updates(params, updates), state

  if m.framework == "equinox":
    import equinox as eqx

    return _EquinoxStep(eqx.filter_jit(lambda batch, params, state: step(params, state, batch),
                                       donate="all-except-first")), (params, state, m.batch)
  return jax.jit(step, donate_argnums=(0, 1)), (params, state, m.batch)


class _EquinoxStep:
  """``eqx.filter_jit`` with the batch first (Equinox donates every argument but the first, as a
  user's loop would), called and lowered in the order of the other structures' steps."""

  def __init__(self, jitted: Any):
    self.jitted = jitted

  def __call__(self, params, state, batch):
    return self.jitted(batch, params, state)

  def lower(self, params, state, batch):
    return self.jitted.lower(batch, params, state)


def _nnx_steps(m: Model, tx: Any, kind: str) -> tuple[Callable, tuple]:
  from flax import nnx

  module = m.make_params()
  optimizer = nnx.Optimizer(module, tx, wrt=nnx.Param)
  if kind == "update":
    grads = jax.tree_util.tree_map(lambda p: jnp.full_like(p, 1e-2), nnx.state(module, nnx.Param))

    @nnx.jit
    def update(module, optimizer, grads):
      optimizer.update(module, grads)

    return update, (module, optimizer, grads)

  @nnx.jit
  def train_step(module, optimizer, batch):
    grads = nnx.grad(m.loss)(module, batch)
    optimizer.update(module, grads)

  return train_step, (module, optimizer, m.batch)


def steps(cell: Cell, label: str, kind: str, optimizer: Callable[[Any], Any]
          ) -> tuple[Callable, tuple]:
  """``(fn, args)`` of one column's ``kind`` step ("train" or "update"), not yet compiled.

  JAX and Equinox: ``fn(params, state, x) -> (params, state)``; NNX: ``fn(module, optimizer, x)``
  updates the module in place.
  """
  m = model(cell)
  lib, tx = transformation(label, optimizer)
  if m.framework == "nnx":
    return _nnx_steps(m, tx, kind)
  return _tree_steps(m, lib, tx, label, kind)


def _nnx_sync(module: Any) -> Any:
  from flax import nnx

  return jax.block_until_ready(nnx.state(module))


def runner(cell: Cell, fn: Callable, args: tuple) -> Runner:
  """A ``Runner`` over ``fn`` (already called once, or about to be) and its arguments."""
  if model(cell).framework == "nnx":
    def nnx_step():
      fn(*args)

    return Runner(nnx_step, lambda: _nnx_sync(args[0]))
  box = list(args)

  def tree_step():
    box[0], box[1] = fn(box[0], box[1], box[2])

  return Runner(tree_step, lambda: jax.block_until_ready(box[:2]))


def peak_bytes(cell: Cell, label: str, optimizer: Callable[[Any], Any]) -> int | None:
  """XLA's peak memory of the compiled training step (params, batch, state, temporaries).

  Compiled once more for the analysis (the timed first call runs before it); Equinox's and NNX's
  jits lower like ``jax.jit``'s.
  """
  fn, args = steps(cell, label, "train", optimizer)
  lowered = fn.lower(*args)
  # Equinox's Lowered wraps JAX's (its own compile returns a callable, not the analysis).
  stats = getattr(lowered, "lowered", lowered).compile().memory_analysis()
  return None if stats is None else int(stats.peak_memory_in_bytes)


def first_result(cell: Cell, fn: Callable, args: tuple) -> Any:
  """Calls a step once and waits for it (its first call: trace, compile, run); its outputs (None
  for NNX, whose step updates the module in place)."""
  out = fn(*args)
  if out is None:
    _nnx_sync(args[0])
    return None
  return jax.block_until_ready(out)


def n_leaves(cell: Cell) -> int:
  return len(leaf_shapes(cell))


def n_parameters(cell: Cell) -> int:
  return int(sum(np.prod(s) for s in leaf_shapes(cell)))


def largest_leaf(cell: Cell) -> int:
  return int(max(np.prod(s) for s in leaf_shapes(cell)))
