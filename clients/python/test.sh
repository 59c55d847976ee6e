#!/usr/bin/env bash
# Runs the Python client's test suite against a real control plane and real sidecars
# (../../tests/harness/with-sidecar.sh), twice: on the newest releases of its
# dependencies, and on its floors (tests/floor-constraints.txt: the oldest grpcio and
# protobuf pyproject.toml admits).
#
#   bash test.sh                 # newest: all of tests/; floors: $FLOOR_TESTS
#   bash test.sh [PYTEST ARGS]   # only these, on the newest releases (and on the
#                                # floors too with SAFEWRITE_FLOOR=1)
#
# The virtualenvs live outside the checkout, in ${XDG_CACHE_HOME:-$HOME/.cache}/safewrite/
# (venv-<hash> and venv-floor-<hash>, hashed over pyproject.toml, the floors and the
# Python), and are made once: later runs only re-point the editable install when the
# checkout moved. The Python is $PYTHON, else python3 (3.9 or newer). Fails when any
# test fails or a run collected none.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
python=${PYTHON:-python3}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/safewrite
mkdir -p "$cache"

# The floor run: everything but the tests of optional extras (OpenTelemetry, kopf), the
# type check and the README, which the newest run covers.
FLOOR_TESTS=${FLOOR_TESTS:-"tests/test_offline.py tests/test_generated.py tests/test_conformance.py tests/test_mutation.py tests/test_conditions.py tests/test_changes.py tests/test_writes.py tests/test_get.py tests/test_errors.py tests/test_lost_answer.py tests/test_async.py tests/test_token.py tests/test_delete.py tests/test_skew.py"}

hash_of() { { cat "$@"; "$python" -c 'import sys; print(sys.version)'; } | { sha256sum 2>/dev/null || shasum -a 256; } | cut -c1-16; }

# make_venv DIR PIP-INSTALL-ARGS...: creates DIR once (one setup at a time per venv).
make_venv() {
  local venv=$1
  shift
  exec 9>"$venv.lock"
  if command -v flock >/dev/null 2>&1; then flock 9; fi
  if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.complete" ]; then
    echo "test.sh: creating $venv" >&2
    rm -rf "$venv"
    "$python" -m venv "$venv" || {
      echo "test.sh: '$python -m venv' failed (on Debian: apt-get install python3-venv)" >&2
      exit 1
    }
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
    printf '%s\n' "$here" >"$venv/.source"
    touch "$venv/.complete"
  elif [ "$(cat "$venv/.source" 2>/dev/null)" != "$here" ]; then
    # Same dependencies, another checkout: point the editable install here.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
    printf '%s\n' "$here" >"$venv/.source"
  fi
  exec 9>&-
}

newest="$cache/venv-$(hash_of pyproject.toml)"
floor="$cache/venv-floor-$(hash_of pyproject.toml tests/floor-constraints.txt)"
make_venv "$newest" --upgrade setuptools -e '.[test]'
make_venv "$floor" -c tests/floor-constraints.txt setuptools pytest grpcio-tools -e .

if [ $# -gt 0 ]; then
  newest_args=("$@")
  if [ "${SAFEWRITE_FLOOR:-0}" = 1 ]; then floor_args=("$@"); else floor_args=(); fi
else
  newest_args=(tests)
  read -r -a floor_args <<<"$FLOOR_TESTS"
fi

# One control plane and one pair of sidecars for both runs.
export SAFEWRITE_TEST_NEWEST="$newest" SAFEWRITE_TEST_FLOOR="$floor"
status=0
bash ../../tests/harness/with-sidecar.sh bash -c '
  set -u
  run() { # NAME VENV ARGS...
    local name=$1 venv=$2
    shift 2
    local started=$SECONDS versions
    versions=$("$venv/bin/python" -c "from importlib.metadata import version as v; print(\"grpcio\", v(\"grpcio\"), \"protobuf\", v(\"protobuf\"))")
    echo "test.sh: $name ($versions)" >&2
    local rc=0
    "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@" || rc=$?
    echo "test.sh: $name finished in $((SECONDS - started)) s with status $rc" >&2
    if [ "$rc" -eq 5 ]; then echo "test.sh: $name collected no tests; that counts as a failure" >&2; rc=1; fi
    return "$rc"
  }
  n=$1; shift
  rc=0
  run newest "$SAFEWRITE_TEST_NEWEST" "${@:1:$n}" || rc=1
  shift "$n"
  if [ $# -gt 0 ]; then run floors "$SAFEWRITE_TEST_FLOOR" "$@" || rc=1; fi
  exit "$rc"
' test.sh "${#newest_args[@]}" "${newest_args[@]}" "${floor_args[@]}" || status=$?
exit "$status"
