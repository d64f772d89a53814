"""Small utilities with Optax's names: gradient scaling, diagonal Gaussians."""

from ._gradients import scale_gradient as scale_gradient
from ._multi_normal import multi_normal as multi_normal

__all__ = [
    "multi_normal", "scale_gradient",
]
