#!/usr/bin/env bash
# Prepare the PostgreSQL and MySQL/MariaDB servers used by the relstorage
# test suite.  Safe to run any number of times.
#
# Usage: scripts/testdb.sh [--postgresql] [--mysql]
#        scripts/testdb.sh --replicas
#        scripts/testdb.sh --galera
#
# --replicas starts, for trying replica-conf and ro-replica-conf by hand,
# a private PostgreSQL primary with a streaming hot standby and a private
# MariaDB primary with a GTID replica (temporary directories, free ports;
# the machine's servers are not touched), prints the server files and a
# <relstorage> section to use, and removes them all on ^C. It needs the
# venv scripts/test.sh makes.
#
# --print-mysql-sql prints the statements it would send to MySQL/MariaDB
# (as the administrator) and does nothing else.
#
# --galera likewise starts a private three-node MariaDB Galera cluster
# (loopback ports, a temporary directory) and prints a replica-conf file
# naming its nodes and a <relstorage> section.
#
# With no flag both databases are prepared.  For each one the script makes
# sure a server answers, then creates (when missing) the test account
# `relstoragetest` and the databases
#   relstoragetest_hp relstoragetest_hf relstoragetest_hp2
#   relstoragetest_hf2 relstoragetest_misc
# (and the same five with relstoragetest_py312_ and relstoragetest_py313_
# for scripts/other_pythons.sh, and relstoragetest_side_ for the tests
# scripts/test.sh runs beside the others) owned by / fully granted to that
# account, and the account `relstoragetest_ro`, which may only read relstoragetest_hp.
# On MySQL/MariaDB both accounts are loopback ones only (@localhost,
# @127.0.0.1, @::1); the same accounts @'%', which earlier versions made,
# are dropped.
#
# A server that answers is used as it is: this script never stops,
# restarts or reconfigures it (no ALTER SYSTEM, no SET GLOBAL, no
# pg_hba.conf edits); it only creates the accounts and databases above.
# A local server (127.0.0.1 or localhost on the standard port) that does
# not answer is started, and when run as root on Debian/Ubuntu installed
# from the distribution's packages first.  A server elsewhere is only
# checked.  Tests that restart a server or need more connections than a
# default server allows start private servers of their own
# (relstorage/testing/private_servers.py).
#
# Environment:
#   RELSTORAGE_TEST_PG_HOST, RELSTORAGE_TEST_PG_PORT        (127.0.0.1, 5432)
#   RELSTORAGE_TEST_PG_ADMIN_USER                           (postgres)
#   RELSTORAGE_TEST_MYSQL_HOST, RELSTORAGE_TEST_MYSQL_PORT  (127.0.0.1, 3306)
#   RELSTORAGE_TEST_MYSQL_ADMIN_USER                        (root)
#   RELSTORAGE_TEST_MYSQL_ADMIN_PASSWORD                    (empty)
#   RELSTORAGE_TEST_DB_WAIT   seconds to wait for a server to start (60)
#   CI=true                   an unreachable server is an error, not a warning
#
# Both accounts' password is `relstoragetest` (the read-only account's is
# its name), so they connect whether the server trusts loopback or asks
# for a password.

set -euo pipefail

TEST_USER=relstoragetest
RO_USER=relstoragetest_ro  # may only read; its password is its name
TEST_PASSWORD=relstoragetest
TEST_DATABASES=(relstoragetest_hp relstoragetest_hf relstoragetest_hp2
                relstoragetest_hf2 relstoragetest_misc)
# The runs on the other supported Pythons (scripts/other_pythons.sh) and
# the tests scripts/test.sh runs beside the main run (side) have databases
# of their own.
for tag in py312 py313 side; do
    for which in hp hf hp2 hf2 misc; do
        TEST_DATABASES+=("relstoragetest_${tag}_$which")
    done
done

PG_HOST=${RELSTORAGE_TEST_PG_HOST:-127.0.0.1}
PG_PORT=${RELSTORAGE_TEST_PG_PORT:-5432}
PG_ADMIN=${RELSTORAGE_TEST_PG_ADMIN_USER:-postgres}
MY_HOST=${RELSTORAGE_TEST_MYSQL_HOST:-127.0.0.1}
MY_PORT=${RELSTORAGE_TEST_MYSQL_PORT:-3306}
MY_ADMIN=${RELSTORAGE_TEST_MYSQL_ADMIN_USER:-root}
MY_ADMIN_PASSWORD=${RELSTORAGE_TEST_MYSQL_ADMIN_PASSWORD:-}
WAIT_SECONDS=${RELSTORAGE_TEST_DB_WAIT:-60}

FAILED=0
APT_UPDATED=0
LOG=$(mktemp "${TMPDIR:-/tmp}/relstorage-testdb.XXXXXX")
trap 'rm -f "$LOG"' EXIT

say()  { printf 'testdb: %s\n' "$*"; }
warn() { printf 'testdb: WARNING: %s\n' "$*" >&2; }
err()  { printf 'testdb: ERROR: %s\n' "$*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }
is_root() { [ "$(id -u)" -eq 0 ]; }
show_log() { [ -s "$LOG" ] && sed 's/^/testdb:   | /' "$LOG" | tail -n 20 >&2; return 0; }

usage() {
    sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0"
}

is_ci() {
    case "${CI:-}" in
        true|TRUE|True|1|yes) return 0 ;;
        *) return 1 ;;
    esac
}

# A server is "ours to manage" only on loopback and the standard port.
is_local() {  # host port standard_port
    case "$1" in
        127.0.0.1|localhost) [ "$2" = "$3" ] ;;
        *) return 1 ;;
    esac
}

# Report a database that cannot be used.  Whether this fails the run
# depends on CI and on whether the database was asked for explicitly.
problem() {  # explicit message
    if [ "$1" = 1 ] || is_ci; then
        err "$2"
        FAILED=1
    else
        warn "$2"
        warn "continuing; tests that need it will report the problem"
    fi
}

apt_install() {
    if ! is_root || ! have apt-get; then
        warn "cannot install $* (needs root and apt-get)"
        return 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    if [ "$APT_UPDATED" = 0 ]; then
        say "apt-get update"
        if ! apt-get update -qq >"$LOG" 2>&1; then
            show_log
            return 1
        fi
        APT_UPDATED=1
    fi
    say "apt-get install $*"
    if ! apt-get install -y -qq --no-install-recommends "$@" >"$LOG" 2>&1; then
        show_log
        return 1
    fi
}

wait_for() {  # seconds command...
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            return 1
        fi
        sleep 1
    done
}

# ---------------------------------------------------------------- PostgreSQL

pg_ready() {
    pg_isready -q -h "$PG_HOST" -p "$PG_PORT" -t 3 >/dev/null 2>&1
}

# "VERSION CLUSTER" of the local cluster configured for $PG_PORT.
pg_local_cluster() {
    local found=""
    if have pg_lsclusters; then
        found=$(pg_lsclusters -h 2>/dev/null |
                awk -v p="$PG_PORT" '$3 == p { print $1, $2; exit }')
    fi
    if [ -z "$found" ] && [ -d /etc/postgresql ]; then
        local ver
        ver=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
        [ -n "$ver" ] && [ -d "/etc/postgresql/$ver/main" ] && found="$ver main"
    fi
    [ -n "$found" ] && echo "$found"
}

pg_install() {
    apt_install postgresql postgresql-client libpq-dev || return 1
    local cluster ver
    cluster=$(pg_local_cluster || true)
    if [ -z "$cluster" ]; then
        ver=$(ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -n 1)
        if [ -z "$ver" ]; then
            warn "no PostgreSQL server found under /usr/lib/postgresql"
            return 1
        fi
        say "creating cluster $ver/main on port $PG_PORT"
        pg_createcluster "$ver" main -p "$PG_PORT" >"$LOG" 2>&1 || { show_log; return 1; }
        cluster="$ver main"
    fi
    # Its defaults serve the tests: it listens on localhost, and the test
    # accounts log in with their passwords over TCP.
}

pg_start_local() {
    if ! is_root; then
        warn "not root: cannot start or install PostgreSQL"
        return 1
    fi
    local cluster
    cluster=$(pg_local_cluster || true)
    if [ -z "$cluster" ]; then
        say "PostgreSQL is not installed; installing it"
        pg_install || return 1
        cluster=$(pg_local_cluster || true)
        [ -n "$cluster" ] || return 1
    fi
    local ver name
    read -r ver name <<<"$cluster"
    if id postgres >/dev/null 2>&1; then
        install -d -o postgres -g postgres -m 2775 /var/run/postgresql
    fi
    if pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" status >/dev/null 2>&1; then
        return 0  # running; maybe still starting up
    fi
    say "starting postgresql cluster $ver/$name"
    if ! pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" start >"$LOG" 2>&1; then
        show_log
        return 1
    fi
}

# How to run psql as a superuser: over TCP as $PG_ADMIN, or on a local
# server through the socket as the postgres system user (peer auth).
PG_ADMIN_MODE=""
pg_find_admin() {
    local modes="tcp" mode
    if is_local "$PG_HOST" "$PG_PORT" 5432; then
        if is_root && id postgres >/dev/null 2>&1; then
            if have runuser; then modes+=" runuser"; else modes+=" su"; fi
        elif [ "$(id -un)" = postgres ]; then
            modes+=" socket"
        fi
    fi
    for mode in $modes; do
        PG_ADMIN_MODE=$mode
        if [ "$(pg_admin -tAc 'select 1' 2>/dev/null)" = 1 ]; then
            return 0
        fi
    done
    PG_ADMIN_MODE=""
    return 1
}

pg_admin() {
    local opts=(-X -w -q -v ON_ERROR_STOP=1)
    case "$PG_ADMIN_MODE" in
        tcp)
            psql "${opts[@]}" -h "$PG_HOST" -p "$PG_PORT" -U "$PG_ADMIN" -d postgres "$@" ;;
        runuser)
            (cd / && runuser -u postgres -- psql "${opts[@]}" -p "$PG_PORT" -d postgres "$@") ;;
        su)
            (cd / && su -s /bin/sh postgres -c 'exec psql "$@"' sh \
                 "${opts[@]}" -p "$PG_PORT" -d postgres "$@") ;;
        socket)
            psql "${opts[@]}" -p "$PG_PORT" -d postgres "$@" ;;
        *)
            return 1 ;;
    esac
}

pg_test_connect() {
    PGPASSWORD=$TEST_PASSWORD psql -X -w -q "host=$PG_HOST port=$PG_PORT user=$TEST_USER dbname=${TEST_DATABASES[0]} connect_timeout=5" \
        -tAc 'select 1' 2>"$LOG" | grep -qx 1
}

pg_setup() {
    if ! pg_find_admin; then
        pg_test_connect && return 0  # already set up; nothing to do
        warn "cannot connect to postgresql on $PG_HOST:$PG_PORT as a superuser" \
             "(set RELSTORAGE_TEST_PG_ADMIN_USER); not creating $TEST_USER"
        return 0
    fi
    local exists db
    exists=$(pg_admin -tAc "select 1 from pg_roles where rolname = '$TEST_USER'") || return 1
    if [ "$exists" != 1 ]; then
        say "creating postgresql role $TEST_USER"
        pg_admin -c "CREATE ROLE $TEST_USER LOGIN PASSWORD '$TEST_PASSWORD'" || return 1
    else
        pg_admin -c "ALTER ROLE $TEST_USER LOGIN PASSWORD '$TEST_PASSWORD'" || return 1
    fi
    for db in "${TEST_DATABASES[@]}"; do
        exists=$(pg_admin -tAc "select 1 from pg_database where datname = '$db'") || return 1
        if [ "$exists" != 1 ]; then
            say "creating postgresql database $db"
            pg_admin -c "CREATE DATABASE $db OWNER $TEST_USER ENCODING 'UTF8' TEMPLATE template0" \
                || return 1
        else
            pg_admin -c "ALTER DATABASE $db OWNER TO $TEST_USER" || return 1
        fi
    done
    # A user that may only read ${TEST_DATABASES[0]}, for the read-only
    # user tests; tables the tests create later are readable too.
    exists=$(pg_admin -tAc "select 1 from pg_roles where rolname = '$RO_USER'") || return 1
    if [ "$exists" != 1 ]; then
        pg_admin -c "CREATE ROLE $RO_USER LOGIN PASSWORD '$RO_USER'" || return 1
    else
        pg_admin -c "ALTER ROLE $RO_USER LOGIN PASSWORD '$RO_USER'" || return 1
    fi
    pg_admin -d "${TEST_DATABASES[0]}" -c "
        GRANT CONNECT ON DATABASE ${TEST_DATABASES[0]} TO $RO_USER;
        GRANT USAGE ON SCHEMA public TO $RO_USER;
        GRANT SELECT ON ALL TABLES IN SCHEMA public TO $RO_USER;
        ALTER DEFAULT PRIVILEGES FOR ROLE $TEST_USER IN SCHEMA public
            GRANT SELECT ON TABLES TO $RO_USER;" >/dev/null || return 1
}

prepare_postgresql() {  # explicit
    local explicit=$1 where="$PG_HOST:$PG_PORT" local_server=0 started=$SECONDS
    is_local "$PG_HOST" "$PG_PORT" 5432 && local_server=1

    if ! have pg_isready || ! have psql; then
        if [ "$local_server" = 1 ] && [ ! -d /etc/postgresql ]; then
            pg_install || true
        else
            apt_install postgresql-client || true
        fi
        if ! have pg_isready || ! have psql; then
            problem "$explicit" "postgresql on $where: the client tools (psql, pg_isready) are not installed"
            return 0
        fi
    fi

    if ! pg_ready; then
        if [ "$local_server" = 1 ]; then
            if pg_start_local; then
                say "waiting up to ${WAIT_SECONDS}s for postgresql on $where"
                if wait_for "$WAIT_SECONDS" pg_ready; then
                    say "postgresql on $where answered after $((SECONDS - started))s"
                fi
            fi
        fi
    fi
    if ! pg_ready; then
        problem "$explicit" "postgresql on $where is not answering (pg_isready -h $PG_HOST -p $PG_PORT)"
        return 0
    fi

    if ! pg_setup; then
        problem "$explicit" "postgresql on $where: could not create the $TEST_USER role and databases"
        return 0
    fi
    if ! pg_test_connect; then
        show_log
        problem "$explicit" "postgresql on $where is up, but user $TEST_USER cannot connect to ${TEST_DATABASES[0]} (with the password $TEST_PASSWORD)"
        return 0
    fi
    say "postgresql on $where ready"
}

# ----------------------------------------------------------- MySQL/MariaDB

my_ping() {
    mysqladmin --protocol=tcp -h "$MY_HOST" -P "$MY_PORT" -u "$MY_ADMIN" \
        --connect-timeout=3 ping >/dev/null 2>&1
}

my_daemon() {
    local d
    for d in /usr/sbin/mariadbd /usr/sbin/mysqld; do
        if [ -x "$d" ]; then
            echo "$d"
            return 0
        fi
    done
    return 1
}

my_start_local() {
    if ! is_root; then
        warn "not root: cannot start or install MariaDB"
        return 1
    fi
    local daemon datadir
    if ! daemon=$(my_daemon); then
        say "MariaDB is not installed; installing it"
        apt_install mariadb-server mariadb-client libmariadb-dev pkg-config || return 1
        daemon=$(my_daemon) || return 1
        # The package may have started it already.
        if wait_for 5 my_ping; then
            return 0
        fi
    fi
    if id mysql >/dev/null 2>&1; then
        mkdir -p /run/mysqld
        chown mysql:mysql /run/mysqld
    fi
    datadir=$(my_print_defaults --mysqld 2>/dev/null | sed -n 's/^--datadir=//p' | tail -n 1)
    datadir=${datadir:-/var/lib/mysql}
    if [ ! -d "$datadir/mysql" ]; then
        say "initialising MariaDB data directory $datadir"
        if ! mariadb-install-db --user=mysql --datadir="$datadir" >"$LOG" 2>&1; then
            show_log
            return 1
        fi
    fi
    say "starting $daemon"
    if ! start-stop-daemon --start --oknodo --background --exec "$daemon" -- --user=mysql >"$LOG" 2>&1; then
        show_log
        return 1
    fi
}

# How to run SQL as an administrator: over TCP as $MY_ADMIN, or on a local
# server through the socket as root (unix_socket auth, Debian's default).
MY_ADMIN_MODE=""
my_find_admin() {
    local modes="tcp" mode
    if is_local "$MY_HOST" "$MY_PORT" 3306 && is_root; then
        modes+=" socket"
    fi
    for mode in $modes; do
        MY_ADMIN_MODE=$mode
        if [ "$(my_admin -e 'select 1' 2>/dev/null)" = 1 ]; then
            return 0
        fi
    done
    MY_ADMIN_MODE=""
    return 1
}

my_admin() {
    local cmd
    case "$MY_ADMIN_MODE" in
        tcp) cmd=(mysql --protocol=tcp -h "$MY_HOST" -P "$MY_PORT" -u "$MY_ADMIN") ;;
        socket) cmd=(mysql --protocol=socket -u root) ;;
        *) return 1 ;;
    esac
    if [ -n "$MY_ADMIN_PASSWORD" ] && [ "$MY_ADMIN_MODE" = tcp ]; then
        MYSQL_PWD=$MY_ADMIN_PASSWORD "${cmd[@]}" --connect-timeout=5 -N -B "$@"
    else
        "${cmd[@]}" --connect-timeout=5 -N -B "$@"
    fi
}

# The accounts are loopback ones only (a server that listens beyond
# loopback must not let the known test passwords in from elsewhere); the
# '%' accounts earlier versions of this script made are dropped.
MY_HOSTS=(localhost 127.0.0.1 ::1)

# The statements my_setup sends, one a line.
my_setup_sql() {
    local host db account user
    for user in "$TEST_USER" "$RO_USER"; do
        echo "DROP USER IF EXISTS '$user'@'%';"
    done
    for host in "${MY_HOSTS[@]}"; do
        account="'$TEST_USER'@'$host'"
        echo "CREATE USER IF NOT EXISTS $account IDENTIFIED BY '$TEST_PASSWORD';"
        echo "ALTER USER $account IDENTIFIED BY '$TEST_PASSWORD';"
    done
    for db in "${TEST_DATABASES[@]}"; do
        echo "CREATE DATABASE IF NOT EXISTS \`$db\` CHARACTER SET utf8mb4;"
        for host in "${MY_HOSTS[@]}"; do
            echo "GRANT ALL PRIVILEGES ON \`$db\`.* TO '$TEST_USER'@'$host';"
        done
    done
    for host in "${MY_HOSTS[@]}"; do
        account="'$RO_USER'@'$host'"
        echo "CREATE USER IF NOT EXISTS $account IDENTIFIED BY '$RO_USER';"
        echo "GRANT SELECT ON \`${TEST_DATABASES[0]}\`.* TO $account;"
    done
}

my_setup() {
    if ! my_find_admin; then
        my_test_connect && return 0  # already set up; nothing to do
        warn "cannot connect to mysql on $MY_HOST:$MY_PORT as '$MY_ADMIN'" \
             "(set RELSTORAGE_TEST_MYSQL_ADMIN_USER/_PASSWORD); not creating $TEST_USER"
        return 0
    fi
    if ! my_admin -e "$(my_setup_sql)" >"$LOG" 2>&1; then
        show_log
        return 1
    fi
    # PROCESS lets the tests look at lock waits; nice to have only.
    local host
    for host in "${MY_HOSTS[@]}"; do
        my_admin -e "GRANT PROCESS ON *.* TO '$TEST_USER'@'$host'" >/dev/null 2>&1 || true
    done
}

my_test_connect() {
    MYSQL_PWD=$TEST_PASSWORD mysql --protocol=tcp -h "$MY_HOST" -P "$MY_PORT" \
        -u "$TEST_USER" --connect-timeout=5 -N -B "${TEST_DATABASES[0]}" \
        -e 'select 1' 2>"$LOG" | grep -qx 1
}

prepare_mysql() {  # explicit
    local explicit=$1 where="$MY_HOST:$MY_PORT" local_server=0 started=$SECONDS
    is_local "$MY_HOST" "$MY_PORT" 3306 && local_server=1
    # The TLS tests make their certificates with openssl.
    have openssl || apt_install openssl || true

    if ! have mysqladmin || ! have mysql; then
        if [ "$local_server" = 1 ] && ! my_daemon >/dev/null; then
            apt_install mariadb-server mariadb-client libmariadb-dev pkg-config || true
        else
            apt_install mariadb-client || true
        fi
        if ! have mysqladmin || ! have mysql; then
            problem "$explicit" "mysql on $where: the client tools (mysql, mysqladmin) are not installed"
            return 0
        fi
    fi

    if ! my_ping; then
        if [ "$local_server" = 1 ]; then
            if my_start_local; then
                say "waiting up to ${WAIT_SECONDS}s for mysql on $where"
                if wait_for "$WAIT_SECONDS" my_ping; then
                    say "mysql on $where answered after $((SECONDS - started))s"
                fi
            fi
        fi
    fi
    if ! my_ping; then
        problem "$explicit" "mysql on $where is not answering (mysqladmin -h $MY_HOST -P $MY_PORT ping)"
        return 0
    fi

    if ! my_setup; then
        problem "$explicit" "mysql on $where: could not create the $TEST_USER user and databases"
        return 0
    fi
    if ! my_test_connect; then
        show_log
        problem "$explicit" "mysql on $where is up, but user $TEST_USER cannot connect to ${TEST_DATABASES[0]}"
        return 0
    fi
    say "mysql on $where ready"
}

# ---------------------------------------------------------------- main

# Start private servers by hand with the venv's python (--replicas, --galera).
run_servers() {  # module
    local root
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
    [ -x "$root/.venv/bin/python" ] ||
        { err "no venv: run scripts/test.sh once first"; exit 1; }
    cd "$root"
    exec "$root/.venv/bin/python" -m "$1"
}

want_pg=0
want_my=0
for arg in "$@"; do
    case "$arg" in
        --replicas) run_servers relstorage.testing.replica_pairs ;;
        --galera) run_servers relstorage.testing.galera_cluster ;;
        --postgresql|--postgres|--pg) want_pg=1 ;;
        --mysql|--mariadb) want_my=1 ;;
        --print-mysql-sql) my_setup_sql; exit 0 ;;
        -h|--help) usage; exit 0 ;;
        *) err "unknown argument: $arg"; usage >&2; exit 2 ;;
    esac
done
explicit=1
if [ "$want_pg" = 0 ] && [ "$want_my" = 0 ]; then
    want_pg=1
    want_my=1
    explicit=0
fi

# The server programs themselves, for the private servers some tests
# start (relstorage/testing/private_servers.py), wherever the shared
# servers are; and pgbouncer, which the tests start in front of a private
# PostgreSQL (the package's own service is left alone).
private_server_programs() {
    if [ "$want_pg" = 1 ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
        apt_install postgresql || problem "$explicit" \
            "the PostgreSQL server programs (initdb) are not installed; the tests that need a private server cannot run"
    fi
    if [ "$want_pg" = 1 ] && ! have pgbouncer && [ ! -x /usr/sbin/pgbouncer ]; then
        apt_install pgbouncer || problem "$explicit" \
            "pgbouncer is not installed; the tests through a connection pooler cannot run"
    fi
    # pg_auto_failover for the newest PostgreSQL installed (the private
    # formations of test_autofailover run on it).
    local newest
    newest=$(ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -n 1)
    if [ "$want_pg" = 1 ] && [ -n "$newest" ] && { ! have pg_autoctl ||
            [ ! -e "/usr/lib/postgresql/$newest/lib/pgautofailover.so" ]; }; then
        apt_install pg-auto-failover-cli "postgresql-$newest-auto-failover" ||
            problem "$explicit" \
                "pg_auto_failover is not installed; the failover manager tests cannot run"
    fi
    if [ "$want_my" = 1 ] && { ! my_daemon >/dev/null || ! have mariadb-install-db; }; then
        apt_install mariadb-server || problem "$explicit" \
            "the MariaDB server programs (mariadbd, mariadb-install-db) are not installed; the tests that need a private server cannot run"
    fi
    # The private Galera cluster (relstorage/testing/galera_cluster.py):
    # the wsrep provider, and rsync for the state transfers.
    if [ "$want_my" = 1 ] && { ! galera_provider || ! have rsync; }; then
        apt_install galera-4 rsync || problem "$explicit" \
            "the Galera provider (galera-4) or rsync is not installed; the tests on a private Galera cluster cannot run"
    fi
}

galera_provider() {
    local p
    for p in /usr/lib/galera/libgalera_smm.so /usr/lib/libgalera_smm.so; do
        [ -e "$p" ] && return 0
    done
    return 1
}

if [ "$want_pg" = 1 ]; then
    prepare_postgresql "$explicit"
fi
if [ "$want_my" = 1 ]; then
    prepare_mysql "$explicit"
fi

private_server_programs

if [ "$FAILED" != 0 ]; then
    err "database setup failed"
    exit 1
fi
