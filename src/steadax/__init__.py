"""steadax: type-stable, composable gradient processing and optimization for JAX.

``import steadax as optax`` works for Optax's public names; every transformation is a frozen pytree
whose numeric hyperparameters are leaves, and every update obeys the type-stability contract
(see ``docs/contract.md``).

The public names are Optax 0.2.8's plus the steadax extensions listed in ``docs/extensions.md``
(``tests/test_surface.py`` holds the list and asserts this exact set). Every name is re-exported
explicitly from the private module that defines it; the private packages ``_optimizers``,
``_wrappers`` and ``_linesearch`` are internal layers, not namespaces.
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._core._deprecations import deprecation_getattr as _deprecation_getattr
from ._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from ._core._adapters import with_extra_args_support as with_extra_args_support
  from ._core._contract import InputMismatchError as InputMismatchError
  from ._core._interface import (
      EmptyState as EmptyState,
      GradientTransformation as GradientTransformation,
      GradientTransformationExtraArgs as GradientTransformationExtraArgs,
      TransformInitFn as TransformInitFn,
      TransformUpdateExtraArgsFn as TransformUpdateExtraArgsFn,
      TransformUpdateFn as TransformUpdateFn,
      init_empty_state as init_empty_state,
  )
  from ._core._stateless import (
      identity as identity,
      set_to_zero as set_to_zero,
      stateless as stateless,
      stateless_with_tree_map as stateless_with_tree_map,
  )
  from ._core._transformation import Transformation as Transformation
  from ._core._updates import (
      apply_updates as apply_updates,
      incremental_update as incremental_update,
      periodic_update as periodic_update,
  )
  from ._core._combine import chain as chain, named_chain as named_chain
  from ._core._config import is_strict as is_strict, set_strict as set_strict, strict_mode as strict_mode
  from ._core._contract import ContractError as ContractError
  from ._core._module import (
      Fn as Fn,
      Module as Module,
      child_field as child_field,
      hyper_field as hyper_field,
      static_field as static_field,
  )
  from ._core._policy import safe_increment as safe_increment
  from ._core._policy import safe_increment as safe_int32_increment
  from ._core._tree import global_norm as global_norm
  from ._core._types import (
      MaskOrFn as MaskOrFn,
      OptState as OptState,
      Params as Params,
      ScalarOrSchedule as ScalarOrSchedule,
      Schedule as Schedule,
      Updates as Updates,
  )
  from ._linesearch._backtracking import (
      BacktrackingLinesearchInfo as BacktrackingLinesearchInfo,
      ScaleByBacktrackingLinesearchState as ScaleByBacktrackingLinesearchState,
      scale_by_backtracking_linesearch as scale_by_backtracking_linesearch,
  )
  from ._linesearch._common import value_and_grad_from_state as value_and_grad_from_state
  from ._linesearch._zoom import (
      ZoomLinesearchInfo as ZoomLinesearchInfo,
      ScaleByZoomLinesearchState as ScaleByZoomLinesearchState,
      scale_by_zoom_linesearch as scale_by_zoom_linesearch,
  )
  from ._optimizers._adam import (
      adam as adam,
      adamw as adamw,
      nadam as nadam,
      nadamw as nadamw,
      amsgrad as amsgrad,
      adamax as adamax,
      adamaxw as adamaxw,
  )
  from ._optimizers._adam_variants import (
      adabelief as adabelief,
      adan as adan,
      radam as radam,
      yogi as yogi,
  )
  from ._optimizers._adaptive import (
      adadelta as adadelta,
      novograd as novograd,
      sm3 as sm3,
  )
  from ._optimizers._factored import adafactor as adafactor
  from ._optimizers._fromage import fromage as fromage
  from ._optimizers._lbfgs import (
      ScaleByLBFGSState as ScaleByLBFGSState,
      scale_by_lbfgs as scale_by_lbfgs,
      lbfgs as lbfgs,
  )
  from ._optimizers._lion import lion as lion
  from ._optimizers._lowmem import adam_lowmem as adam_lowmem, adam8bit as adam8bit, adamw8bit as adamw8bit
  from ._optimizers._mars import mars as mars
  from ._optimizers._optimistic import (
      optimistic_gradient_descent as optimistic_gradient_descent,
      optimistic_adam as optimistic_adam,
      optimistic_adam_v2 as optimistic_adam_v2,
  )
  from ._optimizers._psgd_kron import psgd_kron as psgd_kron
  from ._optimizers._rms import rmsprop as rmsprop, adagrad as adagrad
  from ._optimizers._sgd import sgd as sgd
  from ._optimizers._sgd_variants import noisy_sgd as noisy_sgd, polyak_sgd as polyak_sgd
  from ._optimizers._shampoo import shampoo as shampoo
  from ._optimizers._sign import (
      sign_sgd as sign_sgd,
      signum as signum,
      rprop as rprop,
  )
  from ._optimizers._soap import soap as soap
  from ._optimizers._trust_ratio import lamb as lamb, lars as lars
  from ._solvers._lbfgsb import ScaleByLBFGSBState as ScaleByLBFGSBState, lbfgsb as lbfgsb
  from ._solvers._minimize import (
      MinimizeInfo as MinimizeInfo,
      StopReason as StopReason,
      minimize as minimize,
      stop_reason_message as stop_reason_message,
  )
  from . import schedules as schedules
  from .schedules._composite import (
      warmup_constant_schedule as warmup_constant_schedule,
      warmup_cosine_decay_schedule as warmup_cosine_decay_schedule,
      warmup_exponential_decay_schedule as warmup_exponential_decay_schedule,
      linear_onecycle_schedule as linear_onecycle_schedule,
      cosine_onecycle_schedule as cosine_onecycle_schedule,
      sgdr_schedule as sgdr_schedule,
  )
  from .schedules._inject import (
      InjectHyperparamsState as InjectHyperparamsState,
      InjectStatefulHyperparamsState as InjectStatefulHyperparamsState,
      WrappedSchedule as WrappedSchedule,
      inject_hyperparams as inject_hyperparams,
      inject_stateful_hyperparams as inject_stateful_hyperparams,
  )
  from .schedules._join import join_schedules as join_schedules
  from .schedules._schedule import (
      constant_schedule as constant_schedule,
      polynomial_schedule as polynomial_schedule,
      linear_schedule as linear_schedule,
      exponential_decay as exponential_decay,
      cosine_decay_schedule as cosine_decay_schedule,
      piecewise_constant_schedule as piecewise_constant_schedule,
      piecewise_interpolate_schedule as piecewise_interpolate_schedule,
  )
  from .schedules._wsd import warmup_stable_decay_schedule as warmup_stable_decay_schedule
  from . import contrib as contrib
  from . import transforms as transforms
  from .transforms._adam import (
      ScaleByAdamState as ScaleByAdamState,
      ScaleByAmsgradState as ScaleByAmsgradState,
      scale_by_adam as scale_by_adam,
      scale_by_amsgrad as scale_by_amsgrad,
      scale_by_adamax as scale_by_adamax,
  )
  from .transforms._adam_8bit import (
      BlockQuantized as BlockQuantized,
      ScaleByAdam8bitState as ScaleByAdam8bitState,
      scale_by_adam_8bit as scale_by_adam_8bit,
      dynamic_quantization_map as dynamic_quantization_map,
  )
  from .transforms._adam_variants import (
      ScaleByBeliefState as ScaleByBeliefState,
      ScaleByAdanState as ScaleByAdanState,
      scale_by_belief as scale_by_belief,
      scale_by_yogi as scale_by_yogi,
      scale_by_radam as scale_by_radam,
      scale_by_adan as scale_by_adan,
  )
  from .transforms._adaptive import (
      ScaleByAdaDeltaState as ScaleByAdaDeltaState,
      ScaleByNovogradState as ScaleByNovogradState,
      ScaleBySM3State as ScaleBySM3State,
      scale_by_adadelta as scale_by_adadelta,
      scale_by_novograd as scale_by_novograd,
      scale_by_sm3 as scale_by_sm3,
  )
  from .transforms._axes import WeightDimensionNumbers as WeightDimensionNumbers
  from .transforms._centralize import centralize as centralize
  from .transforms._clipping import (
      ClipState as ClipState,
      ClipByGlobalNormState as ClipByGlobalNormState,
      clip as clip,
      clip_by_global_norm as clip_by_global_norm,
      clip_by_block_rms as clip_by_block_rms,
  )
  from .transforms._decay import (
      AddDecayedWeightsState as AddDecayedWeightsState,
      WeightDecaySchedule as WeightDecaySchedule,
      add_decayed_weights as add_decayed_weights,
  )
  from .transforms._factored import (
      FactoredState as FactoredState,
      scale_by_factored_rms as scale_by_factored_rms,
  )
  from .transforms._lion import ScaleByLionState as ScaleByLionState, scale_by_lion as scale_by_lion
  from .transforms._lowmem import scale_by_adam_lowmem as scale_by_adam_lowmem
  from .transforms._mars import ScaleByMarsState as ScaleByMarsState, scale_by_mars as scale_by_mars
  from .transforms._moments import (
      update_moment as update_moment,
      update_moment_per_elem_norm as update_moment_per_elem_norm,
      update_infinity_moment as update_infinity_moment,
      bias_correction as bias_correction,
      safe_norm as safe_norm,
      safe_root_mean_squares as safe_root_mean_squares,
  )
  from .transforms._noise import AddNoiseState as AddNoiseState, add_noise as add_noise
  from .transforms._normalize import normalize_by_update_norm as normalize_by_update_norm
  from .transforms._optimistic import (
      ScaleByOptimisticGradientState as ScaleByOptimisticGradientState,
      scale_by_optimistic_gradient as scale_by_optimistic_gradient,
  )
  from .transforms._psgd_kron import (
      ScaleByPsgdKronState as ScaleByPsgdKronState,
      scale_by_psgd_kron as scale_by_psgd_kron,
      psgd_update_probability as psgd_update_probability,
  )
  from .transforms._rms import (
      ScaleByRmsState as ScaleByRmsState,
      ScaleByRmsWithCountState as ScaleByRmsWithCountState,
      ScaleByRStdDevState as ScaleByRStdDevState,
      ScaleByRStdDevWithCountState as ScaleByRStdDevWithCountState,
      ScaleByRssState as ScaleByRssState,
      scale_by_rms as scale_by_rms,
      scale_by_stddev as scale_by_stddev,
      scale_by_rss as scale_by_rss,
  )
  from .transforms._rprop import ScaleByRpropState as ScaleByRpropState, scale_by_rprop as scale_by_rprop
  from .transforms._scaling import (
      ScaleState as ScaleState,
      ScaleByScheduleState as ScaleByScheduleState,
      TraceState as TraceState,
      EmaState as EmaState,
      scale as scale,
      scale_by_learning_rate as scale_by_learning_rate,
      scale_by_schedule as scale_by_schedule,
      scale_by_sign as scale_by_sign,
      trace as trace,
      ema as ema,
  )
  from .transforms._shampoo import (
      ScaleByShampooState as ScaleByShampooState,
      scale_by_shampoo as scale_by_shampoo,
  )
  from .transforms._soap import ScaleBySoapState as ScaleBySoapState, scale_by_soap as scale_by_soap
  from .transforms._step_size import (
      ScaleByDistanceOverGradientsState as ScaleByDistanceOverGradientsState,
      scale_by_polyak as scale_by_polyak,
      scale_by_distance_over_gradients as scale_by_distance_over_gradients,
  )
  from .transforms._trust_ratio import (
      ScaleByTrustRatioState as ScaleByTrustRatioState,
      scale_by_trust_ratio as scale_by_trust_ratio,
      scale_by_param_block_norm as scale_by_param_block_norm,
      scale_by_param_block_rms as scale_by_param_block_rms,
  )
  from ._wrappers._accumulation import (
      ShouldSkipUpdateFunction as ShouldSkipUpdateFunction,
      skip_not_finite as skip_not_finite,
      skip_large_updates as skip_large_updates,
      MultiStepsState as MultiStepsState,
      MultiSteps as MultiSteps,
      ApplyEvery as ApplyEvery,
      apply_every as apply_every,
  )
  from ._wrappers._conditionality import (
      ConditionallyTransformState as ConditionallyTransformState,
      ConditionallyMaskState as ConditionallyMaskState,
      conditionally_transform as conditionally_transform,
      conditionally_mask as conditionally_mask,
      ApplyIfFiniteState as ApplyIfFiniteState,
      apply_if_finite as apply_if_finite,
      ZeroNansState as ZeroNansState,
      zero_nans as zero_nans,
  )
  from ._wrappers._axis_names import dimension_numbers_from as dimension_numbers_from
  from ._wrappers._flatten import flatten as flatten
  from ._fusion._fuse import Fused as Fused, FusedState as FusedState, fuse as fuse
  from ._fusion._flat import (
      FlatParams as FlatParams,
      flat_params as flat_params,
      unflatten_params as unflatten_params,
  )
  from ._wrappers._groups import (
      dotted_path as dotted_path,
      groups as groups,
      group_labels as group_labels,
  )
  from ._wrappers._lookahead import (
      LookaheadParams as LookaheadParams,
      LookaheadState as LookaheadState,
      lookahead as lookahead,
  )
  from .transforms._masked import (
      MaskedNode as MaskedNode,
      MaskedState as MaskedState,
      masked as masked,
  )
  from ._wrappers._monitoring import (
      SnapshotState as SnapshotState,
      MonitorState as MonitorState,
      snapshot as snapshot,
      monitor as monitor,
      measure_with_ema as measure_with_ema,
  )
  from ._wrappers._stats import WithStatsState as WithStatsState, with_stats as with_stats
  from ._wrappers._stats_reader import stats as stats
  from ._wrappers._partition import (
      PartitionState as PartitionState,
      MultiTransformState as MultiTransformState,
      partition as partition,
      multi_transform as multi_transform,
      freeze as freeze,
      selective_transform as selective_transform,
  )
  from ._wrappers._spikes import SkipSpikesState as SkipSpikesState, skip_spikes as skip_spikes
  from ._wrappers._averaging import (
      ParamAveragingState as ParamAveragingState,
      averaged_params as averaged_params,
      ema_params as ema_params,
      swa_params as swa_params,
  )
  from ._wrappers._low_precision import (
      KahanSummationState as KahanSummationState,
      StochasticRoundingState as StochasticRoundingState,
      kahan_summation as kahan_summation,
      stochastic_rounding as stochastic_rounding,
  )
  from ._wrappers._sweep import sweep as sweep
  from ._wrappers._surgery import (
      reset_partition_state as reset_partition_state,
      state_get as state_get,
      state_set as state_set,
  )
  from ._wrappers._unitwise import (
      AdaptiveGradClipState as AdaptiveGradClipState,
      NonNegativeParamsState as NonNegativeParamsState,
      keep_params_nonnegative as keep_params_nonnegative,
      adaptive_grad_clip as adaptive_grad_clip,
      per_example_global_norm_clip as per_example_global_norm_clip,
      per_example_layer_norm_clip as per_example_layer_norm_clip,
  )
  from . import microbatching as microbatching
  from .microbatching import microbatch as microbatch
  from . import losses as losses
  from . import assignment as assignment
  from . import perturbations as perturbations
  from . import tree as tree
  from . import tree_utils as tree_utils
  # The rest of Optax's surface (issue 5): linear algebra, utilities, projections, second order,
  # experimental.
  from ._linalg._nnls import nnls as nnls
  from ._linalg._power import (
      power_iteration as power_iteration,
      matrix_inverse_pth_root as matrix_inverse_pth_root,
  )
  from ._utils._gradients import scale_gradient as scale_gradient
  from ._utils._multi_normal import multi_normal as multi_normal
  from . import projections as projections
  from . import second_order as second_order
  from . import experimental as experimental
  from . import checkpoint as checkpoint
  # The contract checker for any transformation (docs/testing.md).
  from . import testing as testing
  # The switch that makes `import optax` resolve to steadax (docs/migrating.md).
  from . import as_optax as as_optax
  from .tree_utils import tree_map_params as tree_map_params
  # The loss names Optax also keeps at its top level (optax 0.2.8).
  from .losses import (
      convex_kl_divergence as convex_kl_divergence,
      cosine_distance as cosine_distance,
      cosine_similarity as cosine_similarity,
      ctc_loss as ctc_loss,
      ctc_loss_with_forward_probs as ctc_loss_with_forward_probs,
      generalized_kl_divergence as generalized_kl_divergence,
      hinge_loss as hinge_loss,
      huber_loss as huber_loss,
      kl_divergence as kl_divergence,
      l2_loss as l2_loss,
      log_cosh as log_cosh,
      ntxent as ntxent,
      safe_softmax_cross_entropy as safe_softmax_cross_entropy,
      sigmoid_binary_cross_entropy as sigmoid_binary_cross_entropy,
      sigmoid_focal_loss as sigmoid_focal_loss,
      smooth_labels as smooth_labels,
      softmax_cross_entropy as softmax_cross_entropy,
      softmax_cross_entropy_with_integer_labels as softmax_cross_entropy_with_integer_labels,
      squared_error as squared_error,
  )

# Optax 0.2.8's deprecated top-level names (served by its module __getattr__, with a
# DeprecationWarning, or an AttributeError for a name whose deprecation was accelerated).
_deprecations = {
    "differentially_private_aggregate": (
        "steadax.differentially_private_aggregate is deprecated: use "
        "steadax.contrib.differentially_private_aggregate (as optax's since optax v0.1.8).",
        lambda: _contrib().differentially_private_aggregate,
    ),
    "DifferentiallyPrivateAggregateState": (
        "steadax.DifferentiallyPrivateAggregateState is deprecated: use "
        "steadax.contrib.DifferentiallyPrivateAggregateState (as optax's since optax v0.1.8).",
        lambda: _contrib().DifferentiallyPrivateAggregateState,
    ),
    "dpsgd": (
        "steadax.dpsgd is deprecated: use steadax.contrib.dpsgd (as optax's since optax v0.1.8).",
        lambda: _contrib().dpsgd,
    ),
    "monte_carlo": ("steadax.monte_carlo is removed, as optax.monte_carlo (optax v0.2.7 or newer).", None),
}


def _contrib():
  return _importlib.import_module(".contrib", __name__)


__getattr__, __dir__, __all__ = _lazy_surface(
    __name__, __file__, fallback=_deprecation_getattr(__name__, _deprecations, stacklevel=3))

__version__ = "0.2.0"
