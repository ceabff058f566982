#!/usr/bin/env bash
# Set up relstorage in .venv and run the demo on the embedded SQLite
# default: two processes open one database from a zope.conf file, commit,
# and print each other's commits.
#
# Usage: scripts/demo.sh [relstorage-demo arguments...]
set -euo pipefail
SCRIPT_NAME=demo.sh
EXTRAS=
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

exec "$VENV/bin/relstorage-demo" "$@"
