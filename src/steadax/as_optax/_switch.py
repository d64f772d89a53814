"""The import hook behind ``steadax.as_optax``: ``optax`` and its submodules resolve to steadax's.

A finder at the front of ``sys.meta_path`` answers every import of ``optax`` or ``optax.<path>``:
- ``optax`` is the ``steadax`` module object itself, and ``optax.<path>`` (every part public) is
  ``steadax.<path>``: the same module objects, so ``optax.adam is steadax.adam`` and a library's
  ``isinstance(tx, optax.GradientTransformation)`` sees steadax's class;
- a private module of Optax 0.2.8 (``optax._src.base``, ``optax.contrib._muon``) is a module whose
  names are steadax's objects (``_private_modules.py``); another path with a private part raises
  ``ModuleNotFoundError``;
- a public path steadax does not have raises ``ModuleNotFoundError`` too. The finder never answers
  ``None`` for an ``optax`` name: the path finder would then look in ``steadax.__path__`` and load
  a second copy of a steadax module under an ``optax`` name, or fall through to the real Optax.

The loader hands back the existing steadax module. ``importlib`` overwrites ``__spec__`` of the
module a loader creates (every other attribute only where it is missing), so ``exec_module`` puts
steadax's own spec back: ``steadax.__spec__.name`` stays ``"steadax"``.
"""


import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

from . import _private_modules

_OPTAX = "optax"


def _is_optax_name(name: str) -> bool:
  return name == _OPTAX or name.startswith(_OPTAX + ".")


def _is_steadax_module(module: Any) -> bool:
  name = getattr(module, "__name__", "")
  return _private_modules.is_private_module(module) or (
      isinstance(module, types.ModuleType) and (name == "steadax" or name.startswith("steadax.")))


class _SteadaxLoader(importlib.abc.Loader):
  """Loads ``optax.<path>`` as the already-imported (or now imported) ``steadax.<path>``."""

  def __init__(self, target: str):
    self.target = target
    self._spec: Any = None

  def create_module(self, spec):
    module = importlib.import_module(self.target)
    self._spec = module.__spec__
    return module

  def exec_module(self, module):
    # importlib set module.__spec__ to the alias's spec; steadax's module keeps its own.
    module.__spec__ = self._spec


class _OptaxFinder(importlib.abc.MetaPathFinder):
  """Resolves every ``optax`` import to steadax (see the module docstring)."""

  def find_spec(self, fullname, path=None, target=None):
    if not _is_optax_name(fullname):
      return None
    parts = fullname.split(".")[1:]
    if any(part.startswith("_") for part in parts):
      spec = _private_modules.find_spec(fullname)
      if spec is None:
        # A private path Optax 0.2.8 does not have either (``optax._src.clipping``): the error names
        # the first missing module, as Python's own does (no reading of importlib's frames).
        raise _private_modules.private_module_error(fullname)
      return spec
    steadax_name = ".".join(["steadax", *parts])
    try:
      found = importlib.util.find_spec(steadax_name)
    except ModuleNotFoundError:
      found = None
    if found is None:
      raise ModuleNotFoundError(
          f"No module named {fullname!r}: optax resolves to steadax (steadax.as_optax), which has "
          f"no module {steadax_name!r}.", name=fullname)
    return importlib.machinery.ModuleSpec(
        fullname, _SteadaxLoader(steadax_name), is_package=found.submodule_search_locations is not None)


def _finder() -> _OptaxFinder | None:
  return next((f for f in sys.meta_path if isinstance(f, _OptaxFinder)), None)


def _real_optax_users(limit: int = 5) -> list[str]:
  """Names of modules whose globals hold a real (not steadax) ``optax`` module: who imported it."""
  optax_ids = {id(m) for n, m in list(sys.modules.items())
               if _is_optax_name(n) and not _is_steadax_module(m)}
  users = []
  for name, module in list(sys.modules.items()):
    if _is_optax_name(name):
      continue
    namespace = getattr(module, "__dict__", None)
    if isinstance(namespace, dict) and any(id(v) in optax_ids for v in list(namespace.values())):
      users.append(name)
      if len(users) == limit:
        break
  return users


class Switch:
  """What :func:`install` returns: a ``with`` block that restores on exit if it installed.

  ``installed`` is True where this call put the switch in place, False where it was already on (a
  nested ``with steadax.as_optax.install():`` then leaves it on at exit, for the outer one to undo).
  """

  def __init__(self, installed: bool):
    self.installed = installed

  def __enter__(self) -> "Switch":
    return self

  def __exit__(self, *exc_info: object) -> None:
    if self.installed:
      restore()

  def __repr__(self) -> str:
    return f"steadax.as_optax.Switch(installed={self.installed})"


def install() -> Switch:
  """Makes every later ``import optax ...`` in this process resolve to steadax, submodules included.

  After it, ``import optax`` gives the ``steadax`` module itself, ``import optax.tree_utils as otu``,
  ``from optax.contrib import muon`` or ``from optax import losses`` give steadax's namespaces of the
  same names, and every library that imports Optax (Optimistix, Flax's ``nnx.Optimizer``, NumPyro's
  ``optax_to_numpyro``, ...) builds and runs steadax transformations. Call it before anything
  imports Optax: first thing in a program, or run the program with
  ``python -m steadax.as_optax script.py`` (or ``-m module``), which calls it for you. Optax itself
  need not be installed.

  Optax's private modules (``optax._src.base``, ``optax.contrib._muon``, ...) resolve too: their
  names are steadax's objects (``base.GradientTransformation is steadax.GradientTransformation``),
  and a name steadax has no counterpart for raises ``ImportError`` when read, naming what to use
  instead. A module path neither steadax nor Optax 0.2.8 has raises ``ModuleNotFoundError``, never
  falling back to Optax.

  Calling it again while the switch is on does nothing. :func:`restore` undoes it for imports made
  afterwards; modules that imported ``optax`` under the switch keep the steadax objects they hold.

  Returns:
    A :class:`Switch`; used as a context manager (``with steadax.as_optax.install():``) it calls
    :func:`restore` at the end of the block if this call turned the switch on.

  Raises:
    RuntimeError: Optax itself was imported before the switch (its modules are in ``sys.modules``).
      Switching then would leave the modules that already hold Optax on Optax while later imports
      got steadax, two libraries in one process; the message names the modules that imported it.

  Example:
    The switch is process-wide, so this example runs its program in a fresh interpreter:

    >>> import subprocess, sys
    >>> program = '''
    ... import steadax
    ... steadax.as_optax.install()
    ... import optax
    ... import optax.tree_utils as otu
    ... from optax.contrib import muon
    ... print(optax is steadax, otu is steadax.tree_utils, muon is steadax.contrib.muon)
    ... '''
    >>> subprocess.run([sys.executable, "-c", program], capture_output=True, text=True).stdout.split()
    ['True', 'True', 'True']
  """
  if _finder() is not None:
    return Switch(installed=False)
  real = sorted(n for n, m in sys.modules.items() if _is_optax_name(n) and not _is_steadax_module(m))
  if real:
    users = _real_optax_users()
    by = f" (imported by {', '.join(users)})" if users else ""
    raise RuntimeError(
        f"steadax.as_optax.install(): Optax itself is already imported{by}: {len(real)} optax "
        f"modules are in sys.modules, e.g. {', '.join(real[:3])}. Switching now would leave the "
        f"code holding them on Optax while later imports got steadax. Call "
        f"steadax.as_optax.install() before anything imports optax (the first lines of the "
        f"program), or run the program with `python -m steadax.as_optax script.py` "
        f"(or `-m module`).")
  sys.meta_path.insert(0, _OptaxFinder())
  return Switch(installed=True)


def restore() -> None:
  """Turns the switch off: later ``import optax ...`` statements find Optax itself again.

  Removes the import hook and the ``optax`` entries it put in ``sys.modules`` (the steadax modules
  themselves stay imported), and the attributes imports of Optax's private modules set on steadax's
  packages (``steadax._src``). Modules that imported ``optax`` while the switch was on keep the
  steadax objects they hold: import them again (or restart the process) to get Optax. Does nothing
  when the switch is off.

  Example:
    >>> import steadax
    >>> steadax.as_optax.restore()  # the switch is off here: nothing to undo
    >>> steadax.as_optax.is_installed()
    False
  """
  finder = _finder()
  while finder is not None:
    sys.meta_path.remove(finder)
    finder = _finder()
  _private_modules.unbind()
  for name, module in list(sys.modules.items()):
    if _is_optax_name(name) and _is_steadax_module(module):
      del sys.modules[name]


def is_installed() -> bool:
  """Whether the switch is on: ``import optax ...`` resolves to steadax.

  Example:
    >>> import steadax
    >>> steadax.as_optax.is_installed()
    False
  """
  return _finder() is not None
