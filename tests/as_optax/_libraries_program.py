"""Run by test_as_optax.py as ``python -m steadax.as_optax -m tests.as_optax._libraries_program``:
Optimistix and Flax NNX, which import optax themselves, run on steadax. Prints a JSON report."""

import json
import sys

import jax
import jax.numpy as jnp

import steadax

steadax.set_strict(True)
report: dict = {"argv": sys.argv[1:], "name": __name__}

import optax  # noqa: E402
import optimistix as optx  # noqa: E402
from flax import nnx  # noqa: E402
import flax.nnx.training.optimizer as nnx_optimizer  # noqa: E402


def _has(tree, cls):
  nodes = jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, cls))
  return any(isinstance(x, cls) for x in nodes)


# Optimistix: OptaxMinimiser holds and steps the transformation.
solver = optx.OptaxMinimiser(optax.adam(0.1), rtol=1e-5, atol=1e-5)
solution = optx.minimise(lambda y, _: jnp.sum((y - 1.0) ** 2), solver, jnp.zeros(2), max_steps=300,
                         throw=False)
report["optimistix"] = {
    "optim": type(solver.optim).__module__.split(".")[0],
    "optim_is_transformation": isinstance(solver.optim, steadax.Transformation),
    "state_has_adam_record": _has(solution.state.opt_state, steadax.ScaleByAdamState),
    "value": [float(v) for v in solution.value],
}

# Flax NNX: nnx.Optimizer holds the transformation and its state in Variables.
model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adamw(1e-2), wrt=nnx.Param)
before = jnp.array(model.kernel[...])


@nnx.jit
def step(model, optimizer):
  grads = nnx.grad(lambda m: jnp.mean(m(jnp.ones((4, 3))) ** 2))(model)
  optimizer.update(model, grads)


step(model, optimizer)
step(model, optimizer)
report["nnx"] = {
    "module_optax": nnx_optimizer.optax.__name__,
    "tx_is_transformation": isinstance(optimizer.tx, steadax.Transformation),
    "state_has_adam_record": _has(optimizer.opt_state, steadax.ScaleByAdamState),
    "moved": bool(jnp.any(model.kernel[...] != before)),
}

# Real Optax imported after restore(): a second install() refuses, naming the importer.
steadax.as_optax.restore()
import optax as real_optax  # noqa: E402
report["real_after_restore"] = real_optax.__name__
try:
  steadax.as_optax.install()
  report["install_after_real"] = None
except RuntimeError as e:
  report["install_after_real"] = str(e)
print(json.dumps(report))
