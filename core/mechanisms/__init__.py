"""The registry of mechanisms, by the name a release spec (or a flow) uses.

``REGISTRY`` holds the table mechanisms a release request can name; ``MECHANISMS`` every mechanism
the command line and the deployments can run, spam-filter training included. Each is checked
against the contract of ``core.mechanisms.base`` when registered, what it declares too
(``tests/test_contract.py`` checks what a run returns); ``declared`` reads those declarations.
"""

from __future__ import annotations

from core.errors import SpecError
from core.mechanisms import aggregate, dpne, outliers, ra, sdc_chain, spam_training, swapping
from core.mechanisms.base import Mechanism, TableMechanism, declared


def registry(*mechanisms: object, kind: type = Mechanism) -> dict:
    """The mechanisms by name, each checked to implement ``kind`` (a protocol of ``base``)."""
    for m in mechanisms:
        if not isinstance(m, kind):
            members = ("NAME", "Params", "plan") + (("needs", "run", "check") if kind is TableMechanism else ())
            missing = [a for a in members if not hasattr(m, a)]
            raise TypeError(f"mechanism {getattr(m, 'NAME', m)!r} is not a {kind.__name__}: it lacks {', '.join(missing)}")
        said = declared(m)
        unknown = [p for p in (*said.filled, said.COLUMNS_PARAM) if p is not None and p not in m.Params.model_fields]
        if unknown:
            raise TypeError(f"mechanism {m.NAME!r} declares {', '.join(unknown)} filled in, but its Params has no such field")
    return {m.NAME: m for m in mechanisms}


REGISTRY: dict[str, TableMechanism] = registry(
    ra, dpne, outliers, aggregate, swapping.MEWS, swapping.MEDS, swapping.EDS, sdc_chain, kind=TableMechanism
)
MECHANISMS: dict[str, Mechanism] = {**REGISTRY, **registry(spam_training)}


def get(name: str) -> TableMechanism:
    """The table mechanism called ``name``."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise SpecError(f"unknown mechanism {name!r}; available: {', '.join(sorted(REGISTRY))}.") from None
