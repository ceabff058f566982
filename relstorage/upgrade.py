"""``relstorage-upgrade``: convert a RelStorage 4 database in place.

    relstorage-upgrade [--dry-run] [--drop-old] [--database NAME] config.conf

The config file is the one the site uses, unchanged (bare storage
sections, ``<zodb>`` sections or a zope.conf; ``--database`` picks some
of its databases): each ``<relstorage>``
section whose database holds RelStorage 4's tables is converted to this
storage's schema inside the same database, with set-based SQL. Stop every
RelStorage 4 process first; the upgrade refuses to start while one holds
the old tables. An interrupted upgrade resumes where it stopped when run
again, as does one whose last step (keeping the references the first pack
would otherwise read) did not end. RelStorage 4's tables are kept (renamed ``rs4_*``; on SQLite its
``main.sqlite3`` is left as it was) until ``--drop-old`` removes them.

``--dry-run`` says what a run would do, with the exit status the run
would have: that the database is upgraded already, or where an
interrupted upgrade would resume, or what the database holds and how
long the copy should take, from copying the first objects into a
temporary table; it creates and changes nothing (no directory, file or
table).
"""
import logging
import sys

from .adapters.upgrade import STEPS
from .config import RelStorageFactory
from .config import options_from_section
from .exceptions import UpgradeRefused
from .siteconfig import chosen
from .tools import run_sections
from .tools import setup_logging
from .tools import tool_parser
from .wording import counted

def upgrade_of(adapter, say):
    """The Upgrade of *adapter*'s database."""
    if adapter.upgrade_class is None:
        raise UpgradeRefused(
            'upgrading a RelStorage 4 database in the %s is not supported '
            'yet (PostgreSQL, MySQL/MariaDB and SQLite are)'
            % adapter.describe())
    return adapter.upgrade_class(adapter, say=say)


def dry_run(upgrade, out):
    """Say what a run would do, reading only."""
    step = upgrade.next_step()
    if step is None:
        upgrade.say_upgraded()
        return
    if step != STEPS[0]:
        upgrade.say('the upgrade has begun: a run would resume at step %d '
                    'of %d (%s); nothing was changed'
                    % (STEPS.index(step) + 1, len(STEPS), step))
        return
    survey = upgrade.survey()
    for what, count in sorted(survey.items()):
        print('  %-13s %d' % (what, count), file=out)
    seconds, revisions, size = upgrade.sample()
    if revisions:
        # The copy's time grows with the bytes and the rows it moves.
        share = max(size / max(survey['state bytes'], 1),
                    revisions / max(survey['revisions'], 1))
        print('  copying the first %s (%s) took %.2f s, '
              'so the states should take about %.0f s (the other steps and '
              'blobs aside); nothing was changed'
              % (counted(revisions, 'revision'), counted(size, 'byte'),
                 seconds, seconds / share), file=out)
    else:
        print('  the database holds no objects; nothing was changed',
              file=out)


def upgrade_one(name, section, args, out):
    if not isinstance(section, RelStorageFactory):
        print('%s: not a <relstorage> section, left alone' % name, file=out)
        return 0
    options = options_from_section(section)
    adapter = section.adapter_factory().create(options)
    try:
        upgrade = upgrade_of(
            adapter, lambda text: print('%s: %s' % (name, text), file=out))
        print('%s: %s' % (name, adapter.describe()), file=out)
        if args.dry_run:
            dry_run(upgrade, out)
        elif args.drop_old:
            upgrade.drop_old()
            print('%s: RelStorage 4\'s tables dropped' % name, file=out)
        else:
            upgrade.run(lambda done: keep_references(adapter, done))
        return 0
    finally:
        adapter.close()


def keep_references(adapter, done):
    """The upgrade's last step: read the upgraded database's states for
    the references its first pack would otherwise read (see
    storage.pack.keptrefs), then *done()*; what to say of it."""
    from .storage import RelStorage
    storage = RelStorage(adapter)  # closes the adapter when closed
    try:
        kept = storage.keep_references()
        done()
    finally:
        storage.close()
    return ('kept the references of %s for the first pack in %.1f s'
            % (counted(kept.get('prepack_unpickled', 0), 'object'),
               kept['seconds']))


def main(argv=None, out=None):
    out = out or sys.stdout
    parser = tool_parser('relstorage-upgrade', __doc__, config_help=(
        'the config file the site uses (storage sections, <zodb> sections '
        'or zope.conf)'))
    parser.add_argument('--dry-run', action='store_true',
                        help='report what would be done; change nothing')
    parser.add_argument('--drop-old', action='store_true',
                        help="remove RelStorage 4's tables after a finished "
                             'upgrade (no way back to RelStorage 4 then)')
    args = parser.parse_args(argv)
    setup_logging(logging.WARNING, format='%(message)s')
    if args.dry_run and args.drop_old:
        parser.error('--dry-run and --drop-old exclude each other')
    return run_sections('relstorage-upgrade', args.config,
                        lambda name, section: upgrade_one(name, section,
                                                          args, out),
                        chosen(args))

if __name__ == '__main__':
    sys.exit(main())
