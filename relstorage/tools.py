"""What the console tools share: their exit statuses, their logging,
their command line's start (the config file and ``--database``), a
progress line on a terminal, and running once per storage section of a
config file."""
import argparse
import logging
import sys
import time

import ZConfig

from .exceptions import UsageError
from .helptext import help_text
from .siteconfig import add_database_argument
from .siteconfig import select

log = logging.getLogger(__name__)

#: A tool's exit statuses: something failed; the command line or the
#: config file is wrong; what was checked has problems (dangling
#: references, a broken database).
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_PROBLEMS = 3

#: The help of the config file argument most tools take.
CONFIG_HELP = ('file of <relstorage> sections: bare, in <zodb> sections '
               'or a zope.conf')


def setup_logging(level=logging.INFO, format=None):
    """What the command-line tools log: *level* and up, to stderr."""
    logging.basicConfig(
        level=level, stream=sys.stderr,
        format=format or '%(asctime)s %(levelname)s %(name)s: %(message)s')


def tool_parser(prog, doc, json_help=None, config_help=CONFIG_HELP,
                databases=True):
    """The command line a tool starts from: its help (the module's *doc*),
    the config file, with *json_help* ``--json``, and with *databases*
    ``--database``."""
    parser = argparse.ArgumentParser(prog=prog, description=help_text(doc))
    parser.add_argument('config', help=config_help)
    if json_help:
        parser.add_argument('--json', action='store_true', help=json_help)
    if databases:
        add_database_argument(parser)
    return parser


class TerminalProgress:
    """Rewrites one line on a terminal: objects handled, rate, ETA."""

    def __init__(self, out, started):
        self.out = out
        self.started = started

    def __call__(self, done, total):
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = done / elapsed
        eta = (total - done) / rate if rate else 0
        self.out.write('\r  %d/%d objects (%.0f%%), %.0f/s, ETA %.0f s  '
                       % (done, total, 100.0 * done / (total or 1), rate, eta))
        if done >= total:
            self.out.write('\n')
        self.out.flush()


def run_sections(prog, path, run_one, names=None):
    """``run_one(name, section)`` for each storage section of the config
    file at *path* (of the databases *names*, default all), one after the
    other; a failure is reported by name and the others still run.
    Returns the exit status (the worst)."""
    try:
        sections = select(path, names)
    except (ZConfig.ConfigurationError, UsageError, OSError) as e:
        print('%s: %s' % (prog, e), file=sys.stderr)
        return EXIT_USAGE
    status = 0
    for name, section, _, _ in sections:
        try:
            status = max(status, run_one(name, section))
        except Exception as e:  # noqa: BLE001 -- reported, then exit 1
            log.debug('failure details', exc_info=True)
            print('%s: %s: %s: %s' % (prog, name, type(e).__name__, e),
                  file=sys.stderr)
            status = max(status, EXIT_FAILED)
    return status
