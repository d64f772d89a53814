"""conftest.py of the copied Optax test files (tools/optax_tests.py): records every test's outcome.

Writes `{nodeid: {"outcome", "message", "private"}}` as JSON to `$OPTAX_TESTS_RESULTS` at the end of
the session (on the controller under xdist). `outcome` is passed, failed, error (setup or teardown
failed), skipped or collect-error; `private` lists the Optax private helpers the test reached
(_optax_harness.ACCESSED), which the driver excludes from the comparison.
"""

import json
import os

import pytest

import _optax_harness  # pyright: ignore[reportMissingImports]  (beside the copies)

_RESULTS: dict[str, dict] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  del item, nextitem
  _optax_harness.ACCESSED.clear()
  yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
  del item, call
  outcome = yield
  report = outcome.get_result()
  report.user_properties.append(('optax_private', sorted(_optax_harness.ACCESSED)))


def _message(report) -> str:
  longrepr = report.longrepr
  if isinstance(longrepr, tuple):  # a skip: (file, line, reason)
    return str(longrepr[2])
  crash = getattr(longrepr, 'reprcrash', None)
  if crash is not None:
    return crash.message
  return str(longrepr)[-2000:]


def pytest_runtest_logreport(report):
  entry = _RESULTS.setdefault(report.nodeid, {'outcome': 'passed', 'message': '', 'private': []})
  for key, value in report.user_properties:
    if key == 'optax_private':
      entry['private'] = sorted(set(entry['private']) | set(value))
  if report.passed:
    return
  if report.skipped and entry['outcome'] == 'passed':
    entry.update(outcome='skipped', message=_message(report))
  elif report.failed and entry['outcome'] in ('passed', 'skipped'):
    entry.update(outcome='failed' if report.when == 'call' else 'error', message=_message(report))


def pytest_collectreport(report):
  if report.failed:
    _RESULTS[report.nodeid] = {'outcome': 'collect-error', 'message': _message(report),
                               'private': sorted(_optax_harness.ACCESSED)}
    _optax_harness.ACCESSED.clear()


def pytest_sessionfinish(session):
  if hasattr(session.config, 'workerinput'):  # an xdist worker: the controller writes
    return
  with open(os.environ['OPTAX_TESTS_RESULTS'], 'w') as f:
    json.dump(_RESULTS, f, indent=1, sort_keys=True)
