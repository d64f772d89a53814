"""MkDocs hook: the site's nav and its generated API pages.

* The nav of mkdocs.yml, minus pages that do not exist, plus pages it does not name. Several people
  add pages to docs/; a nav entry for a page that is not there yet would fail the strict build, and
  a new page left out of the nav would be built but unreachable. So the nav's entries whose file is
  missing are dropped (empty sections with them), and every ``docs/*.md`` page the nav does not
  name is appended under "More", titled by its first heading.
* The API reference: the nav entry ``api/`` becomes one page per public namespace (``steadax`` and
  every package under ``src/steadax`` whose name has no leading underscore, found on disk, so a new
  namespace gets its page), each rendering the namespace's docstrings with mkdocstrings (``:::``),
  plus an index. The pages are generated at build time; nothing is written to docs/.
"""

from __future__ import annotations

import ast
import pathlib
import re

from mkdocs.structure.files import File

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "steadax"
API = "api/"


def _namespaces():
  """``steadax`` and its public subpackages (dotted names), in a stable order."""
  found = ["steadax"]
  for init in sorted(PACKAGE.rglob("__init__.py")):
    parts = init.parent.relative_to(PACKAGE).parts
    if parts and not any(p.startswith("_") for p in parts):
      found.append(".".join(("steadax", *parts)))
  return found


def _summary(namespace):
  """The first line of a namespace's module docstring."""
  init = PACKAGE.joinpath(*namespace.split(".")[1:], "__init__.py")
  doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
  return doc.strip().splitlines()[0] if doc.strip() else ""


def _api_pages():
  """``{src_uri: markdown}`` of the API reference."""
  namespaces = _namespaces()
  rows = "\n".join(f"| [`{ns}`]({ns}.md) | {_summary(ns).replace('|', '/')} |" for ns in namespaces)
  pages = {f"{API}index.md": (
      "# API reference\n\n"
      "Generated from the docstrings at build time (`make docs`), one page per public namespace.\n"
      "The private modules (`steadax._core`, `steadax._optimizers`, ...) are not part of the API:\n"
      "every name is documented where it is re-exported.\n\n"
      f"| Namespace | |\n|---|---|\n{rows}\n")}
  for ns in namespaces:
    pages[f"{API}{ns}.md"] = f"# `{ns}`\n\n::: {ns}\n    options:\n      show_root_heading: false\n"
  return pages


def _prune(items, docs_dir, named, generated):
  kept = []
  for item in items:
    if isinstance(item, dict):
      (title, value), = item.items()
    else:
      title, value = None, item
    if value == API:  # the API reference section
      pages = list(generated)  # the index, then steadax, then its subpackages in order
      named.update(pages)
      kept.append({title or "API reference": [
          p if p.endswith("index.md") else {p[len(API):-3]: p} for p in pages]})
      continue
    if isinstance(value, list):
      value = _prune(value, docs_dir, named, generated)
      if value:
        kept.append({title: value})
      continue
    if (docs_dir / value).is_file():
      named.add(value)
      kept.append(item)
  return kept


def _title(path):
  match = re.search(r"^# (.+)$", path.read_text(encoding="utf-8"), flags=re.M)
  return match.group(1).strip() if match else path.stem


def on_config(config):
  """Builds the nav: missing pages dropped, the API section expanded, unnamed pages appended."""
  if not config.nav:
    return config
  docs_dir = pathlib.Path(config.docs_dir)
  named: set[str] = set()
  nav = _prune(config.nav, docs_dir, named, _api_pages())
  extra = [{_title(p): p.name} for p in sorted(docs_dir.glob("*.md")) if p.name not in named]
  if extra:
    nav.append({"More": extra})
  config.nav = nav
  return config


def on_files(files, config):
  """Adds the generated API pages."""
  for uri, content in _api_pages().items():
    files.append(File.generated(config, uri, content=content))
  return files
