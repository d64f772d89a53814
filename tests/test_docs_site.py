"""The docs site's nav hook (tools/mkdocs_nav.py): pages others add later never break the build.

``make docs`` builds the site strictly; these tests check the hook's rules without MkDocs: a nav
entry whose page is missing is dropped (with a section it empties), a docs/*.md page the nav does
not name is listed under "More", and ``api/`` becomes the API reference by topic, where every public
name of every namespace is documented on exactly one page. Two small sites are built with MkDocs:
``adamw``'s entry as a reader sees it, and cross-references and anchors to a name's other paths.
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
def test_api_section_is_by_topic_with_a_page_per_namespace(tmp_path):
  (tmp_path / "index.md").write_text("# Home\n")
  config = HOOK["on_config"](_config(tmp_path, [{"Home": "index.md"}, {"API reference": "api/"}]))
  (api,) = [entry["API reference"] for entry in config.nav if "API reference" in entry]
  assert api[0] == "api/index.md"
  topics = {title: page for entry in api[1:] for title, page in entry.items() if title != "By namespace"}
  assert list(topics)[:6] == ["Core", "Optimizers", "Transformations", "Combining transformations",
                              "Wrappers", "Schedules"]
  assert {"Losses", "Projections", "Tree utilities", "Contrib"} <= set(topics)
  (namespaces,) = [entry["By namespace"] for entry in api[1:] if "By namespace" in entry]
  pages = [next(iter(p.values())) for p in namespaces]
  assert pages[0] == "api/steadax.md"
  for namespace in ("transforms", "losses", "schedules", "contrib", "tree", "experimental.aggregating"):
    assert f"api/steadax.{namespace}.md" in pages
  assert not any("/steadax._" in p for p in pages)  # private packages have no page
  generated = HOOK["_api_pages"]()
  assert "[`steadax.transforms`](steadax.transforms.md)" in generated["api/index.md"]
  # The former per-namespace URL lists its names, each linking to its topic page.
  assert '<span id="steadax.adamw">[`adamw`][steadax.adamw]</span> | [Optimizers](optimizers.md)' \
      in generated["api/steadax.md"]


def _documented():
  """``{public path: (page, "heading" or "alias", heading path)}`` from the generated topic pages."""
  import re

  found: dict[str, list[tuple[str, str, str]]] = {}
  for page, text in HOOK["_api_pages"]().items():
    if page.startswith("api/steadax") or page == "api/index.md":
      continue  # namespace pages and the index only link to the topic pages
    aliases: list[str] = []
    for line in text.splitlines():
      if (anchor := re.fullmatch(r"\[\]\(\)\{#([\w.]+)\}", line)):
        aliases.append(anchor.group(1))
      elif line.startswith("::: "):
        heading = line[4:]
        found.setdefault(heading, []).append((page, "heading", heading))
        for alias in aliases:
          found.setdefault(alias, []).append((page, "alias", heading))
        aliases = []
  return found


@pytest.mark.x32_only
def test_every_public_name_is_documented_on_exactly_one_topic_page():
  # Every name of every public namespace's ``__all__`` (as imported, the surface tests/test_surface.py
  # asserts), is the heading or an anchor of exactly one object on one topic page; every path of
  # an object is the same runtime object as its heading; a namespace has its own page.
  import importlib

  documented = _documented()
  pages = HOOK["_api_pages"]()
  public = set()
  for namespace in HOOK["_namespaces"]():
    module = importlib.import_module(namespace)
    assert f"api/{namespace}.md" in pages
    for name in module.__all__:
      value = getattr(module, name)
      if isinstance(value, types.ModuleType):
        assert f"api/{value.__name__}.md" in pages, value.__name__
        continue
      path = f"{namespace}.{name}"
      public.add(path)
      assert len(documented.get(path, [])) == 1, (path, documented.get(path))
      (_, kind, heading), = documented[path]
      head_namespace, head_name = heading.rsplit(".", 1)
      assert getattr(importlib.import_module(head_namespace), head_name) is value, (path, heading)
  assert set(documented) == public  # nothing documented that is not public
  headings = [h for entries in documented.values() for _, kind, h in entries if kind == "heading"]
  assert len(headings) == len(set(headings))  # each object rendered once
  # The names the issue names, on the pages Optax users look for them on.
  where = {p: entries[0][0] for p, entries in documented.items()}
  assert where["steadax.adamw"] == "api/optimizers.md"
  assert where["steadax.scale_by_adam"] == where["steadax.transforms.scale_by_adam"] == "api/transformations.md"
  assert where["steadax.chain"] == where["steadax.named_chain"] == "api/combinators.md"
  assert where["steadax.MultiSteps"] == where["steadax.masked"] == "api/wrappers.md"
  assert where["steadax.cosine_decay_schedule"] == "api/schedules.md"
  assert where["steadax.l2_loss"] == where["steadax.losses.l2_loss"] == "api/losses.md"
  assert where["steadax.tree.add"] == where["steadax.tree_utils.tree_add"] == "api/tree.md"
  assert where["steadax.contrib.muon"] == "api/contrib.md"
  assert documented["steadax.safe_int32_increment"][0][1:] == ("alias", "steadax.safe_increment")


@pytest.mark.x32_only
def test_topic_follows_the_defining_module():
  topic_of = HOOK["topic_of"]
  assert topic_of("steadax._optimizers._a_new_family") == "optimizers"  # no list to keep up to date
  assert topic_of("steadax.transforms._a_new_block") == "transformations"
  assert topic_of("steadax._wrappers._a_new_wrapper") == "wrappers"
  assert topic_of("steadax.transforms._masked") == "wrappers"  # a hand-placed exception
  assert topic_of("steadax.a_new_package._x") == "a_new_package"  # a public package: its own page
  with pytest.raises(ValueError, match=r"'_a_new_layer' to PACKAGE_TOPICS"):
    topic_of("steadax._a_new_layer._x")


def _build_api_page(tmp_path, identifier):
  """Builds a one-page site holding ``::: identifier`` with mkdocs.yml's own mkdocstrings options."""
  return (_build_site(tmp_path, {"index.md": f"# API\n\n::: {identifier}\n"}) / "index.html").read_text()


def _build_site(tmp_path, pages):
  """Builds ``{path: markdown}`` strictly with mkdocs.yml's own mkdocstrings options; the site dir."""
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
  for name, text in pages.items():
    (docs / name).parent.mkdir(parents=True, exist_ok=True)
    (docs / name).write_text(text)
  site = {"site_name": "t", "docs_dir": str(docs), "site_dir": str(tmp_path / "site"), "strict": True,
          "theme": config["theme"], "markdown_extensions": config["markdown_extensions"],
          "plugins": ["autorefs", {"mkdocstrings": handler}]}
  (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(site))
  mkdocs = pathlib.Path(sys.executable).with_name("mkdocs")
  result = subprocess.run([str(mkdocs), "build", "--strict", "-f", str(tmp_path / "mkdocs.yml")],
                          capture_output=True, text=True, cwd=tmp_path, check=False,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
  assert result.returncode == 0, result.stderr
  return tmp_path / "site"


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


@pytest.mark.x32_only
def test_other_paths_of_a_name_are_anchors_and_cross_references_resolve(tmp_path):
  # The hook's own page makers, for two objects: the transformations page (heading
  # steadax.scale_by_adam, as Optax's reference shows it; anchor steadax.transforms.scale_by_adam)
  # and the former namespace page.
  # A guide's autorefs to either path resolve to the topic page (strict build: an unresolved one
  # fails it), and the namespace page's row carries the old anchor and links to the new place.
  import re

  entries, _ = HOOK["surface"]()
  chosen = [e for e in entries if e.heading in ("steadax.scale_by_adam", "steadax.adamw")]
  topics = {t.slug: t for t in HOOK["TOPICS"]}
  pages = {f"api/{slug}.md": HOOK["_topic_page"](topics[slug], [e for e in chosen if e.topic == slug], set())
           for slug in ("transformations", "optimizers")}
  where = {p: (topics[e.topic], e.summary) for e in chosen for p in e.paths}
  pages["api/steadax.md"] = HOOK["_namespace_page"]("steadax", ["adamw", "scale_by_adam"], where)
  pages["index.md"] = ("# Guide\n\nUse [steadax.scale_by_adam][], [steadax.transforms.scale_by_adam][] "
                       "or [steadax.adamw][].\n")
  site = _build_site(tmp_path, pages)
  guide = (site / "index.html").read_text()
  links = re.findall(r'<a class="autorefs autorefs-internal"[^>]*href="([^"]+)"', guide)
  assert links == ["api/transformations/#steadax.scale_by_adam",
                   "api/transformations/#steadax.transforms.scale_by_adam", "api/optimizers/#steadax.adamw"]
  topic = (site / "api" / "transformations" / "index.html").read_text()
  assert topic.count('id="steadax.scale_by_adam"') == 1
  assert topic.count('id="steadax.transforms.scale_by_adam"') == 1
  assert topic.index('id="steadax.transforms.scale_by_adam"') < topic.index('id="steadax.scale_by_adam"')
  namespace = (site / "api" / "steadax" / "index.html").read_text()
  assert re.search(r'<span id="steadax.adamw"><a class="autorefs autorefs-internal"[^>]*'
                   r'href="\.\./optimizers/#steadax.adamw"', namespace)
  assert "location.replace(link.href)" in namespace  # the old anchor forwards there
