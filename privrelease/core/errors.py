"""Named errors. A ``UserError`` is one the user can fix; its message says what to change.

Messages never carry data values: they name files, columns, expectations and counts only.
"""

from __future__ import annotations


class UserError(Exception):
    """An error caused by input the user controls (file, spec, parameter, budget)."""


class DatabaseBusy(UserError):
    """Another process held the database for longer than a command waits; its message names it, if DuckDB did."""


class SpecError(UserError):
    """The release spec is malformed or names an impossible parameter."""


class NotRegistered(SpecError):
    """No such dataset in the registry (the command line adds which home it searched)."""


class IngestError(UserError):
    """The source file cannot be read into a table."""


class ValidationFailed(UserError):
    """The dataset failed its expectation suite; nothing was charged or published."""

    def __init__(self, message: str, failures: list[dict]):
        super().__init__(message)
        self.failures = failures


class ParameterError(UserError):
    """A mechanism parameter does not fit the data or the mechanism."""


class BudgetError(UserError):
    """The ledger refuses a charge: no cap set, or the cap would be exceeded."""


class TimeLimit(UserError):
    """A run went on past the operator's limit on how long one may take (``privrelease.core.interrupts.limited``)."""


class ApprovalError(UserError):
    """A release that needs a data steward's approval did not get it (or cannot wait for it here)."""


class BudgetExhausted(BudgetError):
    """The cap's admission filter refuses a charge: ``plain`` says what is left and what to do, ``detail`` the
    accounting behind it (what binds, the filter's figures, who spent the most)."""

    def __init__(self, plain: str, detail: str = ""):
        super().__init__(f"{plain} {detail}".strip())
        self.plain, self.detail = plain, detail


class ReleaseConflict(UserError):
    """A release id is reused for a different release."""


class LedgerCorrupt(Exception):
    """The ledger's hash chain does not hold."""

    def __init__(self, message: str, seq: int | None):
        super().__init__(message)
        self.seq = seq


class RolledBack(LedgerCorrupt):
    """The ledger holds less than its anchors say it once did, or its anchors are lost (``privrelease.core.ledger.rollback``)."""


class InternalError(Exception):
    """A state that should be impossible: this is a bug, not a user error."""


class QuorumLost(UserError):
    """Fewer parties than the public threshold remain in a multi-party run: it stops, nothing is published."""


def yaml_where(exc: Exception) -> str:
    """Where a YAML parse error is, and what it is, from PyYAML's marks: " at line L, column C: problem" (its lines and
    columns counted from 1), or "" when it has no mark."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is None:
        return ""
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" + (f": {problem}" if problem else "")
