"""``zodbinfo``: what a relstorage database holds, and how much of it.

    zodbinfo [--exact] [--classes [--top N]] [--json] [--database NAME]
             config.conf

For each ``<relstorage>`` section of the file (bare, in ``<zodb>``
sections or in a zope.conf's ``<zodb_db NAME>`` sections; ``--database``
picks some): the database and its
server version, the history mode and schema version, objects, revisions
and transactions with the time they span, current and historical state
bytes, blobs (in the database or the shared blob directory) and the last
pack. Figures an exact count would have to read a whole table for come
from the server's statistics (PostgreSQL, MySQL), state bytes from a
bounded sample of the rows, and are marked as estimates (``~``);
``--exact`` counts them. ``--classes`` reads the class
of every current object from its record (no application code needed)
and lists the largest classes by bytes (``--top``, 20), with their object counts.
``--json`` prints the same as JSON. The database is only read, in one
snapshot; nothing is locked or created.
"""
import json
import logging
import sys
import time

import ZConfig
from ZODB.TimeStamp import TimeStamp
from ZODB.utils import p64

from .blobs.cachesize import cache_files
from .config import RelStorageFactory
from .config import options_from_section
from .exceptions import HistoryModeMismatch
from .exceptions import UsageError
from .siteconfig import chosen
from .siteconfig import select
from .pickledclasses import class_statistics
from .wording import counted
from .tools import EXIT_FAILED
from .tools import EXIT_USAGE
from .tools import setup_logging
from .tools import tool_parser

log = logging.getLogger('zodbinfo')



def open_adapter(section):
    """The adapter of a ``<relstorage>`` section, read-only (nothing is
    created), in the history mode the database was made in, whatever the
    section says; and the options it was built with."""
    factory = section.adapter_factory()
    options = options_from_section(section).copy(read_only=True)
    for attempt in range(2):
        adapter = factory.create(options)
        try:
            adapter.prepare()
            return adapter, options
        except HistoryModeMismatch:
            adapter.close()
            if attempt:
                raise
            options = options.copy(keep_history=not options.keep_history)
        except BaseException:
            adapter.close()
            raise


def relstorage_sections(path, names=None):
    """``[(name, section)]``: the ``<relstorage>`` sections of the file
    (of the databases *names*, default all; other storage sections are
    named and left out)."""
    found = []
    for name, section, _, _ in select(path, names):
        if isinstance(section, RelStorageFactory):
            found.append((name, section))
        else:
            log.warning('%s is not a <relstorage> section; skipped', name)
    return found


def each_section(prog, args, gather_one, render, out, err):
    """Report on every ``<relstorage>`` section of the file ``args.config``
    (of the databases ``--database`` names):
    ``gather_one(name, section)`` makes a report (a dict), printed by
    ``render(name, report, out)`` or, with ``--json``, all together as
    JSON. A section that fails is named on *err* and skipped. Returns
    ``(reports, whether any failed)``; reports is None when the file
    cannot be read."""
    path, as_json = args.config, args.json
    try:
        sections = relstorage_sections(path, chosen(args))
    except (ZConfig.ConfigurationError, UsageError, OSError) as e:
        print('%s: %s' % (prog, e), file=err)
        return None, True
    if not sections:
        print('%s: %s holds no <relstorage> section' % (prog, path),
              file=err)
        return None, True
    failed = False
    reports = []
    for name, section in sections:
        try:
            report = gather_one(name, section)
        except Exception as e:  # noqa: BLE001 -- reported, then exit 1
            log.debug('failure details', exc_info=True)
            print('%s: %s: %s: %s' % (prog, name, type(e).__name__, e),
                  file=err)
            failed = True
            continue
        report['name'] = name
        reports.append(report)
        if not as_json:
            render(name, report, out)
    if as_json:
        json.dump({'storages': reports}, out, indent=2, sort_keys=True)
        out.write('\n')
    return reports, failed


def tid_time(tid):
    """The UTC time of a tid, as text; None for None."""
    if not tid:
        return None
    return time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(
        TimeStamp(p64(tid)).timeTime()))


def unix_time(seconds):
    return time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(seconds))


def gather(section, exact=False, classes=None):
    """The report of one ``<relstorage>`` section, as a dict. *classes*:
    how many of the largest classes to list (None: do not read them)."""
    adapter, options = open_adapter(section)
    try:
        session = adapter.open_load_session()
        try:
            session.restart()
            report = session.figures(exact)
            if classes is not None:
                found = class_statistics(session)
                report['classes'] = [
                    {'class': name, 'objects': count, 'bytes': size}
                    for name, (count, size) in sorted(
                        found.items(), key=lambda item: (-item[1][1],
                                                         item[0]))[:classes]]
                report['class_count'] = len(found)
        finally:
            session.close()
        report['database'] = adapter.describe()
    finally:
        adapter.close()
    if options.blob_dir and options.shared_blob_dir:
        report['blob_dir'] = options.blob_dir
        files = cache_files(options.blob_dir)
        report['blobs'] = len(files)
        report['blob_bytes'] = sum(size for _, size, _ in files)
        if 'blob_bytes' in report['estimated']:
            report['estimated'].remove('blob_bytes')
    report['first_time'] = tid_time(report['first_tid'])
    report['last_time'] = tid_time(report['last_tid'])
    report['last_pack_to'] = tid_time(report['last_pack_tid'])
    if report['last_pack_time'] is not None:
        report['last_pack_time'] = unix_time(report['last_pack_time'])
    return report


def size(n):
    if n is None:
        return '?'
    for unit, scale in (('GB', 1e9), ('MB', 1e6), ('kB', 1e3)):
        if n >= scale:
            return '%.1f %s' % (n / scale, unit)
    return counted(n, 'byte')


def count(n):
    return '?' if n is None else '{:,}'.format(n)


def render(name, r, out):
    """The text report of one section."""
    est = set(r['estimated'])

    def mark(key, text):
        return '~' + text if key in est else text

    def line(label, text):
        print('  %-15s %s' % (label, text), file=out)

    print('%s: %s' % (name, r['database']), file=out)
    line('server', r['server'])
    line('history', '%s (keep-history %s), schema version %s' % (
        'preserving' if r['keep_history'] else 'free',
        'true' if r['keep_history'] else 'false', r['schema_version']))
    line('objects', mark('objects', count(r['objects'])))
    if 'revisions' in r:
        line('revisions', mark('revisions', count(r['revisions'])))
    if r['transactions'] is None:
        text = 'not counted (history-free: --exact counts the tids ' \
               'objects carry)'
    else:
        text = mark('transactions', count(r['transactions']))
    if r['first_time']:
        text += ', %s to %s' % (r['first_time'], r['last_time'])
    line('transactions', text)
    line('object state', '%s current, %s historical' % (
        mark('current_bytes', size(r['current_bytes'])),
        mark('historical_bytes', size(r['historical_bytes']))))
    if 'blob_dir' in r:
        text = '%s files, %s in the shared blob-dir %s' % (
            count(r['blobs']), size(r['blob_bytes']), r['blob_dir'])
    elif r['blobs'] is None:
        text = '%s in %s chunks in the database (--exact counts blobs)' % (
            mark('blob_bytes', size(r['blob_bytes'])),
            mark('blob_chunks', count(r['blob_chunks'])))
    else:
        text = '%s in the database, %s in %s chunks' % (
            count(r['blobs']), size(r['blob_bytes']),
            count(r['blob_chunks']))
    line('blobs', text)
    line('database size', size(r['database_bytes']))
    if r['last_pack_time']:
        text = '%s, to %s' % (r['last_pack_time'], r['last_pack_to'])
    else:
        text = 'none recorded'
    if r['prepack_tid']:
        text += '; a pre-pack to %s awaits --use-prepack-state' % (
            tid_time(r['prepack_tid']))
    line('last pack', text)
    if 'classes' in r:
        print('  largest classes (of %d), by bytes:' % r['class_count'],
              file=out)
        for entry in r['classes']:
            print('    %12s  %10s objects  %s' % (
                size(entry['bytes']), count(entry['objects']),
                entry['class']), file=out)
    if est:
        print('  (~: an estimate, from the server\'s statistics or a '
              'sample; --exact counts)', file=out)


def main(argv=None, out=None):
    out = out or sys.stdout
    parser = tool_parser('zodbinfo', __doc__, 'print the report as JSON')
    parser.add_argument('--exact', action='store_true',
                        help='count rows and bytes instead of using the '
                             'server\'s estimates (reads whole tables)')
    parser.add_argument('--classes', action='store_true',
                        help='list the largest classes; reads the header '
                             'of every current object')
    parser.add_argument('--top', type=int, default=20, metavar='N',
                        help='with --classes: how many (default 20)')
    args = parser.parse_args(argv)
    setup_logging()
    if args.top < 1:
        parser.error('--top takes a positive number')
    reports, failed = each_section(
        'zodbinfo', args,
        lambda name, section: gather(section, args.exact,
                               args.top if args.classes else None),
        render, out, sys.stderr)
    if reports is None:
        return EXIT_USAGE
    return EXIT_FAILED if failed else 0

if __name__ == '__main__':
    sys.exit(main())
