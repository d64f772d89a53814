"""Optax's private modules under steadax.as_optax: the names public code imports are steadax's objects.

The modules are built here as the switch's loader builds them (``OptaxPrivateModule`` over the
generated table), without turning the switch on in this process; test_as_optax.py imports them
through the switch in a fresh interpreter. The helpers steadax provides for Optax's private ones
(``canonicalize_dtype``, ``abs_sq``, ``ArrayTree``) are compared with Optax's, in both x64 modes.
"""

import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from optax._src import numerics as optax_numerics
from optax._src import utils as optax_utils

import steadax
from steadax.as_optax import _optax_helpers, _private_modules
from steadax.as_optax._optax_private import PRIVATE_NAMES


def _module(name):
  return _private_modules.OptaxPrivateModule(name, PRIVATE_NAMES[name])


# The private imports most used in public code (a search of public repositories' source: PSGD-Kron
# copies (psgd_jax, Levanter), Apple's AXLearn, MaxText, Mava, RL training scripts on gymnax, NetKet
# scripts, Optax's own notebooks and its contrib code copied into other projects), each with the
# steadax object it must be.
MOST_USED = [
    ("optax._src.base", "GradientTransformation", lambda: steadax.GradientTransformation),
    ("optax._src.base", "GradientTransformationExtraArgs",
     lambda: steadax.GradientTransformationExtraArgs),
    ("optax._src.base", "EmptyState", lambda: steadax.EmptyState),
    ("optax._src.base", "init_empty_state", lambda: steadax.init_empty_state),
    ("optax._src.base", "identity", lambda: steadax.identity),
    ("optax._src.base", "OptState", lambda: steadax.OptState),
    ("optax._src.base", "Params", lambda: steadax.Params),
    ("optax._src.base", "Updates", lambda: steadax.Updates),
    ("optax._src.base", "Schedule", lambda: steadax.Schedule),
    ("optax._src.base", "ScalarOrSchedule", lambda: steadax.ScalarOrSchedule),
    ("optax._src.base", "PyTree", lambda: typing.Any),
    ("optax._src.base", "PRNGKey", lambda: jax.Array),
    ("optax._src.base", "ArrayTree", lambda: _optax_helpers.ArrayTree),
    ("optax._src.utils", "canonicalize_dtype", lambda: _optax_helpers.canonicalize_dtype),
    ("optax._src.utils", "safe_int32_increment", lambda: steadax.safe_int32_increment),
    ("optax._src.utils", "scale_gradient", lambda: steadax.scale_gradient),
    ("optax._src.numerics", "safe_int32_increment", lambda: steadax.safe_int32_increment),
    ("optax._src.numerics", "safe_increment", lambda: steadax.safe_increment),
    ("optax._src.numerics", "safe_norm", lambda: steadax.safe_norm),
    ("optax._src.numerics", "safe_root_mean_squares", lambda: steadax.safe_root_mean_squares),
    ("optax._src.numerics", "abs_sq", lambda: _optax_helpers.abs_sq),
    ("optax._src.transform", "ScaleByAdamState", lambda: steadax.ScaleByAdamState),
    ("optax._src.transform", "scale_by_adam", lambda: steadax.scale_by_adam),
    ("optax._src.transform", "add_decayed_weights", lambda: steadax.add_decayed_weights),
    ("optax._src.transform", "scale_by_learning_rate", lambda: steadax.scale_by_learning_rate),
    ("optax._src.transform", "trace", lambda: steadax.trace),
    ("optax._src.transform", "add_noise", lambda: steadax.add_noise),
    ("optax._src.transform", "AddNoiseState", lambda: steadax.AddNoiseState),
    ("optax._src.transform", "ScaleByRmsWithCountState", lambda: steadax.ScaleByRmsWithCountState),
    ("optax._src.combine", "chain", lambda: steadax.chain),
    ("optax._src.combine", "multi_transform", lambda: steadax.multi_transform),
    ("optax._src.alias", "adamw", lambda: steadax.adamw),
    ("optax._src.alias", "MaskOrFn", lambda: steadax.MaskOrFn),
    ("optax._src.linear_algebra", "global_norm", lambda: steadax.global_norm),
    ("optax._src.wrappers", "MultiStepsState", lambda: steadax.MultiStepsState),
    ("optax._src.wrappers", "masked", lambda: steadax.masked),
    ("optax._src.update", "apply_updates", lambda: steadax.apply_updates),
    ("optax._src.linesearch", "scale_by_zoom_linesearch", lambda: steadax.scale_by_zoom_linesearch),
    ("optax._src.schedule", "InjectHyperparamsState", lambda: steadax.InjectHyperparamsState),
    ("optax.contrib._muon", "MuonDimensionNumbers", lambda: steadax.contrib.MuonDimensionNumbers),
    ("optax.contrib._muon", "MuonState", lambda: steadax.contrib.MuonState),
    ("optax.contrib._reduce_on_plateau", "ReduceLROnPlateauState",
     lambda: steadax.contrib.ReduceLROnPlateauState),
    ("optax.transforms._masking", "MaskedNode", lambda: steadax.MaskedNode),
    ("optax.transforms._masking", "MaskedState", lambda: steadax.MaskedState),
    ("optax.transforms._accumulation", "MultiStepsState", lambda: steadax.MultiStepsState),
    ("optax.transforms._combining", "partition", lambda: steadax.partition),
    ("optax.tree_utils._state_utils", "NamedTupleKey", lambda: steadax.tree_utils.NamedTupleKey),
]


def test_the_most_used_private_names_are_steadax_objects():
  wrong = [(module, name) for module, name, expected in MOST_USED
           if getattr(_module(module), name) is not expected()]
  assert not wrong


def test_a_name_without_counterpart_raises_naming_module_name_and_what_to_use():
  utils = _module("optax._src.utils")
  with pytest.raises(ImportError, match=r"^optax\._src\.utils\.tile_second_to_last_dim: Optax "
                     r"0\.2\.8 defines 'tile_second_to_last_dim' in its private module "
                     r"optax\._src\.utils, and steadax has no counterpart") as info:
    utils.tile_second_to_last_dim  # noqa: B018
  assert info.value.name == "optax._src.utils" and "Keep a copy of it" in str(info.value)
  with pytest.raises(ImportError, match=r"Use steadax\.contrib\.sophia"):
    _module("optax.contrib._sophia").scale_by_sophia  # noqa: B018
  # The other names of the module still resolve, and the error comes again on every read.
  assert utils.canonicalize_dtype is _optax_helpers.canonicalize_dtype
  with pytest.raises(ImportError):
    utils.tile_second_to_last_dim  # noqa: B018


def test_a_name_optax_does_not_define_there_raises_attribute_error():
  transform = _module("optax._src.transform")
  with pytest.raises(AttributeError, match=r"no attribute 'update_moment' \(nor has Optax 0\.2\.8's"):
    transform.update_moment  # noqa: B018
  assert not hasattr(transform, "bias_correction")  # hasattr works: AttributeError, not ImportError


def test_dir_and_all_list_the_names_that_resolve():
  base = _module("optax._src.base")
  assert "GradientTransformation" in dir(base) and "NO_PARAMS_MSG" not in dir(base)
  assert base.__all__ == sorted(n for n, r in PRIVATE_NAMES["optax._src.base"].items() if r)


def test_only_optax_0_2_8_modules_resolve():
  assert _private_modules.find_spec("optax._src.base") is not None
  assert _private_modules.find_spec("optax._src").submodule_search_locations == []
  for absent in ("optax._src.clipping", "optax._src.loss", "optax._src.state_utils", "optax._foo"):
    assert _private_modules.find_spec(absent) is None  # removed before 0.2.8, or never there


DTYPES = [None, "float64", "float32", "bfloat16", "int64", "complex128", np.float64, jnp.float16,
          np.dtype("uint8")]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_canonicalize_dtype_is_optaxs(dtype):
  assert _optax_helpers.canonicalize_dtype(dtype) == optax_utils.canonicalize_dtype(dtype)


def test_abs_sq_is_optaxs_bit_for_bit():
  rng = np.random.default_rng(0)
  values = rng.standard_normal((2, 7)) * 10.0 ** rng.integers(-20, 20, (2, 7))
  for x in [jnp.asarray(values[0], jnp.float32), jnp.asarray(values[0], jnp.bfloat16),
            jnp.asarray(values[0] + 1j * values[1], jnp.complex64), values[0],
            values[0] + 1j * values[1]]:
    ours, theirs = _optax_helpers.abs_sq(x), optax_numerics.abs_sq(x)
    assert type(ours) is type(theirs) and ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)
  for bad in (3.0, [1.0, 2.0]):
    for abs_sq in (_optax_helpers.abs_sq, optax_numerics.abs_sq):
      with pytest.raises(ValueError, match="accepts only NDarrays"):
        abs_sq(bad)


def test_muons_private_helpers_are_optaxs():
  # optax.contrib._muon.orthogonalize_via_newton_schulz and scale_by_shape (Optax code calls
  # them to build its own Muon variants) resolve to steadax's, with Optax's arguments and numbers.
  import optax.contrib._muon as optax_muon

  from steadax.contrib import _muon

  module = _module("optax.contrib._muon")
  assert module.orthogonalize_via_newton_schulz is _muon.orthogonalize_via_newton_schulz
  assert module.scale_by_shape is _muon.scale_by_shape
  rng = np.random.default_rng(0)
  cases = [(jnp.asarray(c, jnp.float32), pre) for c, pre in (
      (_muon._DION_COEFFS, "frobenius"), (_muon._DION_COEFFS, "aol"), (_muon._STANDARD_COEFFS, "schatten"))]
  for shape, axes in (((8, 20), None), ((20, 8), None), ((3, 8, 20), (1, 2)), ((8, 3, 20), (0, 2))):
    x = jnp.asarray(rng.normal(size=shape), jnp.float32)
    for coeffs, pre in cases:
      with jax.numpy_dtype_promotion("standard"):  # Optax's code is not written for strict promotion
        want = optax_muon.orthogonalize_via_newton_schulz(
            x, coeffs, 5, pre, 1e-8, None if axes is None else optax_muon.MuonDimensionNumbers(*axes))
      got = module.orthogonalize_via_newton_schulz(
          x, coeffs, 5, pre, 1e-8, None if axes is None else steadax.contrib.MuonDimensionNumbers(*axes))
      assert got.dtype == x.dtype
      np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
  updates = {"w": jnp.ones((4, 16), jnp.float32), "v": jnp.ones((2, 8, 4), jnp.float32)}
  for rms in (None, 0.2):
    ours = module.scale_by_shape({"w": steadax.contrib.MuonDimensionNumbers(),
                                  "v": steadax.contrib.MuonDimensionNumbers(1, 2)}, rms)
    theirs = optax_muon.scale_by_shape({"w": optax_muon.MuonDimensionNumbers(),
                                        "v": optax_muon.MuonDimensionNumbers(1, 2)}, rms)
    with jax.numpy_dtype_promotion("standard"):
      want = theirs.update(updates, theirs.init(updates))[0]
    got = ours.update(updates, ours.init(updates))[0]
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), got, want)
