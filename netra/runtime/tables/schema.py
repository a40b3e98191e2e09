"""The readers of a table file, a certified table and an evidence file, made from the declaration of
the format (netra.runtime.tables.format); the files generated from that declaration are
netra.runtime.tables.generated's."""

from __future__ import annotations

from netra.core import schema as s
from netra.errors import TableError
from netra.runtime.tables.model import HINT, PROFILE_RESULTS, SANITIZER_RESULTS, SUMMARY_FIELDS

__all__ = ["PROFILE_RESULTS", "SANITIZER_RESULTS", "SUMMARY_FIELDS", "reader"]

_readers: dict[str, s.Reader] = {}


def reader(form: str = "table") -> s.Reader:
    """The schema reader of a table file ("table"), a certified table ("certified": the table with each
    summary replaced by its whole evidence record) or an evidence file ("evidence"), made on first use
    (vendors, loaders and families come from the registry when first checked). A vouched read never
    needs one, so serving never builds the format's declaration."""
    got = _readers.get(form)
    if got is None:
        from netra.runtime.tables.format import evidence_format, table_format

        shape = evidence_format() if form == "evidence" else table_format(form)
        got = _readers[form] = s.Reader(shape, TableError, HINT)
    return got
