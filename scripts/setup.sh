# Sourced by scripts/test.sh and scripts/demo.sh (not run on its own).
#
# Creates .venv in the repository root (Python 3.11 or newer) and installs
# relstorage into it, editable, with the extras listed in EXTRAS (comma
# separated, may be empty); pip runs again only when pyproject.toml or the
# extras change. On a fresh Debian/Ubuntu machine (as root) it installs what is
# missing: the Python venv module and, for the database driver extras, the
# headers and tools psycopg2 and mysqlclient are built with.
#
# Set PYTHON to choose the interpreter used to create the venv.
# The sourcing script sets SCRIPT_NAME, EXTRAS and `set -euo pipefail`.

say() { printf '%s: %s\n' "$SCRIPT_NAME" "$*"; }
die() { printf '%s: ERROR: %s\n' "$SCRIPT_NAME" "$*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }
is_root() { [ "$(id -u)" -eq 0 ]; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"

# RELSTORAGE_VENV: another virtualenv (scripts/other_pythons.sh makes one
# per supported Python).
VENV=${RELSTORAGE_VENV:-$ROOT/.venv}
# One stamp per set of extras, holding the hash of the packaging files.
STAMP=$VENV/.relstorage-installed${EXTRAS:+-${EXTRAS//,/-}}

APT_UPDATED=0
apt_install() {
    if ! is_root || ! have apt-get; then
        return 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    if [ "$APT_UPDATED" = 0 ]; then
        say "apt-get update"
        apt-get update -qq || return 1
        APT_UPDATED=1
    fi
    say "apt-get install $*"
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

python_ok() {  # interpreter
    "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1
}

find_python() {
    local candidate
    for candidate in ${PYTHON:-} python3 python3.13 python3.12 python3.11; do
        if have "$candidate" && python_ok "$candidate"; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

# ------------------------------------------------------------ the venv

if [ -x "$VENV/bin/python" ] && ! python_ok "$VENV/bin/python"; then
    say "$VENV is broken or older than Python 3.11; recreating it"
    rm -rf "$VENV"
fi

if [ ! -x "$VENV/bin/python" ]; then
    PY=$(find_python) || die "Python 3.11 or newer is required; none found" \
        "(looked for ${PYTHON:+$PYTHON, }python3, python3.13, python3.12, python3.11)." \
        "Install one, or set PYTHON=/path/to/python3.11."
    say "creating $VENV with $PY ($("$PY" -c 'import platform; print(platform.python_version())'))"
    if ! "$PY" -m venv "$VENV" 2>/dev/null; then
        rm -rf "$VENV"
        pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
        apt_install "python$pyver-venv" || apt_install python3-venv ||
            die "'$PY -m venv' failed: install the venv module (Debian: apt-get install python3-venv)"
        "$PY" -m venv "$VENV" || die "'$PY -m venv $VENV' failed"
    fi
    "$VENV/bin/python" -m pip install -q --upgrade pip ||
        say "warning: could not upgrade pip in $VENV; continuing with $("$VENV/bin/python" -m pip --version)"
fi

# ---------------------------------------- build prerequisites for drivers

missing=()
case ",$EXTRAS," in
    *,postgresql,*) have pg_config || missing+=(libpq-dev) ;;
esac
case ",$EXTRAS," in
    *,mysql,*) have mysql_config || have mariadb_config || missing+=(libmariadb-dev) ;;
esac
if [ -n "$EXTRAS" ]; then
    have pkg-config || missing+=(pkg-config)
    have gcc || missing+=(gcc)
fi
if [ -n "$EXTRAS" ] && ! "$VENV/bin/python" -c '
import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'
then
    missing+=(python3-dev)
fi
if [ "${#missing[@]}" -gt 0 ]; then
    if is_root && have apt-get; then
        apt_install "${missing[@]}" || die "could not install ${missing[*]}"
    else
        say "warning: ${missing[*]} may be needed to build psycopg2/mysqlclient" \
            "(not root, not installing)"
    fi
fi

# ----------------------------------------------------- install the package

project_hash() {
    local f
    for f in setup.py setup.cfg pyproject.toml; do
        if [ -f "$f" ]; then
            echo "$f"
            cat "$f"
        fi
    done | sha256sum | cut -d' ' -f1
}

want=$(project_hash)
have_hash=$(cat "$STAMP" 2>/dev/null || true)
if [ "$want" != "$have_hash" ]; then
    say "installing relstorage${EXTRAS:+[$EXTRAS]} into $VENV"
    rm -f "$STAMP"
    "$VENV/bin/python" -m pip install -q -e ".${EXTRAS:+[$EXTRAS]}"
    echo "$want" >"$STAMP"
fi
