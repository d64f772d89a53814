"""Where the suite's time goes, in CPU seconds (a pytest plugin; not loaded by default).

``STEADAX_TEST_PROFILE=<directory> pytest -p tests._cpu_profile ...`` writes one JSON line per test
and summary lines per process into ``<directory>/<worker>-<pid>.jsonl``: the test's CPU seconds
(user + system of the pytest process, setup and teardown of its fixtures included), the CPU seconds
of the child processes it waited for (subprocess tests; forked docs blocks too), its wall seconds,
and what JAX did meanwhile (programs traced, lowered, and compiled or read from the persistent
cache; the seconds are wall seconds). CPU time, unlike wall time, does not grow when other processes
share the cores, so two runs on a loaded machine compare. ``python -m tests._cpu_profile
<directory>`` prints a summary.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time

import pytest

_COUNTERS: collections.Counter = collections.Counter()
_SECONDS: collections.Counter = collections.Counter()
_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
    "/jax/compilation_cache/cache_retrieval_time_sec": "cache_read",
}


def _on_duration(event, duration, **_):
  name = _EVENTS.get(event)
  if name is not None:
    _COUNTERS[name] += 1
    _SECONDS[name] += duration


def _on_event(event, **_):
  if event == "/jax/compilation_cache/cache_hits":
    _COUNTERS["cache_hits"] += 1
  elif event == "/jax/compilation_cache/cache_misses":
    _COUNTERS["cache_misses"] += 1


def _cpu():
  me = resource.getrusage(resource.RUSAGE_SELF)
  kids = resource.getrusage(resource.RUSAGE_CHILDREN)
  forked = sys.modules.get("tests.fresh_python")  # children of its fork server, not of this process
  return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime + (forked.CHILD_CPU[0] if forked else 0.0)


class _Profile:

  def __init__(self, directory):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    os.makedirs(directory, exist_ok=True)
    self.out = open(os.path.join(directory, f"{worker}-{os.getpid()}.jsonl"), "w")
    self.start_wall = time.monotonic()
    import jax.monitoring
    jax.monitoring.register_event_duration_secs_listener(_on_duration)
    jax.monitoring.register_event_listener(_on_event)

  def write(self, record):
    self.out.write(json.dumps(record) + "\n")
    self.out.flush()

  @pytest.hookimpl(trylast=True)
  def pytest_collection_finish(self, session):
    cpu, kids = _cpu()
    self.write({"phase": "collected", "cpu": cpu, "children": kids, "items": len(session.items),
                "wall": time.monotonic() - self.start_wall})

  @pytest.hookimpl(hookwrapper=True)
  def pytest_runtest_protocol(self, item, nextitem):
    before, kids_before = _cpu()
    counts, seconds = dict(_COUNTERS), dict(_SECONDS)
    wall = time.monotonic()
    yield
    after, kids_after = _cpu()
    self.write({
        "test": item.nodeid, "cpu": after - before, "children": kids_after - kids_before,
        "wall": time.monotonic() - wall,
        **{k: v - counts.get(k, 0) for k, v in _COUNTERS.items() if v - counts.get(k, 0)},
        **{f"{k}_s": round(v - seconds.get(k, 0), 4) for k, v in _SECONDS.items()
           if v - seconds.get(k, 0)}})

  def pytest_unconfigure(self, config):
    cpu, kids = _cpu()
    self.write({"phase": "end", "cpu": cpu, "children": kids,
                "wall": time.monotonic() - self.start_wall})
    self.out.close()


def pytest_configure(config):
  directory = os.environ.get("STEADAX_TEST_PROFILE")
  if directory:
    config.pluginmanager.register(_Profile(directory), "steadax-cpu-profile")


def _summary(directory, top=40):
  tests, processes = {}, []
  for name in sorted(os.listdir(directory)):
    records = [json.loads(line) for line in open(os.path.join(directory, name))]
    phases = {r["phase"]: r for r in records if "phase" in r}
    processes.append((name, phases))
    for r in records:
      if "test" in r:
        tests[r["test"]] = r
  total = lambda r: r["cpu"] + r["children"]  # noqa: E731
  print(f"{len(tests)} tests: {sum(map(total, tests.values())):.1f} CPU-s "
        f"({sum(r['cpu'] for r in tests.values()):.1f} in pytest, "
        f"{sum(r['children'] for r in tests.values()):.1f} in children); "
        f"compiles {sum(r.get('compile', 0) for r in tests.values())} "
        f"({sum(r.get('compile_s', 0) for r in tests.values()):.1f} s), "
        f"traces {sum(r.get('trace', 0) for r in tests.values())}, "
        f"cache hits {sum(r.get('cache_hits', 0) for r in tests.values())}")
  for name, phases in processes:
    collected, end = phases.get("collected"), phases.get("end")
    print(f"  {name}: collection {collected['cpu'] if collected else float('nan'):.1f} CPU-s, "
          f"process {end['cpu'] + end['children'] if end else float('nan'):.1f} CPU-s")
  files = collections.Counter()
  for test, r in tests.items():
    files[test.split("::")[0]] += total(r)
  print("by file:")
  for path, cpu in files.most_common(top):
    print(f"  {cpu:8.1f}  {path}")
  print("by test:")
  for test, r in sorted(tests.items(), key=lambda kv: -total(kv[1]))[:top]:
    print(f"  {total(r):8.1f}  ({r['children']:.1f} children, {r.get('compile', 0)} compiles)  {test}")


if __name__ == "__main__":
  _summary(sys.argv[1], *(int(a) for a in sys.argv[2:]))
