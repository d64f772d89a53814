"""Every conformance registry entry on a 4x2 mesh of 8 virtual CPU devices (run as a script by
test_registry_sharding.py; prints ``RESULT {json}``).

The parameters are tiny and their shapes distinct (a state leaf shaped like a parameter is that
parameter's), sharded over one axis, the other, both, or not at all. For each mesh kind:

* **Explicit axes** (``jax.make_mesh``'s default): the sharding is part of every traced type, so
  ``jax.eval_shape`` of ``init`` and of one update gives exactly what the jitted functions return;
  one compiled program runs every entry's ``init`` from abstract parameters with ``out_shardings``
  taken from those types, and its arrays are checked too.
* **Automatic axes** (the compiler places values): every ``init`` in one program lowered from
  abstract parameters (ShapeDtypeStructs with shardings, no data), whose output layouts are
  checked before it runs on the sharded parameters; then every update on the states it returned
  (their layouts are the update programs' input shardings, as in a training loop), in two
  programs of 12 entries each: the elementwise entries, whose compiled HLO must hold no
  all-gather, and the others.

Checked: every state leaf shaped like a parameter, and every update, carries that parameter's
sharding; scalars are replicated; under explicit axes every state leaf keeps its sharding through
the update (a different one would be a type error in a ``lax.scan`` carry). Compilations are
shared across entries (one init program per mesh kind, update programs of 12 entries) to keep the
cost down.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")

import steadax  # noqa: E402
from steadax._fusion._elementwise import fusion_blocker  # noqa: E402
from tests.conformance import _harness as h  # noqa: E402
from tests.conformance.registry import all_entries  # noqa: E402

steadax.set_strict(True)

SPECS = {"w": ((8, 6), P("data", "model")), "e": ((6, 8), P(None, "model")),
         "v": ((24,), P(("data", "model"))), "b": ((20,), P("data")), "s": ((), P()), "r": ((3, 5), P())}
BY_SHAPE = {shape: spec for shape, spec in SPECS.values()}
# Entries per update program (see main).
CHUNK = 12


def _normal(spec: P, ndim: int) -> tuple:
  """A spec as a tuple of per-axis entries, padded to ``ndim`` (``('a',)`` and ``'a'`` alike)."""
  entries = tuple(spec) + (None,) * (ndim - len(tuple(spec)))
  return tuple(e[0] if isinstance(e, tuple) and len(e) == 1 else (tuple(e) if isinstance(e, tuple) else e)
               for e in entries)


def _layout(leaf) -> str:
  """``replicated``, ``none`` (a traced value outside any mesh), or the normalised spec."""
  sharding = getattr(leaf, "sharding", None)
  if sharding is None:
    return "none"
  if sharding.is_fully_replicated:
    return "replicated"
  if isinstance(sharding, NamedSharding):
    return str(_normal(sharding.spec, len(leaf.shape)))
  return str(sharding)


def _expected(shape) -> str | None:
  if shape == ():
    return "replicated"
  spec = BY_SHAPE.get(tuple(shape))
  if spec is None:
    return None
  return "replicated" if all(e is None for e in _normal(spec, len(shape))) else str(_normal(spec, len(shape)))


def problems(what: str, tree, *, abstract: bool) -> list[str]:
  """Leaves shaped like a parameter (or scalars) not in the expected layout."""
  out = []
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    want, got = _expected(tuple(leaf.shape)), _layout(leaf)
    if want is None or got == want:
      continue
    if abstract and want == "replicated" and got == "none":
      continue  # a traced value on no mesh: replicated once jitted under the mesh
    out.append(f"{what} {jax.tree_util.keystr(path)} {tuple(leaf.shape)}: {got}, expected {want}")
  return out


def drift(before, after) -> list[str]:
  """State leaves whose layout changed through an update (explicit axes: a type change)."""
  out = []
  for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(before)[0], jax.tree_util.tree_leaves(after)):
    la, lb = _layout(a), _layout(b)
    if la != lb and {la, lb} != {"none", "replicated"}:
      out.append(f"state {jax.tree_util.keystr(path)} {tuple(a.shape)}: {la} after init, {lb} after update")
  return out


# Elementwise: declared so (``fusion_blocker`` is None), and the wrappers every elementwise optimizer
# is used under. fuse and flatten concatenate leaves into buffers by design (fuse keeps sharded
# leaves out when its init sees their layout: concrete arrays or explicit axes; under jit with
# automatic axes it cannot), so they are not expected to be gather-free here.
WRAPPED = ("multi_steps_", "masked_", "partition_", "apply_if_finite_")


def is_elementwise(entry, tx) -> bool:
  if entry.name.startswith(("fuse_", "flatten")):
    return False
  return entry.name.startswith(WRAPPED) or fusion_blocker(tx) is None


def make_params(mesh) -> dict:
  out = {}
  for i, (name, (shape, spec)) in enumerate(SPECS.items()):
    x = np.linspace(-1.0, 1.0, int(np.prod(shape)), dtype=np.float32).reshape(shape) * (i + 1) / 3
    out[name] = jax.device_put(jnp.asarray(x), NamedSharding(mesh, spec))
  return out


def main() -> None:
  start = time.process_time()
  entries = all_entries()
  if len(sys.argv) > 1:
    entries = [e for e in entries if e.name in sys.argv[1].split(",")]
  txs = [e.factory() for e in entries]
  failures: dict[str, list[str]] = {}
  gathered_count, elementwise_names = None, [e.name for e, tx in zip(entries, txs) if is_elementwise(e, tx)]

  def note(kind, entry, found):
    if found:
      failures.setdefault(f"{kind}/{entry.name}", []).extend(found)

  def one_update(entry, tx, params, grads, state):
    extra = entry.extra_args(h.matrix_loss, params, grads) if entry.extra_args else {}
    return tx.update(grads, state, params, **extra)

  stages = {}
  for kind in ("Explicit", "Auto"):
    stages[kind] = round(time.process_time() - start, 1)
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(getattr(AxisType, kind),) * 2)
    params = make_params(mesh)
    grads = jax.tree.map(lambda x: x * 0.5 + 0.1, params)
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), params)
    replicated = NamedSharding(mesh, P())
    with jax.set_mesh(mesh):
      if kind == "Explicit":
        states, shardings = [], []
        for entry, tx in zip(entries, txs):
          try:
            state = jax.eval_shape(tx.init, params)
            updates, new_state = jax.eval_shape(
                lambda p, g, s, entry=entry, tx=tx: one_update(entry, tx, p, g, s), params, grads, state)
          except Exception as error:  # noqa: BLE001 - reported per entry
            note(kind, entry, [f"raised {type(error).__name__}: {str(error)[:400]}"])
            states.append(None)
            shardings.append(None)
            continue
          note(kind, entry, problems("init", state, abstract=True) + problems("update", updates, abstract=True)
               + problems("state after update", new_state, abstract=True) + drift(state, new_state))
          states.append(state)
          shardings.append(jax.tree.map(lambda s: s.sharding if s.sharding is not None else replicated, state))
        # init from abstract parameters, with out_shardings read from the traced types.
        live = [i for i, s in enumerate(shardings) if s is not None]
        init_all = jax.jit(lambda p: [txs[i].init(p) for i in live], out_shardings=[shardings[i] for i in live])
        compiled = init_all.lower(abstract).compile()
        for i, state in zip(live, compiled(params)):
          note(kind, entries[i], problems("init (abstract, out_shardings)", state, abstract=False))
      else:
        # jax.jit(tx.init) lowered from abstract parameters (ShapeDtypeStructs with shardings, no
        # data): the layouts it gives its outputs are checked, then it runs on the sharded parameters.
        init_all = jax.jit(lambda p: [tx.init(p) for tx in txs]).lower(abstract).compile()
        states = init_all(params)
        for entry, state, layout in zip(entries, states, init_all.output_shardings):
          placed = jax.tree.map(lambda x, sh: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh), state, layout)
          note(kind, entry, problems("jit(init) from abstract parameters", placed, abstract=False)
               + problems("jit(init)", state, abstract=False))
        # The elementwise entries (whose compiled HLO must hold no all-gather: each device updates
        # its own shards) and the others, each in programs of CHUNK entries: XLA's compile time
        # grows faster than the program (the 71 others in one program: 20.5 CPU-s, in chunks of
        # 12: 11.5; of 6 and 24 more), and a chunk checks its entries as the whole did.
        elementwise = [i for i, e in enumerate(entries) if is_elementwise(e, txs[i])]
        others = [i for i in range(len(entries)) if i not in elementwise]
        gathered_count = 0
        for kind_of_group, members in (("elementwise", elementwise), ("others", others)):
          stages[f"{kind_of_group}{len(members)}"] = round(time.process_time() - start, 1)
          for group in [members[k:k + CHUNK] for k in range(0, len(members), CHUNK)]:
            update_group = jax.jit(lambda p, g, ss, group=group: [
                one_update(entries[i], txs[i], p, g, s) for i, s in zip(group, ss)])
            group_states = [states[i] for i in group]
            compiled = update_group.lower(params, grads, group_states).compile()
            if kind_of_group == "elementwise":
              gathers = [line.strip()[:300] for line in compiled.as_text().splitlines()
                         if re.search(r"\ball-gather(-start)?\(", line)]
              if gathers:
                failures.setdefault("Auto/elementwise all-gathers", []).extend(gathers)
              gathered_count += len(gathers)
            for i, (updates, new_state) in zip(group, compiled(params, grads, group_states)):
              note(kind, entries[i], problems("jit(update) updates", updates, abstract=False)
                   + problems("jit(update) state", new_state, abstract=False))
  print("RESULT " + json.dumps({"entries": len(entries), "devices": jax.device_count(), "failures": failures,
                                "elementwise": elementwise_names, "elementwise_all_gathers": gathered_count,
                                "stages": stages, "cpu_s": round(time.process_time() - start, 1)}), flush=True)


if __name__ == "__main__":
  main()
