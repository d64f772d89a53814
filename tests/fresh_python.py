"""``python -c code`` without paying for ``import jax`` each time: a fork server for the docs blocks.

Every Python block of the docs runs alone in a fresh interpreter (tests/test_docs_examples.py). A
fresh ``python -c`` spends about 0.5 CPU-s importing jax before the block's first line does
anything, and there are some 70 blocks. Here one server process per pytest worker starts with the
block's environment, runs ``import jax`` and nothing else, and forks a child per block. The child is
what a reader's ``python -c code`` is after its ``import jax`` line. Every runnable block imports
jax (56 of 73 blocks first), or steadax (which imports jax on first use of any of its names) before
it computes anything; a block can reach a module only through names it imported, and any use of
jax or steadax loads what ``import jax`` loads, so the modules loaded earlier change no outcome:

- its modules: exactly those ``import jax`` loads (the server's own code uses only modules among
  them: os, sys, json, select, traceback, types; nothing from the test process);
- JAX's configuration: read from the environment by ``import jax`` in the server, which was
  started with the block's environment (``defaults_env``: no ``JAX_ENABLE_X64``, no ``XLA_FLAGS``);
  nothing of the suite's (strict promotion, strict mode, cheap flags) reaches it. A request with
  another environment gets a new server;
- no XLA backend: the server never initialises one, so the child creates its own on first use and
  reads ``XLA_FLAGS`` then (a block may set it before its first computation, as a reader's may);
- its garbage collector: what ``import jax`` left is moved to the permanent generation before
  forking (``gc.freeze``, as Python's documentation advises before ``fork``: a child's exit would
  otherwise walk it all and copy every page it touches); the block's own objects are collected as
  usual;
- one thread: ``fork`` copies only the calling thread. ``import jax`` starts no thread of its own;
  NumPy's OpenBLAS starts a pool at import, and OpenBLAS shuts the pool down around ``fork`` and
  restarts it when first needed (its ``pthread_atfork`` handler), so the child's BLAS works;
- ``python -c``'s ways: a new ``__main__`` module (``__name__ == "__main__"``, no ``__file__``),
  ``sys.argv == ["-c"]``, ``sys.path[0] == ""``, the given working directory and environment, stdin
  from /dev/null, stdout and stderr to files, an uncaught exception's traceback (from ``<string>``)
  on stderr and exit status 1, ``sys.exit`` as in the interpreter, and the interpreter's normal
  shutdown (atexit handlers, non-daemon threads joined).

What it does not reproduce: the hash seed and ``random``'s state are the server's (a fresh
interpreter draws new ones); nothing the blocks check depends on them. ``run_alone`` (the docs
tests' runner) says which blocks still get a whole new interpreter.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
from typing import NamedTuple

# The server's program (run with ``python -c``). Its only imports are ``import jax`` and modules
# that ``import jax`` loads anyway, so a child's sys.modules is a reader's after ``import jax``.
_SERVER = r"""
import jax
import gc, json, os, select, sys, traceback, types


def _child(request):
  os.chdir(request["cwd"])
  stdin = os.open(os.devnull, os.O_RDONLY)
  os.dup2(stdin, 0)
  os.close(stdin)
  sys.stdin = open(0, closefd=False)
  for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, fd)
    os.close(out)
  main = types.ModuleType("__main__")
  main.__dict__.update(__builtins__=__builtins__, __loader__=__loader__, __spec__=None,
                       __annotations__={}, __package__=None, __doc__=None)
  sys.modules["__main__"] = main
  sys.argv[:] = ["-c"]
  sys.path[0] = ""
  try:
    exec(compile(request["code"], "<string>", "exec"), main.__dict__)
  except SystemExit:
    raise
  except BaseException:
    kind, value, trace = sys.exc_info()
    # The traceback starts in the block, as python -c's (without this function's frame).
    sys.excepthook(kind, value.with_traceback(trace.tb_next), trace.tb_next)
    sys.exit(1)
  sys.exit(0)


def _serve():
  # What import jax left is kept out of the children's garbage collections (their exit would walk
  # it all, and copy every page it touches: 0.25 CPU-s a child without this, 0.06 with it).
  gc.collect()
  gc.freeze()
  for line in sys.stdin:
    request = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
      _child(request)  # never returns: the child leaves through SystemExit
    print(json.dumps({"pid": pid}), flush=True)
    _, status, usage = os.wait4(pid, 0)
    print(json.dumps({"status": os.waitstatus_to_exitcode(status), "cpu": usage.ru_utime + usage.ru_stime}),
          flush=True)


_serve()
"""


class Result(NamedTuple):
  """What ``subprocess.run(..., capture_output=True, text=True)`` gives: exit status and output."""

  returncode: int
  stdout: str
  stderr: str


class _Server:

  def __init__(self, env: dict[str, str]):
    self.env = dict(env)
    self.process = subprocess.Popen([sys.executable, "-c", _SERVER], env=self.env, cwd=tempfile.gettempdir(),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    self.child: int | None = None

  def _reply(self, deadline: float) -> dict:
    assert self.process.stdout is not None
    ready = select.select([self.process.stdout], [], [], max(deadline, 0))[0]
    if not ready:
      raise subprocess.TimeoutExpired("fork server", deadline)
    line = self.process.stdout.readline()
    if not line:
      raise RuntimeError(f"the fork server exited with status {self.process.wait()}")
    return json.loads(line)

  def run(self, code: str, cwd: str, timeout: float) -> Result:
    assert self.process.stdin is not None
    with tempfile.TemporaryDirectory() as out:
      paths = {"stdout": os.path.join(out, "stdout"), "stderr": os.path.join(out, "stderr")}
      self.process.stdin.write(json.dumps({"code": code, "cwd": str(cwd), **paths}) + "\n")
      self.process.stdin.flush()
      self.child = self._reply(60)["pid"]
      try:
        reply = self._reply(timeout)
        status = reply["status"]
        CHILD_CPU[0] += reply["cpu"]
      except subprocess.TimeoutExpired:
        os.kill(self.child, 9)  # the server then reaps it and answers
        self._reply(60)
        raise
      finally:
        self.child = None
      with open(paths["stdout"]) as stdout, open(paths["stderr"]) as stderr:
        return Result(status, stdout.read(), stderr.read())

  def close(self) -> None:
    if self.process.poll() is None:
      assert self.process.stdin is not None
      self.process.stdin.close()
      self.process.wait(timeout=60)


_SERVERS: dict[str, _Server] = {}
# CPU seconds of the children run so far (user + system): they are the server's children, not this
# process's, so tests/_cpu_profile.py adds them to the test that ran them.
CHILD_CPU = [0.0]


def run_python(code: str, cwd: str, env: dict[str, str], timeout: float) -> Result:
  """Runs ``code`` as ``python -c code`` would in ``cwd`` with environment ``env``, in a child
  forked from a process that has imported jax (the module docstring says what that changes: only
  the hash seed and ``random``'s state). Raises ``subprocess.TimeoutExpired`` after ``timeout``
  seconds (the child is killed)."""
  key = json.dumps(sorted(env.items()))
  server = _SERVERS.get(key)
  if server is None or server.process.poll() is not None:
    server = _SERVERS[key] = _Server(env)
  return server.run(code, cwd, timeout)


@atexit.register
def _close_servers() -> None:
  for server in _SERVERS.values():
    server.close()
