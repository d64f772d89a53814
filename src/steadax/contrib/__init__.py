"""Optax's contrib optimizers (``steadax.contrib.NAME``), held to the same contract."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from ._cocob import (
      COCOBState as COCOBState,
      scale_by_cocob as scale_by_cocob,
      cocob as cocob,
  )
  from ._dadapt_adamw import DAdaptAdamWState as DAdaptAdamWState, dadapt_adamw as dadapt_adamw
  from ._dog import (
      DoGState as DoGState,
      DoWGState as DoWGState,
      scale_by_dog as scale_by_dog,
      scale_by_dowg as scale_by_dowg,
      dog as dog,
      dowg as dowg,
  )
  from ._mechanic import MechanicState as MechanicState, mechanize as mechanize
  from ._momo import (
      MomoState as MomoState,
      MomoAdamState as MomoAdamState,
      momo as momo,
      momo_adam as momo_adam,
  )
  from ._prodigy import ProdigyState as ProdigyState, prodigy as prodigy
  from ._schedule_free import (
      ScheduleFreeState as ScheduleFreeState,
      schedule_free as schedule_free,
      schedule_free_adamw as schedule_free_adamw,
      schedule_free_sgd as schedule_free_sgd,
      schedule_free_eval_params as schedule_free_eval_params,
  )

  # Adaptive, second-order, sharpness-aware, plateau, privacy and complex-valued contrib (issue 3).
  from ._acprop import scale_by_acprop as scale_by_acprop, acprop as acprop
  from ._ademamix import (
      ScaleByAdemamixState as ScaleByAdemamixState,
      ScaleBySimplifiedAdEMAMixState as ScaleBySimplifiedAdEMAMixState,
      scale_by_ademamix as scale_by_ademamix,
      ademamix as ademamix,
      scale_by_simplified_ademamix as scale_by_simplified_ademamix,
      simplified_ademamix as simplified_ademamix,
  )
  from ._adopt import scale_by_adopt as scale_by_adopt, adopt as adopt
  from ._complex_valued import (
      SplitRealAndImaginaryState as SplitRealAndImaginaryState,
      split_real_and_imaginary as split_real_and_imaginary,
  )
  from ._madgrad import (
      MadgradState as MadgradState,
      scale_by_madgrad as scale_by_madgrad,
      madgrad as madgrad,
  )
  from ._privacy import (
      DifferentiallyPrivateAggregateState as DifferentiallyPrivateAggregateState,
      differentially_private_aggregate as differentially_private_aggregate,
      dpsgd as dpsgd,
  )
  from ._reduce_on_plateau import (
      ReduceLROnPlateauState as ReduceLROnPlateauState,
      reduce_on_plateau as reduce_on_plateau,
  )
  from ._sam import (
      NormalizeState as NormalizeState,
      SAMState as SAMState,
      normalize as normalize,
      sam as sam,
  )
  from ._sophia import (
      HutchinsonState as HutchinsonState,
      SophiaState as SophiaState,
      hutchinson_estimator_diag_hessian as hutchinson_estimator_diag_hessian,
      sophia as sophia,
  )

  # Beyond Optax's contrib (docs/extensions.md).
  from ._cautious import CautiousState as CautiousState, cautious as cautious

  # Orthogonalized and low-rank-projected optimizers (issue 3).
  from ._galore import (
      GaLoreDimensionNumbers as GaLoreDimensionNumbers,
      GaLoreState as GaLoreState,
      scale_by_galore as scale_by_galore,
      galore as galore,
  )
  from ._muon import (
      MuonDimensionNumbers as MuonDimensionNumbers,
      MuonState as MuonState,
      scale_by_muon as scale_by_muon,
      muon as muon,
  )

  # The Muon family as the 2025 reports use it (issue 34 §1).
  from ._normuon import (
      NorMuonState as NorMuonState,
      scale_by_normuon as scale_by_normuon,
      normuon as normuon,
  )
  from ._polar_express import polar_express_coefficients as polar_express_coefficients
  from ._qk_clip import QKClipSpec as QKClipSpec, qk_clip as qk_clip

__all__ = [
    "COCOBState", "CautiousState", "DAdaptAdamWState", "DifferentiallyPrivateAggregateState",
    "DoGState", "DoWGState", "GaLoreDimensionNumbers", "GaLoreState", "HutchinsonState",
    "MadgradState", "MechanicState", "MomoAdamState", "MomoState", "MuonDimensionNumbers",
    "MuonState", "NorMuonState", "NormalizeState", "ProdigyState", "QKClipSpec",
    "ReduceLROnPlateauState", "SAMState",
    "ScaleByAdemamixState", "ScaleBySimplifiedAdEMAMixState", "ScheduleFreeState", "SophiaState",
    "SplitRealAndImaginaryState", "acprop", "ademamix", "adopt", "cautious", "cocob",
    "dadapt_adamw", "differentially_private_aggregate", "dog", "dowg", "dpsgd", "galore",
    "hutchinson_estimator_diag_hessian", "madgrad", "mechanize", "momo", "momo_adam", "muon",
    "normalize", "normuon", "polar_express_coefficients", "prodigy", "qk_clip",
    "reduce_on_plateau", "sam", "scale_by_acprop", "scale_by_ademamix",
    "scale_by_adopt", "scale_by_cocob", "scale_by_dog", "scale_by_dowg", "scale_by_galore",
    "scale_by_madgrad", "scale_by_muon", "scale_by_normuon", "scale_by_simplified_ademamix", "schedule_free",
    "schedule_free_adamw", "schedule_free_eval_params", "schedule_free_sgd", "simplified_ademamix",
    "sophia", "split_real_and_imaginary",
]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
