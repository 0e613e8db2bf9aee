# Sourced by start.sh and test.sh: make .venv with Python >= 3.11 and install the project.
# usage: . scripts/setup_venv.sh [EXTRAS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-python3}"
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "nunet-tui needs Python 3.11 or newer; set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
if [ ! -x "$root/.venv/bin/python" ]; then
  # The first start installs every package (about a minute): say so, and on a terminal let
  # the installer show what it is fetching and how far it is (it printed nothing for 82 s).
  echo "setting up $root/.venv: installing nunet-tui and its packages (first start only)" >&2
  "$py" -m venv "$root/.venv"
fi
# Quiet unless a person watches: on a terminal the installer's own progress is shown.
quiet=(-q)
if [ -t 2 ]; then
  quiet=()
fi
# py-libp2p builds fastecdsa from source: it needs gcc and the GMP headers.
if ! [ -e /usr/include/gmp.h ] && ! ls /usr/include/*/gmp.h >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq libgmp-dev >/dev/null
  else
    echo "note: install the GMP headers (Debian/Ubuntu: sudo apt-get install libgmp-dev)" >&2
  fi
fi
pip=("$root/.venv/bin/python" -m pip --disable-pip-version-check)
# Editable installs of a pyproject.toml project need pip >= 21.3; a newer one only costs a
# download, so it is fetched only for an older pip.
if ! "$root/.venv/bin/python" -c 'import pip, sys; sys.exit(int(pip.__version__.split(".")[0]) < 22)'; then
  "${pip[@]}" install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
fi
extras="${1:-}"
target="$root"
[ -n "$extras" ] && target="$root[$extras]"
# uv resolves and downloads in parallel: with an empty cache the install took 97 s with pip
# (one index lookup after another, an isolated setuptools per sdist) and ~35 s with uv.
# The uv on PATH, else one fetched into the venv (seconds); pip when neither works, or when
# NUNET_INSTALLER=pip.
uv=""
if [ "${NUNET_INSTALLER:-uv}" != pip ]; then
  if command -v uv >/dev/null 2>&1; then
    uv="$(command -v uv)"
  else
    if ! [ -x "$root/.venv/bin/uv" ]; then
      "${pip[@]}" install -q uv 2>&1 | grep -v '^WARNING: Location' >&2 || true
    fi
    if [ -x "$root/.venv/bin/uv" ]; then
      uv="$root/.venv/bin/uv"
    fi
  fi
fi
if [ -n "$uv" ]; then
  # uv reads neither pip.conf nor PIP_* variables: hand it the indexes, links, constraints
  # and certificates pip is configured with here, and pip's rule of taking the best match
  # from any index.
  uv_args=()
  while IFS= read -r line; do
    key="${line%%=*}"
    value="${line#*=}"
    value="${value#\'}"
    value="${value%\'}"
    case "$key" in
      *.index-url) uv_args+=(--index-url "$value") ;;
      *.extra-index-url) for v in $value; do uv_args+=(--extra-index-url "$v"); done ;;
      *.find-links) for v in $value; do uv_args+=(--find-links "$v"); done ;;
      *.constraint) for v in $value; do uv_args+=(--constraint "$v"); done ;;
      *.cert) export SSL_CERT_FILE="$value" ;;
    esac
  done < <("$root/.venv/bin/python" -m pip config list 2>/dev/null)
  UV_INDEX_STRATEGY="${UV_INDEX_STRATEGY:-unsafe-best-match}" "$uv" pip install \
    ${quiet[@]+"${quiet[@]}"} --python "$root/.venv/bin/python" "${uv_args[@]}" -e "$target" ||
    "${pip[@]}" install -q -e "$target" 2>&1 | grep -v '^WARNING: Location' || true
else
  "${pip[@]}" install -q -e "$target" 2>&1 | grep -v '^WARNING: Location' || true
fi
"$root/.venv/bin/python" -c 'import nunet_tui, engine' || { echo "install failed" >&2; exit 1; }
# py-libp2p depends on trio-typing, whose stale trio-stubs (types only, never imported at run
# time) shadow the types trio ships itself; type-checking needs trio's own.
site="$("$root/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
rm -rf "$site/trio-stubs"
