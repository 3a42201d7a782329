"""daimon.server stays optional: lazy to import, and names its extra when it is missing."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import daimon.server


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_importing_daimon_or_the_settings_loads_no_web_library() -> None:
    code = (
        "import json, sys\n"
        "import daimon\n"
        "loaded_by_daimon = 'daimon.server' in sys.modules\n"
        "from daimon.server import ServerSettings\n"
        "ServerSettings(port=9000)\n"
        "libraries = ('fastapi', 'starlette', 'uvicorn', 'pydantic')\n"
        "web = sorted(m for m in libraries if m in sys.modules)\n"
        "print(json.dumps([loaded_by_daimon, web]))\n"
    )
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [False, []]


def test_a_missing_extra_is_named(
    import_without: Callable[[str, str], tuple[str, str, str]],
) -> None:
    extra, module, message = import_without("daimon.server:create_app", "fastapi")
    assert (module, extra) == ("fastapi", "server")
    assert 'pip install "daimon-agents[server]"' in message


def test_the_namespace_is_curated() -> None:
    assert daimon.server.__all__ == ("ServedFlow", "ServerSettings", "create_app", "serve")
    assert set(daimon.server.__all__) <= set(dir(daimon.server))
    for name in daimon.server.__all__:
        assert getattr(daimon.server, name).__module__.startswith("daimon.server.")
