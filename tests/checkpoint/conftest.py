"""The two-process sharded worker joins a distributed run when imported: it is a script, never
collected (``--doctest-modules`` would import it)."""

collect_ignore = ["_sharded_worker.py"]
