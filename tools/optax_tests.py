"""Runs Optax's own test files against steadax's public API (`make optax-tests`; not part of make test).

The installed Optax wheel ships its tests (`optax/**/*_test.py`). This script copies them to a
temporary directory, rewrites each `import optax...` line into a call to tools/optax_tests_resolver.py
(which resolves Optax's public names to Optax or to steadax, and private helpers to an error that is
recorded), and runs the copies twice with pytest: once resolved to Optax, once to steadax. It prints

- the tests excluded because they reach Optax private helpers (names with no public Optax
  equivalent), and whole files excluded with the reason;
- how many tests pass with Optax, and how many of those pass with steadax;
- every difference: a test that passes with Optax and not with steadax, with its message.

Usage (from the repository root; steadax is imported from ./src):
  python tools/optax_tests.py                       # both runs, -n 2
  python tools/optax_tests.py --reuse-optax         # the Optax run from a previous --out
  python tools/optax_tests.py --files 'losses/*' -k softmax
The results (JSON per backend and the summary) are written under --out (default build/optax-tests).
"""

import argparse
import ast
import fnmatch
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
SUITE = 'optax_suite'
# Whole files left out, with the reason.
EXCLUDED_FILES = {
    # Optax's own private helpers are the subject of these files; no public name to compare.
}


def _optax_dir() -> pathlib.Path:
  import optax  # pylint: disable=import-outside-toplevel
  return pathlib.Path(optax.__file__).parent


def _rewrite_imports(source: str, path: str) -> str:
  """Replaces each `import optax...`/`from optax... import` statement with a resolver call."""
  tree = ast.parse(source, path)
  lines = source.splitlines(keepends=True)
  edits = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import) and any(a.name.split('.')[0] == 'optax' for a in node.names):
      statements = []
      for alias in node.names:
        if alias.asname:
          statements.append(f'{alias.asname} = _optax_harness.module({alias.name!r})')
        elif alias.name.split('.')[0] == 'optax':
          # `import optax.tree` binds `optax`; the submodule is an attribute of it.
          statements.append("optax = _optax_harness.module('optax')")
        else:
          statements.append(f'import {alias.name}')
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
        node.module.split('.')[0] == 'optax'):
      statements = [
          f'{a.asname or a.name} = _optax_harness.from_import({node.module!r}, {a.name!r})'
          for a in node.names
      ]
    else:
      continue
    first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
    indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
    edits.append((first, last, ''.join(f'{indent}{s}\n' for s in statements)))
  for first, last, text in sorted(edits, reverse=True):
    lines[first : last + 1] = [text]
  return 'import _optax_harness\n' + ''.join(lines)


def _prepare(workdir: pathlib.Path, patterns: list[str]) -> list[str]:
  """Copies and rewrites the test files; returns their paths relative to the Optax package."""
  source_dir = _optax_dir()
  chosen = []
  for path in sorted(source_dir.rglob('*_test.py')):
    relative = path.relative_to(source_dir).as_posix()
    if patterns and not any(fnmatch.fnmatch(relative, p) for p in patterns):
      continue
    if relative in EXCLUDED_FILES:
      continue
    target = workdir / SUITE / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(_rewrite_imports(path.read_text(), str(path)))
    chosen.append(relative)
  for directory in [workdir / SUITE, *(p for p in (workdir / SUITE).rglob('*') if p.is_dir())]:
    (directory / '__init__.py').touch()
  shutil.copy(ROOT / 'tools' / 'optax_tests_resolver.py', workdir / '_optax_harness.py')
  shutil.copy(ROOT / 'tools' / 'optax_tests_conftest.py', workdir / 'conftest.py')
  (workdir / 'pytest.ini').write_text(
      '[pytest]\npython_files = *_test.py\naddopts =\nfilterwarnings =\n'
  )
  return chosen


def _run(workdir: pathlib.Path, backend: str, args, out: pathlib.Path) -> dict:
  results = out / f'{backend}.json'
  env = dict(os.environ)
  env.update(
      OPTAX_TESTS_BACKEND=backend,
      OPTAX_TESTS_RESULTS=str(results),
      PYTHONPATH=os.pathsep.join(
          [str(workdir), str(ROOT / 'src'), *filter(None, [os.environ.get('PYTHONPATH')])]
      ),
  )
  command = [
      sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-n', str(args.workers),
      f'--timeout={args.timeout}', '-c', str(workdir / 'pytest.ini'), '--rootdir', str(workdir),
      SUITE,
  ]
  if args.k:
    command += ['-k', args.k]
  print(f'== {backend}: {" ".join(command[1:])}', flush=True)
  start = time.monotonic()
  subprocess.run(command, cwd=workdir, env=env, stdout=subprocess.DEVNULL if args.quiet else None,
                 check=False)
  print(f'== {backend}: {time.monotonic() - start:.0f} s', flush=True)
  return json.loads(results.read_text())


def _summarize(optax: dict, steadax: dict) -> tuple[str, dict]:
  """The comparison, as text and as a JSON-able record."""
  private = {n: r['private'] for n, r in optax.items() if r['private']}
  private.update({n: r['private'] for n, r in steadax.items() if r['private']})
  collect_errors = {n: r['message'] for n, r in optax.items() if r['outcome'] == 'collect-error'}
  compared = {n: r for n, r in optax.items() if n not in private and r['outcome'] != 'collect-error'}
  passed = sorted(n for n, r in compared.items() if r['outcome'] == 'passed')
  missing = {'outcome': 'not run', 'message': 'not collected in the steadax run'}
  differences = {n: steadax.get(n, missing) for n in passed if steadax.get(n, missing)['outcome'] != 'passed'}
  steadax_collect = {n: r['message'] for n, r in steadax.items()
                     if r['outcome'] == 'collect-error' and n not in collect_errors}
  text = []
  if collect_errors:
    text.append(f'Files that do not import with Optax itself ({len(collect_errors)}):')
    text += [f'  {n}: {m.splitlines()[-1] if m else ""}' for n, m in sorted(collect_errors.items())]
  if steadax_collect:
    text.append(f'Files that import with Optax but not with steadax ({len(steadax_collect)}):')
    text += [f'  {n}: {m.splitlines()[-1] if m else ""}' for n, m in sorted(steadax_collect.items())]
  text.append(f'Excluded: {len(private)} tests reach Optax private helpers:')
  by_helper: dict[str, list[str]] = {}
  for name, helpers in private.items():
    for helper in helpers:
      by_helper.setdefault(helper, []).append(name)
  text += [f'  {h} ({len(ns)} tests)' for h, ns in sorted(by_helper.items())]
  outcomes = {}
  for record in compared.values():
    outcomes[record['outcome']] = outcomes.get(record['outcome'], 0) + 1
  text.append(f'With Optax: {len(compared)} tests compared: ' +
              ', '.join(f'{v} {k}' for k, v in sorted(outcomes.items())))
  both = len(passed) - len(differences)
  share = 100 * both / len(passed) if passed else 0.0
  text.append(f'Passed with Optax: {len(passed)}; of those passed with steadax: {both} ({share:.1f}%)')
  if differences:
    text.append(f'Differences ({len(differences)}):')
    for name, record in sorted(differences.items()):
      first_line = (record['message'] or '').strip().splitlines()[:1]
      text.append(f'  {record["outcome"]:8} {name}\n           {first_line[0][:300] if first_line else ""}')
  record = dict(passed_optax=len(passed), passed_both=both, excluded_private=sorted(private),
                collect_errors_optax=collect_errors, differences=differences)
  return '\n'.join(text), record


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--backend', choices=['both', 'optax', 'steadax'], default='both')
  parser.add_argument('-n', '--workers', type=int, default=2, help='pytest-xdist workers (default 2)')
  parser.add_argument('--timeout', type=int, default=300, help='seconds per test (default 300)')
  parser.add_argument('--files', nargs='*', default=[], help="globs relative to the optax package, e.g. 'losses/*'")
  parser.add_argument('-k', default='', help='a pytest -k expression')
  parser.add_argument('--out', type=pathlib.Path, default=ROOT / 'build' / 'optax-tests')
  parser.add_argument('--reuse-optax', action='store_true', help='read the Optax run from --out')
  parser.add_argument('--keep', action='store_true', help='keep (and print) the temporary directory')
  parser.add_argument('--quiet', action='store_true', help="hide pytest's own output")
  args = parser.parse_args()
  args.out = args.out.resolve()  # pytest runs in the temporary directory
  args.out.mkdir(parents=True, exist_ok=True)
  workdir = pathlib.Path(tempfile.mkdtemp(prefix='optax-tests-'))
  try:
    files = _prepare(workdir, args.files)
    print(f'{len(files)} Optax test files copied to {workdir}', flush=True)
    results = {}
    for backend in ('optax', 'steadax'):
      if args.backend in ('both', backend) and not (backend == 'optax' and args.reuse_optax):
        results[backend] = _run(workdir, backend, args, args.out)
      elif (args.out / f'{backend}.json').exists():
        results[backend] = json.loads((args.out / f'{backend}.json').read_text())
    if len(results) == 2:
      optax, steadax = results['optax'], results['steadax']
      if args.files or args.k:  # compare the tests of this run only
        optax = {n: r for n, r in optax.items() if n in steadax}
      text, record = _summarize(optax, steadax)
      print(text)
      (args.out / 'summary.txt').write_text(text + '\n')
      (args.out / 'summary.json').write_text(json.dumps(record, indent=1, sort_keys=True))
  finally:
    if args.keep:
      print(f'kept {workdir}')
    else:
      shutil.rmtree(workdir, ignore_errors=True)


if __name__ == '__main__':
  main()
