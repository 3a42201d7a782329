"""``daimon db migrate`` and ``daimon db status`` against the real PostgreSQL."""

from __future__ import annotations

import importlib

import psycopg
import pytest

from daimon.cli.db import STORES, schemas
from daimon.kit.sql_schema import Schema

from .conftest import CLI

pytestmark = pytest.mark.service("postgres")


def tables(url: str, prefix: str) -> list[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE %s ORDER BY tablename",
            (f"{prefix}%",),
        ).fetchall()
    return [str(row[0])[len(prefix) :] for row in rows]


def test_every_store_module_exposes_its_schema() -> None:
    found = schemas()
    assert [s.component for s in found] == ["checkpoint", "memory", "broker", "server_state"]
    for name, schema in zip(STORES, found, strict=True):
        assert importlib.import_module(name).SCHEMA is schema
        assert isinstance(schema, Schema) and schema.version >= 1


def test_status_then_migrate_then_migrate_again(
    cli: CLI, postgres_url: str, postgres_prefix: str
) -> None:
    before = cli("db", "status", postgres_url, "--prefix", postgres_prefix)
    assert before.returncode == 1, before.stderr
    assert before.stdout.splitlines() == [
        "checkpoint: version 0 of 1 (not created: run `daimon db migrate`)",
        "memory: version 0 of 1 (not created: run `daimon db migrate`)",
        "broker: version 0 of 1 (not created: run `daimon db migrate`)",
        "server_state: version 0 of 2 (not created: run `daimon db migrate`)",
    ]
    assert tables(postgres_url, postgres_prefix) == []  # status writes nothing

    first = cli("db", "migrate", postgres_url, "--prefix", postgres_prefix)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [
        "checkpoint: version 1 (migrated from 0)",
        "memory: version 1 (migrated from 0)",
        "broker: version 1 (migrated from 0)",
        "server_state: version 2 (migrated from 0)",
    ]
    assert tables(postgres_url, postgres_prefix) == [
        "broker_dead",
        "broker_tasks",
        "checkpoint_leases",
        "checkpoints",
        "memory_messages",
        "memory_sessions",
        "schema_versions",
        "state_events",
        "state_records",
        "state_streams",
    ]

    again = cli("db", "migrate", postgres_url, "--prefix", postgres_prefix)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        "checkpoint: version 1 (up to date)",
        "memory: version 1 (up to date)",
        "broker: version 1 (up to date)",
        "server_state: version 2 (up to date)",
    ]

    after = cli("db", "status", postgres_url, "--prefix", postgres_prefix)
    assert after.returncode == 0, after.stderr
    assert after.stdout.splitlines() == [
        "checkpoint: version 1 of 1 (up to date)",
        "memory: version 1 of 1 (up to date)",
        "broker: version 1 of 1 (up to date)",
        "server_state: version 2 of 2 (up to date)",
    ]


def test_a_database_newer_than_this_daimon_is_refused(
    cli: CLI, postgres_url: str, postgres_prefix: str
) -> None:
    assert cli("db", "migrate", postgres_url, "--prefix", postgres_prefix).returncode == 0
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            f"UPDATE {postgres_prefix}schema_versions SET version = 7 WHERE component = 'memory'"
        )

    refused = cli("db", "migrate", postgres_url, "--prefix", postgres_prefix)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "error: the database's memory tables are at version 7, newer than this daimon knows "
        "(1): upgrade daimon-agents to use them"
    )
    status = cli("db", "status", postgres_url, "--prefix", postgres_prefix)
    assert status.returncode == 1
    assert "memory: version 7 of 1 (newer than this daimon: upgrade daimon-agents)" in (
        status.stdout.splitlines()
    )


def test_bad_input_is_one_line_and_a_usage_exit(
    cli: CLI, postgres_url: str, postgres_prefix: str
) -> None:
    bad_prefix = cli("db", "migrate", postgres_url, "--prefix", "Not-A-Prefix")
    assert bad_prefix.returncode == 2
    assert bad_prefix.stderr.startswith("error: table prefix must be") and bad_prefix.stdout == ""

    unreachable = cli("db", "status", "postgresql://postgres@127.0.0.1:1/test")
    assert unreachable.returncode == 1
    [line] = unreachable.stderr.splitlines()
    assert line.startswith("error: PostgreSQL: connection failed") and "Traceback" not in line

    missing = cli("db", "migrate", postgres_url, "--prefix", postgres_prefix, without="psycopg")
    assert missing.returncode == 2
    [line] = missing.stderr.splitlines()
    assert 'pip install "daimon-agents[postgres]"' in line
    assert tables(postgres_url, postgres_prefix) == []
