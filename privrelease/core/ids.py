"""Identifiers of datasets and releases: one pattern, checked the same way everywhere."""

from __future__ import annotations

import re

from privrelease.core.errors import SpecError
from privrelease.core.params import ID_PATTERN

_ID = re.compile(ID_PATTERN)


def check_id(value: str, what: str) -> str:
    """``value`` if it is a valid id (it names folders and ledger rows), else a user error."""
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise SpecError(f"{what} must be 1-80 characters of letters, digits, '_', '.' or '-', starting with a letter or digit.")
    return value
