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
#      see relstorage/testing/private_servers.py),
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
source "$ROOT/scripts/run_tmp.sh"

# What the run puts in the temporary directory goes into one of its own,
# removed at the end (see scripts/run_tmp.sh and docs/testing.rst).
run_tmp_begin

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

# A whole run (no arguments) runs in three pytest processes at once,
# which spend most of their time waiting (on servers, on child
# processes) rather than on the processor:
#   - the tests that only use servers of their own (OWN_SERVERS:
#     private_servers, replica_pairs: replicated pairs, chaos, a silent
#     network, galera_cluster: a Galera cluster, pgbouncer,
#     pg_auto_failover);
#   - the tests that mostly wait on child processes (BESIDE: gevent's
#     children, buildout, the docs build, the wheel), on test databases
#     of their own (relstoragetest_side_*), followed by the other
#     supported Pythons' subset (scripts/other_pythons.sh);
#   - all the others, on the shared servers' relstoragetest_* databases.
# RELSTORAGE_TEST_SERIAL=1 runs everything in one process (and not the
# other Pythons).
OWN_SERVERS=(relstorage/tests/test_conformance_replicas.py
             relstorage/tests/test_replicas.py
             relstorage/tests/test_conformance_pgbouncer.py
             relstorage/tests/test_pgbouncer.py
             relstorage/tests/test_pgbouncer_pack_lease.py
             relstorage/tests/test_pooler_check.py
             relstorage/tests/test_tls_postgresql.py
             relstorage/tests/test_autofailover.py
             relstorage/tests/test_chaos.py
             relstorage/tests/test_silent_network.py
             relstorage/tests/test_conformance_galera.py
             relstorage/tests/test_galera.py)
BESIDE=(relstorage/tests/test_gevent.py
        relstorage/tests/test_buildout.py
        relstorage/tests/test_docs.py
        relstorage/tests/test_packaging.py)
set +e
if [ "$#" -eq 0 ] && [ "${RELSTORAGE_TEST_SERIAL:-0}" != 1 ]; then
    own_log=$RUN_TMP/own-servers.log
    beside_log=$RUN_TMP/beside.log
    say "running beside the others (output below, at the end): python -m pytest ${OWN_SERVERS[*]}"
    PYTHONFAULTHANDLER=1 "${guard[@]}" "$VENV/bin/python" -m pytest \
        -p no:cacheprovider "${OWN_SERVERS[@]}" >"$own_log" 2>&1 &
    own=$!
    say "running beside the others (output below, at the end): python -m pytest ${BESIDE[*]}, then scripts/other_pythons.sh"
    (
        PYTHONFAULTHANDLER=1 RELSTORAGE_TEST_PG_DB_PREFIX=relstoragetest_side \
            RELSTORAGE_TEST_MYSQL_DB_PREFIX=relstoragetest_side \
            "${guard[@]}" "$VENV/bin/python" -m pytest -p no:cacheprovider \
            "${BESIDE[@]}"
        beside_status=$?
        say "the other supported Pythons (scripts/other_pythons.sh):"
        "${guard[@]}" bash "$ROOT/scripts/other_pythons.sh"
        others_status=$?
        say "exit status: $beside_status for ${BESIDE[*]}, $others_status for the other Pythons"
        [ "$beside_status" = 0 ] && [ "$others_status" = 0 ]
    ) >"$beside_log" 2>&1 &
    beside=$!
    ignore=()
    for path in "${OWN_SERVERS[@]}" "${BESIDE[@]}"; do
        ignore+=("--ignore=$path")
    done
    say "running: python -m pytest ${ignore[*]}"
    PYTHONFAULTHANDLER=1 "${guard[@]}" "$VENV/bin/python" -m pytest "${ignore[@]}"
    status=$?
    wait "$own"
    own_status=$?
    wait "$beside"
    beside_status=$?
    say "the tests on servers of their own (python -m pytest ${OWN_SERVERS[*]}):"
    cat "$own_log"
    say "the tests beside (python -m pytest ${BESIDE[*]}) and the other Pythons:"
    cat "$beside_log"
    say "exit status: $status, $own_status for the tests on servers of their own," \
        "$beside_status for the tests beside and the other Pythons"
    if [ "$status" = 0 ] || [ "$status" = 5 ]; then
        for other in "$own_status" "$beside_status"; do
            if [ "$other" != 0 ]; then
                status=$other
            fi
        done
    fi
else
    say "running: python -m pytest $*"
    PYTHONFAULTHANDLER=1 "${guard[@]}" "$VENV/bin/python" -m pytest "$@"
    status=$?
fi
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
