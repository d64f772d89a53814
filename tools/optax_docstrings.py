"""Runs Optax's own docstring examples with Optax and with optax resolved to steadax, and compares.

`make optax-docstrings` (not part of make test). The installed Optax's docstrings (its public
modules and `optax._src`) hold 93 example blocks, 842 examples. Each block runs twice in a child
process, as `doctest` runs it (one namespace per block, in order): once in a plain interpreter
(Optax), once under `python -m steadax.as_optax` (every `import optax` resolved to steadax). What
is compared is what each example printed (or the exception it raised), not Optax's expected text:
some of Optax's own examples do not print what their docstring says.

A difference is a bug of steadax's or a documented decision; the decisions are listed in KNOWN with
where they are documented. Exit status 1 on a difference not in KNOWN, or a KNOWN one that is gone.

Usage (from the repository root): python tools/optax_docstrings.py [--out DIR]
"""

import argparse
import doctest
import glob
import importlib
import io
import json
import os
import pkgutil
import subprocess
import sys
import traceback
import warnings

# (docstring, example index) -> why it differs, and where that is documented.
KNOWN = {
    ("optax._src.alias.rprop", 8): "Optax 0.2.8 returns the previous step's update (docs/migrating.md)",
    ("optax._src.transform.centralize", 6):
        "integer gradients: integer leaves get zero updates in their own dtype (docs/contract.md)",
    ("optax._src.utils.x64_precision", 0): "no steadax counterpart: the clear ImportError (docs/migrating.md)",
    ("optax._src.utils.x64_precision", 1): "follows from example 0",
    ("optax._src.utils.x64_precision", 2): "follows from example 0",
    ("optax.experimental._aggregating.add_mean_variance_to_opt", 17):
        "the example fails in Optax too; steadax names the per-example gradient's shape mismatch "
        "first (docs/guarantees.md)",
    ("optax.tree_utils._state_utils.tree_set", 7):
        "tree_set keeps the state's types: count stays int32 (docs/migrating.md)",
}

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def collect(out: str) -> None:
  """Writes ``{docstring name: [(source, want), ...]}`` of the installed Optax to ``out``."""
  import optax
  root = os.path.dirname(optax.__file__)
  names = ["optax"] + [m.name for m in pkgutil.walk_packages(optax.__path__, "optax.")]
  names += ["optax._src." + os.path.basename(f)[:-3] for f in sorted(glob.glob(root + "/_src/*.py"))
            if not f.endswith("__init__.py")]
  found = {}
  finder = doctest.DocTestFinder(exclude_empty=True)
  for name in names:
    if name.rsplit(".", 1)[-1].endswith("_test") or "test_utils" in name:
      continue
    try:
      module = importlib.import_module(name)
    except Exception:  # a module Optax itself cannot import here
      continue
    for test in finder.find(module, name):
      if test.examples and test.name not in found:
        found[test.name] = [(e.source, e.want) for e in test.examples]
  with open(out, "w") as f:
    json.dump(found, f)


def run(examples: str, out: str) -> None:
  """Runs each block of ``examples``; writes ``{name: [what each example printed]}`` to ``out``."""
  results = {}
  for name, block in sorted(json.load(open(examples)).items()):
    got: list = []

    class Runner(doctest.DocTestRunner):
      def report_success(self, out, test, example, g):
        got.append(g)

      def report_failure(self, out, test, example, g):
        got.append(g)

      def report_unexpected_exception(self, out, test, example, exc_info):
        got.append("raised " + "".join(traceback.format_exception_only(*exc_info[:2])).strip())

    test = doctest.DocTest([doctest.Example(s, w) for s, w in block], {"__name__": "__main__"}, name,
                           None, 0, None)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      Runner(optionflags=FLAGS).run(test, out=io.StringIO().write, clear_globs=True)
    results[name] = got
  with open(out, "w") as f:
    json.dump(results, f)


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", default="build/optax-docstrings")
  args = parser.parse_args()
  os.makedirs(args.out, exist_ok=True)
  examples, mine = os.path.join(args.out, "examples.json"), os.path.abspath(__file__)
  env = {**os.environ, "PYTHONPATH": os.path.abspath("src")}
  subprocess.run([sys.executable, mine, "--collect", examples], check=True, env=env)
  outs = {}
  for backend, prefix in (("optax", []), ("steadax", ["-m", "steadax.as_optax"])):
    outs[backend] = os.path.join(args.out, f"{backend}.json")
    subprocess.run([sys.executable, *prefix, mine, "--run", examples, outs[backend]], check=True,
                   env=env, cwd=args.out)
  theirs, ours = (json.load(open(outs[b])) for b in ("optax", "steadax"))
  total = same = 0
  differ = {}
  for name in sorted(theirs):
    for i, (a, b) in enumerate(zip(theirs[name], ours[name])):
      total += 1
      if a == b:
        same += 1
      else:
        differ[(name, i)] = (a, b)
  new = {k: v for k, v in differ.items() if k not in KNOWN}
  gone = sorted(set(KNOWN) - set(differ))
  print(f"{len(theirs)} docstrings, {total} examples: {same} print the same with steadax, "
        f"{len(differ) - len(new)} differ as documented")
  for (name, i), reason in sorted(KNOWN.items()):
    if (name, i) in differ:
      print(f"  documented: {name} example {i}: {reason}")
  for (name, i), (a, b) in sorted(new.items()):
    print(f"NEW DIFFERENCE {name} example {i}:\n-- Optax:\n{a}\n-- steadax:\n{b}")
  for name, i in gone:
    print(f"GONE (remove from KNOWN): {name} example {i}")
  return 1 if new or gone else 0


if __name__ == "__main__":
  if sys.argv[1:2] == ["--collect"]:
    collect(sys.argv[2])
  elif sys.argv[1:2] == ["--run"]:
    run(sys.argv[2], sys.argv[3])
  else:
    sys.exit(main())
