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
import hooks between blocks, so it checks less than a fresh interpreter. What a new interpreter
costs is its JAX import, and every block uses jax (directly, or through steadax) before it computes
anything: so each block runs in a child forked from a server that has
run ``import jax`` and nothing else, in the block's environment (tests/fresh_python.py, which lists
what the child shares with a reader's ``python -c``: the modules ``import jax`` loads, no backend,
no thread, the same traceback and exit status). A block that writes ``os.environ`` still gets a
new interpreter: JAX reads its ``JAX_*`` variables at import. Compiled programs are shared through
the persistent compilation cache that ``make test`` exports to the children. Run in the x64-off
pass only (``x32_only``): the block sees the same defaults in both passes. Measured on 12 blocks
(load 11): 1.8 CPU-s a block in a new interpreter, 1.4 forked; the file 124 -> 82 CPU-s.

A block's warnings are failures too: a reader's copy should not print one.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

from tests.compile_flags import defaults_env
from tests.fresh_python import run_python

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _blocks(path):
  """(index, code) of the page's ```python blocks, except sketches whose first line says ``# not run``."""
  blocks = re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)
  return [(i, b) for i, b in enumerate(blocks) if not b.lstrip().startswith("# not run")]


CASES = [(p, i, b) for p in DOCS for i, b in _blocks(p)]


_WRITES_ENVIRONMENT = re.compile(
    r"os\.environ\s*\[[^\]]*\]\s*=|os\.environ\.(update|setdefault|pop|clear)\b|del\s+os\.environ|"
    r"os\.(putenv|unsetenv)\b")


def writes_environment(code):
  """Whether a block sets or removes environment variables (JAX reads its own at import)."""
  return _WRITES_ENVIRONMENT.search(code) is not None


def run_alone(code, cwd):
  """Runs ``code`` as ``python -c code`` in a fresh interpreter (forked after ``import jax``
  unless it writes the environment); returns its exit status, stdout and stderr."""
  env = defaults_env()
  if writes_environment(code):
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900, check=False)  # a hang, not a slow machine
  return run_python(code, str(cwd), env, timeout=900)


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


@pytest.mark.x32_only
def test_a_forked_block_is_what_python_c_is_after_import_jax(tmp_path):
  # The fork server's child against a new interpreter, on what a block can see: the modules after
  # `import jax`, one thread, XLA_FLAGS read at the first computation (so a block may set it),
  # JAX's defaults, and the exit status and stderr of a failure, a warning and sys.exit.
  probe = ("import json, os, sys, jax\n"
           "print(json.dumps([sorted(sys.modules), sys.argv, sys.path[0], __name__, '__file__' in dir(),"
           " jax.config.jax_enable_x64, jax.config.jax_numpy_dtype_promotion, 'XLA_FLAGS' in os.environ]))\n")
  forked, fresh = run_python(probe, str(tmp_path), defaults_env(), 600), subprocess.run(
      [sys.executable, "-c", probe], cwd=tmp_path, env=defaults_env(), capture_output=True, text=True, timeout=600)
  assert forked.returncode == fresh.returncode == 0, forked.stderr + fresh.stderr
  assert forked.stdout == fresh.stdout
  threads = run_python("import os\nprint(len(os.listdir('/proc/self/task')))", str(tmp_path), defaults_env(), 600)
  assert threads.stdout == "1\n", threads
  devices = ("import os\nos.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=3'\n"
             "import jax\nprint(jax.device_count())")
  assert run_python(devices, str(tmp_path), defaults_env(), 600).stdout == "3\n"
  for code in ("import jax\nx = jnp.ones(2)\n", "import jax\nraise ValueError('at line 2')\n",
               "import warnings\nwarnings.warn('a warning')\n", "import sys\nsys.exit('stopped')\n",
               "import sys\nsys.exit(3)\n", "def f(:\n"):
    forked = run_python(code, str(tmp_path), defaults_env(), 600)
    fresh = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=defaults_env(), capture_output=True,
                           text=True, timeout=600)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr), code
  # The blocks that set environment variables get a new interpreter; reading one is no reason.
  for code in ("os.environ['XLA_FLAGS'] = '--x'", "os.environ.update(A='1')", "os.environ.setdefault('A', '1')",
               "os.environ.pop('A')", "del os.environ['A']", "os.putenv('A', '1')"):
    assert writes_environment(code), code
  assert not writes_environment("import os\nprint(os.environ.get('HOME'), 'XLA_FLAGS' in os.environ)")


def test_sketches_say_why_they_are_not_run():
  # A block skipped as `# not run` names its reason on that line, and the runnable ones are most.
  for path in DOCS:
    for block in re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S):
      first = block.lstrip().splitlines()[0]
      if first.startswith("# not run"):
        assert re.match(r"# not run: \S", first), f"{path.name}: `{first}` gives no reason"
  assert len(CASES) >= 55
