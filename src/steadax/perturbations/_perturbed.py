"""Differentiable Monte-Carlo smoothing of a function by random perturbations of its input."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._policy import cast, compute_dtype, hyper
from ..tree._leafwise import arith_dtype, as_array, cast_to, map_leaves, with_weak
from ..tree._random import tree_random_like
from .._core._types import Params

__all__ = ["Normal", "Gumbel", "make_perturbed_fun"]


class Normal:
  """The standard normal noise: ``sample`` draws N(0, 1), ``log_prob`` is ``-z**2 / 2`` (+ const).

  Example:
    >>> import jax, steadax
    >>> noise = steadax.perturbations.Normal()
    >>> noise.sample(jax.random.key(0), (3,)).shape
    (3,)
    >>> float(noise.log_prob(jax.numpy.array(2.0)))
    -2.0
  """

  def sample(self, key: jax.Array, sample_shape: Any = (), dtype: Any = float) -> jax.Array:
    """Draws standard normal noise of ``sample_shape`` and ``dtype``."""
    return jax.random.normal(key, sample_shape, dtype)

  def log_prob(self, inputs: jax.Array) -> jax.Array:
    """The unnormalised log-density at ``inputs``."""
    return -0.5 * inputs * inputs

  def __repr__(self) -> str:
    return "Normal()"


class Gumbel:
  """The standard Gumbel noise: ``log_prob`` is ``-z - exp(-z)``.

  With it, ``argmax(x + sigma * z)`` is a sample of ``softmax(x / sigma)`` (the Gumbel-max trick).

  Example:
    >>> import jax, steadax
    >>> noise = steadax.perturbations.Gumbel()
    >>> noise.sample(jax.random.key(0), (3,)).shape
    (3,)
    >>> float(noise.log_prob(jax.numpy.array(0.0)))
    -1.0
  """

  def sample(self, key: jax.Array, sample_shape: Any = (), dtype: Any = float) -> jax.Array:
    """Draws standard Gumbel noise of ``sample_shape`` and ``dtype``."""
    return jax.random.gumbel(key, sample_shape, dtype)

  def log_prob(self, inputs: jax.Array) -> jax.Array:
    """The log-density at ``inputs``."""
    return -inputs - jnp.exp(-inputs)

  def __repr__(self) -> str:
    return "Gumbel()"


def _magic_box(x: jax.Array) -> jax.Array:
  """1 in value, with the derivatives of ``exp(x)``: turns a log-probability into a score term."""
  return jnp.exp(x - jax.lax.stop_gradient(x))


def make_perturbed_fun(
    fun: Callable[[Params], Params],
    num_samples: int = 1000,
    sigma: ArrayLike = 0.1,
    noise: Normal | Gumbel = Gumbel(),
    use_baseline: bool = True,
) -> Callable[[jax.Array, Any], Any]:
  """A smoothed, differentiable Monte-Carlo version of ``fun``: ``E_z[fun(x + sigma * z)]``.

  ``fun`` itself is only evaluated, never differentiated, so it may be piecewise constant (an
  argmax, a ranking, a solver). The returned function's value and its derivatives of every order
  (through JAX autodiff) are unbiased estimates of those of the smoothed function, computed with the
  score-function estimator written as a "magic box" of the samples' log-probability.

  The noise of a leaf is drawn in that leaf's dtype from the same keys as Optax (so the same key
  gives the same samples); scores and averages are computed in at least float32. Each output leaf
  has ``fun``'s output dtype (floating; integer outputs become JAX's default float).

  Args:
    fun: a function from a tree of arrays to a tree of arrays.
    num_samples: the number of perturbations averaged.
    sigma: the scale of the perturbation (may be traced).
    noise: an object with ``sample(key, shape, dtype)`` and ``log_prob(z)``, such as ``Gumbel()``
      (the default) or ``Normal()``.
    use_baseline: subtract ``fun(x)`` as a control variate (lower variance, same expectation).

  Returns:
    ``perturbed(key, x)``, with ``fun``'s signature plus a leading PRNG key.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> hard_max = lambda x: jax.nn.one_hot(jnp.argmax(x), 3)
    >>> soft_max = steadax.perturbations.make_perturbed_fun(hard_max, 2000, sigma=0.5)
    >>> y = soft_max(jax.random.key(0), jnp.array([1.0, 0.0, 0.0]))
    >>> bool(y[0] > y[1]), bool(abs(float(y.sum()) - 1.0) < 1e-5)
    (True, True)

  References:
    Berthet et al., Learning with Differentiable Perturbed Optimizers, NeurIPS 2020 (eq. 1-3);
    Foerster et al., DiCE: The Infinitely Differentiable Monte Carlo Estimator, ICML 2018 (eq. 5).
  """
  if not callable(fun):
    raise TypeError(f"make_perturbed_fun: `fun` must be callable, got {type(fun).__name__}")
  if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples < 1:
    raise ValueError(f"make_perturbed_fun: `num_samples` must be a positive int, got {num_samples!r}")
  if not (hasattr(noise, "sample") and hasattr(noise, "log_prob")):
    raise TypeError("make_perturbed_fun: `noise` must have `sample` and `log_prob` methods")

  def perturbed(key: jax.Array, x: Any) -> Any:
    x = jax.tree_util.tree_map(as_array, x)
    baseline = fun(jax.lax.stop_gradient(x)) if use_baseline else None

    def one_sample(sample_key):
      z = tree_random_like(sample_key, x, sampler=noise.sample)

      def shift(xi, zi):
        cdt = compute_dtype(xi.dtype, zi.dtype)
        return cast(cast_to(xi, cdt) + hyper(sigma, cdt) * cast_to(zi, cdt), xi.dtype)

      y = jax.lax.stop_gradient(map_leaves("make_perturbed_fun", shift, x, z))

      # The noise recovered from y depends on x: its log-probability carries the score function.
      def log_prob(xi, yi):
        cdt = compute_dtype(xi.dtype)
        recovered = (cast_to(yi, cdt) - cast_to(xi, cdt)) / hyper(sigma, cdt)
        return jnp.sum(noise.log_prob(recovered))

      terms = jax.tree_util.tree_leaves(map_leaves("make_perturbed_fun", log_prob, x, y))
      score = jnp.zeros([], compute_dtype(*[t.dtype for t in terms]))
      for t in terms:
        score = score + cast(t, score.dtype)
      box = _magic_box(score)

      def estimate(out, base):
        out = as_array(out)
        cdt = arith_dtype(with_weak(out.dtype, 0.0))
        b = cast(box, cdt)
        value = b * cast_to(out, cdt)
        if base is not None:
          value = value + (jnp.asarray(1, cdt) - b) * cast_to(base, cdt)
        return value

      outputs = fun(y)
      if baseline is None:
        return map_leaves("make_perturbed_fun", lambda o: estimate(o, None), outputs)
      return map_leaves("make_perturbed_fun", estimate, outputs, baseline, names=["fun(x)"])

    keys = jax.random.split(key, num_samples)
    samples = jax.vmap(one_sample)(keys)
    reference = baseline if baseline is not None else jax.eval_shape(fun, x)
    return map_leaves(
        "make_perturbed_fun",
        lambda s, ref: cast(jnp.mean(s, axis=0), with_weak(ref.dtype, 0.0)),
        samples,
        reference,
        names=["fun(x)"],
    )

  return perturbed
