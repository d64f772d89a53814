"""Griffe extension for the API pages: steadax docstrings head their doctests ``Example:``.

Griffe's Google-style parser reads only ``Examples:`` as an examples section (rendered as code) and
turns ``Example:`` into an admonition of plain Markdown, where ``x[0]["w"]`` reads as a reference
link. This extension renames the heading before the docstring is parsed, so every doctest renders
as a Python code block.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_HEADING = re.compile(r"^(\s*)Example:[ \t]*$", flags=re.M)


class ExampleSections(griffe.Extension):
  """Reads ``Example:`` docstring sections as ``Examples:``."""

  def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
    if obj.docstring is not None:
      obj.docstring.value = _HEADING.sub(r"\1Examples:", obj.docstring.value)
