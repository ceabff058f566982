"""``zodbpack``: pack the storages of a config file, for cron.

    zodbpack [-v] [-d DAYS] [--database NAME] [--prepack]
             [--use-prepack-state] [--check-refs-only] config.conf

The file holds one or more storage sections (``<relstorage>`` with any
adapter, ``<filestorage>``, ...): at its top level, in ``<zodb>``
sections, or in the ``<zodb_db NAME>`` sections of a Zope zope.conf
(``--database NAME`` picks some; default all). Each is packed to DAYS
days ago, one after the other: the default, 1, keeps a day of history,
as RelStorage 4's zodbpack did, so that a carried-over cron line keeps
what it kept; ``-d 0``, or any negative number (RelStorage 4's ``-d
-1``), packs to now; a time before the last pack is nothing to pack,
not a failure. Nothing is printed on success (``-v`` prints a summary of
each pack); any failure is reported by name and the exit status is
non-zero.

The databases of a multi-database (two ``<zodb>`` or ``<zodb_db>``
sections or more) are packed together: none removes an object that
another database refers to (see relstorage.storage.pack.multidb). With
``--database NAME``, the others are read for their references to it,
not packed.

``--prepack`` only finds the garbage (the long, lock-free part) and keeps
the finding in the database; a later ``--use-prepack-state`` run removes
it, to the pack time the pre-pack used, without finding it again. Both
apply to RelStorage sections only. ``--check-refs-only`` packs nothing:
it reports references to objects that do not exist (in a multi-database,
also to those missing in the other databases the file configures), exit
status 3 when there is any.
"""
import io
import logging
import math
import sys
import time

import ZConfig
from ZODB.POSException import Unsupported
from ZODB.serialize import referencesf
from ZODB.utils import oid_repr
from ZODB.utils import p64

from .exceptions import PackedFurtherAlready
from .exceptions import UsageError
from .pickledrefs import cross_references
from .pickledrefs import refers_elsewhere
from .siteconfig import chosen
from .siteconfig import load_configured
from .siteconfig import peers
from .siteconfig import select
from .storage import RelStorage
from .storage.pack.multidb import pack_databases
from .tools import EXIT_FAILED
from .tools import EXIT_PROBLEMS
from .tools import EXIT_USAGE
from .tools import TerminalProgress
from .tools import run_sections
from .tools import setup_logging
from .tools import tool_parser
from .wording import counted

log = logging.getLogger('zodbpack')

#: Exit status of --check-refs-only when a reference dangles.
EXIT_DANGLING = EXIT_PROBLEMS


def check_refs(storage, out, others=None):
    """Report references to objects that do not exist; return how many.
    *others* (``{database name: storage section}``) are the other
    databases of the multi-database the storage belongs to: its
    references to their objects are looked up there."""
    dangling = elsewhere = 0
    checked = 0
    opened = {}
    next_oid = None
    try:
        while True:
            try:
                oid, tid, data, next_oid = storage.record_iternext(next_oid)
            except ValueError:
                break  # empty storage
            checked += 1
            for ref in referencesf(data):
                try:
                    storage.load(ref)
                except KeyError:
                    dangling += 1
                    print('  dangling: %s -> %s (missing)'
                          % (oid_repr(oid), oid_repr(ref)), file=out)
            for database, ref in (cross_references(data) if others and
                                  refers_elsewhere(data) else ()):
                if database not in others:
                    continue
                if database not in opened:
                    opened[database] = others[database].open()
                try:
                    opened[database].load(p64(ref))
                except KeyError:
                    elsewhere += 1
                    print('  dangling: %s -> %s of database %r (missing '
                          'there)' % (oid_repr(oid), oid_repr(p64(ref)),
                                      database), file=out)
            if next_oid is None:
                break
    finally:
        for other in opened.values():
            other.close()
    print('  %s checked, %s%s'
          % (counted(checked, 'object'),
             counted(dangling + elsewhere, 'dangling reference'),
             ' (%d to other databases)' % elsewhere if others else ''),
          file=out)
    return dangling + elsewhere


def describe(result):
    parts = []
    for key, noun in (('transactions_removed', 'transaction'),
                      ('revisions_removed', 'revision'),
                      ('objects_removed', 'object')):
        if key in result:
            parts.append(counted(result[key], noun))
    text = 'removed ' + ', '.join(parts) if parts else 'done'
    freed = result.get('bytes_removed')
    if freed is not None:
        text += ('; %.1f MB of state freed' % (freed / 1e6) if freed >= 1e5
                 else '; %s of state freed' % counted(freed, 'byte'))
    return text


def workers_text(count):
    if not count:
        return ''
    return ' with %s' % counted(count, 'worker process')


def heading(name, storage, out):
    print('%s (%s):' % (name, getattr(storage, 'describe',
                                      storage.getName)()), file=out)


def pack_one(name, section, days, check_only, out, prepack_only=False,
             use_prepack_state=False, workers=None, others=None):
    storage = section.open()
    try:
        heading(name, storage, out)
        if check_only:
            return EXIT_DANGLING if check_refs(storage, out, others) else 0
        t = time.time() - days * 86400
        started = time.monotonic()
        if isinstance(storage, RelStorage):
            try:
                result = storage.pack_with_result(
                    t, referencesf,
                    progress=(TerminalProgress(out, started) if out.isatty()
                              else None),
                    prepack_only=prepack_only or None,
                    use_prepack_state=use_prepack_state or None,
                    workers=workers)
            except PackedFurtherAlready as e:
                nothing_to_pack(e, out)
                return 0
        elif prepack_only or use_prepack_state:
            raise Unsupported(
                '--prepack and --use-prepack-state apply to RelStorage '
                'only, not %s' % type(storage).__name__)
        else:
            storage.pack(t, referencesf)
            result = {}
        report(result, t, started, out)
        return 0
    finally:
        storage.close()


def nothing_to_pack(error, out):
    # As RelStorage 4, which found nothing to pack there: a cron line
    # keeping a day, after a pack to now by hand.
    print('  nothing to pack: %s' % error, file=out)


def pack_together(entries, names, days, out, prepack_only=False,
                  use_prepack_state=False, workers=None):
    """Pack the databases *names* of the multi-database *entries*
    (``[Configured]``, each with its database_name) together:
    none removes an object another refers to (see
    relstorage.storage.pack.multidb). Returns the exit status."""
    storages = {}
    chosen = [entry.database_name for entry in entries
              if entry.name in names]
    titles = {entry.database_name: entry.name for entry in entries}
    try:
        for entry in entries:
            storages[entry.database_name] = entry.storage.open()
        t = time.time() - days * 86400
        started = time.monotonic()
        results = pack_databases(
            storages, t, referencesf, chosen,
            progress={name: TerminalProgress(out, started)
                      for name in chosen} if out.isatty() else None,
            prepack_only=prepack_only or None,
            use_prepack_state=use_prepack_state or None, workers=workers)
        for name in chosen:
            heading(titles[name], storages[name], out)
            result = results[name]
            if isinstance(result, PackedFurtherAlready):
                nothing_to_pack(result, out)
            else:
                report(result or {}, t, started, out)
    except Exception as e:  # noqa: BLE001 -- reported, then exit 1
        log.debug('failure details', exc_info=True)
        print('zodbpack: %s (packed together): %s: %s'
              % (', '.join(titles[name] for name in chosen),
                 type(e).__name__, e), file=sys.stderr)
        return EXIT_FAILED
    finally:
        for storage in storages.values():
            storage.close()
    return 0


def multi_database(path, names):
    """``(databases, picked)`` when the file at *path* configures a
    multi-database (two databases or more whose storages can be read
    here): the ``[Configured]`` of those, and of the storages *names*
    picks (select()); else None (a file that cannot be read, or a name
    it has not, included: run_sections says what is wrong)."""
    try:
        picked = select(path, names)
        entries = load_configured(path)
    except (ZConfig.ConfigurationError, UsageError, OSError):
        return None
    entries = [entry for entry in entries if entry.storage is not None
               and entry.database_name is not None]
    return (entries, picked) if len(entries) > 1 else None


def report(result, t, started, out):
    """Print what a pack to *t* begun at *started* (time.monotonic) did:
    its *result* (a PackResult, or {} for another storage's pack)."""
    when = time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(t))
    if 'garbage_found' in result:
        print('  pre-pack to %s: %s found and '
              'kept for --use-prepack-state, in %.1f s'
              % (when, counted(result['garbage_found'], 'unreachable object'),
                 time.monotonic() - started), file=out)
        return
    seconds = time.monotonic() - started
    kept = result.get('objects_kept_for_other_databases')
    waited = result.get('vote_wait_seconds')
    print('  packed to %s: %s in %.1f s%s%s%s'
          % (when, describe(result), seconds,
             ' (pre-pack %.1f s%s%s%s, then %s; %.0f s spent '
             'letting commits go first)'
             % (result.get('prepack_seconds', 0),
                workers_text(result.get('prepack_workers')),
                kept_text(result),
                ', its graph followed in the database'
                if result.get('prepack_graph') == 'database' else '',
                counted(result['batches'], 'batch'),
                result['busy_seconds'])
             if 'batches' in result else '',
             '; %s kept: other databases refer to '
             'them' % counted(kept, 'unreachable object') if kept else '',
             '; %.1f s spent waiting for commits voted in other databases '
             'to finish' % waited if waited else ''), file=out)


def kept_text(result):
    """What the pre-pack unpickled, and what it took from the references
    the last pack kept (see storage.pack.keptrefs)."""
    if 'prepack_unpickled' not in result:
        return ''
    return ', %s unpickled, %d taken as the last pack kept them' % (
        counted(result['prepack_unpickled'], 'state'),
        result['prepack_refs_kept'])


def main(argv=None, out=None):
    out = out or sys.stdout
    parser = tool_parser('zodbpack', __doc__, config_help=(
        'file of storage sections: bare, in <zodb> sections or a zope.conf'))
    parser.add_argument('-d', '--days', type=float, default=1.0,
                        help='days of history to keep: pack to this many '
                             'days ago (default 1, as in RelStorage 4; 0 '
                             'or negative, as RelStorage 4\'s -d -1: '
                             'pack to now)')
    parser.add_argument('--prepack', action='store_true',
                        help='only run the pre-pack analysis')
    parser.add_argument('--use-prepack-state', action='store_true',
                        help='reuse the state of the last --prepack run')
    parser.add_argument('--check-refs-only', action='store_true',
                        help='report references to missing objects '
                             '(in other databases of a multi-database '
                             'too); pack nothing')
    parser.add_argument('--workers', type=int, metavar='N',
                        help='worker processes the pre-pack reads '
                             'references in (default: the pack-workers '
                             'option of each storage, else the CPUs, at '
                             'most 4; 0: none)')
    parser.add_argument('-v', '--verbose', action='store_true',
                        help='print a summary of each pack (by default '
                             'only failures are printed, for cron)')
    args = parser.parse_args(argv)
    setup_logging(logging.INFO if args.verbose else logging.WARNING)
    if not math.isfinite(args.days):
        parser.error('--days must be a number of days')
    # RelStorage 4 read a negative number as "pack to now".
    days = max(args.days, 0.0)
    if args.workers is not None and not 0 <= args.workers <= 64:
        parser.error('--workers must be from 0 to 64')
    if args.prepack and args.use_prepack_state:
        parser.error('--prepack and --use-prepack-state exclude each other')
    if args.check_refs_only and (args.prepack or args.use_prepack_state):
        parser.error('--check-refs-only packs nothing: it excludes '
                     '--prepack and --use-prepack-state')
    if not (args.verbose or args.check_refs_only):
        out = io.StringIO()  # quiet on success: failures go to stderr
    found = (None if args.check_refs_only
             else multi_database(args.config, chosen(args)))
    if found is not None:
        entries, picked = found
        names = [entry.database_name for entry in entries]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            print('zodbpack: %s: more than one database named %s: give '
                  'each <zodb> section a name or a database-name, as a '
                  'multi-database needs' % (
                      args.config, ', '.join(map(repr, twice))),
                  file=sys.stderr)
            return EXIT_USAGE
        status = 0
        names = [entry.name for entry in picked
                 if entry.database_name is not None]
        if names:
            status = pack_together(entries, names, days, out, args.prepack,
                                   args.use_prepack_state, args.workers)
        # A storage at the top level, beside the databases: alone.
        names = [entry.name for entry in picked
                 if entry.database_name is None]
        if not names:
            return status
        return max(status, run_sections(
            'zodbpack', args.config, lambda name, section: pack_one(
                name, section, days, False, out, args.prepack,
                args.use_prepack_state, args.workers), names))
    multi = peers(args.config) if args.check_refs_only else {}
    return run_sections('zodbpack', args.config, lambda name, section:
                        pack_one(name, section, days,
                                 args.check_refs_only, out, args.prepack,
                                 args.use_prepack_state, args.workers,
                                 multi.get(name, (None, None))[1]),
                        chosen(args))


if __name__ == '__main__':
    sys.exit(main())
