"""groups: parameter groups chosen by path patterns (PyTorch-style param groups), built on partition.

A parameter's *path* is its ``jax.tree_util`` key path rendered as a dotted string by
``dotted_path``: dict keys (``DictKey``) by ``str(key)``, attributes (``GetAttrKey``, NamedTuple
fields, dataclass and Equinox module fields) by their name, sequence positions (``SequenceKey``,
``FlattenedIndexKey``) by their index, joined with ``.``. So
``{"encoder": {"layers": [{"w": ..., "bias": ...}]}}`` has the paths ``encoder.layers.0.w`` and
``encoder.layers.0.bias``; a lone array has the empty path ``""``.

A group key is a glob or a regular expression:

* a glob: one pattern or several separated by ``|``; each is an ``fnmatch`` pattern (``*`` any run of
  characters, dots included; ``?`` one character; ``[seq]`` a class), matched against the whole
  path, case-sensitively;
* a regular expression: the key ``"re:<regex>"`` (Levanter, torchtitan and NeMo select parameters by
  regexes), matched with ``re.fullmatch`` against the whole path (``|`` is the regex's own
  alternation; inline flags such as ``(?i)`` work). The key stays a string, so it is the label in
  the state (``PartitionState.inner_states``), in checkpoints and in configuration files alike.

The first group (in the mapping's order) whose key matches wins.
"""

import fnmatch
import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

import jax

from .._core._adapters import as_inner
from .._core._docs import shared_args
from .._core._interface import GradientTransformation
from .._core._policy import key_path_str
from .._core._tree import is_variable, key_entry_name
from ._param_groups import scaled_base
from ._partition import Partition
from .._core._types import Params

__all__ = ["dotted_path", "groups", "group_labels"]

REGEX_PREFIX = "re:"


def _entry_str(entry: Any) -> str:
  name = key_entry_name(entry)
  if name is not None:
    return name
  for attribute in ("name", "key", "idx"):  # key types of other libraries
    if hasattr(entry, attribute):
      return str(getattr(entry, attribute))
  return str(entry).strip(".[]'\"")


def dotted_path(key_path: jax.tree_util.KeyPath) -> str:
  """A ``jax.tree_util`` key path as the dotted string ``groups`` matches its patterns against.

  Args:
    key_path: a tuple of key entries (from ``jax.tree_util.tree_flatten_with_path``).

  Returns:
    The entries rendered (dict keys by ``str``, attributes by name, sequence positions by index)
    and joined with ``.``; ``""`` for the root.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> params = {"layers": [{"w": jnp.ones(1)}]}
    >>> [steadax.dotted_path(p) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
    ['layers.0.w']
  """
  return ".".join(_entry_str(e) for e in key_path)


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern:
  return re.compile(pattern[len(REGEX_PREFIX):])


@functools.lru_cache(maxsize=4096)
def _matches(pattern: str, path: str) -> bool:
  if pattern.startswith(REGEX_PREFIX):
    return _regex(pattern).fullmatch(path) is not None
  return any(fnmatch.fnmatchcase(path, alternative) for alternative in pattern.split("|"))


class _GroupLabels:
  """``param_labels`` of ``groups``: each leaf's first matching pattern (hashable, so jit caches)."""

  def __init__(self, patterns: tuple[str, ...]):
    self.patterns = patterns

  def __eq__(self, other: object) -> bool:
    return isinstance(other, _GroupLabels) and other.patterns == self.patterns

  def __hash__(self) -> int:
    return hash(("groups", self.patterns))

  def label(self, path: Any) -> str:
    text = dotted_path(path)
    for pattern in self.patterns:
      if _matches(pattern, text):
        return pattern
    raise ValueError(
        f"groups: the parameter {text!r} (at {key_path_str(path)}) matches no group; the patterns "
        f"are {list(self.patterns)}. Add a catch-all group \"*\" last to cover the rest."
    )

  def __call__(self, tree: Any) -> Any:
    # A variable wrapper (a Flax NNX ``Param``) is labelled as a whole, by the path of the
    # parameter it holds: ``l1.bias``, not ``l1.bias.value``. Flax's ``nnx.Optimizer`` calls
    # ``init`` on a state of such variables and ``update`` on their plain arrays; both calls then
    # label every parameter alike (the label tree is a prefix of both trees).
    return jax.tree_util.tree_map_with_path(
        lambda path, _: self.label(path), tree, is_leaf=is_variable)


class Groups(Partition):
  """The transformation ``groups`` returns: a ``partition`` labelled by path patterns."""

  name = "groups"


def _check_patterns(patterns: tuple[Any, ...]) -> None:
  for pattern in patterns:
    if isinstance(pattern, re.Pattern):
      raise TypeError(
          f"groups: group keys are strings; write the regular expression {pattern.pattern!r} as "
          f"the key \"{REGEX_PREFIX}{pattern.pattern}\" (inline flags such as (?i) go inside it).")
    if not isinstance(pattern, str):
      raise TypeError(f"groups: group keys must be pattern strings, got {pattern!r}.")
    if pattern.startswith(REGEX_PREFIX):
      try:
        _regex(pattern)
      except re.error as error:
        raise ValueError(
            f"groups: the regular expression {pattern!r} does not compile: {error}.") from None
    elif any(not alternative for alternative in pattern.split("|")):
      raise ValueError(f"groups: the pattern {pattern!r} has an empty alternative.")


@shared_args
def groups(
    transforms: Mapping[str, GradientTransformation | Mapping[str, float]],
    base: GradientTransformation | None = None,
) -> Groups:
  """Parameter groups: a transformation per path pattern, the first matching pattern wins.

  ``groups({"*.bias|*norm*": adamw(lr, weight_decay=0.0), "*": adamw(lr)})`` gives biases and
  normalisation parameters AdamW without weight decay and everything else AdamW with it. Paths are
  rendered by ``dotted_path`` (see the module docstring: ``encoder.layers.0.bias``); a key is an
  ``fnmatch`` pattern with ``|`` between alternatives, or ``"re:<regex>"``, a regular expression
  matched against the whole path.

  With a ``base`` optimizer, a group may give multipliers instead of a transformation (PyTorch's
  parameter groups, muP's per-layer learning rates): ``{"lr_mult": m, "wd_mult": w}`` is the base
  with its learning rate multiplied by ``m`` and its weight decay by ``w`` (numbers and schedules;
  under ``inject_hyperparams`` the injected value stays the shared base value in the state and the
  multiplier is applied as the group's optimizer is built, every step). ``{}`` is the base as it
  is. Decoupled weight decay is scaled by the learning rate as well (AdamW's ``lr * wd * p``, as
  ``torch.optim.AdamW``'s per-group ``lr``).

  Args:
    transforms: ``{pattern: transformation or {"lr_mult": ..., "wd_mult": ...}}`` in priority
      order.
    base: the optimizer the multiplier groups are built from (required when a group gives
      multipliers).

  Returns:
    A ``partition`` whose labels are the patterns: its state is
    ``PartitionState(inner_states={pattern: MaskedState(...)})``, each group's state the one its
    optimizer (the base's, for multiplier groups) makes.

  Raises:
    ValueError: at ``init``/``update`` when a parameter matches no pattern (the message names its
      path); at construction for an empty alternative, a regular expression that does not compile,
      an unknown group setting or a multiplier the base has no hyperparameter for.
    TypeError: a multiplier group without ``base``; a non-string key (a compiled ``re.Pattern``:
      write it as ``"re:..."``).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> params = {"dense": {"kernel": jnp.ones(2), "bias": jnp.ones(1)}}
    >>> tx = steadax.groups({"*.bias": steadax.sgd(0.0), "*": steadax.sgd(1.0)})
    >>> updates, _ = tx.update(params, tx.init(params), params)
    >>> updates["dense"]["bias"], updates["dense"]["kernel"]
    (Array([-0.], dtype=float32), Array([-1., -1.], dtype=float32))
    >>> tx = steadax.groups({"re:.*bias": {"lr_mult": 0.5}, "*": {}}, steadax.sgd(1.0))
    >>> updates, _ = tx.update(params, tx.init(params), params)
    >>> updates["dense"]["bias"], updates["dense"]["kernel"]
    (Array([-0.5], dtype=float32), Array([-1., -1.], dtype=float32))

  References:
    PyTorch, `torch.optim parameter groups
    <https://pytorch.org/docs/stable/optim.html#per-parameter-options>`_. Yang et al., `Tensor
    Programs V: Tuning Large Neural Networks via Zero-Shot Hyperparameter Transfer
    <https://arxiv.org/abs/2203.03466>`_, 2022 (muP: per-layer learning-rate multipliers).
  """
  items = list(transforms.items())
  patterns = tuple(k for k, _ in items)
  _check_patterns(patterns)
  if base is not None:
    base = as_inner(base, "groups", "base")
  built = []
  for pattern, value in items:
    if isinstance(value, Mapping):
      if base is None:
        raise TypeError(
            f"groups: the group {pattern!r} gives multipliers {dict(value)}, which need a base "
            "optimizer: groups({...}, base=steadax.adamw(...)).")
      built.append(scaled_base(base, value, f"the group {pattern!r}"))
    else:
      built.append(as_inner(value, "groups", f"the transformation for {pattern!r}"))
  return Groups(labels=patterns, transforms=tuple(built), param_labels=_GroupLabels(patterns))


def group_labels(transforms_or_groups: Groups | Mapping[str, Any] | Iterable[str], params: Params) -> Any:
  """Which group each parameter falls in: a tree of patterns with the parameters' structure.

  Args:
    transforms_or_groups: the transformation ``groups`` returned, or the mapping given to it (or
      just its patterns).
    params: the parameters.

  Returns:
    A tree with ``params``' structure whose leaves are the winning patterns.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.group_labels(["*.bias", "*"], {"dense": {"kernel": jnp.ones(2), "bias": jnp.ones(1)}})
    {'dense': {'bias': '*.bias', 'kernel': '*'}}
  """
  if isinstance(transforms_or_groups, Groups):
    patterns = transforms_or_groups.labels
  else:
    patterns = tuple(transforms_or_groups)
  _check_patterns(patterns)
  return _GroupLabels(patterns)(params)
