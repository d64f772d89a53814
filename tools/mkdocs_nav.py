"""MkDocs hook: the site's nav and its generated API reference.

* The nav of mkdocs.yml, minus pages that do not exist, plus pages it does not name. Several people
  add pages to docs/; a nav entry for a page that is not there yet would fail the strict build, and
  a new page left out of the nav would be built but unreachable. So the nav's entries whose file is
  missing are dropped (empty sections with them), and every ``docs/*.md`` page the nav does not
  name is appended under "More", titled by its first heading.
* The API reference, by topic as Optax's (optimizers, transformations, combinators, wrappers,
  schedules, losses, ...): the nav entry ``api/`` becomes an index, one page per topic and one short
  page per public namespace. Nothing is written to docs/; the pages are generated at build time.

How a name finds its page. griffe reads the package (statically, as mkdocstrings does) and every
public name of every public namespace (``steadax`` and each package under ``src/steadax`` without a
leading underscore) is resolved to the object it re-exports. Each object is rendered once, on the
page of the topic of the module that defines it: ``steadax._optimizers._adam`` -> Optimizers,
``steadax.transforms._clipping`` -> Transformations (``PACKAGE_TOPICS``); the few modules whose
content belongs elsewhere than their package's are listed in ``MODULE_TOPICS``; a public package
with no entry gets a page of its own, a private one fails the build with a message saying where to
add it. So a new optimizer module lands on Optimizers without anyone listing it.

Its heading (and anchor) is the path in the namespace of the package that defines it
(``steadax.adamw``, ``steadax.losses.l2_loss``, ``steadax.tree.add``), except that the building
blocks the top level exports too are headed by their top-level name (``steadax.scale_by_adam``, as
Optax's reference shows ``optax.scale_by_adam``); every other public path of the same object
(``steadax.transforms.scale_by_adam``, ``steadax.tree_utils.tree_add``) is an anchor on the same page
(``[](){#...}``, read by autorefs), so ``api/transformations/#steadax.transforms.scale_by_adam`` and
``[steadax.transforms.scale_by_adam][]`` in any page work.
The namespace pages (``api/steadax/``, ``api/steadax.transforms/``, the URLs of the former
one-page-per-namespace reference) list each name with a link to its topic page, and a link to an old
anchor (``api/steadax/#steadax.adamw``) is forwarded to the name's new place.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import pathlib
import re

from mkdocs.structure.files import File

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "steadax"
API = "api/"


@dataclasses.dataclass(frozen=True)
class Topic:
  slug: str  # the page: api/<slug>.md
  title: str
  intro: str  # one paragraph of Markdown under the title (links relative to api/)


# The topics, in reading order (Optax's API reference, plus steadax's own packages).
TOPICS = (
    Topic("core", "Core", "The transformation interface, `apply_updates`, the types and strict "
          "mode: what every transformation and training loop is built on "
          "([the contract](../contract.md))."),
    Topic("optimizers", "Optimizers", "The optimizers (chains of transformations with a learning "
          "rate), one family per module ([Optimizer families](../optimizers.md))."),
    Topic("transformations", "Transformations", "The building blocks: preconditioners "
          "(`scale_by_*`), clipping, decay, noise, moments, and their state records."),
    Topic("combinators", "Combining transformations", "Chains, partitions and parameter groups, "
          "and reading or writing the state of a combined transformation."),
    Topic("wrappers", "Wrappers", "Transformations that take a transformation: accumulation, "
          "masking, finite guards, lookahead, monitoring, fusion "
          "([Composing wrappers](../wrappers.md))."),
    Topic("schedules", "Schedules", "Step-size and hyperparameter schedules and their injection "
          "into a transformation ([Schedules](../schedules.md))."),
    Topic("losses", "Losses", "`steadax.losses` ([Losses](../losses.md))."),
    Topic("projections", "Projections", "`steadax.projections` ([Projections](../projections.md))."),
    Topic("tree", "Tree utilities", "`steadax.tree` and Optax's `tree_utils` names "
          "([Tree utilities](../tree.md))."),
    Topic("linesearch", "Line searches and solvers", "Line searches and the `minimize` loop "
          "([Line searches](../linesearch.md))."),
    Topic("utilities", "Linear algebra and utilities", "Linear algebra, second order and gradient "
          "utilities ([Linear algebra and second order](../linalg.md))."),
    Topic("contrib", "Contrib", "`steadax.contrib`: Optax's contrib optimizers, held to the same "
          "contract."),
    Topic("experimental", "Experimental", "`steadax.experimental`."),
    Topic("microbatching", "Microbatching", "`steadax.microbatching`."),
    Topic("perturbations", "Perturbations", "`steadax.perturbations`."),
    Topic("assignment", "Assignment", "`steadax.assignment`."),
    Topic("checkpoint", "Checkpoints", "`steadax.checkpoint` ([Checkpointing](../checkpointing.md))."),
    Topic("testing", "Testing", "`steadax.testing` "
          "([Checking your own transformation](../testing.md))."),
    Topic("as_optax", "as_optax", "`steadax.as_optax` ([Migrating from Optax](../migrating.md))."),
)

# The topic of a package's modules (the first component under steadax).
PACKAGE_TOPICS = {
    "_core": "core", "_optimizers": "optimizers", "transforms": "transformations",
    "_wrappers": "wrappers", "_fusion": "wrappers", "schedules": "schedules", "losses": "losses",
    "projections": "projections", "tree": "tree", "tree_utils": "tree", "_linesearch": "linesearch",
    "_solvers": "linesearch", "_linalg": "utilities", "_utils": "utilities",
    "second_order": "utilities",
}
# The exceptions: modules whose content belongs elsewhere than their package's.
MODULE_TOPICS = {
    "steadax._core._combine": "combinators",
    "steadax._core._tree": "tree",
    "steadax._core._state_tree": "tree",
    "steadax._wrappers._partition": "combinators",
    "steadax._wrappers._groups": "combinators",
    "steadax._wrappers._surgery": "combinators",
    "steadax._solvers._lbfgsb": "optimizers",
    "steadax.transforms._masked": "wrappers",
}


def topic_of(module):
  """The topic slug of the objects defined in ``module`` (a dotted path under ``steadax``)."""
  parts = module.split(".")
  for end in range(len(parts), 1, -1):
    if ".".join(parts[:end]) in MODULE_TOPICS:
      return MODULE_TOPICS[".".join(parts[:end])]
  package = parts[1] if len(parts) > 1 else ""
  if package in PACKAGE_TOPICS:
    return PACKAGE_TOPICS[package]
  if package and not package.startswith("_"):
    return package  # a public package without an entry: a page of its own
  raise ValueError(f"{module} defines public names but its package has no topic: add "
                   f"{package or module!r} to PACKAGE_TOPICS (or the module to MODULE_TOPICS) "
                   "in tools/mkdocs_nav.py")


def _topics():
  return {t.slug: t for t in TOPICS}


def _namespaces():
  """``steadax`` and its public subpackages (dotted names), in a stable order."""
  found = ["steadax"]
  for init in sorted(PACKAGE.rglob("__init__.py")):
    parts = init.parent.relative_to(PACKAGE).parts
    if parts and not any(p.startswith("_") for p in parts):
      found.append(".".join(("steadax", *parts)))
  return found


def _home(module):
  """The public namespace a module belongs to: its path up to the first private component."""
  parts = module.split(".")
  end = next((i for i, p in enumerate(parts) if p.startswith("_")), len(parts))
  return ".".join(parts[:end])


def _first_sentence(docstring):
  """The docstring's first paragraph, on one line, safe in a table cell."""
  text = " ".join((docstring or "").strip().split("\n\n")[0].split())
  return text.replace("|", "\\|")


# Namespaces that only rename another's names (Optax's ``tree_utils`` for ``steadax.tree``): a name
# there is documented under its other path.
SECONDARY_NAMESPACES = ("steadax.tree_utils",)


@dataclasses.dataclass
class Entry:
  """One documented object: where it is defined, its public paths, its heading and its topic."""
  target: str  # the defining path: steadax._optimizers._adam.adamw
  lineno: int
  summary: str
  paths: list[str] = dataclasses.field(default_factory=list)  # every public path

  @property
  def module(self):
    return self.target.rsplit(".", 1)[0]

  @property
  def heading(self):
    """The path the object is documented under: in the public namespace of its module (under its
    own name) when that namespace exports it, else in the shallowest namespace that does. The
    building blocks of ``steadax.transforms`` that the top level exports too are documented under
    their top-level name (``steadax.scale_by_adam``), as Optax's reference shows them."""
    home, own = _home(self.module), self.target.rsplit(".", 1)[1]
    def rank(path):
      namespace, name = path.rsplit(".", 1)
      at_home = namespace == home or (home == "steadax.transforms" and namespace == "steadax")
      return (not at_home, namespace in SECONDARY_NAMESPACES, name != own, namespace.count("."),
              path)
    return min(self.paths, key=rank)

  @property
  def aliases(self):
    return sorted(p for p in self.paths if p != self.heading)

  @property
  def topic(self):
    return topic_of(self.module)


@functools.lru_cache(maxsize=1)
def surface():
  """``(entries, namespaces)``: one Entry per public object, and ``{namespace: [public names]}``.

  Read statically by griffe with the docs' own extensions (those that decide what is public), so
  the hook imports neither steadax nor JAX.
  """
  import griffe

  extensions = griffe.load_extensions(f"{ROOT / 'tools' / 'griffe_steadax.py'}:RedundantAliasesArePublic")
  package = griffe.load("steadax", search_paths=[str(ROOT / "src")], extensions=extensions,
                        resolve_aliases=True, resolve_external=False)
  entries: dict[str, Entry] = {}
  names: dict[str, list[str]] = {}
  for namespace in _namespaces():
    module = package if namespace == "steadax" else package[namespace.split(".", 1)[1]]
    names[namespace] = []
    for name, member in sorted(module.members.items()):
      if name.startswith("_") or not member.is_public:
        continue
      target = member.final_target if isinstance(member, griffe.Alias) else member
      if target.is_module:
        continue  # a namespace: it has its own page
      names[namespace].append(name)
      if not target.path.startswith("steadax."):
        raise ValueError(f"{namespace}.{name} re-exports {target.path}, outside steadax: the API "
                         "reference documents steadax's own objects")
      entry = entries.get(target.path)
      if entry is None:
        docstring = target.docstring.value if target.docstring else ""
        entry = entries[target.path] = Entry(target.path, target.lineno or 0,
                                             _first_sentence(docstring))
      entry.paths.append(f"{namespace}.{name}")
  return list(entries.values()), names


def _topic_page(topic, entries, guides):
  intro = topic.intro if all(link in guides for link in re.findall(r"\]\(\.\./([^)#]+)", topic.intro)) \
      else re.sub(r" ?\(\[[^]]*\]\(\.\./[^)]*\)\)", "", topic.intro)
  also = any(e.aliases for e in entries)
  rows = "\n".join(
      f"| [`{e.heading.rsplit('.', 1)[1]}`][{e.heading}] | {e.summary} |"
      + (" " + ", ".join(f"`{a}`" for a in e.aliases) + " |" if also else "")
      for e in sorted(entries, key=lambda e: e.heading.rsplit(".", 1)[1].lower()))
  header = "| Name | Description | Also importable as |\n|---|---|---|" if also else \
      "| Name | Description |\n|---|---|"
  body = []
  for e in sorted(entries, key=lambda e: (e.target.rsplit(".", 1)[0], e.lineno, e.target)):
    anchors = "".join(f"[](){{#{a}}}\n" for a in e.aliases)
    body.append(f"{anchors}::: {e.heading}\n")
  return (f"# {topic.title}\n\n{intro}\n\n{header}\n{rows}\n\n"
          + "\n".join(body))


# Forwards ``api/<namespace>/#<path>`` (the anchors of the former one-page-per-namespace reference)
# to the name's topic page: each row's cell carries the path as its id and links there.
_FORWARD = """<script>
(function () {
  var id = decodeURIComponent(location.hash.slice(1));
  var cell = id && document.getElementById(id);
  var link = cell && cell.querySelector("a[href]");
  if (link) { location.replace(link.href); }
})();
</script>
"""


def _namespace_page(namespace, names, where):
  rows = "\n".join(
      f'| <span id="{namespace}.{n}">[`{n}`][{namespace}.{n}]</span> | '
      f"[{where[f'{namespace}.{n}'][0].title}]({where[f'{namespace}.{n}'][0].slug}.md) | "
      f"{where[f'{namespace}.{n}'][1]} |" for n in names)
  table = f"| Name | Documented in | |\n|---|---|---|\n{rows}\n" if names else ""
  return (f"# `{namespace}`\n\n::: {namespace}\n    options:\n      show_root_heading: false\n"
          f"      members: false\n\n{table}\n{_FORWARD}")


def _api_pages(docs_dir=None):
  """``{src_uri: markdown}`` of the API reference: the index, the topics, the namespaces."""
  entries, names = surface()
  topics = _topics()
  for e in entries:
    topics.setdefault(e.topic, Topic(e.topic, f"steadax.{e.topic}", f"`steadax.{e.topic}`."))
  by_topic = {slug: [e for e in entries if e.topic == slug] for slug in topics}
  by_topic = {slug: group for slug, group in by_topic.items() if group}
  guides = {p.name for p in pathlib.Path(docs_dir).glob("*.md")} if docs_dir else \
      {p.name for p in (ROOT / "docs").glob("*.md")}
  where = {p: (topics[e.topic], e.summary) for e in entries for p in e.paths}
  topic_rows = "\n".join(f"| [{topics[s].title}]({s}.md) | {len(g)} |" for s, g in by_topic.items())
  namespace_rows = "\n".join(f"| [`{ns}`]({ns}.md) | {len(n)} |" for ns, n in names.items())
  pages = {f"{API}index.md": (
      "# API reference\n\n"
      "Generated from the docstrings at build time (`make docs`), by topic as Optax's. Each object\n"
      "is documented once, on the page of the module that defines it, under the path of that\n"
      "module's public namespace; its other public paths are anchors there, so\n"
      "[`steadax.scale_by_adam`][steadax.scale_by_adam] and\n"
      "[`steadax.transforms.scale_by_adam`][steadax.transforms.scale_by_adam] lead to the same\n"
      "place. Search finds every name.\n\n"
      f"| Topic | Objects |\n|---|---|\n{topic_rows}\n\n"
      "## By namespace\n\n"
      f"| Namespace | Public names |\n|---|---|\n{namespace_rows}\n")}
  for slug, group in by_topic.items():
    pages[f"{API}{slug}.md"] = _topic_page(topics[slug], group, guides)
  for ns, public in names.items():
    pages[f"{API}{ns}.md"] = _namespace_page(ns, public, where)
  return pages


def _api_nav(pages):
  topics = [p for p in pages if not p[len(API):].startswith("steadax") and not p.endswith("index.md")]
  namespaces = [p for p in pages if p[len(API):].startswith("steadax")]
  titles = {t.slug: t.title for t in TOPICS}
  return ([f"{API}index.md"]
          + [{titles.get(p[len(API):-3], p[len(API):-3]): p} for p in topics]
          + [{"By namespace": [{p[len(API):-3]: p} for p in namespaces]}])


def _prune(items, docs_dir, named, generated):
  kept = []
  for item in items:
    if isinstance(item, dict):
      (title, value), = item.items()
    else:
      title, value = None, item
    if value == API:  # the API reference section
      named.update(generated)
      kept.append({title or "API reference": _api_nav(generated)})
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
  nav = _prune(config.nav, docs_dir, named, _api_pages(docs_dir))
  extra = [{_title(p): p.name} for p in sorted(docs_dir.glob("*.md")) if p.name not in named]
  if extra:
    nav.append({"More": extra})
  config.nav = nav
  return config


def on_files(files, config):
  """Adds the generated API pages."""
  for uri, content in _api_pages(config.docs_dir).items():
    files.append(File.generated(config, uri, content=content))
  return files
