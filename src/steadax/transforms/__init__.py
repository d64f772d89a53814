"""Optax's ``optax.transforms`` (the wrappers and a few blocks) plus every building block.

The blocks (``scale_by_*`` preconditioners, clipping, decay, moments and their state records) are
the same objects as steadax's top-level names; see ``docs/extensions.md``.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from ._adam import (
      ScaleByAdamState as ScaleByAdamState,
      ScaleByAmsgradState as ScaleByAmsgradState,
      scale_by_adam as scale_by_adam,
      scale_by_amsgrad as scale_by_amsgrad,
      scale_by_adamax as scale_by_adamax,
  )
  from ._clipping import (
      ClipState as ClipState,
      ClipByGlobalNormState as ClipByGlobalNormState,
      clip as clip,
      clip_by_global_norm as clip_by_global_norm,
      clip_by_block_rms as clip_by_block_rms,
  )
  from ._decay import (
      AddDecayedWeightsState as AddDecayedWeightsState,
      WeightDecaySchedule as WeightDecaySchedule,
      add_decayed_weights as add_decayed_weights,
  )
  from ._factored import FactoredState as FactoredState, scale_by_factored_rms as scale_by_factored_rms
  from ._lion import ScaleByLionState as ScaleByLionState, scale_by_lion as scale_by_lion
  from ._moments import (
      update_moment as update_moment,
      update_moment_per_elem_norm as update_moment_per_elem_norm,
      update_infinity_moment as update_infinity_moment,
      bias_correction as bias_correction,
      safe_norm as safe_norm,
      safe_root_mean_squares as safe_root_mean_squares,
  )
  from ._rms import (
      ScaleByRmsState as ScaleByRmsState,
      ScaleByRmsWithCountState as ScaleByRmsWithCountState,
      ScaleByRStdDevState as ScaleByRStdDevState,
      ScaleByRStdDevWithCountState as ScaleByRStdDevWithCountState,
      ScaleByRssState as ScaleByRssState,
      scale_by_rms as scale_by_rms,
      scale_by_stddev as scale_by_stddev,
      scale_by_rss as scale_by_rss,
  )
  from ._scaling import (
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
  from ._trust_ratio import (
      ScaleByTrustRatioState as ScaleByTrustRatioState,
      scale_by_trust_ratio as scale_by_trust_ratio,
      scale_by_param_block_norm as scale_by_param_block_norm,
      scale_by_param_block_rms as scale_by_param_block_rms,
  )

  # Optax's remaining main-namespace blocks (issue 3).
  from ._adam_variants import (
      ScaleByBeliefState as ScaleByBeliefState,
      ScaleByAdanState as ScaleByAdanState,
      scale_by_belief as scale_by_belief,
      scale_by_yogi as scale_by_yogi,
      scale_by_radam as scale_by_radam,
      scale_by_adan as scale_by_adan,
  )
  from ._adaptive import (
      ScaleByAdaDeltaState as ScaleByAdaDeltaState,
      ScaleByNovogradState as ScaleByNovogradState,
      ScaleBySM3State as ScaleBySM3State,
      scale_by_adadelta as scale_by_adadelta,
      scale_by_novograd as scale_by_novograd,
      scale_by_sm3 as scale_by_sm3,
  )
  from ._axes import WeightDimensionNumbers as WeightDimensionNumbers
  from ._runner import MatrixExecution as MatrixExecution
  from ._centralize import centralize as centralize
  from ._noise import AddNoiseState as AddNoiseState, add_noise as add_noise
  from ._optimistic import (
      ScaleByOptimisticGradientState as ScaleByOptimisticGradientState,
      scale_by_optimistic_gradient as scale_by_optimistic_gradient,
  )
  from ._rprop import ScaleByRpropState as ScaleByRpropState, scale_by_rprop as scale_by_rprop
  from ._step_size import (
      ScaleByDistanceOverGradientsState as ScaleByDistanceOverGradientsState,
      scale_by_polyak as scale_by_polyak,
      scale_by_distance_over_gradients as scale_by_distance_over_gradients,
  )

  # Beyond Optax: MARS, PSGD-Kron, low-memory Adam states (issue 3).
  from ._adam_8bit import (
      BlockQuantized as BlockQuantized,
      ScaleByAdam8bitState as ScaleByAdam8bitState,
      scale_by_adam_8bit as scale_by_adam_8bit,
      dynamic_quantization_map as dynamic_quantization_map,
  )
  from ._lowmem import scale_by_adam_lowmem as scale_by_adam_lowmem
  from ._mars import ScaleByMarsState as ScaleByMarsState, scale_by_mars as scale_by_mars
  from ._psgd_kron import (
      ScaleByPsgdKronState as ScaleByPsgdKronState,
      scale_by_psgd_kron as scale_by_psgd_kron,
      psgd_update_probability as psgd_update_probability,
  )

  # Optax's normalize_by_update_norm (issue 5).
  from ._normalize import normalize_by_update_norm as normalize_by_update_norm

  # Beyond Optax: SOAP and Shampoo blocks (issue 3).
  from ._shampoo import ScaleByShampooState as ScaleByShampooState, scale_by_shampoo as scale_by_shampoo
  from ._soap import ScaleBySoapState as ScaleBySoapState, scale_by_soap as scale_by_soap

  # Optax's `optax.transforms` namespace also carries the wrappers; they are defined in the wrappers
  # layer. This file is a public surface and also the package of the transforms layer: it runs
  # whenever a block is loaded (`from ..transforms._adam import ...`), so it names the wrappers here,
  # in the lazy block, and loads them only when one is read (tests/core/test_layering.py).
  from .._core._combine import chain as chain, named_chain as named_chain
  from .._wrappers._flatten import flatten as flatten
  from ._masked import MaskedNode as MaskedNode, MaskedState as MaskedState, masked as masked
  from .._wrappers._partition import (
      PartitionState as PartitionState,
      freeze as freeze,
      partition as partition,
      selective_transform as selective_transform,
  )
  from .._wrappers._unitwise import (
      NonNegativeParamsState as NonNegativeParamsState,
      adaptive_grad_clip as adaptive_grad_clip,
      keep_params_nonnegative as keep_params_nonnegative,
      per_example_global_norm_clip as per_example_global_norm_clip,
      per_example_layer_norm_clip as per_example_layer_norm_clip,
      unitwise_clip as unitwise_clip,
      unitwise_norm as unitwise_norm,
  )
  from .._wrappers._accumulation import (
      MultiSteps as MultiSteps,
      MultiStepsState as MultiStepsState,
      ShouldSkipUpdateFunction as ShouldSkipUpdateFunction,
      skip_large_updates as skip_large_updates,
      skip_not_finite as skip_not_finite,
  )
  from .._wrappers._conditionality import (
      ApplyIfFiniteState as ApplyIfFiniteState,
      ConditionFn as ConditionFn,
      ConditionallyMaskState as ConditionallyMaskState,
      ConditionallyTransformState as ConditionallyTransformState,
      ZeroNansState as ZeroNansState,
      apply_if_finite as apply_if_finite,
      conditionally_mask as conditionally_mask,
      conditionally_transform as conditionally_transform,
      zero_nans as zero_nans,
  )
  from .._wrappers._monitoring import (
      MonitorState as MonitorState,
      SnapshotState as SnapshotState,
      measure_with_ema as measure_with_ema,
      monitor as monitor,
      snapshot as snapshot,
  )

__all__ = [
    "AddDecayedWeightsState", "AddNoiseState", "ApplyIfFiniteState", "BlockQuantized",
    "ClipByGlobalNormState", "ClipState", "ConditionFn", "ConditionallyMaskState",
    "ConditionallyTransformState", "EmaState", "FactoredState", "MaskedNode", "MaskedState",
    "MonitorState", "MultiSteps", "MultiStepsState", "NonNegativeParamsState", "PartitionState",
    "ScaleByAdaDeltaState", "ScaleByAdam8bitState", "ScaleByAdamState", "ScaleByAdanState",
    "ScaleByAmsgradState", "ScaleByBeliefState", "ScaleByDistanceOverGradientsState", "ScaleByLionState",
    "ScaleByMarsState", "ScaleByNovogradState", "ScaleByOptimisticGradientState", "ScaleByPsgdKronState",
    "ScaleByRStdDevState", "ScaleByRStdDevWithCountState", "ScaleByRmsState", "ScaleByRmsWithCountState",
    "ScaleByRpropState", "ScaleByRssState", "ScaleBySM3State", "ScaleByScheduleState",
    "MatrixExecution", "ScaleByShampooState", "ScaleBySoapState", "ScaleByTrustRatioState", "ScaleState",
    "ShouldSkipUpdateFunction", "SnapshotState", "TraceState", "WeightDecaySchedule", "WeightDimensionNumbers",
    "ZeroNansState",
    "adaptive_grad_clip", "add_decayed_weights", "add_noise", "apply_if_finite", "bias_correction",
    "centralize", "chain", "clip", "clip_by_block_rms", "clip_by_global_norm", "conditionally_mask",
    "conditionally_transform", "dynamic_quantization_map", "ema", "flatten", "freeze",
    "keep_params_nonnegative", "masked", "measure_with_ema", "monitor", "named_chain",
    "normalize_by_update_norm", "partition", "per_example_global_norm_clip",
    "per_example_layer_norm_clip", "psgd_update_probability", "safe_norm", "safe_root_mean_squares",
    "scale", "scale_by_adadelta", "scale_by_adam", "scale_by_adam_8bit", "scale_by_adam_lowmem",
    "scale_by_adamax", "scale_by_adan", "scale_by_amsgrad", "scale_by_belief",
    "scale_by_distance_over_gradients", "scale_by_factored_rms", "scale_by_learning_rate",
    "scale_by_lion", "scale_by_mars", "scale_by_novograd", "scale_by_optimistic_gradient",
    "scale_by_param_block_norm", "scale_by_param_block_rms", "scale_by_polyak", "scale_by_psgd_kron",
    "scale_by_radam", "scale_by_rms", "scale_by_rprop", "scale_by_rss", "scale_by_schedule",
    "scale_by_shampoo", "scale_by_sign", "scale_by_sm3", "scale_by_soap", "scale_by_stddev",
    "scale_by_trust_ratio", "scale_by_yogi", "selective_transform", "skip_large_updates",
    "skip_not_finite", "snapshot", "trace", "unitwise_clip", "unitwise_norm", "update_infinity_moment",
    "update_moment", "update_moment_per_elem_norm", "zero_nans",
]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
