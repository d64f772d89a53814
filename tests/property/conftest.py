"""Hypothesis settings of the property tests: a fixed, derandomized example count in make test (no
example database: the suite leaves no files behind), random examples and more of them under make fuzz
(``STEADAX_FUZZ=<multiplier>``)."""

from hypothesis import HealthCheck, settings

from ._strategies import FUZZ

settings.register_profile(
    "steadax", deadline=None, database=None, derandomize=not FUZZ, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
settings.load_profile("steadax")
