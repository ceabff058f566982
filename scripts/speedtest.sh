#!/usr/bin/env bash
# Set up relstorage (with the speed test's extras) in .venv and run the
# speed test; with no config file, on the embedded SQLite default.
#
# Usage: scripts/speedtest.sh [--quick] [config.conf] [arguments...]
# (the arguments of relstorage-speedtest)
set -euo pipefail
SCRIPT_NAME=speedtest.sh
EXTRAS=speedtest
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

exec "$VENV/bin/relstorage-speedtest" "$@"
