"""The registry of mechanisms, by the name a release spec (or a flow) uses.

``REGISTRY`` holds the table mechanisms a release request can name; ``MECHANISMS`` every mechanism
the command line and the deployments can run, spam-filter training included. Each is imported when first
asked for and checked against the contract of ``privrelease.core.mechanisms.base`` then, what it declares too
(``tests/mechanisms/test_contract.py`` checks what a run returns); ``declared`` reads those declarations.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from privrelease.core.errors import SpecError
from privrelease.core.mechanisms.base import Mechanism, SdcMechanism, TableMechanism, declared


def registry(*mechanisms: object, kind: type = Mechanism) -> dict:
    """The mechanisms by name, each checked to implement ``kind`` (a protocol of ``base``)."""
    for m in mechanisms:
        check(m, kind)
    return {m.NAME: m for m in mechanisms}


def check(m: object, kind: type) -> None:
    """``m`` implements ``kind`` (a protocol of ``base``), and what it declares filled in are fields of its Params."""
    if not isinstance(m, kind):
        members = ("NAME", "Params", "plan") + (("needs", "run", "check") if kind in (TableMechanism, SdcMechanism) else ())
        members += ("protects",) if kind is SdcMechanism else ()
        missing = [a for a in members if not hasattr(m, a)]
        raise TypeError(f"mechanism {getattr(m, 'NAME', m)!r} is not a {kind.__name__}: it lacks {', '.join(missing)}")
    said = declared(m)
    unknown = [p for p in (*said.filled, said.COLUMNS_PARAM) if p is not None and p not in m.Params.model_fields]
    if unknown:
        raise TypeError(f"mechanism {m.NAME!r} declares {', '.join(unknown)} filled in, but its Params has no such field")


class Registry(Mapping):
    """Mechanisms by name, each imported (and checked against its protocol) the first time it is asked for: a command
    that runs one mechanism, or none (``ledger totals``, ``dataset list``), loads no other (issue #57: every command
    paid 2.6 s for all of them, scipy's optimizers included)."""

    def __init__(self, where: dict[str, tuple[str, str | None]], kind: type) -> None:
        self._where, self._kind, self._loaded = where, kind, {}

    def kind(self, name: str) -> type:
        """The protocol the mechanism called ``name`` is checked against: an SDC mechanism's, else the registry's."""
        return SdcMechanism if name in SDC else self._kind

    def __getitem__(self, name: str):
        if name not in self._loaded:
            module, attribute = self._where[name]  # KeyError: no such mechanism
            found = importlib.import_module(f"privrelease.core.mechanisms.{module}")
            m = getattr(found, attribute) if attribute else found
            check(m, self.kind(name))
            if m.NAME != name:
                raise TypeError(f"mechanism {m.NAME!r} is registered as {name!r}")
            self._loaded[name] = m
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


# name -> (module under core.mechanisms, the attribute that is the mechanism, or None: the module is)
TABLES = {
    "ra": ("ra", None), "dpne": ("dpne", None), "outliers": ("outliers", None), "aggregate": ("aggregate", None),
    "mews": ("swapping", "MEWS"), "meds": ("swapping", "MEDS"), "eds": ("swapping", "EDS"), "sdc": ("sdc_chain", None),
    "sdc_table": ("sdc_table", None),
}  # fmt: skip
SDC = frozenset({"ra", "mews", "meds", "eds", "sdc", "sdc_table"})  # under statistical disclosure control: SdcMechanism
REGISTRY: Mapping[str, TableMechanism] = Registry(TABLES, TableMechanism)
MECHANISMS: Mapping[str, Mechanism] = Registry({**TABLES, "spam-filter-training": ("spam_training", None)}, Mechanism)


def get(name: str) -> TableMechanism:
    """The table mechanism called ``name``."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise SpecError(f"unknown mechanism {name!r}; available: {', '.join(sorted(REGISTRY))}.") from None
