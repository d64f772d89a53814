"""The matrix optimizers' numbers against another version of steadax (issue 33 §2: results equal
today's to rounding).

Run once with the old source first on ``PYTHONPATH`` (``--save old.npz``), then with the new one
(``--compare old.npz``): every case runs three jitted updates on a small tree (shape groups of
per-layer matrices, a bfloat16 leaf, a 3-D tensor, vectors; complex matrices where supported), and
the updates and every state leaf of the last step are saved, or compared leaf by leaf (the largest
absolute difference relative to the leaf's scale).

  PYTHONPATH=/path/to/old/src python -m benchmarks.matrix_equality --save /tmp/old.npz
  PYTHONPATH=src python -m benchmarks.matrix_equality --compare /tmp/old.npz
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

import steadax

jax.config.update("jax_numpy_dtype_promotion", "standard")


def cases() -> dict:
  sx, c = steadax, steadax.contrib
  return {
      "soap": lambda: sx.soap(0.02, precondition_frequency=1),
      "soap_f2_1d": lambda: sx.soap(0.02, precondition_frequency=2, precondition_1d=True),
      "soap_low_precision": lambda: sx.soap(0.02, precondition_frequency=2, mu_dtype=jnp.bfloat16,
                                            statistics_dtype=jnp.bfloat16, eigenbasis_dtype=jnp.bfloat16),
      "soap_max_dim": lambda: sx.soap(0.02, precondition_frequency=1, max_precond_dim=4),
      "shampoo": lambda: sx.shampoo(0.02, block_size=4, precondition_frequency=1),
      "shampoo_sgd": lambda: sx.shampoo(0.02, block_size=3, precondition_frequency=2, graft_type="sgd"),
      "shampoo_summed": lambda: sx.shampoo(0.02, shampoo_beta=1.0, graft_type="none", exponent_override=2,
                                           precondition_frequency=1),
      "muon": lambda: c.muon(0.02, adaptive=True),
      "muon_aol": lambda: c.muon(0.02, preconditioning="aol", consistent_rms=0.2, weight_decay=0.01),
      "muon_schatten_dion": lambda: c.muon(0.02, ns_coeffs="dion", preconditioning="schatten", nesterov=False),
      "muon_spectral": lambda: c.muon(0.02, preconditioning="spectral", mu_dtype=jnp.bfloat16),
      "muon_dims": lambda: c.muon(0.02, muon_weight_dimension_numbers=lambda p: jax.tree.map(
          lambda x: c.MuonDimensionNumbers(1, 2) if x.ndim == 3 else
          (c.MuonDimensionNumbers(0, 1) if x.ndim == 2 else None), p)),
      "psgd_kron": lambda: sx.psgd_kron(0.02, preconditioner_update_probability=1.0),
      "psgd_kron_half": lambda: sx.psgd_kron(0.02, preconditioner_update_probability=0.5, weight_decay=0.01),
      "psgd_kron_dense_1d": lambda: sx.psgd_kron(0.02, min_ndim_triangular=1, max_size_triangular=5),
      "galore": lambda: c.galore(0.02, rank=2, update_proj_gap=1),
      "galore_gap2": lambda: c.galore(0.02, rank=3, update_proj_gap=2, scale=0.5, weight_decay=0.01),
  }


COMPLEX = ("soap", "shampoo", "muon", "psgd_kron", "galore")


def tree(depth: int, complex_: bool = False) -> dict:
  rng = np.random.default_rng(0)
  shapes = {"q": (4, 4), "k": (4, 4), "up": (4, 6), "down": (6, 4), "bias": (4,)}
  dt = np.complex64 if complex_ else np.float32

  def draw(shape):
    x = rng.normal(size=shape)
    return jnp.asarray(x + 1j * rng.normal(size=shape) if complex_ else x, dt)

  out = {f"layer{i}": {name: draw(shape) for name, shape in shapes.items()} for i in range(depth)}
  if not complex_:
    out["layer1"]["k"] = out["layer1"]["k"].astype(jnp.bfloat16)
    out["tensor"] = draw((2, 4, 3))
  return out


def run(name: str, make, params) -> dict:
  tx = make()
  rng = np.random.default_rng(1)
  grads = [jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape) + (
      1j * rng.normal(size=p.shape) if jnp.iscomplexobj(p) else 0), p.dtype), params) for _ in range(3)]

  @jax.jit
  def steps(params):
    state = tx.init(params)
    for g in grads:
      updates, state = tx.update(g, state, params)
    return updates, state

  updates, state = steps(params)
  out = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path((updates, state))[0]:
    if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
      continue
    out[f"{name}{jax.tree_util.keystr(path)}"] = np.asarray(leaf.astype(
        jnp.complex128 if jnp.iscomplexobj(leaf) else jnp.float64) if jax.config.jax_enable_x64 else
        leaf.astype(jnp.complex64 if jnp.iscomplexobj(leaf) else jnp.float32))
  return out


def results(only=None) -> dict:
  out = {}
  for name, make in cases().items():
    if only and not any(o in name for o in only):
      continue
    for depth in (2, 6):
      out.update(run(f"{name} L={depth}", make, tree(depth)))
    if name in COMPLEX:
      out.update(run(f"{name} complex", make, tree(2, complex_=True)))
  return out


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(prog="python -m benchmarks.matrix_equality", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--save", default=None)
  parser.add_argument("--compare", default=None)
  parser.add_argument("--only", default=None, help="comma-separated substrings of the case names")
  args = parser.parse_args(argv)
  found = results(args.only.split(",") if args.only else None)
  if args.save:
    np.savez(args.save, **found)
    print(f"saved {len(found)} arrays to {args.save}")
  if args.compare:
    old = np.load(args.compare)
    worst: dict = {}
    for key, new in found.items():
      if key not in old:
        print(f"missing in the old results: {key}")
        continue
      a = old[key]
      if a.shape != new.shape:
        print(f"SHAPE {key}: {a.shape} -> {new.shape}")
        continue
      scale = max(1.0, float(np.max(np.abs(a)))) if a.size else 1.0
      diff = float(np.max(np.abs(a - new))) / scale if a.size else 0.0
      case = key.split("[")[0].split(".")[0]
      if diff > worst.get(case, (0.0, ""))[0] or case not in worst:
        worst[case] = (diff, key)
    for case, (diff, key) in worst.items():
      print(f"{case:40s} {diff:.2e}  {key}")
    missing = set(old.files) - set(found)
    if missing and not args.only:
      print(f"{len(missing)} old arrays not produced, e.g. {sorted(missing)[:3]}")
    sys.exit(0)


if __name__ == "__main__":
  main()
