"""steadax's benchmark suite against Optax (``make bench``; ``python -m benchmarks.run --help``)."""
