#!/usr/bin/env bash
# The long chaos run (opt-in; minutes, bounded): 8 writer and 2 reader
# processes run the bank-transfer workload on each database and history
# mode while writers are SIGKILLed, backends killed, the database server
# restarted (a private one this run starts in a temporary directory,
# never the machine's own) and packs run; a JSON summary per database
# and mode, exit status 1 if an invariant broke.
#
# Usage: scripts/chaos.sh [--seconds N] [--db sqlite|postgresql|mysql]...
#                         [--mode HP|HF]... [--writers N] [--readers N]
#                         [--seed N]
# (default: 60 seconds for each of sqlite, postgresql and mysql, HP and
# HF). CHAOS_KEEP=1 keeps the workers' logs.

set -euo pipefail
SCRIPT_NAME=chaos.sh
EXTRAS=test,postgresql,mysql
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

cd "${TMPDIR:-/tmp}"
exec timeout --signal=INT 7200 "$VENV/bin/python" -m relstorage.tests.chaos "$@"
