"""The public namespace of daimon.tools."""

import subprocess
import sys

import daimon.tools


def test_all_is_sorted_and_complete() -> None:
    names = daimon.tools.__all__
    assert isinstance(names, tuple)
    assert list(names) == sorted(names)
    assert set(names) == {
        "Elicitation",
        "FunctionTool",
        "EndRun",
        "ModelRetry",
        "RunClient",
        "RunContext",
        "Tool",
        "ToolRegistry",
        "ToolRetryPolicy",
        "UndocumentedToolWarning",
        "tool",
    }
    for name in names:
        assert getattr(daimon.tools, name).__module__.startswith("daimon.tools")


def test_importing_tools_loads_no_heavy_or_optional_library() -> None:
    code = (
        "import sys, daimon.tools\n"
        "loaded = {'pydantic', 'fastjsonschema', 'docstring_parser'} & set(sys.modules)\n"
        "print(sorted(loaded))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"


def test_decorating_never_imports_pydantic() -> None:
    code = (
        "import sys, daimon.tools\n"
        "from dataclasses import dataclass\n"
        "@dataclass\n"
        "class P:\n"
        "    x: int\n"
        "@daimon.tools.tool\n"
        "def f(p: P, n: int = 1) -> str:\n"
        "    '''Doc.\n\n    Args:\n        n: how many\n    '''\n"
        "    return ''\n"
        "print('pydantic' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "False"
