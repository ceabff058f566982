"""What a PostgreSQL error means to the storage, told by its SQLSTATE,
and what a role lacks when the server refuses it a privilege.

Since PostgreSQL 15 the schema ``public`` of a new database grants
CREATE to the database's owner alone (``pg_database_owner``), no longer
to every role: a role that does not own its database may connect and
read but not create the storage's tables. The error then names the
privilege, the schema and the database, and the statements that give
it, rather than the server's bare "permission denied for schema".
"""
from ..session import Session
from ..sql import SQL
from ..sql import Identifier

#: SQLSTATE insufficient_privilege.
INSUFFICIENT_PRIVILEGE = '42501'
#: SQLSTATE disk_full: a table, an index or a temporary file could not
#: grow.
DISK_FULL = '53100'

#: The role, its database and that database's owner, the schema new
#: tables go into (the first of search_path that exists; NULL: none)
#: and whether the role may create in it.
WHO_MAY_CREATE = (
    'SELECT current_user, current_database(), pg_get_userbyid(datdba), '
    "current_schema(), has_schema_privilege(current_schema(), 'CREATE') "
    'FROM pg_database WHERE datname = current_database()')

PUBLIC_SINCE_15 = (' (since PostgreSQL 15 schema public lets only the '
                   "database's owner create in it)")

#: The privilege named in the message (a word of the message, not SQL).
MISSING = 'CREATE'
OWN_DATABASE = SQL('ALTER DATABASE {database} OWNER TO {role}')
GRANT_CREATE = SQL('GRANT CREATE ON SCHEMA {schema} TO {role}')


def sqlstate(error):
    """The SQLSTATE of a driver *error* (psycopg2's ``pgcode``, psycopg
    3's ``sqlstate``); None for an error the server did not send."""
    return getattr(error, 'pgcode', None) or getattr(error, 'sqlstate', None)


def is_permission_error(session, error):
    """Whether the driver *error* is PostgreSQL's insufficient_privilege."""
    return sqlstate(error) == INSUFFICIENT_PRIVILEGE


def is_full_error(session, error):
    """Whether the driver *error* is PostgreSQL's disk_full."""
    return sqlstate(error) == DISK_FULL


def missing_create_privilege(session, error):
    """The privilege the role lacks to create the schema, named with the
    statements that give it (see Session.missing_create_privilege)."""
    row = session.fetchone(WHO_MAY_CREATE)
    if row is None:
        return Session.missing_create_privilege(session, error)
    role, database, owner, schema, may_create = row
    if schema is None:
        return ('the search_path of role %s names no schema that exists in '
                'database %s, so there is nowhere to create tables: create '
                'one the role owns, or set its search_path'
                % (role, database))
    if may_create:
        return Session.missing_create_privilege(session, error)
    return (
        'role %s lacks the %s privilege on schema %s of database %s, '
        'owned by %s%s. Make the role own the database (%s, run by a '
        'superuser), or grant it: %s. read-only true would not help: the '
        'storage needs its tables first.'
        % (role, MISSING, schema, database, owner,
           PUBLIC_SINCE_15 if schema == 'public' else '',
           OWN_DATABASE.format(database=Identifier(database),
                               role=Identifier(role)),
           GRANT_CREATE.format(schema=Identifier(schema),
                               role=Identifier(role))))
