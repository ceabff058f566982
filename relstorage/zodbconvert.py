"""``zodbconvert``: copy a ZODB storage (FileStorage with blobs, or any
relstorage database) into another, transaction by transaction.

    zodbconvert [--dry-run] [--clear] [--incremental] convert.conf

``convert.conf`` holds two storage sections named ``source`` and
``destination``, for example::

    %import relstorage
    <filestorage source>
      path /var/app/Data.fs
      blob-dir /var/app/blobs
    </filestorage>
    <relstorage destination>
      blob-dir /var/app/blobcache
      <postgresql>
        dsn dbname=app host=127.0.0.1
      </postgresql>
    </relstorage>

The destination must be empty unless ``--clear`` (empty it first) or
``--incremental`` (copy only transactions newer than its last one) is
given. ``--dry-run`` reads the source and says what would be copied;
it opens the destination read-only, if it exists, and changes nothing
there (no schema, no blob directory).
"""
import logging
import os
import sys
import time

import ZConfig
import ZODB.interfaces
from zope.interface import alsoProvides

from .config import RelStorageFactory
from .config import options_from_section
from .exceptions import CopyError
from .exceptions import DatabaseMissing
from .exceptions import NoSchema
from .exceptions import RelStorage4Database
from .exceptions import UsageError
from .siteconfig import select
from .storage import RelStorage
from .storage.copy import copy_transactions
from .storage.copy import is_empty
from .storage.copy import resume_point
from .tools import EXIT_FAILED
from .tools import EXIT_USAGE
from .tools import setup_logging
from .tools import tool_parser
from .wording import counted

log = logging.getLogger('zodbconvert')

#: RelStorage 4's level below DEBUG, which its --trace turned on.
TRACE = 5



def find_sections(path):
    sections = {entry.name: entry.storage
                for entry in select(path, required=False)}
    missing = [n for n in ('source', 'destination') if n not in sections]
    if missing:
        raise UsageError(
            '%s needs storage sections named "source" and "destination" '
            '(e.g. <filestorage source> and <relstorage destination>); '
            'missing: %s' % (path, ', '.join(missing)))
    return sections['source'], sections['destination']


class TerminalProgress:
    """One line rewritten on a terminal: transactions, objects per second,
    an ETA from how far through the source's time span the copy is."""

    def __init__(self, out):
        self.out = out
        self.started = time.monotonic()
        self.shown = 0.0

    def __call__(self, result, fraction):
        now = time.monotonic()
        if now - self.shown < 0.2 and fraction < 1.0:
            return
        self.shown = now
        elapsed = max(now - self.started, 1e-6)
        eta = elapsed * (1 - fraction) / fraction if fraction > 0 else 0
        self.out.write('\r  %s, %s, %.0f objects/s, '
                       '%.0f%%, ETA %.0f s  '
                       % (counted(result['transactions'], 'transaction'),
                          counted(result['records'], 'object'),
                          result['records'] / elapsed, 100 * fraction, eta))
        self.out.flush()

    def done(self):
        self.out.write('\n')


def describe(storage):
    """Which database *storage* is: a RelStorage's own description (a
    section's name, such as "destination", says nothing), otherwise the
    storage's name (a FileStorage's path)."""
    describe = getattr(storage, 'describe', None)
    return describe() if describe is not None else storage.getName()


class DryRunDestination:
    """What a dry run needs of the destination: which database it is,
    its last transaction and whether it takes blobs, found without
    changing it. *storage* is the destination opened read-only, without
    its blob directory, or None where it does not exist yet."""

    def __init__(self, storage, description, blobs):
        self.storage = storage
        self.description = description
        #: Whether --clear could empty it (one that does not exist yet is
        #: empty).
        self.clearable = storage is None or hasattr(storage, 'zap_all')
        if blobs:
            alsoProvides(self, ZODB.interfaces.IBlobStorage)

    def getName(self):
        return self.description

    describe = getName

    def lastTransaction(self):
        if self.storage is None:
            return None
        return self.storage.lastTransaction()

    def close(self):
        if self.storage is not None:
            self.storage.close()


def open_dry_run_destination(config):
    """The DryRunDestination of the storage section *config*."""
    section = getattr(config, 'config', None)
    blobs = bool(getattr(section, 'blob_dir', None))
    if isinstance(config, RelStorageFactory):
        options = options_from_section(config).copy(read_only=True,
                                                      blob_dir=None)
        adapter = config.adapter_factory().create(options)
        try:
            storage = RelStorage(adapter, options=options)
        except (DatabaseMissing, NoSchema):
            adapter.close()
            return DryRunDestination(
                None, adapter.describe() + ' (does not exist yet: a real '
                'run creates it)', blobs)
        return DryRunDestination(storage, storage.describe(), blobs)
    path = getattr(section, 'path', None)
    if path is not None and not os.path.exists(path):
        return DryRunDestination(
            None, path + ' (does not exist yet: a real run creates it)',
            blobs)
    # Any other storage section: opened read-only, its blob directory
    # left alone.
    for attr, value in (('read_only', True), ('blob_dir', None)):
        if hasattr(section, attr):
            setattr(section, attr, value)
    storage = config.open()
    return DryRunDestination(storage, describe(storage), blobs)


def open_relstorage4_source(config):
    """The RelStorage 4 database of the ``<relstorage>`` section *config*,
    read-only, as a copy's source."""
    from .storage.relstorage4 import RelStorage4Source
    adapter = config.adapter_factory().create(
        options_from_section(config).copy(read_only=True))
    try:
        return RelStorage4Source(adapter)
    except BaseException:
        adapter.close()
        raise


def summary(result, dry_run):
    verb = 'would copy' if dry_run else 'copied'
    text = ('%s %s, %s, %s, %.1f MB in '
            '%.1f s (%.0f objects/s)'
            % (verb, counted(result['transactions'], 'transaction'),
               counted(result['records'], 'object record'),
               counted(result['blobs'], 'blob'), result['bytes'] / 1e6,
               result['seconds'],
               result['records'] / max(result['seconds'], 1e-6)))
    if result['missing_blobs']:
        missing = result['missing_blobs']
        text += ('; %s had no blob file in the source and %s copied '
                 'without one' % (counted(missing, 'blob record'),
                                  'was' if missing == 1 else 'were'))
    return text


def convert(source, destination, clear=False, incremental=False,
            dry_run=False, out=None, keep_references=True):
    """Copy *source* into *destination* (open storages) as the options
    say; return the CopyResult. A destination that is a RelStorage then
    keeps its objects' references for its first pack (unless not
    *keep_references*)."""
    out = out or sys.stdout
    after = None
    if incremental:
        after = resume_point(source, destination)
        print('incremental: copying transactions after %s'
              % (after.hex() if after else 'the beginning'), file=out)
    elif clear:
        if not getattr(destination, 'clearable',
                       hasattr(destination, 'zap_all')):
            raise CopyError(
                '--clear cannot empty %s; remove it by hand first'
                % describe(destination))
        print('%s %s' % ('would clear' if dry_run else 'clearing',
                         describe(destination)), file=out)
        if not dry_run:
            destination.zap_all()
    elif not is_empty(destination):
        raise CopyError(
            'the destination %s is not empty; use --clear to replace its '
            'contents or --incremental to add what is new'
            % describe(destination))
    progress = TerminalProgress(out) if out.isatty() else None
    try:
        result = copy_transactions(source, destination, after,
                                   progress=progress, dry_run=dry_run)
    finally:
        if progress is not None:
            progress.done()
    print(summary(result, dry_run), file=out)
    if keep_references and not dry_run and hasattr(destination,
                                                     'keep_references'):
        kept = destination.keep_references()
        print('kept the references of %s for the first pack '
              '(which then unpickles only what changed since) in %.1f s'
              % (counted(kept.get('prepack_unpickled', 0)
                         + kept.get('prepack_refs_kept', 0), 'object'),
                 kept['seconds']),
              file=out)
    return result


def main(argv=None, out=None):
    out = out or sys.stdout
    parser = tool_parser('zodbconvert', __doc__, config_help=(
        'file with <... source> and <... destination> storage sections'),
        databases=False)
    parser.add_argument('--dry-run', action='store_true',
                        help='read the source and report; write nothing')
    parser.add_argument('--clear', action='store_true',
                        help='empty the destination first')
    parser.add_argument('--incremental', action='store_true',
                        help="copy only what is newer than the "
                             "destination's last transaction")
    parser.add_argument('--no-keep-references', dest='keep_references',
                        action='store_false', default=True,
                        help='do not read the copied states for the '
                             "references the destination's first pack "
                             'would otherwise read again (a RelStorage '
                             'destination; they are read by default)')
    parser.add_argument('--debug', action='store_const', dest='log_level',
                        const=logging.DEBUG, default=logging.INFO,
                        help='log debugging details (and the traceback of '
                             'a failure)')
    parser.add_argument('--trace', action='store_const', dest='log_level',
                        const=TRACE, help='log even more than --debug '
                                          '(as RelStorage 4)')
    args = parser.parse_args(argv)
    setup_logging(args.log_level)
    if args.clear and args.incremental:
        parser.error('--clear and --incremental exclude each other')
    try:
        if not os.path.exists(args.config):
            raise UsageError('no such configuration file: %s' % args.config)
        source_config, destination_config = find_sections(args.config)
    except (UsageError, ZConfig.ConfigurationError, OSError) as e:
        print('zodbconvert: %s' % e, file=sys.stderr)
        return EXIT_USAGE
    source = destination = None
    try:
        source = _open(source_config, 'source')
        destination = _open(destination_config, 'destination',
                            args.dry_run)
        print('source: %s\ndestination: %s'
              % (describe(source), describe(destination)), file=out)
        convert(source, destination, args.clear, args.incremental,
                args.dry_run, out, args.keep_references)
        return 0
    except Exception as e:  # noqa: BLE001 -- reported, then exit 1
        log.debug('failure details', exc_info=True)
        print('zodbconvert: %s: %s' % (type(e).__name__, e),
              file=sys.stderr)
        return EXIT_FAILED
    finally:
        for storage in (destination, source):
            if storage is not None:
                storage.close()


def _open(config, role, dry_run=False):
    path = getattr(getattr(config, 'config', None), 'path', None)
    if role == 'source' and path and not os.path.exists(path):
        # Opening would create an empty FileStorage there.
        raise CopyError('the source %s does not exist' % path)
    try:
        if dry_run and role == 'destination':
            return open_dry_run_destination(config)
        try:
            return config.open()
        except RelStorage4Database:
            if role != 'source':
                raise
            # Read as it is: a site can move to another database (or to
            # a FileStorage) in one step, without upgrading in place.
            return open_relstorage4_source(config)
    except Exception as e:
        raise CopyError('cannot open the %s: %s: %s'
                        % (role, type(e).__name__, e)) from e


if __name__ == '__main__':
    sys.exit(main())
