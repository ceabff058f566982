# Sourced by scripts/test.sh: a temporary directory of the run's own.
#
# run_tmp_begin makes it and points TMPDIR at it, so that what the tests
# put in the temporary directory goes there: pytest's basetemp
# (pytest-of-USER, the tests' tmp_path), the tests' mkdtemp() directories
# and child processes' (whose environment has TMPDIR). run_tmp_end,
# called on exit (an EXIT trap; INT and TERM exit through it), removes
# it, and first the private servers of test processes that died without
# removing them (relstorage.testing.processes.sweep_leftovers: only
# those whose owner process is gone), wherever they are.

RUN_TMP=""

run_tmp_begin() {
    RUN_TMP=$(mktemp -d "${TMPDIR:-/tmp}/relstorage-run-XXXXXX")
    # Others may pass through (a directory a test makes readable to a
    # server's account); what is inside keeps its own modes.
    chmod 755 "$RUN_TMP"
    export TMPDIR=$RUN_TMP
    trap run_tmp_end EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

run_tmp_end() {
    local python=${1:-${VENV:+$VENV/bin/python}}
    if [ -n "$python" ] && [ -x "$python" ]; then
        "$python" -c 'from relstorage.testing.processes import sweep_leftovers
sweep_leftovers()' >/dev/null 2>&1 || true
    fi
    if [ -n "$RUN_TMP" ]; then
        rm -rf "$RUN_TMP"
        RUN_TMP=""
    fi
}
