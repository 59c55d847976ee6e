#!/usr/bin/env bash
# Runs the Python client's test suite against a real control plane and real sidecars
# (../../tests/harness/with-sidecar.sh):
#
#   bash test.sh [PYTEST ARGS...]     # default: the whole of tests/
#
# The virtualenv lives outside the checkout, in
# ${XDG_CACHE_HOME:-$HOME/.cache}/safewrite/venv-<hash of pyproject.toml and Python>,
# and is made once: later runs only re-point the editable install when the checkout moved.
# The Python is $PYTHON, else python3 (3.9 or newer).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
python=${PYTHON:-python3}

pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
key=$({ cat pyproject.toml; "$python" -c 'import sys; print(sys.version)'; } | { sha256sum 2>/dev/null || shasum -a 256; } | cut -c1-16)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/safewrite
venv="$cache/venv-$key"
mkdir -p "$cache"
# One setup at a time per virtualenv (where flock exists); released before the tests.
exec 9>"$venv.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi

if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.complete" ]; then
  echo "test.sh: creating $venv (Python $pyver)" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv" || {
    echo "test.sh: '$python -m venv' failed (on Debian: apt-get install python3-venv)" >&2
    exit 1
  }
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip setuptools
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test]'
  printf '%s\n' "$here" >"$venv/.source"
  touch "$venv/.complete"
elif [ "$(cat "$venv/.source" 2>/dev/null)" != "$here" ]; then
  # Same dependencies, another checkout: point the editable install here.
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
  printf '%s\n' "$here" >"$venv/.source"
fi
exec 9>&-

[ $# -gt 0 ] || set -- tests

status=0
bash ../../tests/harness/with-sidecar.sh \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@" || status=$?
if [ "$status" -eq 5 ]; then
  echo "test.sh: pytest collected no tests; that counts as a failure" >&2
  exit 1
fi
exit "$status"
