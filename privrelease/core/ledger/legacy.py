"""The flat form of privacy events, before they were a typed tree: old ledger entries, read here only.

Entries written before the tree (commit 898388b and earlier: ``tests/fixtures/ledger-898388b.json``)
record each part of a charge flat, as ``{"family": ..., "count": ..., figures, "part": ...}``; an
entry from before events records none. ``read`` turns a flat part into the leaf it described (a
discrete Gaussian's is the Gaussian it was accounted as), self-composed ``count`` times, so the filter,
the PLD report and ``replay`` (``privrelease.core.ledger.account``) walk one tree for every entry, old or new.
``flat`` writes a leaf in that form: what an outlier release's manifest has always shown of its parts.
The live accounting (``privrelease.core.privacy.events``, ``privrelease.core.privacy.accountant``) knows no family.
"""

from __future__ import annotations

from privrelease.core.privacy import events

FAMILIES = {"gaussian": (events.Gaussian, ("sigma", "sensitivity")), "laplace": (events.Laplace, ("scale", "sensitivity")),
            "discrete_laplace": (events.DiscreteLaplace, ("scale", "sensitivity")),
            "permute_and_flip": (events.PermuteAndFlip, ("epsilon",)), "exponential": (events.Exponential, ("epsilon",)),
            "approx": (events.EpsilonDelta, ("epsilon", "delta"))}  # fmt: skip
ORDER = ("sigma", "scale", "sensitivity", "epsilon", "delta")  # a flat part's figures, in the order they were written


def is_flat(doc: dict) -> bool:
    """Whether a recorded part is in the flat form (else the tree's, ``events.dump``)."""
    return "family" in doc


def read(doc: dict) -> events.Event:
    """The leaf a flat part describes, self-composed ``count`` times."""
    family = doc["family"]
    if family not in FAMILIES:
        raise ValueError(f"not a privacy event: family {family!r}")
    cls, names = FAMILIES[family]
    return events.times(cls(*(doc.get(n) for n in names), part=doc.get("part", "")), doc.get("count", 1))


def family(leaf: events.Leaf) -> str:
    """The family a leaf was written under (each leaf as it is accounted: ``events.accounted``)."""
    for name, (cls, _) in FAMILIES.items():
        if type(leaf) is cls or (name == "gaussian" and isinstance(leaf, events.Gaussian)):
            return name
    raise ValueError(f"a {type(leaf).__name__} has no flat form")


def flat(leaf: events.Leaf, count: int = 1) -> dict:
    """``count`` compositions of ``leaf`` (as it is accounted) in the flat form: family, count, its figures, part."""
    leaf = events.accounted(leaf)
    figures = {n: getattr(leaf, n) for n in ORDER if n in FAMILIES[family(leaf)][1]}
    return {"family": family(leaf), "count": count, **figures, **({"part": leaf.part} if leaf.part else {})}
