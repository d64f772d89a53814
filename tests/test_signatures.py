"""Every parameter of every public callable is typed and described, as a user's tools see it.

For each callable of the public surface (the namespaces of tests/test_surface.py, plus
``steadax.testing`` and ``steadax.checkpoint``), read through ``inspect`` as IDEs, ``help()``,
Optax's own tests and users' tools read it:

* annotations are objects, never strings (no module uses ``from __future__ import annotations``);
* no parameter is typed ``Any`` (or left unannotated) unless Optax types the same parameter of the
  same name ``Any`` too, or it is listed in ``GENUINELY_ANY`` with its reason;
* where Optax annotates the same parameter, steadax's annotation is no vaguer: it names no ``Any``
  where Optax's names none (compared by the alias names both libraries use: ``ScalarOrSchedule``,
  ``ArrayLike``, ``Params`` ...). It may be more precise: a state record's ``count`` is a
  ``jax.Array`` (Optax: ``ArrayLike``; steadax's state holds arrays only), ``apply_every``'s ``k``
  an ``int``, ``scale_by_lion``'s ``mode`` a ``str`` checked at construction;
* every parameter (a state record's every field) has a description in the docstring ``help()``
  shows: an ``Args:`` or ``Attributes:`` entry, after ``<shared>`` descriptions are filled in.
"""

import collections.abc
import enum
import importlib
import inspect
import pathlib
import pydoc
import re
import types
import typing
import warnings

import jax
import optax
import pytest

import steadax

NAMESPACES = [
    "", "transforms", "losses", "tree", "tree_utils", "schedules", "microbatching", "projections",
    "second_order", "assignment", "perturbations", "contrib", "experimental", "experimental.aggregating",
    "testing", "checkpoint",
]
SRC = pathlib.Path(steadax.__file__).resolve().parent
pytestmark = pytest.mark.x32_only  # introspection only: the same in both x64 modes

# (name, parameter) -> why ``Any`` is the honest type.
GENUINELY_ANY = {
    ("MinimizeInfo", "aux"): "whatever the user's objective returns beside its value",
    ("state_get", "default"): "returned as given when nothing matches",
    ("hyper_field", "default"): "a field's default value, of the field's own type",
    ("child_field", "default"): "as hyper_field",
    ("static_field", "default"): "as hyper_field",
    ("hyper_field", "default_factory"): "as dataclasses.field's: a zero-argument callable or MISSING",
    ("child_field", "default_factory"): "as hyper_field",
    ("static_field", "default_factory"): "as hyper_field",
    ("dimension_numbers_from", "axis_names"): "a tree of the parameters' structure whose leaves are "
                                              "tuples of axis names (PartitionSpecs): no array type",
}
def _get(root, path):
  for part in filter(None, path.split(".")):
    root = getattr(root, part, None)
  return root


def public_callables():
  """(namespace, name, object) for every public callable steadax defines, each object once."""
  seen = {}
  for namespace in NAMESPACES:
    module = _get(steadax, namespace)
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    for name in names:
      obj = getattr(module, name)
      if inspect.ismodule(obj) or not callable(obj) or id(obj) in seen:
        continue
      if not getattr(obj, "__module__", "").startswith("steadax"):
        continue
      if isinstance(obj, enum.EnumMeta) or getattr(obj, "_is_protocol", False):
        continue  # an enum's "parameters" are Enum's functional API; a protocol is an annotation
      seen[id(obj)] = (namespace, name, obj)
  return sorted(seen.values(), key=lambda t: (t[0], t[1]))


CALLABLES = public_callables()


def _parameters(obj):
  try:
    signature = inspect.signature(obj)
  except (TypeError, ValueError):
    return []
  variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
  return [p for p in signature.parameters.values() if p.kind not in variadic and p.name != "self"]


def _optax_counterpart(namespace, name):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    module = _get(optax, namespace)
    obj = getattr(module, name, None) if module is not None else None
    if obj is None:
      obj = getattr(optax, name, None)
  try:
    return inspect.signature(obj).parameters if obj is not None else {}
  except (TypeError, ValueError):
    return {}


def _anyish(annotation):
  return annotation in (typing.Any, inspect.Parameter.empty, typing.Optional[typing.Any])


def _union_members(annotation):
  if typing.get_origin(annotation) in (typing.Union, types.UnionType):
    return [m for a in typing.get_args(annotation) for m in _union_members(a)]
  return [annotation]


def _aliases(lib):
  """(alias object, name) pairs, biggest unions first, for rendering an annotation by its names."""
  if lib == "optax":
    base = optax._src.base
    pairs = [(base.Params, "Params"), (base.ScalarOrSchedule, "ScalarOrSchedule"),
             (base.Schedule, "Schedule"), (jax.typing.ArrayLike, "ArrayLike"),
             (jax.typing.DTypeLike, "DTypeLike")]
  else:
    types_ = importlib.import_module("steadax._core._types")
    pairs = [(types_.Params, "Params"), (types_.ScalarOrSchedule, "ScalarOrSchedule"),
             (types_.Schedule, "Schedule"), (jax.typing.ArrayLike, "ArrayLike"),
             (jax.typing.DTypeLike, "DTypeLike")]
  return pairs


def render(annotation, lib):
  """A library-independent spelling: alias names for the aliases, module-free class names."""
  aliases = _aliases(lib)
  for obj, alias in aliases:
    if annotation == obj:
      return alias
  if typing.get_origin(annotation) in (typing.Union, types.UnionType):
    members = list(dict.fromkeys(_union_members(annotation)))
    names = []
    for obj, alias in aliases:
      parts = _union_members(obj)
      if len(parts) > 1 and all(p in members for p in parts):
        names.append(alias)
        members = [m for m in members if m not in parts]
    return " | ".join(sorted(names + [render(m, lib) for m in members]))
  origin = typing.get_origin(annotation)
  if origin is not None:
    args = ", ".join("..." if a is Ellipsis else
                     "[" + ", ".join(render(x, lib) for x in a) + "]" if isinstance(a, list) else
                     render(a, lib) for a in typing.get_args(annotation))
    name = getattr(origin, "__name__", str(origin))
    return f"{name}[{args}]" if args else name
  if annotation is type(None) or annotation is None:
    return "None"
  if annotation is typing.Any:
    return "Any"
  if isinstance(annotation, typing.ForwardRef):
    return annotation.__forward_arg__
  return getattr(annotation, "__name__", repr(annotation))


def annotation_problems(namespace, name, obj):
  problems = []
  theirs = _optax_counterpart(namespace, name)
  for p in _parameters(obj):
    ours = p.annotation
    if isinstance(ours, str) or isinstance(ours, typing.ForwardRef):
      problems.append(f"{p.name}: the annotation is the string {ours!r}, not a type")
      continue
    their = theirs[p.name].annotation if p.name in theirs else None
    if _anyish(ours):
      if (name, p.name) not in GENUINELY_ANY and not (their is not None and _anyish(their)):
        problems.append(f"{p.name}: typed {ours!r}")
      continue
    if their is None or _anyish(their) or isinstance(their, str):
      continue
    r_ours, r_theirs = render(ours, "steadax"), render(their, "optax")
    if "Any" in re.findall(r"\w+", r_ours) and "Any" not in re.findall(r"\w+", r_theirs):
      problems.append(f"{p.name}: {r_ours} is vaguer than Optax's {r_theirs}")
  return problems


_ENTRY = re.compile(r"^(\s*)\**(\w+)(?: \([^)]*\))?:\s*(\S.*)?$")


def described_names(doc):
  """The names given a description in the ``Args:`` / ``Attributes:`` sections of ``doc``."""
  names, section, indent = set(), False, None
  for line in (doc or "").splitlines():
    stripped = line.strip()
    if re.fullmatch(r"(Args|Arguments|Attributes|Parameters|Keyword Args):", stripped):
      section, indent = True, None
      continue
    if section and stripped and not line.startswith(" ") and stripped.endswith(":"):
      section = False  # the next top-level section
    if not section or not stripped:
      continue
    match = _ENTRY.match(line)
    level = len(line) - len(line.lstrip())
    if indent is None and match:
      indent = level
    if match and level == indent and (match.group(3) or "").strip() not in ("", "<shared>"):
      names.add(match.group(2))
    elif level < (indent or 0):
      section = False
  return names


def description_problems(obj):
  doc = inspect.getdoc(obj) or ""
  if isinstance(obj, type) and not hasattr(obj, "_fields"):
    # A class built by calling it: its __init__ documents the arguments when the class does not.
    doc += "\n" + (inspect.getdoc(obj.__init__) or "")
  described = described_names(doc)
  return [p.name for p in _parameters(obj) if p.name not in described]


IDS = [f"{ns or 'steadax'}.{name}" for ns, name, _ in CALLABLES]


def test_the_walk_sees_the_surface():
  names = {name for _, name, _ in CALLABLES}
  assert {"adamw", "sgd", "chain", "ScaleByAdamState", "MultiSteps", "softmax_cross_entropy",
          "check_transformation", "save"} <= names
  assert len(CALLABLES) > 350


@pytest.mark.parametrize("namespace,name,obj", CALLABLES, ids=IDS)
def test_parameters_are_typed_as_optax_types_them(namespace, name, obj):
  assert not annotation_problems(namespace, name, obj)


@pytest.mark.parametrize("namespace,name,obj", CALLABLES, ids=IDS)
def test_parameters_are_described(namespace, name, obj):
  assert not description_problems(obj), f"no description in the docstring: {description_problems(obj)}"


def test_annotations_are_objects_that_optax_introspection_accepts():
  # What Optax's tests ask of a learning rate (optax/schedules/_schedule_test.py): the annotation
  # is ScalarOrSchedule itself, equal to Optax's alias.
  annotation = inspect.signature(steadax.adam).parameters["learning_rate"].annotation
  assert annotation == optax.ScalarOrSchedule
  assert annotation is steadax.ScalarOrSchedule if hasattr(steadax, "ScalarOrSchedule") else True
  assert inspect.signature(steadax.adamw).parameters["mask"].annotation is not typing.Any
  assert not any("from __future__ import annotations" in p.read_text() for p in SRC.rglob("*.py"))


def test_help_describes_every_parameter_of_adamw():
  text = pydoc.render_doc(steadax.adamw, renderer=pydoc.plaintext)
  for parameter in inspect.signature(steadax.adamw).parameters:
    assert re.search(rf"^\s+{parameter}: \w", text, flags=re.M), parameter
  assert "<shared>" not in text
  signature = text.split("\n")[2]  # adamw(learning_rate: Union[float, ...
  assert ": Any" not in signature and "learning_rate: Union[float" in signature
