"""How a source's text becomes typed columns: one rule for every format, declared missing values, decimal commas.

Every format is read with its text as text (a CSV's cells; a Parquet or JSON string column) and then
typed by one rule, so the same table gets the same schema from CSV, Parquet or JSON lines. A column
already typed in the file (a Parquet integer, a JSON number) keeps its type. A text column is, when
every present value fits:

- ``integer``: whole numbers without a leading zero (``02139`` is a code, not a number: it stays text)
  that fit in 64 bits;
- ``float``: numbers with the decimal separator (``--decimal``), an optional exponent, no leading zero;
- ``boolean``: ``true``/``false`` (any case); ``date``: ``YYYY-MM-DD``; ``timestamp``: ``YYYY-MM-DD hh:mm[:ss]``;
- else ``string``.

The missing-value tokens (``--na``, default empty and ``NA``) are read as missing in every text column
before anything is typed; with ``--normalise`` every text value is first read without invisible characters
(zero-width spaces, joiners, a byte-order mark, soft hyphens), with no-break spaces as spaces, trimmed and in
Unicode NFC (``normalised_sql``), so ``'Ward A\u200b'`` and ``' Ward A'`` are ``'Ward A'``. A column that stays text because a few of its values are not numbers is
named in a warning, with example values, so the steward can declare them missing or fix them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from privrelease.core.db import quote_ident
from privrelease.core.errors import SpecError
from privrelease.core.tables.readers import DUCK
from privrelease.core.tables.schema import Column, Schema

NA = ("", "NA")
_SEPARATORS = (".", ",")
INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\u00ad"  # zero-width space, non-joiner, joiner, word joiner, BOM, soft hyphen
SPACES = "\u00a0\u202f"  # no-break spaces, read as a space


def normalised_sql(x: str) -> str:
    """SQL for the text value ``x`` (an SQL expression) without invisible characters, with no-break spaces as spaces,
    trimmed, in Unicode NFC; NULL when nothing is left (what ``--normalise`` reads)."""
    gone = f"regexp_replace({x}, '[{INVISIBLE}]', '', 'g')"
    return f"nullif(trim(nfc_normalize(regexp_replace({gone}, '[{SPACES}]', ' ', 'g'))), '')"


@dataclass(frozen=True)
class Reading:
    """How a source's text is read: the tokens meaning a missing value, the decimal separator, and whether text values
    are normalised (``normalised_sql``)."""

    na: tuple[str, ...] = NA
    decimal: str = "."
    normalise: bool = False

    @classmethod
    def parse(cls, na: str | None, decimal: str, delimiter: str = ",", fmt: str = "csv", normalise: bool = False) -> Reading:
        """From the command line: ``--na "NA,?"`` (comma-separated; an empty value is always missing)."""
        if decimal not in _SEPARATORS:
            raise SpecError(f"--decimal must be '.' or ',', got {decimal!r}.")
        if fmt == "csv" and decimal == delimiter:
            raise SpecError(
                f"--decimal {decimal!r} is also the CSV delimiter; a file with decimal commas separates its "
                "fields with another character: pass it with --delimiter (such as ';')."
            )
        tokens = NA if na is None else tuple(dict.fromkeys(["", *(t.strip() for t in na.split(","))]))
        return cls(tokens, decimal, normalise)

    def dump(self) -> str:
        """As the registry keeps it (a refresh reads its source the same way)."""
        return json.dumps({"na": list(self.na), "decimal": self.decimal} | ({"normalise": True} if self.normalise else {}))

    @classmethod
    def load(cls, text: str | None) -> Reading:
        """As the registry kept it; a registration from before reading options were kept read only empty values
        as missing (a refresh reads its source as it was read then)."""
        if not text:
            return cls(("",), ".")
        doc = json.loads(text)
        return cls(tuple(doc["na"]), doc["decimal"], bool(doc.get("normalise", False)))


def _number(decimal: str) -> str:
    d = "\\" + decimal
    # inf and nan read as numbers, so that a float column holding one is refused naming its line (readers.check_schema)
    return rf"[+-]?(((0|[1-9][0-9]*)({d}[0-9]*)?|{d}[0-9]+)([eE][+-]?[0-9]+)?|(?i:inf|infinity|nan))"


_INTEGER = r"[+-]?(0|[1-9][0-9]*)"
_CODE = r"[+-]?0[0-9]+"  # a leading zero: a code (zip, id), kept as text on purpose
_DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
_TIMESTAMP = r"[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?"


def clean(con, raw: str, table: str, reading: Reading) -> list[tuple[str, str]]:
    """View ``table`` over ``raw`` with the missing-value tokens read as NULL in every text column; its
    columns and DuckDB types."""
    found = con.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
        [raw],
    ).fetchall()
    tokens = ", ".join("'" + t.replace("'", "''") + "'" for t in reading.na)

    def text(n: str) -> str:
        x = quote_ident(n)
        return f"CASE WHEN trim({x}) IN ({tokens}) THEN NULL ELSE {normalised_sql(x) if reading.normalise else x} END AS {x}"

    parts = [text(n) if dtype == "VARCHAR" else quote_ident(n) for n, dtype in found]
    con.execute(f"CREATE TEMP VIEW {table} AS SELECT {', '.join(parts)} FROM {raw}")
    return found


def infer(con, table: str, found: list[tuple[str, str]], reading: Reading) -> tuple[Schema, list[str]]:
    """The schema of ``table`` by the rule above, and a warning for each column left as text by a few values."""
    columns, warnings = {}, []
    for name, dtype in found:
        q = quote_ident(name)
        nulls = con.execute(f"SELECT count(*) FROM {table} WHERE {q} IS NULL").fetchall()[0][0]
        kind = DUCK.get(dtype, "string")
        if dtype == "VARCHAR":
            kind, warning = _text(con, table, name, reading)
            if warning:
                warnings.append(warning)
        columns[name] = Column(type=kind, nullable=bool(nulls))
    return Schema(columns=columns), warnings


def _text(con, table: str, name: str, reading: Reading) -> tuple[str, str | None]:
    number = _number(reading.decimal)
    other = _number("," if reading.decimal == "." else ".")
    present, integers, fits, numbers, booleans, dates, stamps, codes, foreign, odd, examples = con.execute(
        f"""SELECT count(v),
            count(*) FILTER (WHERE regexp_full_match(v, '{_INTEGER}')),
            count(*) FILTER (WHERE regexp_full_match(v, '{_INTEGER}') AND TRY_CAST(v AS BIGINT) IS NOT NULL),
            count(*) FILTER (WHERE regexp_full_match(v, '{number}')),
            count(*) FILTER (WHERE lower(v) IN ('true', 'false')),
            count(*) FILTER (WHERE regexp_full_match(v, '{_DATE}') AND TRY_CAST(v AS DATE) IS NOT NULL),
            count(*) FILTER (WHERE regexp_full_match(v, '{_TIMESTAMP}') AND TRY_CAST(v AS TIMESTAMP) IS NOT NULL),
            count(*) FILTER (WHERE regexp_full_match(v, '{_CODE}')),
            count(*) FILTER (WHERE regexp_full_match(v, '{other}') AND NOT regexp_full_match(v, '{number}')),
            count(*) FILTER (WHERE NOT regexp_full_match(v, '{number}') AND NOT regexp_full_match(v, '{_CODE}')
                             AND NOT regexp_full_match(v, '{other}')),
            (list(DISTINCT v ORDER BY v) FILTER (WHERE NOT regexp_full_match(v, '{number}')
                             AND NOT regexp_full_match(v, '{_CODE}') AND NOT regexp_full_match(v, '{other}')))[1:3]
        FROM (SELECT trim({quote_ident(name)}) AS v FROM {table})"""
    ).fetchall()[0]
    if present == 0:
        return "string", None
    for kind, count in (("boolean", booleans), ("date", dates), ("timestamp", stamps)):
        if count == present:
            return kind, None
    if integers == present:
        return ("integer" if fits == present else "string"), None
    if numbers == present:
        return "float", None
    if foreign and foreign + numbers + codes == present:
        return "string", (
            f"column {name!r} is read as text: {foreign} of its {present} values use the decimal separator "
            f"{'.' if reading.decimal == ',' else ','!r} (for example {_sample(con, table, name, other, number)}); pass "
            f"--decimal {'.' if reading.decimal == ',' else ','} if they are numbers."
        )
    if odd and numbers + codes + foreign > odd:
        shown = ", ".join(repr(e) for e in (examples or []))
        tokens = ",".join(dict.fromkeys([*(t for t in reading.na if t), *(e for e in examples or [] if "," not in e)]))
        return "string", (
            f"column {name!r} is read as text because {odd} of its {present} values are not numbers "
            f'(for example {shown}); if they mean a missing value, declare them with --na "{tokens}", '
            "else fix them in the source."
        )
    return "string", None


def _sample(con, table: str, name: str, pattern: str, unlike: str) -> str:
    (values,) = con.execute(
        f"SELECT (list(DISTINCT v ORDER BY v))[1:3] FROM (SELECT trim({quote_ident(name)}) AS v FROM {table}) "
        f"WHERE regexp_full_match(v, '{pattern}') AND NOT regexp_full_match(v, '{unlike}')"
    ).fetchall()[0]
    return ", ".join(repr(v) for v in values)


def value(name: str, column: Column, dtype: str, reading: Reading) -> str:
    """The SQL reading column ``name`` of the cleaned table as text ready to cast to its type: a decimal comma
    becomes a point in a float column read from text."""
    q = quote_ident(name)
    if column.type == "float" and dtype == "VARCHAR" and reading.decimal != ".":
        return f"replace({q}, '{reading.decimal}', '.')"
    return q
