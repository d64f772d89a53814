"""Mutation testing of the dtype policy: does the suite fail when a known dtype bug is injected?

Usage: ``make mutate`` (or ``.venv/bin/python tests/mutation/run.py [-k NAME] [-v]``).

The working tree is never touched: ``src/``, ``tests/``, ``conftest.py`` and ``pyproject.toml`` are
copied once to a temporary directory, each mutation is an exact-text substitution applied to the
copy (the script fails loudly when the original text is not found, so a mutation never silently
stops testing anything after the code moves), and a small fixed set of test ids runs against the
copy in one pytest process per mutation, with the copy's ``src`` first on ``PYTHONPATH``; that
process checks that ``steadax`` was imported from the copy before running pytest.

A mutation is *caught* when at least one of its tests fails. The script first runs every selected
test on the unmutated copy (they must pass, or the results mean nothing), then each mutation, and
exits non-zero if any mutation survives (or the baseline fails).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class Mutation:
  name: str
  what: str
  path: str        # relative to the repository root
  old: str         # exact text; must occur exactly `count` times
  new: str
  tests: tuple[str, ...]
  count: int = 1
  x64: bool = False  # run the tests with JAX_ENABLE_X64=1 (some bugs only show under x64)


_ADAM_LEAF = (
    "    def leaf(k, g, m, v):\n"
    "      return adam_step(k, g, m, v, self.nesterov)\n"
)


def _adam_leaf(body: str) -> str:
  return "    def leaf(k, g, m, v):\n      u, m, v = adam_step(k, g, m, v, self.nesterov)\n" + body


MUTATIONS = (
    Mutation(
        "a_update_float16",
        "scale_by_adam's leaf function rounds its update to float16",
        "src/steadax/transforms/_adam.py", _ADAM_LEAF,
        _adam_leaf("      return u.astype(jnp.float16), m, v\n"),
        ("tests/conformance/test_matrix.py::test_mixed_tree_all_forms[adam]",),
    ),
    Mutation(
        "b_drop_imaginary_part",
        "scale_by_adam's leaf function drops the imaginary part of the first moment",
        "src/steadax/transforms/_adam.py", _ADAM_LEAF,
        _adam_leaf("      return u, jnp.real(m), v\n"),
        ("tests/conformance/test_matrix.py::test_complex_all_forms[adam]",),
    ),
    Mutation(
        "c_counter_float32",
        "safe_increment returns a float32 counter",
        "src/steadax/_core/_policy.py",
        "    return jnp.where(count < top, count + jnp.asarray(1, dtype), top)\n",
        "    return jnp.where(count < top, count + jnp.asarray(1, dtype), top).astype(jnp.float32)\n",
        ("tests/conformance/test_matrix.py::test_mixed_tree_all_forms[adam]",),
    ),
    Mutation(
        "c_counter_int64_x64",
        "scale_by_adam's counter becomes int64 (visible only under x64)",
        "src/steadax/transforms/_adam.py",
        "    count = safe_increment(state.count)\n\n    def leaf(k, g, m, v):\n",
        "    count = safe_increment(state.count).astype(jnp.int64)\n\n    def leaf(k, g, m, v):\n",
        ("tests/conformance/test_matrix.py::test_mixed_tree_all_forms[adam]",),
        x64=True,
    ),
    Mutation(
        "d_no_cast_to_parameter_dtype",
        "leafwise returns the update without its one cast to the parameter's dtype",
        "src/steadax/_core/_leafwise.py",
        "        written.append(plan.write(j, value))\n",
        "        written.append(value if j == 0 else plan.write(j, value))\n",
        ("tests/core/test_contract.py::test_leafwise_writes_updates_in_the_parameter_dtype",),
    ),
    Mutation(
        "e_accumulator_through_bfloat16",
        "scale_by_adam rounds its first moment through bfloat16 on write",
        "src/steadax/transforms/_adam.py", _ADAM_LEAF,
        _adam_leaf("      return u, m.astype(jnp.bfloat16).astype(m.dtype), v\n"),
        ("tests/conformance/test_progress_and_optax.py::test_agrees_with_optax[adam]",),
    ),
    Mutation(
        "f_no_state_dtype_check",
        "the contract no longer compares state dtypes",
        "src/steadax/_core/_contract.py",
        "    bad_dtype = old_dtype != new_dtype\n",
        "    bad_dtype = False\n",
        ("tests/core/test_contract.py::test_dtype_drift_raises_in_strict_mode_naming_transformation_and_path",
         "tests/core/test_contract.py::test_dtype_drift_is_cast_back_outside_strict_mode"),
    ),
    Mutation(
        "g_no_leafwise_output_check",
        "leafwise no longer checks the leaf function's output dtypes (the contract must still see "
        "a float16 update)",
        "src/steadax/_core/_leafwise.py",
        "  if strict and value.dtype != want:\n",
        "  if False:\n",
        ("tests/core/test_core_v2.py::test_leafwise_rejects_rounding_inside_the_leaf_function",),
    ),
    Mutation(
        "h_no_contract_update_cast",
        "the contract no longer casts updates to the parameter's dtype",
        "src/steadax/_core/_contract.py",
        "      new = new.astype(target)\n    fixed.append(new)\n",
        "    fixed.append(new)\n",
        ("tests/core/test_contract.py::test_contract_casts_compute_dtype_updates_to_the_parameter_dtype",),
    ),
)


def _copy_tree(dest: Path) -> None:
  ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", "*.egg-info")
  shutil.copytree(ROOT / "src", dest / "src", ignore=ignore)
  shutil.copytree(ROOT / "tests", dest / "tests", ignore=ignore)
  for name in ("conftest.py", "pyproject.toml"):
    shutil.copy2(ROOT / name, dest / name)


# Runs in the child: refuses to test anything unless steadax comes from the mutated copy.
_RUNNER = """
import sys
root = sys.argv[1]
import steadax
if not steadax.__file__.startswith(root):
  sys.exit(f"mutation runner: steadax imported from {steadax.__file__}, not from the copy {root}")
import pytest
sys.exit(pytest.main(sys.argv[2:]))
"""


def _pytest(copy: Path, tests: tuple[str, ...], x64: bool, verbose: bool) -> tuple[int, str]:
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join([str(copy / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
  env["JAX_ENABLE_X64"] = "1" if x64 else "0"
  env["JAX_PLATFORMS"] = env.get("JAX_PLATFORMS", "cpu")
  env["PYTHONDONTWRITEBYTECODE"] = "1"
  cmd = [sys.executable, "-c", _RUNNER, str(copy / "src"), "-q", "-x", "-p", "no:xdist",
         "-p", "no:cacheprovider", "--rootdir", str(copy), *tests]
  proc = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True)
  out = proc.stdout + proc.stderr
  if verbose:
    print(out)
  return proc.returncode, out


def _tail(text: str, n: int = 6) -> str:
  return "\n".join("      " + line for line in text.strip().splitlines()[-n:])


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("-k", default="", help="run only the mutations whose name contains this")
  parser.add_argument("-v", action="store_true", help="print pytest's output")
  args = parser.parse_args(argv)
  selected = [m for m in MUTATIONS if args.k in m.name]
  start = time.time()
  with tempfile.TemporaryDirectory(prefix="steadax-mutate-") as tmp:
    copy = Path(tmp)
    _copy_tree(copy)
    # Every substitution must apply to the snapshot before anything runs: fail loudly if code moved.
    for m in selected:
      text = (copy / m.path).read_text()
      found = text.count(m.old)
      if found != m.count:
        print(f"ERROR {m.name}: expected {m.count} occurrence(s) of the original text in {m.path}, "
              f"found {found}; update the mutation to the current code:\n{m.old}")
        return 2

    for x64 in sorted({m.x64 for m in selected}):
      tests = tuple(dict.fromkeys(t for m in selected if m.x64 == x64 for t in m.tests))
      rc, out = _pytest(copy, tests, x64, args.v)
      if rc != 0:
        print(f"BASELINE FAILED (x64={x64}): the unmutated code fails its tests; fix that first.")
        print(_tail(out, 30))
        return 3
      print(f"baseline (x64={int(x64)}): {len(tests)} test ids pass on the unmutated copy")

    survivors = []
    for m in selected:
      target = copy / m.path
      original = target.read_text()
      target.write_text(original.replace(m.old, m.new))
      try:
        rc, out = _pytest(copy, m.tests, m.x64, args.v)
      finally:
        target.write_text(original)
      if rc == 1:
        print(f"caught    {m.name}: {m.what}")
      else:
        survivors.append(m.name)
        status = "SURVIVED" if rc == 0 else f"ERROR rc={rc}"
        print(f"{status:9s} {m.name}: {m.what}\n{_tail(out)}")
  print(f"{len(selected) - len(survivors)}/{len(selected)} mutations caught in {time.time() - start:.0f}s"
        + (f"; not caught: {', '.join(survivors)}" if survivors else ""))
  return 1 if survivors else 0


if __name__ == "__main__":
  sys.exit(main())
