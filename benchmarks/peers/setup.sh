#!/usr/bin/env bash
# Creates one virtualenv per peer framework in benchmarks/.venvs/<name> (git-ignored), with the
# exact versions the published table used (requirements/<name>.txt, from pip freeze), so none of
# them becomes a dependency of daimon. Usage: benchmarks/peers/setup.sh [name ...]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venvs="$here/../.venvs"
python="${PYTHON:-python3.11}"
names=("$@")
if ((${#names[@]} == 0)); then
  names=(agno pydantic-ai openai-agents langgraph smolagents)
fi
mkdir -p "$venvs"
for name in "${names[@]}"; do
  echo "==> $name"
  [[ -x "$venvs/$name/bin/python" ]] || "$python" -m venv "$venvs/$name"
  "$venvs/$name/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements/$name.txt"
done
