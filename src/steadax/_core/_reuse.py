"""Reusing one leaf's trace for the later leaves of the same types: ``leafwise``'s ``Once``.

Tracing a leaf function costs every one of its operations in Python; ``leafwise`` traces it once
per combination of input types and calls that trace for the other leaves (``Once``). That is right
only for a leaf function whose result depends on its arguments alone: ``Captures`` reads what a
leaf function captures and says whether its trace may be reused (docs/internals.md, "Traced once
per leaf type").
"""

import enum
import functools
import sys
import types
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from ._module import Module

__all__ = ["Captures", "Once"]


# Values a leaf function may close over and still have its trace reused: they cannot change
# between two leaves (a numpy array is taken as a constant table). Lists and dicts are read
# through (and watched for changes, see Captures); anything else (an iterator, an object of
# unknown kind) could be read differently for each leaf, and a reused trace would give every
# later leaf the first's.
_FROZEN_ATOMS: tuple[type, ...] = (
    type(None), bool, int, float, complex, str, bytes, type, range, slice, type(Ellipsis),
    enum.Enum, np.dtype, np.generic, np.ndarray, jax.Array, jax.tree_util.PyTreeDef,
    jax.sharding.Sharding, jax.sharding.PartitionSpec, types.BuiltinFunctionType, types.ModuleType,
)


@functools.lru_cache(maxsize=4096)
def _global_names(code: types.CodeType) -> tuple[str, ...]:
  """The names ``code`` (and the code of functions defined in it) reads as globals or attributes."""
  names = list(code.co_names)
  for const in code.co_consts:
    if isinstance(const, types.CodeType):
      names.extend(_global_names(const))
  return tuple(dict.fromkeys(names))


class Captures:
  """What a leaf function captures: whether later leaves may reuse one leaf's trace of it.

  A leaf function gets each leaf's data as arguments (the gradient, state and read leaves, the
  scalars record); ``Once`` reuses the trace of one leaf for every later leaf of its types, which
  is right only if nothing else the function reads differs between leaves. It may read constants
  from its closure (Muon's and the matrix optimizers' leaf functions close over their
  configuration: Modules, numbers, dtypes, tuples, the state record, other such functions), but a
  leaf function that reads per-leaf data from its closure (``next(scales)``, ``scales[i]`` with a
  ``nonlocal i`` it advances) would silently give every later leaf the first one's. So the trace
  is reused only when:

  * every value the function captures (closure cells, defaults, the module globals it names, a
    ``partial``'s arguments, a bound method's object, recursively through the closures among
    them) is of a kind that cannot change between leaves (``_FROZEN_ATOMS``: numbers, strings,
    dtypes, arrays, modules, ...; tuples, frozensets, lists and dicts of them; steadax Modules and
    scalars records; functions defined at module level, which are code); and
  * its first call rebinds none of those cells and globals and changes no captured list or dict
    (a ``nonlocal`` counter or key it advances, ``index[0] += 1``).

  Otherwise every leaf runs the function (correct, traced per leaf). An iterator or any object of
  another kind is never taken as constant. The captures are read once per ``leafwise`` call
  (microseconds).
  """

  def __init__(self, fn: Callable[..., Any], records: tuple[type, ...] = ()):
    self.records = records
    self.cells: list = []
    self.globals: list = []
    self.containers: list = []
    self.frozen = self._frozen(fn, 0, set())
    self.before = self._contents()
    self.reusable = False

  def called(self) -> None:
    """After the first call: reusable when the captures are frozen and none of them changed."""
    if self.frozen:
      after = self._contents()
      self.reusable = len(after) == len(self.before) and all(a is b for a, b in zip(self.before, after))

  def _contents(self) -> list:
    out = [namespace.get(name) for namespace, name in self.globals]
    for cell in self.cells:
      try:
        out.append(cell.cell_contents)
      except ValueError:  # an empty cell (a name the enclosing function assigns later)
        out.append(None)
    for container in self.containers:
      out.extend(container.values() if isinstance(container, dict) else container)
    return out

  def _frozen(self, value: Any, depth: int, seen: set) -> bool:
    if isinstance(value, _FROZEN_ATOMS):
      return True
    if id(value) in seen:
      return True
    if depth > 8:
      return False
    seen.add(id(value))
    if isinstance(value, (tuple, frozenset)):
      return all(self._frozen(x, depth + 1, seen) for x in value)
    if type(value) in (list, dict):
      self.containers.append(value)
      return all(self._frozen(x, depth + 1, seen) for x in (value.values() if isinstance(value, dict) else value))
    if isinstance(value, self.records):  # a scalars record: its values
      return all(self._frozen(x, depth + 1, seen) for _, x in value.items())
    if isinstance(value, Module):
      return True  # a frozen dataclass pytree (a transformation, its configuration)
    if isinstance(value, types.FunctionType):
      if depth and _module_level(value):
        return True  # code: a function the leaf function calls, not data it was given
      cells = value.__closure__ or ()
      self.cells.extend(cells)
      namespace = value.__globals__
      names = [name for name in _global_names(value.__code__) if name in namespace]
      self.globals.extend((namespace, name) for name in names)
      captured = [*_cell_contents(cells), *(value.__defaults__ or ()),
                  *(value.__kwdefaults__ or {}).values(), *(namespace[name] for name in names)]
      return all(self._frozen(x, depth + 1, seen) for x in captured)
    if isinstance(value, functools.partial):
      return all(self._frozen(x, depth + 1, seen)
                 for x in (value.func, *value.args, *value.keywords.values()))
    if isinstance(value, types.MethodType):
      return self._frozen(value.__self__, depth + 1, seen) and self._frozen(value.__func__, depth + 1, seen)
    wrapped = getattr(value, "__wrapped__", None)  # functools.cache, jax.jit and other wrappers
    if wrapped is not None and callable(value):
      return self._frozen(wrapped, depth + 1, seen)
    return False


def _cell_contents(cells: tuple) -> list:
  out = []
  for cell in cells:
    try:
      out.append(cell.cell_contents)
    except ValueError:
      pass
  return out


def _module_level(fn: types.FunctionType) -> bool:
  """A function its module holds under its name (a decorated factory included)."""
  module = sys.modules.get(fn.__module__) if isinstance(fn.__module__, str) else None
  return module is not None and getattr(module, fn.__name__, None) is fn


class Once:
  """A leaf function traced once for the input types of a leaf and called for every later leaf of
  those types.

  Tracing a leaf function binds each of its operations through ``jax.numpy``'s dispatch (a
  fraction of a millisecond each); a model repeats a few parameter shapes many times (the layers
  of an MLP or a transformer), so leafwise traces the leaf function again only where the types
  differ: the later leaves' updates are one ``jit`` call each of the first trace (``jax.jit``
  caches the trace by input types; XLA inlines the calls, so the compiled program is the same).
  The scalars record ``k`` comes split (``_leafwise.split_record``): its Python numbers stay in
  the function (folded as constants), its traced values (bias corrections, injected
  hyperparameters) are the ``traced`` arguments, ``rebuild`` makes the record of them.
  A type met once is traced directly: a call costs more than tracing a leaf once.
  """

  def __init__(self, fn: Callable[..., Any], traced: dict, rebuild: Callable[[dict], Any]):
    self.traced = traced

    def leaf(traced: dict, *inputs: Any) -> Any:
      return fn(rebuild(traced), *inputs)

    leaf.__name__ = leaf.__qualname__ = getattr(fn, "__name__", "leaf")
    self.jitted = jax.jit(leaf)

  def __call__(self, inputs: list) -> Any:
    return self.jitted(self.traced, *inputs)
