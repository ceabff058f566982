"""``zodbcheck``: check a relstorage database for damage before a user
meets it.

    zodbcheck [--unreachable] [--limit N] [--json] [--database NAME]
              config.conf

For each ``<relstorage>`` section of the file (bare, in ``<zodb>``
sections or in a zope.conf's ``<zodb_db NAME>`` sections; ``--database``
picks some), walks everything reachable
from the root through one snapshot (read-only: writers go on) and
reports references to objects that do not exist (naming the referring
object and its class), states that do not unpickle, current revisions
whose transaction id is newer than the last transaction, and blobs whose
data is missing (chunks in the database, including gaps, or files in a
shared blob directory); for a database of a multi-database, references
to objects missing in the other databases the file configures;
``--unreachable`` also lists the objects nothing
reaches, which a pack with pack-gc would remove. Memory stays bounded
(about 21 bytes per object plus 8 per reference). On a terminal a
progress line is shown; a summary ends each section; ``--json`` prints
the findings as JSON; ``--limit`` bounds how many findings of each kind
are listed (1000; the counts are complete). The exit status is 0 only when nothing is broken
(3 when something is; 1 when a check could not run; 2 for bad usage).
"""
import sys
import time

from .config import RelStorageFactory
from .siteconfig import peers
from .storage.check import LISTED
from .storage.check import Check
from .zodbinfo import open_adapter
from .zodbinfo import each_section
from .zodbinfo import tid_time
from .tools import EXIT_FAILED
from .tools import EXIT_PROBLEMS
from .tools import EXIT_USAGE
from .tools import TerminalProgress
from .tools import setup_logging
from .tools import tool_parser
from .wording import counted

#: Exit status when the database has problems.
EXIT_BROKEN = EXIT_PROBLEMS


def check(section, unreachable=False, progress=None, listed=LISTED,
          name=None, others=None):
    """The CheckResult of one ``<relstorage>`` section, with the name of
    its database under ``database``. When it is the database *name* of a
    multi-database, *others* is ``{database name: <relstorage> section}``
    of the others: its references to their objects are looked up
    there."""
    adapter, options = open_adapter(section)
    try:
        checker = Check(adapter, options.blob_dir, options.shared_blob_dir,
                        unreachable, progress, listed)
        result = checker.run()
        result['database'] = adapter.describe()
    finally:
        adapter.close()
    checker.check_elsewhere(name, {
        other: (lambda section=section: open_adapter(section)[0])
        for other, section in (others or {}).items()})
    return result


def _plural(n, word):
    return counted(n, word, grouped=True)


def _what(entry):
    return '%s (%s)' % (entry['oid'], entry['class'] or 'class unknown')


def render(name, r, out):
    print('%s: %s' % (name, r['database']), file=out)
    print('  checked %s (%s reachable from the root), %s and %s, as of '
          '%s, in %.1f s' % (
              _plural(r['objects'], 'object'), '{:,}'.format(r['reachable']),
              _plural(r['references'], 'reference'),
              _plural(r['blobs'], 'blob'),
              tid_time(r['tid']) or 'an empty database', r['seconds']),
          file=out)
    for entry in r['dangling']:
        if entry['oid'] is None:
            print('  missing: the root object (0x00) does not exist',
                  file=out)
        else:
            print('  dangling reference: %s refers to %s, which does not '
                  'exist' % (_what(entry), entry['missing']), file=out)
    for entry in r['dangling_elsewhere']:
        print('  dangling reference to another database: %s refers to %s '
              'of database %r, which does not exist there' % (
                  _what(entry), entry['missing'], entry['database']),
              file=out)
    if r.get('elsewhere_unchecked'):
        print('  %s to databases this file does not configure as '
              '<relstorage> sections not checked' % _plural(
                  r['elsewhere_unchecked'], 'reference'), file=out)
    for entry in r['damaged']:
        print('  damaged state: %s, transaction %s%s: %s' % (
            _what(entry), entry['tid'],
            '' if entry['reachable'] else ' (unreachable)', entry['error']),
            file=out)
    for entry in r['missing_blobs']:
        print('  missing blob: %s, transaction %s%s: %s' % (
            _what(entry), entry['tid'],
            '' if entry['reachable'] else ' (unreachable)', entry['why']),
            file=out)
    for entry in r['future']:
        print('  revision newer than the last transaction: %s, transaction '
              '%s%s, while the last transaction is %s' % (
                  _what(entry), entry['tid'],
                  '' if entry['reachable'] else ' (unreachable)',
                  entry['last']), file=out)
    for entry in r.get('unreachable', ()):
        print('  unreachable: %s' % _what(entry), file=out)
    counts = [('dangling', 'reference to a missing object',
               'references to missing objects'),
              ('dangling_elsewhere',
               'reference to a missing object of another database',
               'references to missing objects of other databases'),
              ('damaged', 'damaged state', 'damaged states'),
              ('missing_blobs', 'missing blob', 'missing blobs'),
              ('future', 'revision newer than the last transaction',
               'revisions newer than the last transaction')]
    problems = ['{:,} {}'.format(r[kind + '_count'],
                                 one if r[kind + '_count'] == 1 else many)
                for kind, one, many in counts if r[kind + '_count']]
    listed = sum(len(r[kind]) for kind, _, _ in counts)
    if listed < sum(r[kind + '_count'] for kind, _, _ in counts):
        problems.append('(only the first of each kind are listed: '
                        '--limit)')
    if 'unreachable' in r:
        line = '  %s unreachable (a pack with pack-gc would remove them)' \
            % _plural(r['unreachable_count'], 'object')
        if len(r['unreachable']) < r['unreachable_count']:
            line += ', the first %d listed (--limit)' % len(r['unreachable'])
        if r['damaged_count']:
            line += '; objects only damaged states refer to count as ' \
                    'unreachable'
        print(line, file=out)
    if problems:
        print('  BROKEN: %s' % ', '.join(problems), file=out)
    else:
        print('  no problems found', file=out)


def main(argv=None, out=None, err=None):
    out = out or sys.stdout
    err = err or sys.stderr
    parser = tool_parser('zodbcheck', __doc__, 'print the findings as JSON')
    parser.add_argument('--unreachable', action='store_true',
                        help='also list the objects nothing reaches from '
                             'the root (garbage a pack would remove)')
    parser.add_argument('--limit', type=int, default=LISTED, metavar='N',
                        help='list at most N findings of each kind '
                             '(default %(default)s; 0: all); the counts '
                             'are always complete')
    args = parser.parse_args(argv)
    if args.limit < 0:
        parser.error('--limit must not be negative')
    setup_logging()

    multi = peers(args.config, RelStorageFactory)

    def check_one(name, section):
        progress = (TerminalProgress(err, time.monotonic())
                    if err.isatty() else None)
        database, others = multi.get(name, (None, None))
        result = check(section, args.unreachable, progress,
                       args.limit or None, database, others)
        result['broken'] = result.broken
        return result

    results, failed = each_section('zodbcheck', args, check_one,
                                   render, out, err)
    if results is None:
        return EXIT_USAGE
    if any(result['broken'] for result in results):
        return EXIT_BROKEN
    return EXIT_FAILED if failed else 0


if __name__ == '__main__':
    sys.exit(main())
