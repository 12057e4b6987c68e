"""Column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Dialect, Text
from sqlalchemy.types import TypeDecorator


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in and out: SQLite keeps no offset, so store UTC and put the zone back on read."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class SafeText(TypeDecorator[str]):
    """Text that any program may have printed: PostgreSQL rejects NUL characters, so they become U+FFFD there.

    SQLite keeps the exact string. Lone surrogates (undecodable bytes) are replaced on both, because
    neither driver can encode them as UTF-8.
    """

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        if value is None or (value.isascii() and "\x00" not in value):
            return value
        if dialect.name == "postgresql" and "\x00" in value:
            value = value.replace("\x00", "\ufffd")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            value = value.encode("utf-8", "replace").decode("utf-8")
        return value


def json_type() -> JSON:
    """Plain JSON on both databases (PostgreSQL `json` keeps `\\u0000` escapes that `jsonb` would refuse)."""
    return JSON(none_as_null=True)


JSONValue = Any
"""What a JSON column holds: dicts, lists, strings, numbers, booleans."""
