"""daimon.server stays optional: lazy to import, and names its extra when it is missing."""

from __future__ import annotations

import json
import subprocess
import sys

import daimon.server

_BLOCK = """
import importlib.abc, json, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Block())
{statement}
"""


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


def test_a_missing_extra_is_named() -> None:
    statement = (
        "from daimon.core.errors import MissingDependencyError\n"
        "try:\n"
        "    from daimon.server import create_app\n"
        "except MissingDependencyError as exc:\n"
        "    print(json.dumps([exc.module, exc.extra, str(exc)]))\n"
    )
    result = _run(_BLOCK.format(blocked={"fastapi"}, statement=statement))
    assert result.returncode == 0, result.stderr
    module, extra, message = json.loads(result.stdout)
    assert (module, extra) == ("fastapi", "server")
    assert 'pip install "daimon[server]"' in message


def test_the_namespace_is_curated() -> None:
    assert daimon.server.__all__ == ("ServedFlow", "ServerSettings", "create_app", "serve")
    assert set(daimon.server.__all__) <= set(dir(daimon.server))
    for name in daimon.server.__all__:
        assert getattr(daimon.server, name).__module__.startswith("daimon.server.")
