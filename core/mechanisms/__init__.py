"""The registry of release mechanisms, by the name a release spec uses."""

from __future__ import annotations

from types import ModuleType

from core.errors import SpecError
from core.mechanisms import dpne, ra

REGISTRY: dict[str, ModuleType] = {ra.NAME: ra, dpne.NAME: dpne}


def get(name: str) -> ModuleType:
    """The mechanism module called ``name``."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise SpecError(
            f"unknown mechanism {name!r}; available: {', '.join(sorted(REGISTRY))}."
        ) from None
