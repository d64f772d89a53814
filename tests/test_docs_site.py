"""The docs site's nav hook (tools/mkdocs_nav.py): pages others add later never break the build.

``make docs`` builds the site strictly; these tests check the hook's rules without MkDocs: a nav
entry whose page is missing is dropped (with a section it empties), a docs/*.md page the nav does
not name is listed under "More", and ``api/`` becomes one generated page per public namespace.
"""

from __future__ import annotations

import os
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


def _build_api_page(tmp_path, identifier):
  """Builds a one-page site holding ``::: identifier`` with mkdocs.yml's own mkdocstrings options."""
  import subprocess
  import sys

  import yaml

  config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
  handler = config["plugins"][[next(iter(p)) if isinstance(p, dict) else p
                               for p in config["plugins"]].index("mkdocstrings")]["mkdocstrings"]
  python = handler["handlers"]["python"]
  python["paths"] = [str(ROOT / "src")]
  python["options"]["extensions"] = [str(ROOT / e) for e in python["options"]["extensions"]]
  docs = tmp_path / "docs"
  docs.mkdir()
  (docs / "index.md").write_text(f"# API\n\n::: {identifier}\n")
  site = {"site_name": "t", "docs_dir": str(docs), "site_dir": str(tmp_path / "site"), "strict": True,
          "theme": config["theme"], "markdown_extensions": config["markdown_extensions"],
          "plugins": ["autorefs", {"mkdocstrings": handler}]}
  (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(site))
  mkdocs = pathlib.Path(sys.executable).with_name("mkdocs")
  result = subprocess.run([str(mkdocs), "build", "--strict", "-f", str(tmp_path / "mkdocs.yml")],
                          capture_output=True, text=True, cwd=tmp_path, check=False,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
  assert result.returncode == 0, result.stderr
  return (tmp_path / "site" / "index.html").read_text()


@pytest.mark.x32_only
def test_the_rendered_adamw_page_types_and_describes_every_parameter(tmp_path):
  # The API reference as a reader sees it: a row per parameter with its type and a description,
  # the `<shared>` ones filled in by the griffe extension from the same ARGS as help() shows.
  import html
  import inspect
  import re

  import steadax
  from steadax._core._docs import ARGS

  page = _build_api_page(tmp_path, "steadax.adamw")
  table = page[page.index("<table>"):page.index("</table>")]
  rows = {}
  for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table, flags=re.S)[1:]:
    cells = [html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", c))).strip()
             for c in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)]
    rows[cells[0]] = cells[1:]
  parameters = list(inspect.signature(steadax.adamw).parameters)
  assert list(rows) == parameters and len(parameters) == 10
  for name, (type_, description, _default) in rows.items():
    assert type_ and "Any" not in type_.split(), (name, type_)
    assert description and "<shared>" not in description, name
  assert rows["learning_rate"][:2] == ["ScalarOrSchedule", ARGS["learning_rate"]]
  assert rows["b1"][:2] == ["ArrayLike", ARGS["b1"]]
  assert rows["mu_dtype"][:2] == ["DTypeLike | None", ARGS["mu_dtype"]]
  assert rows["mask"][:2] == ["MaskOrFn", ARGS["mask"]]
