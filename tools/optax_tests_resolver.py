"""Resolves the `optax` imports of Optax's own test files (copied by tools/optax_tests.py).

Copied next to the rewritten test files as `_optax_harness.py`; every `import optax...` line of a test
file became a call to `module(...)` or `from_import(...)` here. `OPTAX_TESTS_BACKEND` says what they
resolve to:

- `optax`: Optax itself, through its public names;
- `steadax`: steadax's public namespace of the same path (`optax.tree_utils` -> `steadax.tree_utils`).

Optax's tests import private modules (`from optax._src import alias`, `from optax.transforms import
_accumulation`). Such a module resolves to a proxy: an attribute whose object Optax also exports under
a public name (`alias.adam` is `optax.adam`) resolves to that public name, in both backends; an
attribute with no public name is a private helper: the access is recorded against the running test
(which the driver then excludes from the comparison) and raises `PrivateOptaxHelper`. So both runs
see the same tests and the comparison is of public behaviour only. `optax._src.test_utils` (Optax's
assertion helpers, not the library under test), `optax._src.utils.x64_precision` (a context manager
switching JAX's x64 flag), `optax._src.numerics.abs_sq` where a test writes its objective with it (not
in numerics_test.py, whose subject it is) and the test modules themselves are used as they are.
"""

import importlib
import os
import sys
import types

import optax as _optax

BACKEND = os.environ.get('OPTAX_TESTS_BACKEND', 'optax')
SUITE_PACKAGE = 'optax_suite'  # where the driver put the rewritten test files
_TEST_INFRASTRUCTURE = ('optax._src.test_utils',)
# Private names that are test infrastructure, not library behaviour: used as they are.
_TEST_INFRASTRUCTURE_NAMES = {
    ('optax._src.utils', 'x64_precision'),  # a context manager switching jax_enable_x64
    ('optax._src.base', 'PRNGKey'),  # an annotation (`jax.Array`) in tree_utils/_random_test.py
}
# Private helpers that other test files use to write their objective (`jnp.sum(numerics.abs_sq(params
# - target))` in alias_test, contrib/_common_test, the schedule tests, ...): the loss, not the library
# under test, so they are used as they are, except in the helper's own test file, where they are the
# subject (and stay excluded).
_OBJECTIVE_HELPERS = {
    ('optax._src.numerics', 'abs_sq'): 'numerics_test.py',
}

# Private accesses of the running test (cleared by the conftest before each test).
ACCESSED: set[str] = set()


class PrivateOptaxHelper(Exception):
  """A test reached an Optax name that is not in Optax's public API."""


class MissingInSteadax(AttributeError):
  """A public Optax name that steadax does not export at the same path."""


def _public_namespaces():
  """Optax's public namespaces: `{attribute path: module}`, reached from `optax` by public names."""
  found = {'optax': _optax}
  stack = ['optax']
  while stack:
    path = stack.pop()
    module = found[path]
    for name in dir(module):
      if name.startswith('_'):
        continue
      obj = getattr(module, name)
      # A submodule, not a module it imported (optax.experimental.aggregating imports
      # optax._src.utils as `utils`: that is no public namespace).
      if isinstance(obj, types.ModuleType) and obj.__name__.startswith(module.__name__ + '.'):
        sub = f'{path}.{name}'
        if sub not in found:
          found[sub] = obj
          stack.append(sub)
  return found


_NAMESPACES = _public_namespaces()
# A module object -> its public path (`optax.experimental._aggregating` -> `optax.experimental.aggregating`).
_MODULE_PATHS = {id(m): p for p, m in sorted(_NAMESPACES.items(), key=lambda kv: kv[0].count('.'))[::-1]}
_MODULE_PATHS[id(_optax)] = 'optax'
# id(object) -> [(public namespace path, public name)], top-level first.
_PUBLIC: dict[int, list[tuple[str, str]]] = {}
for _path in sorted(_NAMESPACES, key=lambda p: (p.count('.'), p)):
  _module = _NAMESPACES[_path]
  for _name in dir(_module):
    if not _name.startswith('_'):
      _PUBLIC.setdefault(id(getattr(_module, _name)), []).append((_path, _name))
_VALUE_TYPES = (bool, int, float, complex, str, bytes, tuple, type(None))


def _steadax_module(public_path: str):
  return importlib.import_module('steadax' + public_path[len('optax'):])


def _public_module(public_path: str):
  if BACKEND == 'optax':
    return _NAMESPACES[public_path]
  try:
    return _steadax_module(public_path)
  except ImportError as error:
    raise MissingInSteadax(f'steadax has no namespace for {public_path}: {error}') from error


def _resolve_public(public_path: str, name: str):
  module = _public_module(public_path)
  try:
    return getattr(module, name)
  except AttributeError:
    raise MissingInSteadax(
        f'{public_path}.{name} is public in Optax; steadax has no {module.__name__}.{name}'
    ) from None


class _PrivateModule(types.ModuleType):
  """A private Optax module seen through Optax's public names."""

  def __init__(self, name: str):
    super().__init__(name)
    self._real = importlib.import_module(name)
    self._package_path = _MODULE_PATHS.get(id(importlib.import_module(name.rsplit('.', 1)[0])))

  def __getattr__(self, name: str):
    if name.startswith('__'):
      raise AttributeError(name)
    obj = getattr(self._real, name)
    if (self.__name__, name) in _TEST_INFRASTRUCTURE_NAMES:
      return obj
    own_test_file = _OBJECTIVE_HELPERS.get((self.__name__, name))
    # The file whose code reaches for the name (a test body, a helper, or a module-level parameter list).
    if own_test_file is not None and not sys._getframe(1).f_code.co_filename.endswith(own_test_file):  # pylint: disable=protected-access
      return obj
    if isinstance(obj, types.ModuleType):
      return module(obj.__name__)
    places = _PUBLIC.get(id(obj), [])
    if isinstance(obj, _VALUE_TYPES):  # an identical small value is not the same name
      places = [p for p in places if p[1] == name]
    if not places:
      where = f'{self.__name__}.{name}'
      ACCESSED.add(where)
      raise PrivateOptaxHelper(f'{where} has no public Optax name')
    if BACKEND == 'optax':
      return obj
    # Prefer the same name, then the private module's own package, then the top level.
    def rank(place):
      return (place[1] != name, place[0] != self._package_path, place[0] != 'optax')
    errors = []
    for path, public_name in sorted(places, key=rank):
      try:
        return _resolve_public(path, public_name)
      except MissingInSteadax as error:
        errors.append(str(error))
    raise MissingInSteadax('; '.join(errors))


_PRIVATE_CACHE: dict[str, types.ModuleType] = {}


def module(name: str):
  """The module `import name` binds in a test file."""
  if name in _NAMESPACES:
    return _public_module(name)
  if name.endswith('_test'):
    return importlib.import_module(SUITE_PACKAGE + name[len('optax'):])
  if name in _TEST_INFRASTRUCTURE:
    return importlib.import_module(name)
  real = importlib.import_module(name)
  public_path = _MODULE_PATHS.get(id(real))
  if public_path is not None:  # a private module that Optax exports itself
    return _public_module(public_path)
  if name not in _PRIVATE_CACHE:
    _PRIVATE_CACHE[name] = _PrivateModule(name)
  return _PRIVATE_CACHE[name]


def from_import(package: str, name: str):
  """What `from package import name` binds in a test file."""
  if name.endswith('_test'):
    return module(f'{package}.{name}')
  try:
    importlib.import_module(f'{package}.{name}')
  except ImportError:
    pass
  else:
    return module(f'{package}.{name}')
  return getattr(module(package), name)
