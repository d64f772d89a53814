"""A transformer with its layers stacked and scanned, trained with Muon, SOAP and AdamW (Flax NNX).

Run: ``make example NAME=scanned_transformer`` (about 20-40 s on a 2-core CPU; ``ARGS="--steps 60"``
and ``--layers``, ``--width`` ... change the run). Prints the training loss of each optimizer
every few steps, then one row per optimizer: the loss before and after, and the seconds of the
first call of the training step (trace and compile) and of the steps after it.

Large models are written this way (MaxText, Levanter, a scanned Flax model): the blocks are created
once by ``nnx.vmap`` and run by ``nnx.scan``, so each weight of the blocks is one array
``(layers, d_in, d_out)`` and the program holds one block however deep the model. A matrix
optimizer must then be told that the first axis is a stack of separate matrices, not part of the
matrix: ``steadax.dimension_numbers_from`` reads that from the model. Every parameter is created
with axis names (``nnx.with_partitioning``), and ``transform_metadata={nnx.PARTITION_NAME:
"layers"}`` makes ``nnx.vmap`` insert ``"layers"`` into the names of the stacked ones, so one call
gives every parameter its dimension numbers: ``(layers, embed, mlp)`` is a stack of ``embed x
mlp`` matrices, a ``(layers, embed)`` norm scale is not a matrix.

The model is a byte-level language model (pre-norm blocks, causal attention, a GELU MLP) learning
the next byte of one file of Python's standard library (``os.py``), so it runs offline anywhere.
Muon leaves the embeddings and the output layer to its AdamW part, as its authors do (``override``
in the one call). The optimizers that take dimension numbers with batch axes run; any other is
listed with the reason it is left out.
"""

from __future__ import annotations

import argparse
import inspect
import os
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import steadax

VOCAB = 256


def named(init, *names):
  """An initializer whose parameter carries axis names (metadata only here: no device mesh)."""
  return nnx.with_partitioning(init, names)


class Block(nnx.Module):
  """Pre-norm causal self-attention and a GELU MLP, every parameter with axis names."""

  def __init__(self, width: int, heads: int, rngs: nnx.Rngs):
    dense = nnx.initializers.lecun_normal()
    ones, zeros = nnx.initializers.ones_init(), nnx.initializers.zeros_init()
    self.heads = heads
    self.norm1 = nnx.LayerNorm(width, scale_init=named(ones, "embed"),
                               bias_init=named(zeros, "embed"), rngs=rngs)
    self.query, self.key, self.value = (
        nnx.Linear(width, width, use_bias=False, kernel_init=named(dense, "embed", "qkv"), rngs=rngs)
        for _ in range(3))
    self.out = nnx.Linear(width, width, use_bias=False, kernel_init=named(dense, "qkv", "embed"),
                          rngs=rngs)
    self.norm2 = nnx.LayerNorm(width, scale_init=named(ones, "embed"),
                               bias_init=named(zeros, "embed"), rngs=rngs)
    self.up = nnx.Linear(width, 4 * width, use_bias=False, kernel_init=named(dense, "embed", "mlp"),
                         rngs=rngs)
    self.down = nnx.Linear(4 * width, width, use_bias=False, kernel_init=named(dense, "mlp", "embed"),
                           rngs=rngs)

  def __call__(self, x):
    batch, length, width = x.shape
    h = self.norm1(x)
    q, k, v = (f(h).reshape(batch, length, self.heads, width // self.heads)
               for f in (self.query, self.key, self.value))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.float32(np.sqrt(width // self.heads))
    causal = jnp.tril(jnp.ones((1, 1, length, length), bool))
    attention = jax.nn.softmax(jnp.where(causal, scores, np.float32(-1e9)), axis=-1)
    x = x + self.out(jnp.einsum("bhqk,bkhd->bqhd", attention, v).reshape(batch, length, width))
    return x + self.down(jax.nn.gelu(self.up(self.norm2(x))))


class Transformer(nnx.Module):
  """Embeddings, ``layers`` blocks stacked by ``nnx.vmap`` and run by ``nnx.scan``, an output layer."""

  def __init__(self, layers: int, width: int, heads: int, context: int, rngs: nnx.Rngs):
    normal = nnx.initializers.normal(0.1)
    self.embed = nnx.Embed(VOCAB, width, embedding_init=named(normal, "vocab", "embed"), rngs=rngs)
    self.position = nnx.Param(normal(rngs.params(), (context, width)), out_sharding=(None, "embed"))

    @nnx.split_rngs(splits=layers)
    @nnx.vmap(in_axes=(0,), out_axes=0, transform_metadata={nnx.PARTITION_NAME: "layers"})
    def blocks(rngs):
      return Block(width, heads, rngs)

    self.blocks = blocks(rngs)
    self.final_norm = nnx.LayerNorm(width, scale_init=named(nnx.initializers.ones_init(), "embed"),
                                    bias_init=named(nnx.initializers.zeros_init(), "embed"),
                                    rngs=rngs)
    self.head = nnx.Linear(width, VOCAB, use_bias=False,
                           kernel_init=named(nnx.initializers.lecun_normal(), "embed", "vocab"),
                           rngs=rngs)

  def __call__(self, tokens):
    x = self.embed(tokens) + self.position[...][None, :tokens.shape[1]]

    @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry,
              transform_metadata={nnx.PARTITION_NAME: "layers"})
    def run(x, block):
      return block(x)

    return self.head(self.final_norm(run(x, self.blocks)))


def loss_fn(model: Transformer, tokens: jax.Array) -> jax.Array:
  """Mean next-byte cross-entropy (nats) over ``tokens[:, :-1]``."""
  logits = model(tokens[:, :-1])
  return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[:, 1:, None], axis=-1))


def takes_stacked_dimension_numbers(factory, keyword: str) -> bool:
  """Whether the optimizer takes dimension numbers (those that do take batch axes)."""
  return keyword in inspect.signature(factory).parameters


# Muon's authors give the embeddings and the output layer to AdamW (Muon's other part).
MUON_RULE = {"embed.*|head.*|position": None}

# name -> (factory, the keyword of its dimension numbers, learning rate, other arguments,
# overrides of the dimension numbers). The optimizers as data: a line each.
OPTIMIZERS = {
    "adamw": (steadax.adamw, None, 3e-3, {}, None),
    "muon": (steadax.contrib.muon, "muon_weight_dimension_numbers", 2e-2,
             {"adam_learning_rate": 5e-3}, MUON_RULE),
    # On a CPU a 256x256 eigendecomposition (the vocabulary's side) takes most of a second.
    "soap": (steadax.soap, "weight_dimension_numbers", 3e-3, {"max_precond_dim": 128}, None),
}


def make_optimizer(name: str, model: Transformer):
  factory, keyword, lr, extra, override = OPTIMIZERS[name]
  if keyword is None:
    return factory(lr, **extra)
  # The whole tree of dimension numbers in one call, from the names the model carries.
  dims = steadax.dimension_numbers_from(model, batch_axes="layers", override=override)
  return factory(lr, **{keyword: dims}, **extra)


def batches(args, seed: int = 0):
  with open(os.path.join(os.path.dirname(os.__file__), "os.py"), "rb") as f:
    text = np.frombuffer(f.read(), np.uint8).astype(np.int32)
  starts = np.random.default_rng(seed).integers(0, len(text) - args.context - 1,
                                                (args.steps, args.batch))
  return jnp.asarray(text[starts[..., None] + np.arange(args.context + 1)])


def new_model(args) -> Transformer:
  with nnx.use_eager_sharding(False):  # the names are metadata here: no mesh to shard over
    return Transformer(args.layers, args.width, args.heads, args.context, nnx.Rngs(0))


def train(name: str, args, data) -> dict:
  model = new_model(args)
  optimizer = nnx.Optimizer(model, make_optimizer(name, model), wrt=nnx.Param)

  @nnx.jit
  def step(model, optimizer, tokens):
    loss, grads = nnx.value_and_grad(loss_fn)(model, tokens)
    optimizer.update(model, grads)
    return loss

  t0 = time.perf_counter()
  losses = [float(step(model, optimizer, data[0]))]
  first_call_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  for i in range(1, args.steps):
    losses.append(float(step(model, optimizer, data[i])))
    if (i + 1) % args.print_every == 0:
      print(f"{name:>6} step {i + 1:4d}: loss {losses[-1]:.3f}", flush=True)
  return {"first": losses[0], "final": float(np.mean(losses[-3:])), "losses": losses,
          "first_call_s": first_call_s, "steps_s": time.perf_counter() - t0}


def main(argv: Sequence[str] = ()) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--layers", type=int, default=4)
  parser.add_argument("--width", type=int, default=64)
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--context", type=int, default=64)
  parser.add_argument("--batch", type=int, default=16)
  parser.add_argument("--print-every", type=int, default=10)
  parser.add_argument("--optimizers", default=",".join(OPTIMIZERS))
  args = parser.parse_args(list(argv))
  names = []
  for name in args.optimizers.split(","):
    factory, keyword = OPTIMIZERS[name][:2]
    if keyword is None or takes_stacked_dimension_numbers(factory, keyword):
      names.append(name)
    else:
      print(f"{name}: left out, steadax.{name} does not take `{keyword}` yet")

  model = new_model(args)
  dims = steadax.dimension_numbers_from(model, batch_axes="layers")
  state = nnx.state(model, nnx.Param)
  print(f"{args.layers} layers stacked; dimension numbers from the model's axis names:")
  for path in (("blocks", "up", "kernel"), ("blocks", "norm1", "scale"), ("embed", "embedding")):
    leaf, spec = state, dims
    for key in path:
      leaf, spec = leaf[key], spec[key]
    print(f"  {'.'.join(path)} {tuple(leaf.shape)} {leaf.get_metadata()['out_sharding']}: {spec}")

  data = batches(args)
  rows = {name: train(name, args, data) for name in names}
  print("| optimizer | initial loss | final loss | first call s | later steps s |")
  print("|---|---:|---:|---:|---:|")
  for name, r in rows.items():
    print(f"| {name} | {r['first']:.3f} | {r['final']:.3f} | {r['first_call_s']:.1f} | "
          f"{r['steps_s']:.1f} |")
  for name, r in rows.items():
    if not r["final"] < 0.8 * r["first"]:
      raise SystemExit(f"{name}: the loss fell only from {r['first']:.3f} to {r['final']:.3f}")
  return rows


if __name__ == "__main__":
  import sys
  main(sys.argv[1:])
