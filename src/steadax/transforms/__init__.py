"""Building blocks: ``scale_by_*`` preconditioners, clipping, decay, momentum and moment helpers."""

from ._adam import *  # noqa: F401,F403
from ._adam import __all__ as _adam_all
from ._clipping import *  # noqa: F401,F403
from ._clipping import __all__ as _clipping_all
from ._decay import *  # noqa: F401,F403
from ._decay import __all__ as _decay_all
from ._factored import *  # noqa: F401,F403
from ._factored import __all__ as _factored_all
from ._lion import *  # noqa: F401,F403
from ._lion import __all__ as _lion_all
from ._moments import *  # noqa: F401,F403
from ._moments import __all__ as _moments_all
from ._rms import *  # noqa: F401,F403
from ._rms import __all__ as _rms_all
from ._scaling import *  # noqa: F401,F403
from ._scaling import __all__ as _scaling_all
from ._trust_ratio import *  # noqa: F401,F403
from ._trust_ratio import __all__ as _trust_ratio_all

# Optax's remaining main-namespace blocks (issue 3).
from ._adam_variants import *  # noqa: F401,F403
from ._adam_variants import __all__ as _adam_variants_all
from ._adaptive import *  # noqa: F401,F403
from ._adaptive import __all__ as _adaptive_all
from ._centralize import *  # noqa: F401,F403
from ._centralize import __all__ as _centralize_all
from ._noise import *  # noqa: F401,F403
from ._noise import __all__ as _noise_all
from ._optimistic import *  # noqa: F401,F403
from ._optimistic import __all__ as _optimistic_all
from ._rprop import *  # noqa: F401,F403
from ._rprop import __all__ as _rprop_all
from ._step_size import *  # noqa: F401,F403
from ._step_size import __all__ as _step_size_all

__all__ = [*_adam_all, *_decay_all, *_moments_all, *_scaling_all, *_clipping_all, *_factored_all,
           *_lion_all, *_rms_all, *_trust_ratio_all,
           *_adam_variants_all, *_adaptive_all, *_centralize_all, *_noise_all, *_optimistic_all,
           *_rprop_all, *_step_size_all]

# Beyond Optax: MARS, PSGD-Kron, low-memory Adam states (issue 3).
from ._adam_8bit import *  # noqa: F401,F403
from ._adam_8bit import __all__ as _adam_8bit_all
from ._lowmem import *  # noqa: F401,F403
from ._lowmem import __all__ as _lowmem_all
from ._mars import *  # noqa: F401,F403
from ._mars import __all__ as _mars_all
from ._psgd_kron import *  # noqa: F401,F403
from ._psgd_kron import __all__ as _psgd_kron_all

__all__ += [*_adam_8bit_all, *_lowmem_all, *_mars_all, *_psgd_kron_all]

# Optax's normalize_by_update_norm (issue 5).
from ._normalize import *  # noqa: F401,F403
from ._normalize import __all__ as _normalize_all

__all__ += [*_normalize_all]

# Beyond Optax: SOAP and Shampoo blocks (issue 3).
from ._shampoo import *  # noqa: F401,F403
from ._shampoo import __all__ as _shampoo_all
from ._soap import *  # noqa: F401,F403
from ._soap import __all__ as _soap_all

__all__ += [*_shampoo_all, *_soap_all]

# Optax's `optax.transforms` namespace also carries the wrappers; they are defined in
# steadax.wrappers (imported from its private modules, which depend only on the core, so the
# import order of the two packages does not matter).
from .._core._combine import chain as chain, named_chain as named_chain
from ..wrappers._flatten import flatten as flatten
from ..wrappers._masked import MaskedNode as MaskedNode, MaskedState as MaskedState, masked as masked
from ..wrappers._partition import (
    PartitionState as PartitionState,
    freeze as freeze,
    partition as partition,
    selective_transform as selective_transform,
)
from ..wrappers._unitwise import (
    NonNegativeParamsState as NonNegativeParamsState,
    adaptive_grad_clip as adaptive_grad_clip,
    keep_params_nonnegative as keep_params_nonnegative,
    per_example_global_norm_clip as per_example_global_norm_clip,
    per_example_layer_norm_clip as per_example_layer_norm_clip,
    unitwise_clip as unitwise_clip,
    unitwise_norm as unitwise_norm,
)

__all__ += [
    "chain", "named_chain", "flatten", "MaskedNode", "MaskedState", "masked", "PartitionState",
    "freeze", "partition", "selective_transform", "NonNegativeParamsState", "adaptive_grad_clip",
    "keep_params_nonnegative", "per_example_global_norm_clip", "per_example_layer_norm_clip",
    "unitwise_clip", "unitwise_norm",
]
from ..wrappers._accumulation import (
    MultiSteps as MultiSteps,
    MultiStepsState as MultiStepsState,
    ShouldSkipUpdateFunction as ShouldSkipUpdateFunction,
    skip_large_updates as skip_large_updates,
    skip_not_finite as skip_not_finite,
)
from ..wrappers._conditionality import (
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
from ..wrappers._monitoring import (
    MonitorState as MonitorState,
    SnapshotState as SnapshotState,
    measure_with_ema as measure_with_ema,
    monitor as monitor,
    snapshot as snapshot,
)

__all__ += [
    "MultiSteps", "MultiStepsState", "ShouldSkipUpdateFunction", "skip_large_updates",
    "skip_not_finite", "ApplyIfFiniteState", "ConditionFn", "ConditionallyMaskState",
    "ConditionallyTransformState", "ZeroNansState", "apply_if_finite", "conditionally_mask",
    "conditionally_transform", "zero_nans", "MonitorState", "SnapshotState", "measure_with_ema",
    "monitor", "snapshot",
]
