"""``daimon db migrate`` and ``daimon db status``: the tables of daimon's PostgreSQL stores.

Every store listed in :data:`STORES` exposes its :class:`~daimon.kit.sql_schema.Schema` as a
module-level ``SCHEMA``; ``migrate`` brings each to this daimon's version (each under the same
advisory lock the stores take on first use), ``status`` shows where each stands. Exit codes:
``0`` done (``status``: every store is up to date), ``1`` failed (the database cannot be reached,
or it holds a version newer than this daimon knows; ``status``: some store needs ``migrate``),
``2`` a usage error or the extra ``postgres`` is missing.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer

from daimon.cli.render import TerminalRenderer
from daimon.core.errors import BuilderError, DaimonError, MissingDependencyError
from daimon.core.optional import require
from daimon.kit.sql_schema import DEFAULT_PREFIX, Schema, check_prefix, migrate, schema_version

__all__ = ("STORES", "db_app")

T = TypeVar("T")

STORES = (
    "daimon.checkpoint.postgres",
    "daimon.memory.postgres",
    "daimon.distributed.brokers.postgres",
    "daimon.serverstate.postgres",
)
"""Modules of the PostgreSQL stores, each with a module-level ``SCHEMA``, migrated in order."""

db_app = typer.Typer(
    help="PostgreSQL: create or upgrade the tables of daimon's stores.", no_args_is_help=True
)

UrlArgument = Annotated[
    str, typer.Argument(metavar="URL", help="The database, e.g. postgresql://user@host/db.")
]
PrefixOption = Annotated[
    str, typer.Option("--prefix", metavar="P", help="Prefix of the stores' table names.")
]


def schemas() -> list[Schema]:
    """Every store's schema (importing a store needs the extra ``postgres``)."""
    found: list[Schema] = []
    for name in STORES:
        schema = getattr(importlib.import_module(name), "SCHEMA", None)
        if not isinstance(schema, Schema):
            raise AssertionError(f"{name} has no module-level SCHEMA")
        found.append(schema)
    return found


async def _on(url: str, work: Callable[[Any], Awaitable[T]]) -> T:
    """``work(connection)`` on a new autocommit connection to ``url``."""
    psycopg = require("psycopg", extra="postgres")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        return await work(conn)


def _run(url: str, prefix: str, work: Callable[[Any, list[Schema]], Awaitable[T]]) -> T:
    """Run ``work`` against the database; a failure is one line on standard error."""
    try:
        check_prefix(prefix)
        found = schemas()
        return asyncio.run(_on(url, lambda conn: work(conn, found)))
    except BuilderError as exc:
        TerminalRenderer().error(str(exc), type(exc).__name__)
        raise typer.Exit(2) from None
    except MissingDependencyError:
        raise  # the command's own handler: one line, exit 2
    except DaimonError as exc:  # SchemaVersionError among them
        TerminalRenderer().error(str(exc), type(exc).__name__)
        raise typer.Exit(1) from None
    except Exception as exc:
        if type(exc).__module__.partition(".")[0] != "psycopg":
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        TerminalRenderer().error(f"PostgreSQL: {message}", type(exc).__name__)
        raise typer.Exit(1) from None


@db_app.command("migrate")
def migrate_command(url: UrlArgument, prefix: PrefixOption = DEFAULT_PREFIX) -> None:
    """Create or upgrade every store's tables to this daimon's version (safe to run again)."""

    async def work(conn: Any, found: list[Schema]) -> list[str]:
        lines = []
        for schema in found:
            before = await migrate(conn, schema, prefix)
            done = "up to date" if before == schema.version else f"migrated from {before}"
            lines.append(f"{schema.component}: version {schema.version} ({done})")
        return lines

    for line in _run(url, prefix, work):
        typer.echo(line)


@db_app.command("status")
def status_command(url: UrlArgument, prefix: PrefixOption = DEFAULT_PREFIX) -> None:
    """Show each store's table version against this daimon's; exit 1 unless all are current."""

    async def work(conn: Any, found: list[Schema]) -> list[tuple[Schema, int]]:
        return [(s, await schema_version(conn, s.component, prefix)) for s in found]

    current = True
    for schema, version in _run(url, prefix, work):
        if version == schema.version:
            state = "up to date"
        elif version > schema.version:
            state = "newer than this daimon: upgrade daimon-agents"
        else:
            state = (
                "needs `daimon db migrate`" if version else "not created: run `daimon db migrate`"
            )
        current = current and version == schema.version
        typer.echo(f"{schema.component}: version {version} of {schema.version} ({state})")
    if not current:
        raise typer.Exit(1)
