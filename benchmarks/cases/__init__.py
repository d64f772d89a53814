"""The cases, in the order a full run takes them: name -> ``run(sizes, progress) -> result dict``.

Every result has a ``kind`` (how ``report`` tabulates it) and keeps its raw measurements.
"""

from . import (first_call, grid, import_time, lbfgs, lm, matrix_depth, memory, recipes, solvers, stats, steps,
               sweep, trace_time, train, wrappers)

CASES = {
    "big": steps.big,
    "many_small": steps.many_small,
    "mixed": steps.mixed,
    "wrappers": wrappers.run,
    "stats": stats.run,
    "train": train.run,
    "trace_time": trace_time.run,
    "first_call": first_call.run,
    "recipes": recipes.run,
    "grid": grid.run,
    "memory": memory.run,
    "lbfgs": lbfgs.run,
    "solvers": solvers.run,
    "sweep": sweep.run,
    "import_time": import_time.run,
    "matrix_depth": matrix_depth.run,
    "lm": lm.run,
}
