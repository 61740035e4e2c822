"""The registry of release mechanisms, by the name a release spec uses."""

from __future__ import annotations

from types import ModuleType

from core.errors import SpecError
from core.mechanisms import dpne, outliers, ra, swapping

REGISTRY: dict[str, ModuleType | object] = {
    ra.NAME: ra, dpne.NAME: dpne, outliers.NAME: outliers, swapping.MEWS.NAME: swapping.MEWS, swapping.MEDS.NAME: swapping.MEDS, swapping.EDS.NAME: swapping.EDS,
}


def get(name: str) -> ModuleType | object:
    """The mechanism module called ``name``."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise SpecError(
            f"unknown mechanism {name!r}; available: {', '.join(sorted(REGISTRY))}."
        ) from None
