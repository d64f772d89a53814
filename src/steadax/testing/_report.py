"""The result of ``check_transformation``: every violation with its check, configuration and tree path."""

import dataclasses
import re

__all__ = ["Violation", "ConformanceReport", "ConformanceError"]

# How many violations of one check and configuration ``str(report)`` prints before summarising.
_SHOWN_PER_GROUP = 12
# A tree path as ``jax.tree_util.keystr`` writes it (``['layer'][0].mu``), after " at " in an error.
_PATH_IN_MESSAGE = re.compile(r" at (<root>|(?:\[[^\]]*\]|\.[A-Za-z_]\w*)+)")


@dataclasses.dataclass(frozen=True)
class Violation:
  """One broken rule of the contract.

  Attributes:
    check: the check that failed (``"update"``, ``"scan"``, ``"recompile"`` ...; see
      ``steadax.testing.CHECKS``).
    path: the tree path of the offending leaf (``['w']``, ``.mu['w']``, ``<root>``), or ``""`` when
      the failure is not about one leaf (an exception, a retrace).
    message: what was expected and what came instead.
    config: the configuration it was found in (``"x64 off"``, ``"x64 on, mixed precision"``).
  """

  check: str
  path: str
  message: str
  config: str = ""

  def __str__(self) -> str:
    where = f" at {self.path}" if self.path else ""
    return f"[{self.check}]{where}: {self.message}"


def violation_from_exception(check: str, config: str, error: BaseException) -> Violation:
  """A violation for an exception raised while running ``check``: its type, its first lines and,
  when the message names one (steadax's ContractError does), the tree path."""
  text = str(error).strip()
  lines = text.splitlines()
  short = " ".join(line.strip() for line in lines[:4])
  if len(lines) > 4:
    short += " ..."
  if len(short) > 600:
    short = short[:600] + " ..."
  return Violation(check, path_in_message(text), f"raised {type(error).__name__}: {short}", config)


def path_in_message(text: str) -> str:
  """The tree path an error message names after " at " (steadax's ContractError does), or ""."""
  found = _PATH_IN_MESSAGE.search(text)
  return found.group(1) if found else ""


@dataclasses.dataclass(frozen=True)
class ConformanceReport:
  """What ``check_transformation`` found.

  Attributes:
    name: the transformation's name.
    violations: every violation found, in the order the checks ran.
    passed: ``(check, config)`` pairs that ran and found nothing.
    skipped: ``(check, config, reason)`` for the checks that did not run.

  ``bool(report)`` is not defined (is a report true when it passed?); use ``report.ok``.
  """

  name: str
  violations: tuple[Violation, ...] = ()
  passed: tuple[tuple[str, str], ...] = ()
  skipped: tuple[tuple[str, str, str], ...] = ()

  @property
  def ok(self) -> bool:
    """True when no check found a violation."""
    return not self.violations

  def failed_checks(self) -> list[str]:
    """The names of the checks with at least one violation, in the order they ran, each once."""
    return list(dict.fromkeys(v.check for v in self.violations))

  def __bool__(self) -> bool:
    raise TypeError("the truth value of a ConformanceReport is ambiguous; use `report.ok`.")

  def raise_if_failed(self) -> "ConformanceReport":
    """Raise a ``ConformanceError`` (an AssertionError) holding this report if any check failed.

    Returns:
      The report itself when every check passed.
    """
    if self.violations:
      raise ConformanceError(self)
    return self

  def __str__(self) -> str:
    ran = len(self.passed) + len({(v.check, v.config) for v in self.violations})
    if self.ok:
      head = f"{self.name}: conforms ({ran} checks passed"
      head += f", {len(self.skipped)} skipped)" if self.skipped else ")"
      lines = [head]
    else:
      lines = [f"{self.name}: {len(self.violations)} violation(s) of the type-stability contract "
               f"in {len(self.failed_checks())} check(s): {', '.join(self.failed_checks())}"]
      groups: dict[tuple[str, str], list[Violation]] = {}
      for v in self.violations:
        groups.setdefault((v.config, v.check), []).append(v)
      for (config, check), found in groups.items():
        lines.append(f"  {check} ({config}):" if config else f"  {check}:")
        for v in found[:_SHOWN_PER_GROUP]:
          where = f"{v.path}: " if v.path else ""
          lines.append(f"    {where}{v.message}")
        if len(found) > _SHOWN_PER_GROUP:
          lines.append(f"    ... and {len(found) - _SHOWN_PER_GROUP} more")
    skipped: dict[tuple[str, str], list[str]] = {}
    for check, config, reason in self.skipped:
      skipped.setdefault((config, reason), []).append(check)
    for (config, reason), checks in skipped.items():
      lines.append(f"  skipped {', '.join(checks)}" + (f" ({config})" if config else "") + f": {reason}")
    return "\n".join(lines)

  def __repr__(self) -> str:
    return (f"ConformanceReport({self.name!r}, violations={len(self.violations)}, "
            f"passed={len(self.passed)}, skipped={len(self.skipped)})")


class ConformanceError(AssertionError):
  """Raised by ``ConformanceReport.raise_if_failed`` (and ``check_transformation(...,
  raise_on_failure=True)``); its message is the report, and ``.report`` holds it.

  Args:
    report: the failed ``ConformanceReport``.
  """

  def __init__(self, report: ConformanceReport):
    super().__init__(str(report))
    self.report = report
