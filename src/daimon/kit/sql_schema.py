"""Versioned tables for the PostgreSQL stores: each store's migrations, applied once, in order.

A store (checkpoints, memory, the task queue, server state) declares its :class:`Schema`: a
component name and the SQL of each version, in order. :func:`migrate` brings a database to the
newest version in one transaction, under an advisory lock (so processes starting together take
turns), and records the version reached in ``<prefix>schema_versions``::

    component   text PRIMARY KEY      -- "checkpoint", "memory", ...
    version     integer NOT NULL      -- the number of steps applied
    migrated_at timestamptz NOT NULL

A database written by a newer daimon (a version this one does not know) is refused with
:class:`~daimon.core.errors.SchemaVersionError`, before anything is read or written. Every table
name starts with a prefix (``daimon_`` by default), so several deployments can share a database.

The functions take a psycopg ``AsyncConnection`` (typed loosely: the kit imports no optional
library); statements refer to tables as ``{prefix}name``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from daimon.core.errors import BuilderError, SchemaVersionError

__all__ = ("DEFAULT_PREFIX", "Schema", "check_prefix", "migrate", "schema_version")

DEFAULT_PREFIX = "daimon_"
"""The prefix of every table daimon's PostgreSQL stores create, unless told otherwise."""

_PREFIX = re.compile(r"[a-z_][a-z0-9_]{0,39}")


def check_prefix(prefix: object) -> str:
    """``prefix`` if it can start a table name; :class:`BuilderError` otherwise."""
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise BuilderError(
            "table prefix must be 1-40 lowercase letters, digits or '_', not starting with a "
            f"digit; got {prefix!r}"
        )
    return prefix


@dataclass(frozen=True, slots=True)
class Schema:
    """One store's tables: the SQL of each version, in order (``{prefix}`` names the prefix)."""

    component: str
    steps: tuple[str, ...]

    @property
    def version(self) -> int:
        """The newest version: how many steps there are."""
        return len(self.steps)


def _lock_key(prefix: str) -> int:
    """The advisory lock of one prefix's migrations: a signed 64-bit number."""
    digest = hashlib.sha256(b"daimon-schema:" + prefix.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _versions_table(prefix: str) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {prefix}schema_versions ("
        "component text PRIMARY KEY, version integer NOT NULL, "
        "migrated_at timestamptz NOT NULL DEFAULT now())"
    )


async def schema_version(conn: Any, component: str, prefix: str = DEFAULT_PREFIX) -> int:
    """The version of ``component``'s tables in the database (0: not created yet)."""
    check_prefix(prefix)
    cursor = await conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{prefix}schema_versions",))
    exists = await cursor.fetchone()
    if not exists or not exists[0]:
        return 0
    cursor = await conn.execute(
        f"SELECT version FROM {prefix}schema_versions WHERE component = %s", (component,)
    )
    row = await cursor.fetchone()
    return int(row[0]) if row else 0


async def migrate(conn: Any, schema: Schema, prefix: str = DEFAULT_PREFIX) -> int:
    """Bring ``schema``'s tables to its newest version; the version they had before.

    Raises:
        SchemaVersionError: The database holds a newer version than this daimon knows.
    """
    check_prefix(prefix)
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(prefix),))
        await conn.execute(_versions_table(prefix))
        found = await schema_version(conn, schema.component, prefix)
        if found > schema.version:
            raise SchemaVersionError(schema.component, found, schema.version)
        for step in schema.steps[found:]:
            await conn.execute(step.format(prefix=prefix))
        if found < schema.version:
            await conn.execute(
                f"INSERT INTO {prefix}schema_versions (component, version) VALUES (%s, %s) "
                "ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version, "
                "migrated_at = now()",
                (schema.component, schema.version),
            )
    return found
