"""The programs run in fresh interpreters through the runner: scripts, never collected
(``--doctest-modules`` would import them, switching optax in the test process)."""

collect_ignore = ["_libraries_program.py", "_switch_program.py"]
