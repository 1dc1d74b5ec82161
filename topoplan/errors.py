"""The two kinds of failure a user can fix, as opposed to bugs.

``SpecError``        the input is wrong (YAML, types, unknown keys or ids); the user edits the file.
``InfeasibleDesign`` the input is valid but cannot be built (not enough ports, too many GPUs for the
                     tiers asked for); the optimizer counts these and moves on.

Both carry ``Problem`` records that print as ``FILE:LINE: key.path: message (hint: ...)``, one line each.
Anything else that escapes is a bug and the CLI reports it as an internal error.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input, located in its file."""

    file: str
    line: int
    path: str
    message: str
    hint: str = ""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        text = f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"
        return one_line(f"{text} (hint: {self.hint})" if self.hint else text)


_LINE_BREAKING = {c: f"\\x{c:02x}" for c in (*range(32), 0x7F, 0x85)}
_LINE_BREAKING.update({0x2028: "\\u2028", 0x2029: "\\u2029"})


def one_line(text: str) -> str:
    """Escape control characters (from user input echoed back) so that a problem stays on one line."""
    return text.translate(_LINE_BREAKING)


class TopoplanError(Exception):
    """Base of the errors a user can act on; holds one or more problems."""

    def __init__(self, problems: list[Problem]):
        # file order reads best: problems sorted by file and line, stable for equal lines
        self.problems = sorted(problems, key=lambda p: (p.file, p.line))
        super().__init__("\n".join(str(p) for p in self.problems))


class SpecError(TopoplanError):
    """The input must be fixed: every problem found, each with a location and a hint."""


class InfeasibleDesign(TopoplanError):
    """The spec is valid but describes something that cannot be built."""

    def __init__(self, path: str, message: str, hint: str = "", file: str = "", line: int = 0):
        super().__init__([Problem(file, line, path, message, hint)])

    @property
    def path(self) -> str:
        return self.problems[0].path

    @property
    def reason(self) -> str:
        return self.problems[0].message


@dataclass(frozen=True)
class Refusal:
    """Why a solver (a routing engine) cannot take a problem: a typed reason instead of a string flag."""

    engine: str
    reason: str

    def __str__(self) -> str:
        return self.reason


class EngineRefused(ValueError):
    """A routing engine cannot route this topology or workload (too large, or not the structure it needs).
    A bug-free refusal: the pipeline turns it into an ``InfeasibleDesign`` with the reason."""

    def __init__(self, refusal: Refusal | str):
        self.refusal = refusal if isinstance(refusal, Refusal) else Refusal("", refusal)
        super().__init__(self.refusal.reason)


class Refused(ValueError):
    """A planner or sizer that works without the spec at hand refuses a request: ``message`` says why,
    ``path`` (dotted spec path, "" when unknown) and ``hint`` let the caller raise ``design.infeasible``;
    ``facts`` carry figures the caller words its message with."""

    def __init__(self, message: str, path: str = "", hint: str = "", **facts):
        self.message, self.path, self.hint, self.facts = message, path, hint, facts
        super().__init__(message)


def did_you_mean(word: str, choices) -> str:
    """A hint naming the closest valid choice, or listing a few valid choices."""
    choices = sorted(str(c) for c in choices)
    close = difflib.get_close_matches(str(word), choices, n=1, cutoff=0.6)
    if close:
        return f"did you mean '{close[0]}'?"
    if not choices:
        return ""
    shown = ", ".join(choices[:8]) + (", ..." if len(choices) > 8 else "")
    return f"expected one of: {shown}"
