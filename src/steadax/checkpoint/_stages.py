"""Restoring a state into a chain whose named stages changed: stages matched by name, with a report.

A ``named_chain``'s state is ``{name: stage state}``, so the paths of a checkpoint start with the
stage's name wherever the chain sits (``"adam/0/mu/w"``, ``"inner_opt_state/adam/0/mu/w"`` under
``MultiSteps``, ``"opt_state/adam/mu/w"`` in a Flax NNX state). ``restore_state`` restores stage by
stage, each as a whole: a stage of the new chain whose name is in the checkpoint with the same
paths, shapes and dtypes is carried over; a stage the checkpoint lacks keeps the template's (its
fresh init); a stage of the checkpoint the chain lost is dropped; a stage whose name matches but
whose state differs is refused, or started fresh on request, and never half restored. What lies
outside the named stages (a wrapper's counters, ``nnx.Optimizer``'s ``step``) must match exactly,
as in ``arrays_to_state``. The answer comes with a ``StageReport`` that lists each stage's fate.

Which dicts of the state are a ``named_chain``'s is read from the transformation, not guessed: a
dict of the template whose keys are stage names of one ``named_chain`` found in ``tx`` (all of
them, or only those with state, as a Flax NNX pure dict keeps) and whose values are not arrays.
Nested named_chains are matched level by level, so ``"opt/adam"`` names a stage inside a stage.
"""

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from .._core._combine import NamedChain
from .._core._interface import GradientTransformation
from . import _files
from ._arrays import CheckpointError, Template, _assemble, _flatten, _misfit, _stored, leaf_path

__all__ = ["StageReport", "restore_state"]


@dataclasses.dataclass(frozen=True)
class StageReport:
  """What ``restore_state`` did with each stage of the ``named_chain``s (paths: ``"adam"``,
  ``"inner_opt_state/adam"``, ``"opt/adam"`` for a stage inside a stage).

  Attributes:
    carried: stages restored from the checkpoint (under their new name where renamed).
    new: stages the checkpoint does not have: they keep the template's state (their init).
    dropped: stages of the checkpoint the template does not have: their arrays were not used.
    mismatched: ``{stage: what differs}`` for stages whose name matches but whose state does not
      (other paths, shapes or dtypes): started from the template's state (``mismatched="fresh"``).
    stateless: stages without state in the template (nothing to restore).
    renamed: ``{old name: new name}`` of the stages carried under a new name.
  """

  carried: tuple[str, ...] = ()
  new: tuple[str, ...] = ()
  dropped: tuple[str, ...] = ()
  mismatched: Mapping[str, str] = dataclasses.field(default_factory=dict)
  stateless: tuple[str, ...] = ()
  renamed: Mapping[str, str] = dataclasses.field(default_factory=dict)

  def __str__(self) -> str:
    renamed = {new: old for old, new in self.renamed.items()}
    lines = [
        f"carried: {', '.join(s + (f' (was {renamed[s]})' if s in renamed else '') for s in self.carried) or '-'}",
        f"new (fresh state): {', '.join(self.new) or '-'}",
        f"dropped: {', '.join(self.dropped) or '-'}",
    ]
    lines += [f"mismatched (fresh state): {stage}: {why}" for stage, why in self.mismatched.items()]
    if self.stateless:
      lines.append(f"stateless: {', '.join(self.stateless)}")
    if self.new and self.dropped:
      lines.append(f"(a renamed stage? pass renames={{{self.dropped[0]!r}: {self.new[0]!r}}})")
    return "\n".join(lines)


def _path(key_path: tuple) -> str:
  return leaf_path(key_path) if key_path else ""


def _join(prefix: str, name: str) -> str:
  return f"{prefix}/{name}" if prefix else name


def _within(path: str, prefix: str) -> bool:
  """Whether ``path`` is ``prefix`` or lies below it."""
  return path == prefix or path.startswith(prefix + "/")


def _below(path: str, container: str) -> bool:
  """Whether ``path`` lies strictly below ``container`` ("" is the root)."""
  return path != "<root>" if container == "" else path.startswith(container + "/")


def _named_chains(tx: Any) -> list[tuple[str, ...]]:
  """The stage names of every ``named_chain`` in a transformation (its children, at any depth)."""
  found = []
  for node in jax.tree_util.tree_leaves(tx, is_leaf=lambda x: isinstance(x, NamedChain)):
    if isinstance(node, NamedChain):
      found += [node.names, *_named_chains(node.transforms)]
  return found


def _containers(like: Any, chains: list[tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
  """``{path of a named_chain state in the template: that chain's stage names}``, outer first."""
  def stage_names(node: Any) -> tuple[str, ...] | None:
    if type(node) is not dict or not node or any(hasattr(v, "shape") for v in node.values()):
      return None
    fits = [names for names in chains if set(node) <= set(names)]
    return min(fits, key=len) if fits else None

  found: dict[str, tuple[str, ...]] = {}

  def walk(tree: Any, prefix: tuple) -> None:
    is_state = lambda node: stage_names(node) is not None  # noqa: E731
    for key_path, node in jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_state)[0]:
      names = stage_names(node)
      if names is None:
        continue
      found[_path(prefix + key_path)] = names
      for name, value in node.items():
        walk(value, prefix + key_path + (jax.tree_util.DictKey(name),))

  walk(like, ())
  return found


def _owner(path: str, stages: set[str], containers: Mapping[str, Any]) -> tuple[str, str]:
  """Where a leaf path belongs: ``("stage", S)``, ``("dropped", S)`` (a stage the template lacks)
  or ``("frame", "")`` (outside every stage)."""
  stage = max((s for s in stages if _within(path, s)), key=len, default=None)
  container = max((c for c in containers if _below(path, c)), key=len, default=None)
  if container is not None and (stage is None or len(container) >= len(stage)):
    name = (path[len(container) + 1:] if container else path).split("/", 1)[0]
    return "dropped", _join(container, name)
  return ("stage", stage) if stage is not None else ("frame", "")


def _chain_order(containers: Mapping[str, tuple[str, ...]], stages: set[str]) -> list[str]:
  """The stages in the order of their chains (a stage's inner stages where it stands), leaving out
  the stages that are named_chains themselves (their stages are listed)."""
  order: list[str] = []
  visited: set[str] = set()

  def visit(container: str) -> None:
    visited.add(container)
    for name in containers[container]:
      stage = _join(container, name)
      order.append(stage)
      for inner in containers:  # outer first: a chain inside this stage, at any depth below it
        if inner not in visited and _within(inner, stage):
          visit(inner)

  for container in containers:
    if container not in visited and not any(_within(container, s) for s in stages):
      visit(container)
  return [s for s in order if s not in containers]


def _read_saved(saved: Any, manifest: Mapping | None) -> tuple[dict, dict, Any]:
  """``(found, records, read)`` of what was saved: each path's (shape, dtype), its manifest record,
  and ``read(paths)`` giving those paths' arrays (a steadax checkpoint reads only those)."""
  if isinstance(saved, (str, os.PathLike)):
    path = os.path.abspath(os.fspath(saved))
    if not os.path.exists(path):
      raise FileNotFoundError(f"restore_state: no checkpoint at {path}.")
    if _files._is_v1(path):
      manifest, arrays = _files._read_v1(path)
      saved = arrays
    elif os.path.isdir(os.path.join(path, _files._MANIFEST)):  # written by save / save_step
      manifest = _files._read_orbax_manifest(path)
      records = {r["path"]: r for r in manifest["leaves"]}
      found = {p: (tuple(r["shape"]), r["dtype"]) for p, r in records.items()}

      def read(paths: list[tuple[str, Any]]) -> dict:
        return _files._read_arrays(path, [(p, leaf, "read") for p, leaf in paths], records)
      return found, records, read
    else:  # a pytree saved by Orbax itself (StandardCheckpointer, PyTreeCheckpointer)
      saved = _files._read_orbax_tree(path)
  records = {r["path"]: dict(r) for r in (manifest or {}).get("leaves", [])}
  arrays, found = {}, {}
  for path, leaf in _flatten(saved):
    data, record = _stored(path, leaf)  # a typed PRNG key: its key data, its record the key type
    if "key_impl" in record:
      records[path] = record
    arrays[path] = data
    known = records.get(path, {})  # uint32 key data whose manifest names the key type
    found[path] = (tuple(np.shape(data)), known["dtype"] if "key_impl" in known else record["dtype"])
  return found, records, lambda paths: {p: arrays[p] for p, _ in paths}


def restore_state(saved: Template | Mapping[str, Any] | str | os.PathLike, like: Template,
                  tx: GradientTransformation | Sequence[GradientTransformation], *, renames: Mapping[str, str] | None = None,
                  mismatched: str = "raise", manifest: Mapping | None = None) -> tuple[Any, StageReport]:
  """Restore a state into a chain whose ``named_chain`` stages were added, removed or renamed.

  Stages are matched by name (see ``StageReport`` for the paths), each restored whole: a stage
  whose name is in the checkpoint with the same paths, shapes and dtypes is carried over; a new
  stage keeps the template's state; a removed stage is dropped. Everything outside the named
  stages must match exactly (as in ``arrays_to_state``).

  Args:
    saved: what was saved: a state pytree (the old state itself, or one Orbax restored without a
      template), path-keyed arrays (``state_to_arrays``), or the path of a checkpoint written by
      ``save`` / ``save_step`` (its manifest is checked before the arrays it needs are read), by
      Orbax's ``StandardCheckpointer``, or a file of format version 1.
    like: the template: the new transformation's state, ``tx.init(params)`` (concrete, so new
      stages start from their init; ``jax.eval_shape`` templates work when no stage is new). Its
      leaves' shardings are the restored arrays'.
    tx: the new transformation (or a list of transformations): its ``named_chain``s say which
      dicts of the state are stages. A ``named_chain`` built inside a factory
      (``inject_hyperparams``) is not visible in ``tx``: pass it, or a list holding it.
    renames: ``{old stage path: new stage path}`` for stages that were renamed (``{"adam": "opt"}``);
      without it a renamed stage is reported new and its old state dropped.
    mismatched: a stage whose name matches but whose state does not: ``"raise"`` (default) or
      ``"fresh"`` to start it from the template's state (listed in the report).
    manifest: the manifest saved with path-keyed arrays, for the implementation of PRNG keys.

  Returns:
    ``(state, report)``: the restored state, with the template's structure, shapes and dtypes, and
    a ``StageReport``.

  Raises:
    CheckpointError: a stage mismatched (with ``mismatched="raise"``), the paths outside the
      stages do not match, or a new stage's template leaf is abstract; each names the paths.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> params = {"w": jnp.ones(3)}
    >>> old = steadax.named_chain(("adam", steadax.scale_by_adam()), ("lr", steadax.scale(-1e-3)))
    >>> saved = old.init(params)
    >>> new = steadax.named_chain(("clip", steadax.clip_by_global_norm(1.0)),
    ...                           ("adam", steadax.scale_by_adam()), ("ema", steadax.ema(0.9)),
    ...                           ("lr", steadax.scale(-1e-3)))
    >>> state, report = steadax.checkpoint.restore_state(saved, new.init(params), new)
    >>> print(report)
    carried: adam
    new (fresh state): ema
    dropped: -
    stateless: clip, lr
  """
  if mismatched not in ("raise", "fresh"):
    raise ValueError(f"restore_state: mismatched must be 'raise' or 'fresh', got {mismatched!r}.")
  chains = _named_chains(tx)
  containers = _containers(like, chains)
  stages = {_join(c, n) for c, names in containers.items() for n in names}
  found, records, read = _read_saved(saved, manifest)

  renames = dict(renames or {})
  for old, new in renames.items():
    if new not in stages:
      raise ValueError(f"restore_state: renames maps {old!r} to {new!r}, which is not a stage of the "
                       f"template (its stages: {sorted(stages)}).")
  def renamed(path: str) -> str:
    old = max((o for o in renames if _within(path, o)), key=len, default=None)
    return path if old is None else renames[old] + path[len(old):]
  source = {renamed(p): p for p in found}  # the template's path -> the checkpoint's
  if len(source) != len(found):
    twice = sorted({renamed(p) for p in found if renamed(p) != p} & set(found))
    raise ValueError(f"restore_state: renames gives two of the checkpoint's arrays the path "
                     f"{twice[0]!r}: a stage renamed to a name the checkpoint also has (rename that "
                     "one too).")
  found = {p: found[q] for p, q in source.items()}

  template = [(path, leaf, *_owner(path, stages, containers)) for path, leaf in _flatten(like)]
  own: dict[str, list[tuple[str, Any]]] = {}
  frame_template = []
  for path, leaf, kind, stage in template:
    if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
      raise CheckpointError(f"restore_state: the template leaf at {path} is a {type(leaf).__name__}, "
                            "not an array or ShapeDtypeStruct; build the template with "
                            "tx.init(params) or jax.eval_shape(tx.init, params).")
    (own.setdefault(stage, []) if kind == "stage" else frame_template).append((path, leaf))
  saved_in: dict[str, set[str]] = {}
  dropped: dict[str, None] = {}
  frame_saved = set()
  for path in found:
    kind, stage = _owner(path, stages, containers)
    if kind == "stage":
      saved_in.setdefault(stage, set()).add(path)
    elif kind == "dropped":
      dropped[stage] = None
    else:
      frame_saved.add(path)

  def differences(leaves: list[tuple[str, Any]], stored: set[str]) -> list[str]:
    out = []
    for path, leaf in leaves:
      if path not in found:
        if int(np.prod(leaf.shape)):  # an empty leaf is not stored: rebuilt from its type
          out.append(f"{path} not in the checkpoint")
      elif problem := _misfit(leaf, *found[path]):
        out.append(f"{path}: {problem}")
    expected = {path for path, _ in leaves}
    out += [f"{path} in the checkpoint only" for path in sorted(stored - expected)]
    return out

  frame_problems = differences(frame_template, frame_saved)
  if frame_problems:
    raise CheckpointError(
        "restore_state: outside the named_chain stages the state must match the checkpoint exactly:\n  "
        + "\n  ".join(frame_problems))

  carried, new, stateless, mismatch = [], [], [], {}
  for stage in _chain_order(containers, stages):
    leaves, stored = own.get(stage, []), saved_in.get(stage, set())
    if not leaves and not stored:
      stateless.append(stage)
    elif leaves and not stored and any(int(np.prod(leaf.shape)) for _, leaf in leaves):
      new.append(stage)
    elif why := differences(leaves, stored):
      mismatch[stage] = "; ".join(why)
    else:
      carried.append(stage)
  if mismatch and mismatched == "raise":
    raise CheckpointError(
        "restore_state: stages whose name matches but whose state does not (pass "
        "mismatched=\"fresh\" to start them from the template):\n  "
        + "\n  ".join(f"{stage}: {why}" for stage, why in mismatch.items()))

  report = StageReport(carried=tuple(carried), new=tuple(new), dropped=tuple(sorted(dropped)),
                       mismatched=mismatch, stateless=tuple(stateless),
                       renamed={old: new for old, new in renames.items() if new in carried})
  if not carried and not mismatch and new and found:
    raise CheckpointError("restore_state: no stage of the checkpoint is carried over (another chain's "
                          f"checkpoint, or another wrapper around it?):\n{report}")
  restored = set(carried)
  plan, to_read = [], []
  for path, leaf, kind, stage in template:
    empty = int(np.prod(leaf.shape)) == 0
    if kind == "frame" or stage in restored:
      plan.append((path, leaf, "empty" if empty else "read"))
      if not empty:
        to_read.append((path, leaf))
    elif empty:
      plan.append((path, leaf, "empty"))
    elif not isinstance(leaf, (jax.Array, np.ndarray)):
      raise CheckpointError(
          f"restore_state: stage {stage!r} is {'new' if stage in new else 'mismatched'}: it starts "
          f"from the template's state, but the template leaf at {path} is a {type(leaf).__name__}; "
          "build the template with tx.init(params), not jax.eval_shape.")
    else:
      plan.append((path, leaf, "keep"))
  arrays = read([(source[p], leaf) for p, leaf in to_read])
  arrays = {p: arrays[source[p]] for p, _ in to_read}
  records = {p: records[source[p]] for p, _ in to_read if source[p] in records}
  return _assemble(plan, like, arrays, records), report
