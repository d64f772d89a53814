"""The integration matrix: every registry entry inside the training loops of the libraries that use
Optax, each giving the plain ``jax.jit`` loop's parameters after two jitted steps.

The clients, for each entry of tests/conformance/registry.py (with its extra arguments and problem):
- ``nnx.Optimizer(model, tx, wrt=nnx.Param)`` updated by an ``nnx.jit`` step called twice (NNX
  writes the new state back into the optimizer's Variables between the calls: what broke SOAP,
  Shampoo, PSGD, SM3 and 8-bit Adam in issue 21), and the same with a ``wrt`` filter that leaves a
  Param out (a ``_FrozenParam``, which must stay unchanged);
- a Linen ``TrainState`` (params from ``Module.init``, frozen) and ``apply_gradients`` under
  ``jax.jit`` (an explicit ``tx.update`` with the extra arguments where the entry needs them:
  ``apply_gradients`` passes none);
- an Equinox Module under ``eqx.filter_jit`` with ``eqx.partition`` / ``eqx.apply_updates``, the
  transformation a field of a Module (as Optimistix's OptaxMinimiser holds it);
- ``steadax.flat_params`` parameters and ``steadax.fuse(tx)`` (with the kernel kept out of the
  buffers) for the entries that accept them.

The model is the entry's problem (its leaves and loss) plus a 64x64 linear layer: the matrix
optimizers run their matrix paths on the kernel, and its 4,096 elements reach ``adam8bit``'s default
``min_8bit_size``, so its blockwise quantized path runs. Every client computes the same loss of the
same values, read through its own containers: a difference is the client's handling of the
transformation and its state.

Time (XLA compilation is the cost): one compiled program per entry. The reference and every client
run inside one ``jax.jit`` (compiled with the suite's cheap flags, tests/compile_flags.py), each
client in its own ``nnx.jit`` / ``jax.jit`` / ``eqx.filter_jit`` step called twice; they start from
the same traced arrays, so XLA's common-subexpression pass compiles the arithmetic they share once.
One program also keeps the comparison exact: Shampoo's inverse roots of singular statistics and
SOAP's second step (Adam's first, on rotated gradients) turn the rounding differences between two
compilations into differences of 1e-4..1e-1 in the parameters. The step functions inside see what they see at the top
level (the NNX write-back between the calls is the same Python code; run there, the NNX clients
raise issue 21's errors without its fix). Each step is traced once for its two calls (the state it
returns has the type of the one it was given), except where NNX rebuilds the containers below a
parameter on its first write-back (then twice, as with Optax's sm3, and stable after that).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import core as flax_core
from flax import linen, nnx
from flax.training import train_state

import steadax
from steadax._fusion._elementwise import fusion_blocker
from tests.conformance.registry import Entry, all_entries

pytestmark = pytest.mark.x32_only  # the clients' handling of containers does not depend on x64

WIDTH = 64  # 64 * 64 = adam8bit's default min_8bit_size: the kernel is quantized blockwise
BATCH = 4
STEPS = 2

_RNG = np.random.default_rng(0)
_KERNEL = (_RNG.normal(size=(WIDTH, WIDTH)) / WIDTH).astype(np.float32)
_BIAS = (0.1 * _RNG.normal(size=(WIDTH,))).astype(np.float32)
_X = _RNG.normal(size=(BATCH, WIDTH)).astype(np.float32)
_TARGET = (0.5 * _RNG.normal(size=(BATCH, WIDTH))).astype(np.float32)
# An input scaling: a constant of the loss, and the Param the filtered nnx.Optimizer leaves out.
_SCALE = np.linspace(0.5, 1.5, WIDTH, dtype=np.float32)


# --------------------------------------------------------------------------------------------------
# The model, in one canonical tree: ``{**problem leaves, "linear": {"bias", "kernel"}}``.


def _initial(entry: Entry) -> dict:
  tree = dict(entry.problem.init())
  assert "linear" not in tree
  tree["linear"] = {"bias": jnp.asarray(_BIAS), "kernel": jnp.asarray(_KERNEL)}
  return tree


def _loss(entry: Entry, tree: dict, scale: Any = None) -> jax.Array:
  """The entry's problem plus a least-squares fit of the linear layer, in float32."""
  problem = {k: v for k, v in tree.items() if k != "linear"}
  scale = jnp.asarray(_SCALE) if scale is None else scale
  y = (jnp.asarray(_X) * scale[None]) @ tree["linear"]["kernel"] + tree["linear"]["bias"][None]
  return entry.problem.loss(problem) + 0.5 * jnp.mean((y - jnp.asarray(_TARGET)) ** 2)


def _from_mapping(params) -> dict:
  """The canonical tree of a mapping with the canonical keys (dict, FrozenDict, nnx.State)."""
  return {k: ({"bias": v["bias"], "kernel": v["kernel"]} if k == "linear" else v) for k, v in params.items()}


def _extras(entry: Entry, loss_fn: Callable, params, grads) -> dict:
  return entry.extra_args(loss_fn, params, grads) if entry.extra_args is not None else {}


def _accepts_flat_params(tx) -> bool:
  return fusion_blocker(tx, flat_params=True) is None


def _accepts_fuse(tx) -> bool:
  # A fused transformation is fused already.
  return fusion_blocker(tx) is None and not isinstance(tx, steadax.Fused)


# A mask or a partition takes FlatParams flattened with its own groups (``flat_params(params,
# groups=...)``), which a generic client cannot know: it refuses plain ones at init, saying so.
_NEEDS_GROUPS = "flat_params(params, groups=...)"


# --------------------------------------------------------------------------------------------------
# Flax NNX.


class _FrozenParam(nnx.Param):
  """A Param that the filtered optimizer leaves out (as a LoRA setup freezes the base weights)."""


_NNX_FILTER = nnx.All(nnx.Param, nnx.Not(_FrozenParam))


class _NnxModel(nnx.Module):

  def __init__(self, initial: dict, frozen: bool):
    self.keys = tuple(k for k in initial if k != "linear")
    for key in self.keys:
      setattr(self, key, nnx.Param(initial[key]))
    linear = initial["linear"]
    self.linear = nnx.Linear(WIDTH, WIDTH, kernel_init=lambda *_: linear["kernel"],
                             bias_init=lambda *_: linear["bias"], rngs=nnx.Rngs(0))
    self.scale = _FrozenParam(jnp.asarray(_SCALE)) if frozen else None

  def tree(self) -> dict:
    tree = {k: getattr(self, k)[...] for k in self.keys}
    tree["linear"] = {"bias": self.linear.bias[...], "kernel": self.linear.kernel[...]}
    return tree

  def scale_value(self):
    return None if self.scale is None else self.scale[...]


# --------------------------------------------------------------------------------------------------
# Linen and Equinox.


class _LinenModel(linen.Module):
  initial: Callable[[], dict]  # the initial values, read by the initializers

  @linen.compact
  def __call__(self, x):
    values = self.initial()
    for key in values:
      if key != "linear":
        self.param(key, lambda _, key=key: values[key])
    return linen.Dense(WIDTH, name="linear", kernel_init=lambda *_: values["linear"]["kernel"],
                       bias_init=lambda *_: values["linear"]["bias"])(x)


class _EqxLinear(eqx.Module):
  bias: jax.Array
  kernel: jax.Array


@functools.lru_cache(maxsize=None)
def _eqx_model(names: tuple[str, ...]) -> type:
  """An Equinox Module with a field per problem leaf and a ``linear`` Module.

  Fields are declared in sorted order, so the leaves come in the canonical dict's order, with its
  names: entries that draw random numbers leaf by leaf (noisy_sgd, psgd_kron, Sophia's estimator,
  stochastic rounding) or label leaves by path (groups) see the same tree as the reference.
  """
  fields = {name: (_EqxLinear if name == "linear" else jax.Array) for name in sorted(names + ("linear",))}
  return type("_EqxModel", (eqx.Module,), {"__annotations__": fields, "__module__": __name__})


def _eqx_tree(model) -> dict:
  tree = {name: getattr(model, name) for name in model.__dataclass_fields__ if name != "linear"}
  tree["linear"] = {"bias": model.linear.bias, "kernel": model.linear.kernel}
  return tree


class _Minimiser(eqx.Module):
  """The transformation as a field of a Module, as Optimistix's OptaxMinimiser holds it."""

  optim: Any


# --------------------------------------------------------------------------------------------------
# The program: the reference and every client, each in its own jitted step called twice.


def _clients_program(entry: Entry, traces: list, errors: dict, retraced: set) -> Callable:
  """``program(initial) -> {client: {"params": final canonical tree, ...}}``, to run under one
  jax.jit. A client that raises is left out and its error recorded in ``errors``; ``retraced``
  gets the NNX clients whose state NNX gave back in other containers after the first step."""
  tx = entry.factory()
  flat_ok, fuse_ok = _accepts_flat_params(tx), _accepts_fuse(tx)
  loss = functools.partial(_loss, entry)

  def plain_step(name, tx, loss_of):
    @jax.jit
    def step(params, state):
      traces.append(name)
      grads = jax.grad(loss_of)(params)
      updates, state = tx.update(grads, state, params, **_extras(entry, loss_of, params, grads))
      return steadax.apply_updates(params, updates), state

    return step

  def plain_loop(name, tx, params, loss_of):
    step, state = plain_step(name, tx, loss_of), tx.init(params)
    for _ in range(STEPS):
      params, state = step(params, state)
    return params

  @jax.jit
  def linen_step(state):
    traces.append("linen")
    loss_of = lambda p: loss(_from_mapping(p))
    grads = jax.grad(loss_of)(state.params)
    if entry.extra_args is None:
      return state.apply_gradients(grads=grads)
    # apply_gradients passes no extra arguments to update: Flax's users call the transformation.
    updates, opt_state = state.tx.update(grads, state.opt_state, state.params,
                                         **_extras(entry, loss_of, state.params, grads))
    return state.replace(step=state.step + 1, params=steadax.apply_updates(state.params, updates),
                         opt_state=opt_state)

  @eqx.filter_jit
  def eqx_step(minimiser, model, state):
    traces.append("equinox")
    params, static = eqx.partition(model, eqx.is_inexact_array)
    loss_of = lambda p: loss(_eqx_tree(eqx.combine(p, static)))
    grads = eqx.filter_grad(lambda m: loss(_eqx_tree(m)))(model)
    updates, state = minimiser.optim.update(grads, state, params, **_extras(entry, loss_of, params, grads))
    return eqx.apply_updates(model, updates), state

  def nnx_client(name, wrt, frozen):
    @nnx.jit
    def step(model, optimizer):
      traces.append(name)
      grads = nnx.grad(lambda m: loss(m.tree(), m.scale_value()), argnums=nnx.DiffState(0, wrt))(model)
      loss_of = lambda p, scale=model.scale_value(): loss(_from_mapping(p), scale)
      params = nnx.as_pure(nnx.state(model, wrt))
      optimizer.update(model, grads, **_extras(entry, loss_of, params, nnx.as_pure(grads)))

    def run(initial):
      model = _NnxModel(initial, frozen)
      optimizer = nnx.Optimizer(model, entry.factory(), wrt=wrt)
      structures = [jax.tree_util.tree_structure(nnx.as_pure(nnx.state(optimizer)))]
      for _ in range(STEPS):
        step(model, optimizer)  # NNX writes the new state back into the optimizer's Variables
        structures.append(jax.tree_util.tree_structure(nnx.as_pure(nnx.state(optimizer))))
      # NNX rebuilds a tuple or dict below a parameter as an nnx.State on its first write-back (so
      # the second call is traced again, with Optax's sm3 too); after that it must not change.
      if structures[-1] != structures[-2]:
        raise AssertionError(f"the optimizer's state changed structure at step {STEPS}:\n"
                             f"{structures[-2]}\n{structures[-1]}")
      if structures[1] != structures[0]:
        retraced.add(name)
      out = {"params": model.tree()}
      if frozen:
        out["frozen"] = model.scale[...]
      return out

    return run

  def linen(initial):
    module = _LinenModel(lambda: initial)
    params = flax_core.freeze(module.init(jax.random.key(0), jnp.asarray(_X))["params"])
    state = train_state.TrainState.create(apply_fn=module.apply, params=params, tx=entry.factory())
    for _ in range(STEPS):
      state = linen_step(state)
    return _from_mapping(state.params)

  def equinox(initial):
    problem = {k: v for k, v in initial.items() if k != "linear"}
    model = _eqx_model(tuple(problem))(linear=_EqxLinear(**initial["linear"]), **problem)
    minimiser = _Minimiser(entry.factory())
    state = minimiser.optim.init(eqx.filter(model, eqx.is_inexact_array))
    for _ in range(STEPS):
      model, state = eqx_step(minimiser, model, state)
    return _eqx_tree(model)

  clients = {
      "reference": lambda initial: {"params": plain_loop("reference", tx, initial, loss)},
      "nnx": nnx_client("nnx", nnx.Param, frozen=False),
      "nnx_filtered": nnx_client("nnx_filtered", _NNX_FILTER, frozen=True),
      "linen": lambda initial: {"params": linen(initial)},
      "equinox": lambda initial: {"params": equinox(initial)},
  }
  if flat_ok:
    clients["flat_params"] = lambda initial: {"params": plain_loop(
        "flat_params", entry.factory(), steadax.flat_params(initial), lambda f: loss(f.tree())).tree()}
  if fuse_ok:
    # The kernel (4,096 elements) stays a leaf beside the buffer of the small leaves.
    clients["fuse"] = lambda initial: {"params": plain_loop(
        "fuse", steadax.fuse(entry.factory(), max_leaf_size=1024), initial, loss)}

  def program(initial):
    # A client that fails while tracing is reported (in ``errors``) and the others still run.
    out = {}
    for name, client in clients.items():
      try:
        out[name] = client(initial)
      except ValueError as e:
        if not (name == "flat_params" and _NEEDS_GROUPS in str(e)):
          errors[name] = f"{type(e).__name__}: {e}"
      except Exception as e:  # noqa: BLE001 - reported by the test
        errors[name] = f"{type(e).__name__}: {e}"
    return out

  return program


def _run_clients(entry: Entry, traces: list, errors: dict, retraced: set) -> dict:
  program = jax.jit(_clients_program(entry, traces, errors, retraced))
  return program(_initial(entry))


# --------------------------------------------------------------------------------------------------

ENTRIES = all_entries()


def _assert_close(expected, got, what: str):
  assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(expected), what
  for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(expected)[0], jax.tree_util.tree_leaves(got)):
    assert b.dtype == a.dtype and b.shape == a.shape, f"{what}{jax.tree_util.keystr(path)}"
    # The same maths on the same values; whole-tree sums (norms, inner products) may add the leaves
    # in another order (Equinox orders them by field, flat_params concatenates them).
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6,
                               err_msg=f"{what}{jax.tree_util.keystr(path)}")


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_entry_in_every_client_gives_the_plain_loop_parameters(entry):
  traces: list = []
  errors: dict = {}
  retraced: set = set()
  results = _run_clients(entry, traces, errors, retraced)
  failures = [f"{client}: {error}" for client, error in errors.items()]
  if "reference" in results:
    expected = results.pop("reference")["params"]
    for client, got in sorted(results.items()):
      try:
        _assert_close(expected, got["params"], client)
        if "frozen" in got:
          np.testing.assert_array_equal(got["frozen"], _SCALE, err_msg="the Param the wrt filter leaves out")
      except AssertionError as e:
        failures.append(f"{client}: {e}")
  for client in sorted(set(traces)):
    allowed = 2 if client in retraced else 1
    if traces.count(client) != allowed:
      failures.append(f"{client}: the step was traced {traces.count(client)} times for {STEPS} calls")
  assert not failures, "\n".join(failures)
