#!/usr/bin/env bash
# Run the conformance suites for SQLite and PostgreSQL and the tests that
# need no server on each supported Python besides the main run's.
#
# Usage: scripts/other_pythons.sh [pytest arguments...]
#
# Called by scripts/test.sh after a whole run's tests. For each version in
# OTHER_PYTHONS (the supported versions besides 3.11, as README and
# pyproject.toml list them) it finds the interpreter (python3.X on PATH,
# else pyenv's newest 3.X), makes .venv-3.X with the test and postgresql
# extras (scripts/setup.sh), and runs the subset below against databases
# of its own (relstoragetest_py3X_*, made by scripts/testdb.sh). A
# missing interpreter is a warning; with CI=true it is a failure.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
OTHER_PYTHONS=(3.12 3.13)
SUBSET=(relstorage/tests/test_conformance_sqlite.py
        relstorage/tests/test_conformance_postgresql.py
        relstorage/tests/test_options.py
        relstorage/tests/test_config.py
        relstorage/tests/test_interfaces.py
        relstorage/tests/test_uriresolver.py
        relstorage/tests/test_oracle_sql.py
        relstorage/tests/test_sqlite_files.py)

say() { printf 'other_pythons.sh: %s\n' "$*"; }

is_version() {  # interpreter 3.X
    "$1" -c "import sys; sys.exit(sys.version_info[:2] != ($2))" \
        >/dev/null 2>&1
}

find_version() {  # 3.X: the interpreter's path, or nothing
    local version=$1 candidate pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
    # (A pyenv shim on PATH answers only for the versions pyenv selects.)
    for candidate in "$(command -v "python$version" 2>/dev/null || true)" \
            $(ls -d "$pyenv_root"/versions/"$version".*/bin/"python$version" \
              2>/dev/null | sort -rV); do
        if [ -n "$candidate" ] && is_version "$candidate" "${version/./, }"; then
            echo "$candidate"
            return
        fi
    done
}

status=0
for version in "${OTHER_PYTHONS[@]}"; do
    interpreter=$(find_version "$version")
    if [ -z "$interpreter" ]; then
        if [ "${CI:-}" = true ]; then
            say "ERROR: Python $version, which this package supports, is not installed"
            status=1
        else
            say "warning: Python $version not found; its tests are not run"
        fi
        continue
    fi
    tag=${version//./}
    say "Python $version ($interpreter): setting up .venv-$version"
    if ! (PYTHON=$interpreter RELSTORAGE_VENV=$ROOT/.venv-$version \
          SCRIPT_NAME=other_pythons.sh EXTRAS=test,postgresql \
          bash -c 'set -euo pipefail; source "$0"' "$ROOT/scripts/setup.sh"); then
        say "ERROR: could not set up .venv-$version"
        status=1
        continue
    fi
    say "Python $version: python -m pytest ${SUBSET[*]} $*"
    set +e
    (cd "$ROOT" && PYTHONFAULTHANDLER=1 \
        RELSTORAGE_TEST_PG_DB_PREFIX=relstoragetest_py$tag \
        RELSTORAGE_TEST_MYSQL_DB_PREFIX=relstoragetest_py$tag \
        "$ROOT/.venv-$version/bin/python" -m pytest -p no:cacheprovider -q \
        "${SUBSET[@]}" "$@")
    result=$?
    set -e
    say "Python $version: exit status $result"
    if [ "$result" != 0 ]; then
        status=1
    fi
done
exit $status
