"""``python -m steadax.as_optax``: runs a program with ``optax`` resolved to steadax.

Usage::

  python -m steadax.as_optax script.py [args ...]
  python -m steadax.as_optax -m module [args ...]     # e.g. -m pytest tests/
  python -m steadax.as_optax -c command [args ...]

The switch (``steadax.as_optax.install``) is turned on before the program runs; the program then
sees the ``sys.argv``, ``sys.path[0]`` and ``__name__ == "__main__"`` that ``python script.py``,
``python -m module`` or ``python -c command`` would give it. Child processes (pytest-xdist
workers, ``multiprocessing``) are new interpreters: start them through this runner too, or call
``install()`` in them.
"""

import os
import runpy
import sys

from ._switch import install

_USAGE = ("usage: python -m steadax.as_optax (script.py | -m module | -c command) [args ...]\n"
          "Runs the program with every `import optax ...` resolved to steadax.")


def main(argv: list[str]) -> None:
  """Runs the program ``argv`` names (``script.py ...``, ``-m module ...`` or ``-c command ...``)."""
  if not argv or argv[0] in ("-h", "--help") or (argv[0] in ("-m", "-c") and len(argv) < 2):
    print(_USAGE, file=sys.stderr if not argv or argv[0] not in ("-h", "--help") else sys.stdout)
    raise SystemExit(0 if argv and argv[0] in ("-h", "--help") else 2)
  install()
  if argv[0] == "-m":
    # `python -m steadax.as_optax` already put the working directory first on sys.path, as
    # `python -m module` does; run_module sets sys.argv[0] to the module's file.
    sys.argv = [argv[1], *argv[2:]]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
  elif argv[0] == "-c":
    sys.argv = ["-c", *argv[2:]]
    exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
  else:
    script = argv[0]
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python script.py` sets it
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
  main(sys.argv[1:])
