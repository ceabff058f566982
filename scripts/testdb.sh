#!/usr/bin/env bash
# Prepare the PostgreSQL and MySQL/MariaDB servers used by the relstorage
# test suite.  Safe to run any number of times.
#
# Usage: scripts/testdb.sh [--postgresql] [--mysql] [--stop]
#
# With no flag both databases are prepared. With --stop the selected local
# servers are stopped instead (the restart tests stop a server, then run
# this script again to start it).  For each one the script makes
# sure a server answers, then creates (when missing) the test account
# `relstoragetest` and the databases
#   relstoragetest_hp relstoragetest_hf relstoragetest_hp2
#   relstoragetest_hf2 relstoragetest_misc
# owned by / fully granted to that account, and the account
# `relstoragetest_ro`, which may only read relstoragetest_hp.
#
# A local server (127.0.0.1 or localhost on the standard port) is started,
# and when run as root on Debian/Ubuntu installed from the distribution's
# packages, if it is not answering.  A server elsewhere is only checked.
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
# The PostgreSQL account has no password (the server must trust loopback
# connections for it); the MySQL account's password is `relstoragetest`.

set -euo pipefail

TEST_USER=relstoragetest
RO_USER=relstoragetest_ro  # may only read; its MySQL password is its name
MYSQL_TEST_PASSWORD=relstoragetest
TEST_DATABASES=(relstoragetest_hp relstoragetest_hf relstoragetest_hp2
                relstoragetest_hf2 relstoragetest_misc)

PG_HOST=${RELSTORAGE_TEST_PG_HOST:-127.0.0.1}
PG_PORT=${RELSTORAGE_TEST_PG_PORT:-5432}
PG_ADMIN=${RELSTORAGE_TEST_PG_ADMIN_USER:-postgres}
MY_HOST=${RELSTORAGE_TEST_MYSQL_HOST:-127.0.0.1}
MY_PORT=${RELSTORAGE_TEST_MYSQL_PORT:-3306}
MY_ADMIN=${RELSTORAGE_TEST_MYSQL_ADMIN_USER:-root}
MY_ADMIN_PASSWORD=${RELSTORAGE_TEST_MYSQL_ADMIN_PASSWORD:-}
WAIT_SECONDS=${RELSTORAGE_TEST_DB_WAIT:-60}

HBA_MARK_BEGIN='# relstorage-testdb: begin'
HBA_MARK_END='# relstorage-testdb: end'

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

# Prepend trust rules to pg_hba.conf, once.  With "all" every local and
# loopback connection is trusted (a cluster this script created); with
# a role name only that role is.
pg_add_trust() {  # hba_file all|ROLE
    local hba=$1 who=$2 tmp
    if grep -qF "$HBA_MARK_BEGIN" "$hba"; then
        return 1
    fi
    tmp=$(mktemp "$hba.XXXXXX")
    {
        echo "$HBA_MARK_BEGIN"
        echo "local   all   $who                trust"
        echo "host    all   $who   127.0.0.1/32 trust"
        echo "host    all   $who   ::1/128      trust"
        echo "$HBA_MARK_END"
        cat "$hba"
    } >"$tmp"
    chown --reference="$hba" "$tmp"
    chmod --reference="$hba" "$tmp"
    mv "$tmp" "$hba"
    say "added trust rules for '$who' to $hba"
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
    local name
    read -r ver name <<<"$cluster"
    local conf=/etc/postgresql/$ver/$name
    mkdir -p "$conf/conf.d"
    printf "listen_addresses = '%s'\nport = %s\n" "$PG_HOST" "$PG_PORT" \
        >"$conf/conf.d/50-relstorage-testdb.conf"
    pg_add_trust "$conf/pg_hba.conf" all || true
    # The package may have started the cluster already: make it re-read
    # the configuration (listen_addresses needs a restart).
    if pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" status >/dev/null 2>&1; then
        pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" restart >"$LOG" 2>&1 || { show_log; return 1; }
    fi
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

# ZODB's race tests run 64 clients at once, each with a load and a store
# connection: the default of 100 server connections is not enough.
MIN_CONNECTIONS=300

pg_raise_max_connections() {
    [ -n "$PG_ADMIN_MODE" ] || return 0
    local max cluster ver name
    max=$(pg_admin -tAc 'show max_connections' 2>/dev/null) || return 1
    [ "${max:-0}" -lt "$MIN_CONNECTIONS" ] || return 0
    cluster=$(pg_local_cluster || true)
    if ! is_root || [ -z "$cluster" ]; then
        warn "postgresql allows only $max connections; the race tests need $MIN_CONNECTIONS"
        return 1
    fi
    read -r ver name <<<"$cluster"
    say "raising postgresql max_connections from $max to $MIN_CONNECTIONS (restart)"
    pg_admin -c "ALTER SYSTEM SET max_connections = $MIN_CONNECTIONS" >/dev/null || return 1
    if ! pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" restart >"$LOG" 2>&1; then
        show_log
        return 1
    fi
    wait_for "$WAIT_SECONDS" pg_ready
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
    psql -X -w -q "host=$PG_HOST port=$PG_PORT user=$TEST_USER dbname=${TEST_DATABASES[0]} connect_timeout=5" \
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
        pg_admin -c "CREATE ROLE $TEST_USER LOGIN" || return 1
    else
        pg_admin -c "ALTER ROLE $TEST_USER LOGIN" || return 1
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
        pg_admin -c "CREATE ROLE $RO_USER LOGIN" || return 1
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
    if [ "$local_server" = 1 ]; then
        pg_raise_max_connections || true
    fi

    if ! pg_test_connect; then
        # An existing server that does not trust loopback for our role:
        # add a narrow rule for it, when this is a local server we run.
        local hba=""
        if [ "$local_server" = 1 ] && is_root && [ -n "$PG_ADMIN_MODE" ]; then
            hba=$(pg_admin -tAc 'show hba_file' 2>/dev/null || true)
        fi
        if [ -n "$hba" ] && [ -f "$hba" ] && pg_add_trust "$hba" "$TEST_USER"; then
            pg_admin -tAc 'select pg_reload_conf()' >/dev/null
            sleep 1
        fi
    fi
    if ! pg_test_connect; then
        show_log
        problem "$explicit" "postgresql on $where is up, but user $TEST_USER cannot connect to ${TEST_DATABASES[0]} without a password"
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

my_setup() {
    if ! my_find_admin; then
        my_test_connect && return 0  # already set up; nothing to do
        warn "cannot connect to mysql on $MY_HOST:$MY_PORT as '$MY_ADMIN'" \
             "(set RELSTORAGE_TEST_MYSQL_ADMIN_USER/_PASSWORD); not creating $TEST_USER"
        return 0
    fi
    local sql="" host db account
    for host in localhost 127.0.0.1 %; do
        account="'$TEST_USER'@'$host'"
        sql+="CREATE USER IF NOT EXISTS $account IDENTIFIED BY '$MYSQL_TEST_PASSWORD';"
        sql+="ALTER USER $account IDENTIFIED BY '$MYSQL_TEST_PASSWORD';"
    done
    for db in "${TEST_DATABASES[@]}"; do
        sql+="CREATE DATABASE IF NOT EXISTS \`$db\` CHARACTER SET utf8mb4;"
        for host in localhost 127.0.0.1 %; do
            sql+="GRANT ALL PRIVILEGES ON \`$db\`.* TO '$TEST_USER'@'$host';"
        done
    done
    for host in localhost 127.0.0.1 %; do
        account="'$RO_USER'@'$host'"
        sql+="CREATE USER IF NOT EXISTS $account IDENTIFIED BY '$RO_USER';"
        sql+="GRANT SELECT ON \`${TEST_DATABASES[0]}\`.* TO $account;"
    done
    if ! my_admin -e "$sql" >"$LOG" 2>&1; then
        show_log
        return 1
    fi
    # PROCESS lets the tests look at lock waits; nice to have only.
    for host in localhost 127.0.0.1 %; do
        my_admin -e "GRANT PROCESS ON *.* TO '$TEST_USER'@'$host'" >/dev/null 2>&1 || true
    done
    # Room for the race tests' many concurrent clients (until the server
    # restarts; this runs before every test run).
    my_admin -e "SET GLOBAL max_connections = GREATEST(@@max_connections, $MIN_CONNECTIONS)" \
        >/dev/null 2>&1 || warn "could not raise mysql max_connections to $MIN_CONNECTIONS"
}

my_test_connect() {
    MYSQL_PWD=$MYSQL_TEST_PASSWORD mysql --protocol=tcp -h "$MY_HOST" -P "$MY_PORT" \
        -u "$TEST_USER" --connect-timeout=5 -N -B "${TEST_DATABASES[0]}" \
        -e 'select 1' 2>"$LOG" | grep -qx 1
}

prepare_mysql() {  # explicit
    local explicit=$1 where="$MY_HOST:$MY_PORT" local_server=0 started=$SECONDS
    is_local "$MY_HOST" "$MY_PORT" 3306 && local_server=1

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

# ---------------------------------------------------------------- stop

pg_stop_local() {
    if ! is_local "$PG_HOST" "$PG_PORT" 5432 || ! is_root; then
        warn "only a local PostgreSQL can be stopped, and only as root"
        return 1
    fi
    local cluster ver name
    cluster=$(pg_local_cluster || true)
    if [ -z "$cluster" ]; then
        warn "no local PostgreSQL cluster on port $PG_PORT"
        return 1
    fi
    read -r ver name <<<"$cluster"
    say "stopping postgresql cluster $ver/$name"
    pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" stop -m fast \
        >"$LOG" 2>&1 || { show_log; return 1; }
}

my_stop_local() {
    if ! is_local "$MY_HOST" "$MY_PORT" 3306 || ! is_root; then
        warn "only a local MySQL can be stopped, and only as root"
        return 1
    fi
    local daemon
    daemon=$(my_daemon) || { warn "no mysql server installed"; return 1; }
    say "stopping $daemon"
    # Waits until the process has exited, so that starting it again
    # cannot mistake the one shutting down for a running server.
    start-stop-daemon --stop --oknodo --exec "$daemon" \
        --retry "TERM/$WAIT_SECONDS/KILL/5" >"$LOG" 2>&1 || { show_log; return 1; }
}

# ---------------------------------------------------------------- main

want_pg=0
want_my=0
stop=0
for arg in "$@"; do
    case "$arg" in
        --postgresql|--postgres|--pg) want_pg=1 ;;
        --mysql|--mariadb) want_my=1 ;;
        --stop) stop=1 ;;
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

if [ "$stop" = 1 ]; then
    status=0
    if [ "$want_pg" = 1 ]; then pg_stop_local || status=1; fi
    if [ "$want_my" = 1 ]; then my_stop_local || status=1; fi
    exit "$status"
fi

if [ "$want_pg" = 1 ]; then
    prepare_postgresql "$explicit"
fi
if [ "$want_my" = 1 ]; then
    prepare_mysql "$explicit"
fi

if [ "$FAILED" != 0 ]; then
    err "database setup failed"
    exit 1
fi
