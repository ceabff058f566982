#!/usr/bin/env bash
# Set up a development environment and run the whole relstorage test suite.
#
# Usage: scripts/test.sh [pytest arguments...]
#
# Works from any directory.  On a fresh Debian/Ubuntu machine (as root) it
# installs what is missing (see scripts/setup.sh), then
#   1. creates .venv and installs relstorage with its test, postgresql and
#      mysql extras (scripts/setup.sh),
#   2. prepares the test databases with scripts/testdb.sh (accounts and
#      databases only: it never stops, restarts or reconfigures a server
#      that answers; tests that must, start private servers of their own,
#      see relstorage/tests/private_servers.py),
#   3. runs `python -m pytest "$@"` and exits with pytest's status
#      (no test collected counts as a failure).
#
# Set PYTHON to choose the interpreter used to create the venv, and
# RELSTORAGE_TEST_TIMEOUT to the seconds pytest may run (default 5000,
# 0 for no limit).

set -euo pipefail
SCRIPT_NAME=test.sh
EXTRAS=test,postgresql,mysql
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

# ------------------------------------------------------------ databases

bash "$ROOT/scripts/testdb.sh"

# ------------------------------------------------------------ the tests

# A hung run (a stuck thread keeps the interpreter alive, say) is stopped
# after RELSTORAGE_TEST_TIMEOUT seconds with SIGABRT, which makes Python's
# faulthandler print every thread's stack before the process dies.
limit=${RELSTORAGE_TEST_TIMEOUT:-5000}
guard=()
if have timeout && [ "$limit" != 0 ]; then
    guard=(timeout --foreground --signal=ABRT --kill-after=30 "$limit")
fi

say "running: python -m pytest $*"
set +e
PYTHONFAULTHANDLER=1 "${guard[@]}" "$VENV/bin/python" -m pytest "$@"
status=$?
set -e

case "$status" in
    5)
        printf 'test.sh: ERROR: pytest collected no tests (exit 5); treating as a failure\n' >&2
        exit 1 ;;
    124|137)
        if [ "${#guard[@]}" -gt 0 ]; then
            printf 'test.sh: ERROR: pytest did not finish within %ss (RELSTORAGE_TEST_TIMEOUT); stopped it\n' \
                "$limit" >&2
            exit 1
        fi ;;
esac
exit "$status"
