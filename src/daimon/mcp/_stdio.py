"""Starting a stdio MCP server so that it cannot outlive the process that started it.

A clean shutdown is the SDK's job: it closes the server's stdin, waits, then kills the server's
process group. A client that is SIGKILLed (or crashes) runs no shutdown at all, and a server that
ignores the end of its stdin then lives on as an orphan. On Linux the server is therefore started
through a tiny guard: a Python one-liner that asks the kernel to SIGKILL it when its parent dies
(``PR_SET_PDEATHSIG``, which survives ``exec``), checks the parent is still the one that started
it, then replaces itself with the server. After the ``exec`` nothing of the guard remains.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping

from daimon.core.errors import MCPError

__all__ = ("guard_available", "guarded_command")

# argv: [parent pid, command, *args]. prctl(PR_SET_PDEATHSIG=1, SIGKILL=9); if the parent died
# before prctl ran, the kernel will never signal: exit rather than run unsupervised.
_GUARD = (
    "import ctypes,os,sys\n"
    "if ctypes.CDLL(None,use_errno=True).prctl(1,9,0,0,0)!=0:os._exit(126)\n"
    "if os.getppid()!=int(sys.argv[1]):os._exit(125)\n"
    "os.execvp(sys.argv[2],sys.argv[2:])\n"
)


def guard_available() -> bool:
    """Whether servers can be tied to this process's life (Linux only)."""
    return sys.platform == "linux"


def guarded_command(command: str, args: list[str], env: Mapping[str, str]) -> tuple[str, list[str]]:
    """The command and arguments that start ``command`` under the guard.

    Raises:
        MCPError: ``command`` is not found on the ``PATH`` the server will run with.
    """
    path = env.get("PATH", os.defpath)
    resolved = command if os.sep in command else shutil.which(command, path=path)
    if resolved is None:
        raise MCPError(f"cannot start MCP server: command {command!r} not found")
    # -I: ignore PYTHON* variables and the user site; -S: skip site, the guard needs stdlib only.
    return sys.executable, ["-I", "-S", "-c", _GUARD, str(os.getpid()), resolved, *args]
