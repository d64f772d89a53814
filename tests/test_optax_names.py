"""Every name Optax 0.2.8 resolves resolves in steadax, and warns iff Optax warns.

The walk covers each public package of Optax (found with ``pkgutil``, so a namespace added by a
later Optax is walked too) and, in each, the names of ``dir()`` plus those served only by the
module's ``__getattr__`` deprecation table (Optax keeps it in ``_deprecations``). Reading a name
in Optax either gives an object silently, gives one with a ``DeprecationWarning``, or raises
``AttributeError`` (a deprecation Optax accelerated, ``optax.monte_carlo``); steadax does the same.
Modules Optax merely imports (``functools``, ``typing`` in ``optax.tree_utils``) are not its names.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax


def _walk(module, prefix=""):
  names = {n for n in dir(module) if not n.startswith("_")}
  names |= set(getattr(module, "_deprecations", {}))
  found = []
  for name in sorted(names):
    if name in dir(module):
      obj = getattr(module, name)
      if inspect.ismodule(obj) and not obj.__name__.startswith("optax."):
        continue  # a module Optax imports for itself
    found.append(prefix + name)
  for info in pkgutil.iter_modules(getattr(module, "__path__", [])):
    if not info.name.startswith("_") and not info.name.endswith("_test"):
      sub = importlib.import_module(f"{module.__name__}.{info.name}")
      found.extend(_walk(sub, f"{prefix}{info.name}."))
  return found


def _resolve(root, dotted):
  """``('ok' | 'warns' | 'raises', object or message, warning messages)``."""
  obj = root
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
      for part in dotted.split("."):
        obj = getattr(obj, part)
    except AttributeError as e:
      return "raises", str(e), []
  messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
  return ("warns" if messages else "ok"), obj, messages


with warnings.catch_warnings():
  warnings.simplefilter("ignore")
  OPTAX_NAMES = _walk(optax)
DEPRECATED = [n for n in OPTAX_NAMES if _resolve(optax, n)[0] != "ok"]


def test_the_walk_sees_optax_deprecation_tables():
  # The walk must reach names that only a module __getattr__ serves, or the test below is vacuous.
  assert len(OPTAX_NAMES) > 400
  assert {"dpsgd", "differentially_private_aggregate", "DifferentiallyPrivateAggregateState",
          "monte_carlo", "tree_utils.tree_l2_norm", "tree_utils.tree_scalar_mul",
          "tree_utils.tree_add_scalar_mul", "tree_utils.tree_l1_norm",
          "tree_utils.tree_linf_norm"} <= set(DEPRECATED)


def test_every_optax_name_resolves_and_warns_iff_optax_warns():
  problems = []
  for name in OPTAX_NAMES:
    theirs, ours = _resolve(optax, name), _resolve(steadax, name)
    if theirs[0] != ours[0]:
      problems.append(f"{name}: optax {theirs[0]}, steadax {ours[0]} ({ours[1] if ours[0] == 'raises' else ''})")
    elif ours[0] == "warns":
      # The message names the name and its replacement, which resolves silently. (Optax's message
      # for tree_add_scalar_mul names tree_scalar_mul and tree_scale, a copy-paste slip steadax
      # does not copy.)
      message = ours[2][0]
      replacement = message.split("use ", 1)[1].split(" ", 1)[0].split("(", 1)[0]
      if not message.startswith(f"steadax.{name} is deprecated") or not replacement.startswith("steadax."):
        problems.append(f"{name}: steadax's warning {message!r} does not name it and its replacement")
      elif _resolve(steadax, replacement.removeprefix("steadax."))[0] != "ok":
        problems.append(f"{name}: the replacement {replacement} does not resolve silently")
  assert not problems, "\n".join(problems)


def test_deprecated_names_warn_with_pytest():
  with pytest.deprecated_call(match="steadax.contrib.dpsgd"):
    dpsgd = steadax.dpsgd
  assert dpsgd is steadax.contrib.dpsgd
  with pytest.deprecated_call(match="tree_norm"):
    steadax.tree_utils.tree_l2_norm  # noqa: B018
  with pytest.raises(AttributeError, match="monte_carlo"):
    steadax.monte_carlo  # noqa: B018
  with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
    steadax.tree_utils.not_a_name  # noqa: B018
  # Not listed by dir(), as in Optax.
  assert "dpsgd" not in dir(steadax) and "tree_l2_norm" not in dir(steadax.tree_utils)


TREE_X = {"a": jnp.array([3.0, -4.0]), "b": jnp.array(-12.0)}
TREE_Y = {"a": jnp.array([1.0, 2.0]), "b": jnp.array(0.5)}
# name -> call on the resolved object; the alias computes what Optax's computes.
TREE_CALLS = {
    "tree_scalar_mul": lambda f: f(2.0, TREE_X),
    "tree_add_scalar_mul": lambda f: f(TREE_X, 0.5, TREE_Y),
    "tree_l1_norm": lambda f: f(TREE_X),
    "tree_l2_norm": lambda f: f(TREE_X),
    "tree_linf_norm": lambda f: f(TREE_X),
}


@pytest.mark.x32_only
@pytest.mark.parametrize("name", sorted(TREE_CALLS))
def test_tree_utils_aliases_compute_what_optax_computes(name):
  call = TREE_CALLS[name]
  with pytest.deprecated_call():
    theirs = call(getattr(optax.tree_utils, name))
  with pytest.deprecated_call():
    ours = call(getattr(steadax.tree_utils, name))
  for a, b in zip(np.atleast_1d(theirs) if not isinstance(theirs, dict) else theirs.values(),
                  np.atleast_1d(ours) if not isinstance(ours, dict) else ours.values()):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-6)


@pytest.mark.x32_only
def test_deprecated_dpsgd_trains_like_contrib_dpsgd():
  import jax
  params = {"w": jnp.array([1.0, -2.0])}
  grads = {"w": jnp.array([[0.5, 0.5], [1.0, -1.0]])}  # per-example gradients
  with pytest.deprecated_call():
    tx = steadax.dpsgd(0.1, l2_norm_clip=1.0, noise_multiplier=0.0, seed=0)
  reference = steadax.contrib.dpsgd(0.1, l2_norm_clip=1.0, noise_multiplier=0.0, seed=0)
  ours, _ = tx.update(grads, tx.init(params), params)
  expected, _ = reference.update(grads, reference.init(params), params)
  np.testing.assert_array_equal(np.asarray(ours["w"]), np.asarray(expected["w"]))


def _loss3(p, x, y):
  return jnp.sum((x @ p["w"] - y) ** 2)


_X3, _Y3, _P3 = jnp.array([[1.0, 2.0]]), jnp.array([0.0]), {"w": jnp.zeros(2)}
# Functions Optax 0.2.8 warns about when called (not when read): name -> call on the module.
CALL_DEPRECATIONS = {
    "global_norm": lambda m: m.global_norm({"a": jnp.ones(2)}),
    "optimistic_adam": lambda m: m.optimistic_adam(0.1),
    "inject_stateful_hyperparams": lambda m: m.inject_stateful_hyperparams(m.sgd)(learning_rate=0.1),
    "second_order.hvp": lambda m: m.second_order.hvp(_loss3, jnp.ones(2), _P3, _X3, _Y3),
    "second_order.hessian_diag": lambda m: m.second_order.hessian_diag(_loss3, _P3, _X3, _Y3),
    "second_order.fisher_diag": lambda m: m.second_order.fisher_diag(_loss3, _P3, _X3, _Y3),
}


@pytest.mark.x32_only
@pytest.mark.parametrize("name", sorted(CALL_DEPRECATIONS))
def test_calls_optax_deprecates_warn_where_optax_warns(name):
  # Where a warning is attributed decides whether Python's default filters show it (only
  # ``__main__``'s DeprecationWarnings are shown): inside the library, or at the caller's line.
  call = CALL_DEPRECATIONS[name]
  with pytest.warns(DeprecationWarning) as theirs:
    call(optax)
  with pytest.warns(DeprecationWarning) as ours:
    call(steadax)
  # The first warning is the call's (Optax's hessian_diag warns again from its inner hvp call).
  theirs_first = [w for w in theirs if w.category is DeprecationWarning][0]
  ours_first = [w for w in ours if w.category is DeprecationWarning][0]
  at_caller = theirs_first.filename == __file__
  assert (ours_first.filename == __file__) == at_caller, (name, ours_first.filename)
  if not at_caller:  # inside the library: a steadax module
    assert "steadax" in ours_first.filename, (name, ours_first.filename)


# A script's lines, one deprecated use each; run as ``__main__`` under Python's default filters.
_SCRIPT = """\
import jax.numpy as jnp, {m}
{m}.global_norm([jnp.ones(2)])
{m}.optimistic_adam(0.1)
{m}.inject_stateful_hyperparams({m}.sgd)(learning_rate=0.1)
{m}.second_order.hvp(lambda p, x, y: jnp.sum(p ** 2), jnp.ones(2), jnp.ones(2), jnp.ones(1), jnp.ones(1))
{m}.losses.convex_kl_divergence(jnp.zeros(2), jnp.ones(2))
{m}.tree_utils.tree_l2_norm([jnp.ones(2)])
{m}.dpsgd
{m}.noisy_sgd(0.1, seed=0)
"""


@pytest.mark.x32_only
def test_a_script_sees_the_deprecation_warnings_optax_shows_it(tmp_path):
  import os
  import re
  import subprocess
  import sys
  env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
  env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(steadax.__file__)),
                                       env.get("PYTHONPATH", "")])
  shown = {}
  for m in ("optax", "steadax"):
    script = tmp_path / f"use_{m}.py"
    script.write_text(_SCRIPT.format(m=m))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    shown[m] = sorted({int(n) for n in re.findall(rf"{re.escape(script.name)}:(\d+): DeprecationWarning",
                                                   run.stderr)})
  assert shown["steadax"] == shown["optax"], shown
  assert shown["optax"], "the script shows none of Optax's warnings: it checks nothing"


@pytest.mark.x32_only
def test_steadax_itself_does_not_call_what_it_deprecates():
  import warnings
  params = {"w": jnp.ones(3)}
  with warnings.catch_warnings():
    warnings.simplefilter("error", DeprecationWarning)
    for tx in (steadax.clip_by_global_norm(1.0), steadax.contrib.sam(steadax.sgd(0.1), steadax.sgd(0.1)),
               steadax.normalize_by_update_norm()):
      tx.update(params, tx.init(params), params)
