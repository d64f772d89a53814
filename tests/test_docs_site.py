"""The docs site's nav hook (tools/mkdocs_nav.py): pages others add later never break the build.

``make docs`` builds the site strictly; these tests check the hook's rules without MkDocs: a nav
entry whose page is missing is dropped (with a section it empties), a docs/*.md page the nav does
not name is listed under "More", and ``api/`` becomes one generated page per public namespace.
"""

from __future__ import annotations

import pathlib
import runpy
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
HOOK = runpy.run_path(str(ROOT / "tools" / "mkdocs_nav.py"))


def _config(docs_dir, nav):
  return types.SimpleNamespace(docs_dir=str(docs_dir), nav=nav)


@pytest.mark.x32_only
def test_missing_pages_are_dropped_and_unnamed_pages_listed(tmp_path):
  for name, title in [("index.md", "Home"), ("contract.md", "Contract"), ("later.md", "Added later")]:
    (tmp_path / name).write_text(f"# {title}\n\ntext\n")
  nav = [{"Home": "index.md"}, {"Sharding": "sharding.md"},
         {"Guides": [{"Contract": "contract.md"}, {"Checkpointing": "checkpointing.md"}]},
         {"Empty": [{"Deterministic": "deterministic.md"}]}]
  config = HOOK["on_config"](_config(tmp_path, nav))
  assert config.nav == [{"Home": "index.md"}, {"Guides": [{"Contract": "contract.md"}]},
                        {"More": [{"Added later": "later.md"}]}]


@pytest.mark.x32_only
def test_api_section_has_a_page_per_public_namespace(tmp_path):
  (tmp_path / "index.md").write_text("# Home\n")
  config = HOOK["on_config"](_config(tmp_path, [{"Home": "index.md"}, {"API reference": "api/"}]))
  (api,) = [entry["API reference"] for entry in config.nav if "API reference" in entry]
  pages = [p if isinstance(p, str) else next(iter(p.values())) for p in api]
  assert pages[:2] == ["api/index.md", "api/steadax.md"]
  for namespace in ("transforms", "losses", "schedules", "contrib", "tree", "experimental.aggregating"):
    assert f"api/steadax.{namespace}.md" in pages
  assert not any("/steadax._" in p for p in pages)  # private packages have no page
  generated = HOOK["_api_pages"]()
  assert generated["api/steadax.losses.md"].startswith("# `steadax.losses`\n\n::: steadax.losses")
  assert "[`steadax.transforms`](steadax.transforms.md)" in generated["api/index.md"]
