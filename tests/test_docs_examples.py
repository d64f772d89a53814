"""Every Python block of README.md and docs/*.md runs as a reader copies it: alone, in a fresh process.

Each block is run by ``python -c <block>`` in a new interpreter (one subprocess per block), in an
empty temporary directory, with nothing injected: no imports, no ``params``, no names from the
page's earlier blocks, and none of the suite's configuration (conftest.py's strict dtype promotion,
rank promotion and strict contract mode live in the pytest process only; the JAX_ENABLE_X64 and
XLA_FLAGS variables are removed, so the block sees JAX's and XLA's defaults, not the suite's cheap
code generation of tests/compile_flags.py). A block that uses a name it does not
define or import fails with the NameError the reader would see. Blocks whose first line says
``# not run`` are sketches (the page says why); there is one, docs/internals.md's outline of a
transformation written with the private core's names.

Why a process per block and not a cheaper runner that ``exec``s each block in a fresh namespace:
such a runner shares ``sys.modules`` (a block using ``jax.experimental.x`` without importing it
passes when an earlier block imported it), JAX's global configuration, registered pytree nodes and
import hooks between blocks, so it checks less than a fresh interpreter. The price is one JAX
import per block (about 1 CPU-s; the whole file about 60 CPU-s on this project's 2-core CI, split
across the xdist workers, compiled programs shared through the persistent compilation cache that
``make test`` exports to the subprocesses). Run in the x64-off pass only (``x32_only``): the block
sees the same defaults in both passes.

A block's warnings are failures too: a reader's copy should not print one.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

from tests.compile_flags import defaults_env

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _blocks(path):
  """(index, code) of the page's ```python blocks, except sketches whose first line says ``# not run``."""
  blocks = re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)
  return [(i, b) for i, b in enumerate(blocks) if not b.lstrip().startswith("# not run")]


CASES = [(p, i, b) for p in DOCS for i, b in _blocks(p)]


def run_alone(code, cwd):
  """Runs ``code`` as ``python -c code`` in a fresh interpreter; returns the CompletedProcess."""
  env = defaults_env()
  return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                        text=True, timeout=900, check=False)  # a hang, not a slow machine


@pytest.mark.x32_only
@pytest.mark.parametrize("path,index,code", CASES, ids=[f"{p.name}-{i}" for p, i, _ in CASES])
def test_markdown_python_block_runs_alone(path, index, code, tmp_path):
  result = run_alone(code, tmp_path)
  assert result.returncode == 0, f"{path.name}, block {index}:\n{result.stderr}"
  warned = [line for line in result.stderr.splitlines() if re.search(r"\w+Warning: ", line)]
  assert not warned, f"{path.name}, block {index} warns:\n{result.stderr}"


@pytest.mark.x32_only
def test_a_block_gets_nothing_injected(tmp_path):
  # The check itself: a block using a name it did not import fails as it would for a reader, and
  # the suite's strict dtype promotion does not reach it (JAX's default promotion applies).
  missing = run_alone("x = jnp.ones(2)\n", tmp_path)
  assert missing.returncode != 0 and "NameError: name 'jnp' is not defined" in missing.stderr
  mixed = run_alone("import os, jax, jax.numpy as jnp\n"
                    "assert not jax.config.jax_enable_x64 and 'XLA_FLAGS' not in os.environ\n"
                    "jnp.ones(2, jnp.int32) + jnp.ones(2, jnp.bfloat16)\n", tmp_path)
  assert mixed.returncode == 0, mixed.stderr


def test_sketches_say_why_they_are_not_run():
  # A block skipped as `# not run` names its reason on that line, and the runnable ones are most.
  for path in DOCS:
    for block in re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S):
      first = block.lstrip().splitlines()[0]
      if first.startswith("# not run"):
        assert re.match(r"# not run: \S", first), f"{path.name}: `{first}` gives no reason"
  assert len(CASES) >= 55
