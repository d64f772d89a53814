"""The Python examples of README.md and docs/*.md run as written."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _blocks(path):
  """Python blocks of a page, except sketches whose first line says ``# not run``."""
  blocks = re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)
  return [b for b in blocks if not b.lstrip().startswith("# not run")]


def _namespace():
  # Pages may assume the usual imports, as docstring examples do.
  import jax
  import jax.numpy as jnp

  import steadax

  # ... and a small model's params, grads and loss where a snippet shows one step.
  params = {"w": jnp.ones((3, 2), jnp.float32), "b": jnp.zeros(2, jnp.float32)}
  grads = jax.tree_util.tree_map(lambda p: jnp.full_like(p, 0.1), params)
  return {"jax": jax, "jnp": jnp, "steadax": steadax, "optax": steadax,
          "params": params, "grads": grads, "loss": jnp.asarray(1.0, jnp.float32)}


CASES = [(p, i, b) for p in DOCS for i, b in enumerate(_blocks(p))]

# page -> (blocks already run, their namespace): a page's next block continues where the previous
# test left off instead of running every earlier block again (tests of a page run in order).
_PAGES: dict = {}


def _namespace_before(path, index):
  """A namespace in which blocks ``0 .. index - 1`` of the page have run, in order."""
  done, namespace = _PAGES.pop(path, (0, None))  # popped: a failing block leaves nothing half-run
  if namespace is None or done > index:
    done, namespace = 0, _namespace()
  for earlier in _blocks(path)[done:index]:
    exec(compile(earlier, f"{path.name}[earlier]", "exec"), namespace)  # noqa: S102
  return namespace


@pytest.mark.x32_only
@pytest.mark.parametrize("path,index,code", CASES, ids=[f"{p.name}-{i}" for p, i, _ in CASES])
def test_markdown_python_blocks_run(path, index, code):
  # Blocks of one page share a namespace, in order, like a reader running them one after another.
  namespace = _namespace_before(path, index)
  exec(compile(code, f"{path.name}[{index}]", "exec"), namespace)  # noqa: S102
  _PAGES[path] = (index + 1, namespace)
