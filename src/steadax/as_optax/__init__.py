"""Resolve ``optax`` to steadax process-wide, so libraries built on Optax run on steadax.

``import steadax as optax`` renames one module in one file. ``steadax.as_optax.install()`` makes
every later ``import optax ...`` in the process, in any module and submodules included, give
steadax: ``import optax.tree_utils as otu``, ``from optax.contrib import muon``, and the imports
inside Optimistix, Flax's ``nnx.Optimizer``, NumPyro, GPJax, FlowJAX or BlackJAX. The runner
``python -m steadax.as_optax script.py [args]`` (or ``-m module [args]``, ``-c command``) turns the
switch on and runs the program, as ``python -m cProfile`` does. See ``docs/migrating.md``.
"""

from ._switch import Switch as Switch, install as install, is_installed as is_installed, restore as restore

__all__ = ["Switch", "install", "is_installed", "restore"]
