"""Wrappers and combinators around transformations.

An internal layer, not a namespace: ``steadax`` re-exports every name below at its top level, except
Optax's ``optax.transforms``-only names (``unitwise_norm``, ``unitwise_clip``, ``ConditionFn``), which
are in ``steadax.transforms``.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from ..transforms._masked import (
      MaskedNode as MaskedNode,
      MaskedState as MaskedState,
      masked as masked,
  )
  from ._partition import (
      PartitionState as PartitionState,
      MultiTransformState as MultiTransformState,
      partition as partition,
      multi_transform as multi_transform,
      freeze as freeze,
      selective_transform as selective_transform,
  )
  from ._groups import (
      dotted_path as dotted_path,
      groups as groups,
      group_labels as group_labels,
  )
  from ._surgery import (
      reset_partition_state as reset_partition_state,
      state_get as state_get,
      state_set as state_set,
  )
  from ._flatten import flatten as flatten
  from .._fusion._fuse import Fused as Fused, FusedState as FusedState, fuse as fuse
  from ._lookahead import (
      LookaheadParams as LookaheadParams,
      LookaheadState as LookaheadState,
      lookahead as lookahead,
  )
  from ._unitwise import (
      AdaptiveGradClipState as AdaptiveGradClipState,
      NonNegativeParamsState as NonNegativeParamsState,
      keep_params_nonnegative as keep_params_nonnegative,
      unitwise_norm as unitwise_norm,
      unitwise_clip as unitwise_clip,
      adaptive_grad_clip as adaptive_grad_clip,
      per_example_global_norm_clip as per_example_global_norm_clip,
      per_example_layer_norm_clip as per_example_layer_norm_clip,
  )
  from ._accumulation import (
      ShouldSkipUpdateFunction as ShouldSkipUpdateFunction,
      skip_not_finite as skip_not_finite,
      skip_large_updates as skip_large_updates,
      MultiStepsState as MultiStepsState,
      MultiSteps as MultiSteps,
      ApplyEvery as ApplyEvery,
      apply_every as apply_every,
  )
  from ._conditionality import (
      ConditionFn as ConditionFn,
      ConditionallyTransformState as ConditionallyTransformState,
      ConditionallyMaskState as ConditionallyMaskState,
      conditionally_transform as conditionally_transform,
      conditionally_mask as conditionally_mask,
      ApplyIfFiniteState as ApplyIfFiniteState,
      apply_if_finite as apply_if_finite,
      ZeroNansState as ZeroNansState,
      zero_nans as zero_nans,
  )
  from ._monitoring import (
      SnapshotState as SnapshotState,
      MonitorState as MonitorState,
      snapshot as snapshot,
      monitor as monitor,
      measure_with_ema as measure_with_ema,
  )
  from ._spikes import SkipSpikesState as SkipSpikesState, skip_spikes as skip_spikes
  from ._sweep import sweep as sweep

__all__ = [
    "AdaptiveGradClipState", "ApplyEvery", "ApplyIfFiniteState", "ConditionFn", "ConditionallyMaskState",
    "ConditionallyTransformState", "LookaheadParams", "LookaheadState", "MaskedNode", "MaskedState",
    "MonitorState", "MultiSteps", "MultiStepsState", "MultiTransformState", "NonNegativeParamsState",
    "PartitionState", "ShouldSkipUpdateFunction", "SkipSpikesState", "SnapshotState", "ZeroNansState",
    "adaptive_grad_clip", "apply_every", "apply_if_finite", "conditionally_mask",
    "conditionally_transform", "dotted_path", "flatten", "fuse", "Fused", "FusedState", "freeze", "group_labels", "groups",
    "keep_params_nonnegative", "lookahead", "masked", "measure_with_ema", "monitor", "multi_transform",
    "partition", "per_example_global_norm_clip", "per_example_layer_norm_clip", "reset_partition_state",
    "selective_transform", "skip_large_updates", "skip_not_finite", "skip_spikes", "snapshot",
    "state_get", "state_set", "sweep", "unitwise_clip", "unitwise_norm", "zero_nans",
]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
