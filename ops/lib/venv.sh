# shellcheck shell=bash
# ensure_venv EXTRAS: create .venv when missing and (re)install the project when pyproject.toml
# or the requested extras changed since the last install. Sourced by ops/dev and ops/test.
ensure_venv() {
  local extras="$1"
  local python="${PYTHON:-python3}"
  if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "error: Python >= 3.11 is required (found: $("$python" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
    return 1
  fi
  if [ ! -x .venv/bin/python ]; then
    echo "creating .venv with $("$python" --version)"
    "$python" -m venv .venv
    .venv/bin/python -m pip install --quiet --upgrade pip
  fi
  local stamp_file=".venv/.arandu-installed${extras:+-$extras}"
  local stamp
  stamp="$(sha256sum pyproject.toml | cut -d' ' -f1)"
  if [ -z "$extras" ] && grep -qsx "$stamp" .venv/.arandu-installed*; then
    return 0  # any install of this pyproject (with or without extras) includes the base package
  fi
  if [ ! -f "$stamp_file" ] || [ "$(cat "$stamp_file")" != "$stamp" ]; then
    local target="."
    [ -n "$extras" ] && target=".[$extras]"
    echo "installing arandu into .venv ($target)"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e "$target"
    echo "$stamp" > "$stamp_file"
  fi
}
