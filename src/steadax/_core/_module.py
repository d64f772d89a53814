"""Frozen dataclass pytrees with declared fields: the base of every steadax object.

Every field of a ``Module`` subclass is declared as one of three kinds, and the kind alone decides
where the field goes when JAX flattens the object:

* ``hyper_field(default)``: a hyperparameter (a learning rate, a decay, an epsilon, a schedule). Always a
  child of the pytree, whatever it holds: a number is a leaf, a schedule Module is a subtree, None
  is an empty subtree. ``jax.jit(step)(tx, ...)`` traces a new learning rate instead of recompiling.
* ``child_field()``: an inner transformation or a tuple/dict of them. Always a child, like ``hyper_field``.
* ``static_field(default)``: a flag, a dtype, a mask, a user callable: always in the auxiliary
  data, so part of the compiled program's identity.

A fourth kind is computed, not given: ``derived_field(fn)``, a constant Optax derives from the
hyperparameters in Python (``1 - b2``). It is a leaf holding the float64 correction of ``fn``'s
float32 value, set when the object is built (and when it is rebuilt from Python numbers), so
``derived(obj, name)`` gives Optax's value whether the object is closed over or a ``jit`` argument.

An annotated field declared with none of these raises a TypeError when the class is defined.
The tree structure is a function of the class and of the static fields only: mapping every leaf of
a transformation to ``False`` or ``None`` (what ``eqx.partition`` and ``eqx.filter_jit`` do) gives a
tree with the same structure, and key paths (``GetAttrKey``) round-trip through ``tree_unflatten``.

Values are converted and checked when the object is *built* (``__init__``, ``.replace``), never
when JAX rebuilds it from leaves (``tree_unflatten`` skips ``__init__``), so traced or filtered
values pass through untouched:

* plain Python callables inside ``hyper_field``/``child_field`` fields are wrapped in ``Fn``, a Module with
  the callable as static data (no leaves), so the field stays a child and jit never sees a function
  leaf;
* ``hyper_field(check=...)`` validates concrete values (``b1=1.5`` raises from the factory, the class
  and ``.replace`` alike) and skips tracers and non-numeric values.

Equality is by value: two Modules are equal when they have the same class, equal static fields
(unhashable static values, such as a mask tree, by identity; callables by their own ``==``, which
is identity for a function) and equal leaves (same shape and value, compared with NaN equal to NaN;
a Python float and a 0-d array of the same value are equal, so ``adam(1e-3) == adam(1e-3)`` and a
restored hyperparameter array equals the code's float). Children (inner transformations, schedule
Modules, tuples of them) compare recursively. A traced leaf (inside ``jit``) equals only itself,
because its value is unknown. The hash is the tree structure's (the class and static fields of
every node), which equal Modules share: hashing never reads a leaf, so it works under tracing, and
a Module can be a dictionary key or a ``static_argnums`` argument.
"""

import dataclasses
import inspect
from collections.abc import Callable

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import numpy as np
from typing import Any, ClassVar, Literal, Self, cast, dataclass_transform, get_origin

from ._docs import called_factory
from ._policy import derived_correction, derived_value, hyperparam_dtype

__all__ = ["Module", "hyper_field", "child_field", "static_field", "derived_field", "derived", "Fn"]

_KIND = "steadax_kind"
_CHECK = "steadax_check"
_AS_GIVEN = "steadax_as_given"
_DERIVE = "steadax_derive"
_HYPER, _CHILD, _STATIC, _DERIVED = "hyper", "child", "static", "derived"


def _declare(kind: str, default: Any, default_factory: Any, check: Any, kwargs: dict) -> Any:
  metadata = dict(kwargs.pop("metadata", {}) or {})
  metadata[_KIND] = kind
  if check is not None:
    metadata[_CHECK] = check
  if default is not dataclasses.MISSING:
    kwargs["default"] = default
  if default_factory is not dataclasses.MISSING:
    kwargs["default_factory"] = default_factory
  return dataclasses.field(metadata=metadata, **kwargs)


def hyper_field(default: Any = dataclasses.MISSING, *, check: Callable | None = None,
          default_factory: Any = dataclasses.MISSING, as_given: bool = False, **kwargs: Any) -> Any:
  """Declare a hyperparameter field: always a pytree child (a leaf when it holds a number).

  Args:
    default: the default value (a number, a tuple of numbers, a schedule, None).
    check: ``check(owner, name, value)`` run on the value when the object is built; it should
      ignore tracers and non-numeric values (the helpers of ``_core._checks`` do).
    default_factory: as in ``dataclasses.field``.
    as_given: keep a concrete scalar exactly as given (a Python number, a numpy scalar, a strong
      or weakly typed jax array) instead of storing it as one canonical kind of leaf: for a value
      whose type is part of what the object returns, as a schedule's arguments are (Optax's
      schedules return the type of their arguments' arithmetic).
    **kwargs: passed to ``dataclasses.field``.

  Returns:
    A dataclass field.

  Example:
    >>> import jax, steadax
    >>> class Scale(steadax.Module):
    ...   factor: float = steadax.hyper_field(1.0)
    >>> jax.tree_util.tree_leaves(Scale(0.5))
    [0.5]
  """
  if as_given:
    kwargs["metadata"] = {**(kwargs.get("metadata") or {}), _AS_GIVEN: True}
  return _declare(_HYPER, default, default_factory, check, kwargs)


def child_field(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING,
          **kwargs: Any) -> Any:
  """Declare a field holding inner transformations (one, or a tuple/dict of them): a pytree child.

  Args:
    default: the default value.
    default_factory: as in ``dataclasses.field``.
    **kwargs: passed to ``dataclasses.field``.

  Returns:
    A dataclass field.

  Example:
    >>> import jax, steadax
    >>> class Wrap(steadax.Module):
    ...   inner: steadax.Module = steadax.child_field()
    >>> class Scale(steadax.Module):
    ...   factor: float = steadax.hyper_field(1.0)
    >>> len(jax.tree_util.tree_leaves(Wrap(Scale(2.0))))
    1
  """
  return _declare(_CHILD, default, default_factory, None, kwargs)


def static_field(default: Any = dataclasses.MISSING, *, check: Callable | None = None,
                 default_factory: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
  """Declare a static field: auxiliary data, part of the compiled program's identity.

  Flags, dtypes, masks, integer sizes used in Python control flow and user callables are static.
  Unhashable values (a mask tree) are compared by identity.

  Args:
    default: the default value.
    check: ``check(owner, name, value)`` run on the value whenever the object is built (any
      ``__init__``, ``.replace``), as for ``hyper_field``.
    default_factory: as in ``dataclasses.field``.
    **kwargs: passed to ``dataclasses.field``.

  Returns:
    A dataclass field.

  Example:
    >>> import jax, steadax
    >>> class Flagged(steadax.Module):
    ...   flag: bool = steadax.static_field(False)
    >>> jax.tree_util.tree_leaves(Flagged(True))
    []
  """
  return _declare(_STATIC, default, default_factory, check, kwargs)


def derived_field(fn: Callable[[Any], Any], *, init: Literal[False] = False) -> Any:
  """Declare a constant derived from the hyperparameters, as Optax computes it: ``fn(self)``.

  Optax computes ``1 - b2`` (Adam), ``2 / (1 - b2) - 1`` (RAdam) ... in Python from the numbers it
  closes over, in float64, rounded once where they meet an array. A transformation passed to
  ``jit`` as an argument holds float32 tracers instead (x64 off), and ``fn`` on them rounds
  differently. The field holds, as a leaf (``init=False``, no constructor argument), the float64
  correction of ``fn`` computed from the Python numbers when the object is built (and rebuilt from
  Python numbers, as ``tree_map`` does); ``derived(self, name)`` is ``fn(self)`` with it added
  where ``fn(self)`` is float32 (``_policy.derived_value``). Use the value, never the field.

  Args:
    fn: Optax's expression, a function of the object (``lambda t: 1 - t.b2``); it reads fields.
    init: always False: no constructor argument (declared for type checkers, PEP 681).

  Returns:
    A dataclass field.

  Example:
    >>> import jax, steadax
    >>> from steadax._core._module import derived, derived_field
    >>> class Decay(steadax.Module):
    ...   b2: float = steadax.hyper_field(0.999)
    ...   one_minus_b2: float = derived_field(lambda t: 1 - t.b2)
    >>> derived(Decay(), "one_minus_b2") == 1 - 0.999
    True
    >>> value = jax.jit(lambda t: derived(t, "one_minus_b2"))(Decay())  # float64 under x64
    >>> bool(value.astype("float32") == jax.numpy.float32(1 - 0.999))
    True
  """
  del init
  return _declare(_DERIVED, 0.0, dataclasses.MISSING, None,
                  {"init": False, "repr": False, "metadata": {_DERIVE: fn}})


def derived(obj: "Module", name: str) -> Any:
  """The value of the derived constant ``name`` of ``obj`` (see ``derived_field``).

  Args:
    obj: the Module.
    name: the derived field's name.

  Returns:
    ``fn(obj)``, exact as Optax computes it from Python numbers.
  """
  return derived_value(obj, type(obj)._derived_fields[name], obj.__dict__[name])


def _static_equal(a: Any, b: Any) -> bool:
  if a is b:
    return True
  if type(a) is not type(b):
    return False
  try:
    hash(a)
    hash(b)
  except TypeError:
    return False
  try:
    return bool(a == b)
  except Exception:  # pragma: no cover - exotic __eq__
    return False


def _static_hash(value: Any) -> int:
  try:
    return hash(value)
  except TypeError:
    return id(value)


class _Aux:
  """Auxiliary data of a Module: its static values, hashable even when one (a mask tree) is not."""

  __slots__ = ("values",)

  def __init__(self, values: tuple):
    self.values = values

  def __eq__(self, other: object) -> bool:
    if not isinstance(other, _Aux) or len(self.values) != len(other.values):
      return False
    return all(_static_equal(a, b) for a, b in zip(self.values, other.values))

  def __hash__(self) -> int:
    return hash(tuple(_static_hash(v) for v in self.values))

  def __repr__(self) -> str:
    return f"_Aux({self.values!r})"


def _leaf_equal(a: Any, b: Any) -> bool:
  """Leaf values equal: same shape and values (NaN equals NaN); tracers only to themselves."""
  if a is b:
    return True
  if isinstance(a, jax.core.Tracer) or isinstance(b, jax.core.Tracer):
    return False
  try:
    x, y = np.asarray(a), np.asarray(b)
  except Exception:  # pragma: no cover - a leaf numpy cannot read
    return _static_equal(a, b)
  if x.dtype == object or y.dtype == object:
    return _static_equal(a, b)
  if x.shape != y.shape:
    return False
  try:
    return bool(np.array_equal(x, y, equal_nan=True))
  except TypeError:  # equal_nan on dtypes without NaN (ints, bools, keys)
    return bool(np.array_equal(x, y))


def _is_plain_callable(x: Any) -> bool:
  return (
      callable(x)
      and not isinstance(x, (Module, type, np.ndarray, np.generic, jax.Array))
      and not hasattr(x, "_fields")  # an (init, update) NamedTuple stays a tuple of two
  )


def _freeze_callables(value: Any) -> Any:
  """Wrap plain callables found in a hyper/child value in ``Fn`` (so they are never leaves)."""
  if value is None or isinstance(value, Module):
    return value
  if _is_plain_callable(value):
    return Fn(value)
  if isinstance(value, (tuple, list, dict)):
    return jax.tree_util.tree_map(
        lambda x: Fn(x) if _is_plain_callable(x) else x,
        value,
        is_leaf=lambda x: isinstance(x, Module) or _is_plain_callable(x),
    )
  return value


def _as_python_number(leaf: Any) -> Any:
  """A concrete scalar hyperparameter in one of two kinds of leaf: a Python number, or a weakly typed
  0-d jax array.

  ``adam(np.float32(1e-3))``, ``adam(jnp.float32(1e-3))``, ``adam(jnp.array(1e-3))`` and
  ``adam(jnp.asarray(1e-3, jnp.float32))`` mean the same learning rate, but as ``jit`` arguments
  they were four kinds of leaf (numpy or jax, weak or strong), four cache keys: a step compiled for
  one was compiled again for the next. A 0-d value whose declared dtype
  (``_policy.hyperparam_dtype``: weak values and 32-bit ones declare what a Python number does) is
  the Python number's is stored as that number (numpy, host data, and Python numbers: what
  Flax NNX accepts in an optimizer's static fields) or as the weakly typed jax array of it (a jax
  array stays an array, which ``eqx.filter_jit`` traces; it holds numbers static), exactly: a
  float32 value is a Python float without rounding. A value that declares another dtype (a float64
  array under x64, a bfloat16 one) is kept: schedules evaluate in it, so it is a different program.
  Tracers, arrays with a shape, keys and other objects are kept as they are.
  """
  if type(leaf) in (bool, int, float, complex) or isinstance(leaf, jax.core.Tracer):
    return leaf
  if not isinstance(leaf, (np.ndarray, np.generic, jax.Array)) or np.ndim(leaf) != 0:
    return leaf
  dtype = leaf.dtype
  if not isinstance(dtype, np.dtype):  # typed PRNG keys (an extended dtype) and the like
    return leaf
  if dtype == np.bool_:
    return bool(leaf)
  kind = {"i": int, "u": int, "f": float, "c": complex}.get(dtype.kind)
  if kind is None:
    return leaf
  declared = jax.dtypes.canonicalize_dtype(hyperparam_dtype(leaf))
  if declared != jax.dtypes.canonicalize_dtype(hyperparam_dtype(kind(0))):
    return leaf
  number = kind(leaf.item())
  if not isinstance(leaf, jax.Array) or kind is int:
    return number
  if getattr(leaf, "weak_type", False):
    return leaf
  with jax.ensure_compile_time_eval():  # a concrete array even when built inside a trace
    return jax.numpy.asarray(number)


def _canonical_hyper(value: Any) -> Any:
  """``value`` with its concrete scalar leaves as Python numbers (``_as_python_number``); Modules
  (schedules) are left alone: their own fields are handled when they are built (schedules keep
  theirs as given)."""
  if value is None or isinstance(value, Module):
    return value
  if isinstance(value, (tuple, list, dict)):
    return jax.tree_util.tree_map(_as_python_number, value, is_leaf=lambda x: isinstance(x, Module))
  return _as_python_number(value)


def _is_concrete(value: Any) -> bool:
  return not any(isinstance(l, jax.core.Tracer) for l in jax.tree_util.tree_leaves(value))


def _finish(obj: Any) -> None:
  """What every built Module gets, whoever wrote its ``__init__``: every field's check run on its
  (concrete) value as given, then plain callables in dynamic fields wrapped in ``Fn`` and concrete
  scalar hyperparameters made one kind of leaf (``_canonical_hyper``; not in ``as_given`` fields)."""
  cls = type(obj)
  d = obj.__dict__
  for name in cls._derived_fields:
    d.setdefault(name, 0.0)  # no constructor argument: set below, once the fields are canonical
  if cls._field_checks:
    owner = getattr(obj, "owner", cls.__name__)
    factory = called_factory()
    for name, check in cls._field_checks:
      value = d[name]
      if _is_concrete(value):
        # The field's check is the one check of the value; the error names what the user called:
        # ``adam: b1 must lie in [0.0, 1.0)`` for ``adam(b1=1.0)``, and ``sm3 > scale_by_sm3: b1``
        # for ``sm3(momentum=1.0)``, whose argument has another name than the field.
        check(_named(owner, name, factory), name, value)
  for name in cls._dynamic_fields:
    value = d[name]
    frozen = _freeze_callables(value)
    if frozen is not value:
      object.__setattr__(obj, name, frozen)
  for name in cls._hyper_fields:
    value = d[name]
    canonical = _canonical_hyper(value)
    if canonical is not value:
      object.__setattr__(obj, name, canonical)
  for name, fn in cls._derived_fields.items():
    object.__setattr__(obj, name, derived_correction(obj, fn))


def _named(owner: str, field: str, factory: tuple[str, frozenset[str]] | None) -> str:
  """The name a failed check of ``owner``'s ``field`` gives: the public factory the user called
  (``_docs.called_factory``) when it takes an argument of that name, the path from it to ``owner``
  when it does not, ``owner`` itself outside any factory or inside its own."""
  if factory is None or factory[0] == owner:
    return owner
  name, parameters = factory
  return name if field in parameters else f"{name} > {owner}"


class _ModuleMeta(type):
  """Runs ``_finish`` after any ``__init__`` (the generated one or a class's own), as Equinox's
  metaclass runs its checks: no subclass can build an unchecked object."""

  def __call__(cls, *args: Any, **kwargs: Any) -> Any:
    obj = super().__call__(*args, **kwargs)
    if isinstance(obj, Module):  # a __new__ may return another class (function-pair adapters)
      _finish(obj)
    return obj

  @property
  def __signature__(cls) -> inspect.Signature:
    # ``inspect.signature(cls)`` would read this metaclass's ``__call__(*args, **kwargs)``: give
    # the constructor's, found as inspect finds it for a class without one (the ``__new__`` or
    # ``__init__`` defined closest in the MRO), without its first parameter.
    for base in cls.__mro__:
      for name in ("__new__", "__init__"):
        if name in base.__dict__ and base is not object:
          method = getattr(cls, name)
          parameters = list(inspect.signature(method).parameters.values())
          return inspect.Signature(parameters[1:], return_annotation=inspect.Signature.empty)
    return inspect.Signature()


# For type checkers: subclasses are frozen dataclasses whose fields are declared by these specifiers
# (``__init_subclass__`` applies ``dataclasses.dataclass`` at run time).
@dataclass_transform(frozen_default=True, eq_default=False,
                     field_specifiers=(hyper_field, child_field, static_field, derived_field,
                                       dataclasses.field))
class Module(metaclass=_ModuleMeta):
  """Base class: subclasses become frozen dataclasses registered as JAX pytrees.

  Every annotated field must be declared with ``hyper_field``, ``child_field`` or ``static_field``.

  Example:
    >>> import jax, steadax
    >>> class Scale(steadax.Module):
    ...   factor: float = steadax.hyper_field(1.0)
    ...   flag: bool = steadax.static_field(False)
    >>> tx = Scale(0.5)
    >>> jax.tree_util.tree_structure(jax.tree_util.tree_map(lambda _: False, tx)) == (
    ...     jax.tree_util.tree_structure(tx))
    True
  """

  def __init_subclass__(cls, **kwargs: Any) -> None:
    super().__init_subclass__(**kwargs)
    if "__annotations__" not in cls.__dict__:
      cls.__annotations__ = {}
    # Fields declared by a subclass body without hyper/child/static_field are an error: the
    # structure must never be inferred from a value.
    for name in cls.__dict__["__annotations__"]:
      annotation = cls.__dict__["__annotations__"][name]
      if annotation is ClassVar or get_origin(annotation) is ClassVar or (
          isinstance(annotation, str) and annotation.startswith(("ClassVar", "typing.ClassVar"))):
        continue
      default = cls.__dict__.get(name, dataclasses.MISSING)
      if not (isinstance(default, dataclasses.Field) and _KIND in default.metadata):
        raise TypeError(
            f"{cls.__qualname__}.{name}: declare the field with hyper_field(...), child_field(...) or "
            "static_field(...); steadax never decides a field's kind from its value."
        )
    dataclasses.dataclass(frozen=True, eq=False, repr=True)(cls)
    fields = dataclasses.fields(cast(Any, cls))
    dynamic = tuple(f.name for f in fields if f.metadata[_KIND] != _STATIC)
    # The hyperparameter fields whose concrete scalars ``_finish`` canonicalizes.
    hypers = tuple(f.name for f in fields
                   if f.metadata[_KIND] == _HYPER and not f.metadata.get(_AS_GIVEN, False))
    static = tuple(f.name for f in fields if f.metadata[_KIND] == _STATIC)
    checks = tuple((f.name, f.metadata[_CHECK]) for f in fields if _CHECK in f.metadata)
    derived_fields = {f.name: f.metadata[_DERIVE] for f in fields if f.metadata[_KIND] == _DERIVED}
    keys = tuple(jax.tree_util.GetAttrKey(n) for n in dynamic)
    cls._dynamic_fields = dynamic
    cls._static_fields = static
    cls._field_checks = checks
    cls._hyper_fields = hypers
    cls._derived_fields = derived_fields

    def flatten_with_keys(obj):
      d = obj.__dict__
      return [(k, d[n]) for k, n in zip(keys, dynamic)], _Aux(tuple(d[n] for n in static))

    def flatten(obj):
      d = obj.__dict__
      return [d[n] for n in dynamic], _Aux(tuple(d[n] for n in static))

    def unflatten(aux: _Aux, children):
      obj = object.__new__(cls)
      for name, value in zip(static, aux.values):
        object.__setattr__(obj, name, value)
      for name, value in zip(dynamic, children):
        object.__setattr__(obj, name, value)
      if derived_fields and not any(isinstance(c, jax.core.Tracer) for c in children):
        # Rebuilt from concrete leaves (``tree_map``, ``eqx.tree_at``): a correction follows the
        # Python numbers it stands for, not the old ones (a placeholder such as False is kept).
        for name, fn in derived_fields.items():
          if type(obj.__dict__[name]) is float:
            object.__setattr__(obj, name, derived_correction(obj, fn))
      return obj

    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)

  def __eq__(self, other: object) -> bool:
    if self is other:
      return True
    if type(other) is not type(self):
      return NotImplemented if not isinstance(other, Module) else False
    leaves_a, def_a = jax.tree_util.tree_flatten(self)
    leaves_b, def_b = jax.tree_util.tree_flatten(other)
    return def_a == def_b and all(_leaf_equal(a, b) for a, b in zip(leaves_a, leaves_b))

  def __ne__(self, other: object) -> bool:
    equal = self.__eq__(other)
    return equal if equal is NotImplemented else not equal

  def __hash__(self) -> int:
    return hash(jax.tree_util.tree_structure(self))

  def replace(self, **changes: Any) -> Self:
    """A copy with some fields changed, checked again as a new object is.

    Works on the fields (``dataclasses.fields``), whatever the class's constructor takes:
    ``__post_init__`` (where a class has one) and the fields' checks run on the copy.

    Args:
      **changes: new values of fields, by name.

    Returns:
      The copy.

    Example:
      >>> import steadax
      >>> steadax.MultiSteps(steadax.sgd(1.0), 2).replace(period=3).period
      3
    """
    names = {f.name for f in dataclasses.fields(cast(Any, self))}
    unknown = sorted(set(changes) - names)
    if unknown:
      raise TypeError(f"{type(self).__name__}.replace: no field named {', '.join(unknown)}; the "
                      f"fields are {', '.join(sorted(names))}.")
    new = object.__new__(type(self))
    for name, value in {**self.__dict__, **changes}.items():
      object.__setattr__(new, name, value)
    post_init = getattr(new, "__post_init__", None)
    if post_init is not None:
      post_init()
    _finish(new)
    return new


class Fn(Module):
  """A plain Python callable held as static data, so it can sit in a hyperparameter field.

  ``hyper_field`` and ``child_field`` fields wrap plain callables (a schedule written as a ``def``) in ``Fn``
  when the object is built; calling it calls the function.

  Attributes:
    fn: the callable (static: part of the compiled program's identity).

  Example:
    >>> import jax, steadax
    >>> f = steadax.Fn(lambda count: 2 * count)
    >>> f(3), jax.tree_util.tree_leaves(f)
    (6, [])
  """

  fn: Callable = static_field()

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    return self.fn(*args, **kwargs)

  def __getattr__(self, name: str) -> Any:
    # Attributes of the wrapped callable (an (init, update) pair's methods, a schedule's fields).
    if name.startswith("__") or name == "fn":
      raise AttributeError(name)
    return getattr(self.__dict__["fn"], name)
