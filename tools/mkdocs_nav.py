"""MkDocs hook: the nav of mkdocs.yml, minus pages that do not exist, plus pages it does not name.

Several people add pages to docs/; a nav entry for a page that is not there yet would fail the
strict build, and a new page left out of the nav would be built but unreachable. So at config time
the nav's entries whose file is missing are dropped (empty sections with them), and every
``docs/*.md`` page the nav does not name is appended under "More", titled by its first heading.
"""

from __future__ import annotations

import pathlib
import re


def _prune(items, docs_dir, named):
  kept = []
  for item in items:
    if isinstance(item, dict):
      (title, value), = item.items()
      if isinstance(value, list):
        value = _prune(value, docs_dir, named)
        if value:
          kept.append({title: value})
        continue
      page = value
    else:
      title, page = None, item
    if (docs_dir / page).is_file():
      named.add(page)
      kept.append(item)
  return kept


def _title(path):
  match = re.search(r"^# (.+)$", path.read_text(encoding="utf-8"), flags=re.M)
  return match.group(1).strip() if match else path.stem


def on_config(config):
  """Prunes missing pages from ``config.nav`` and appends the pages it does not name."""
  if not config.nav:
    return config
  docs_dir = pathlib.Path(config.docs_dir)
  named: set[str] = set()
  nav = _prune(config.nav, docs_dir, named)
  extra = [{_title(p): p.name} for p in sorted(docs_dir.glob("*.md")) if p.name not in named]
  if extra:
    nav.append({"More": extra})
  config.nav = nav
  return config
