"""pytest plugin for tools/clients/run.py: records which module ``optax`` was when the run ended.

Writes ``{"optax": "optax" | "steadax" | "not imported"}`` to the file named by the environment
variable ``STEADAX_CLIENTS_WHICH``, so a run meant to be on steadax that imported the real Optax
(or never imported optax) is reported, not counted as a pass.
"""

import json
import os
import sys


def pytest_sessionfinish(session, exitstatus):
  del session, exitstatus
  module = sys.modules.get("optax")
  name = "not imported" if module is None else module.__name__
  path = os.environ.get("STEADAX_CLIENTS_WHICH")
  if path:
    with open(path, "w", encoding="utf-8") as f:
      json.dump({"optax": name}, f)
