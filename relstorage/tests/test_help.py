"""Every console script's --help is plain text (its module docstring is
reStructuredText) and gives every option a line of help."""
import importlib
import re

import pytest

SCRIPTS = ['relstorage.zodbconvert', 'relstorage.zodbpack',
           'relstorage.zodbinfo', 'relstorage.zodbcheck',
           'relstorage.demo', 'relstorage.upgrade',
           'relstorage.metricsserver', 'relstorage_speedtest.main',
           'relstorage_speedtest.pack',
           'relstorage_speedtest.convert']


@pytest.mark.parametrize('module', SCRIPTS)
def test_help_is_plain_text_with_every_option_explained(module, capsys):
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(module).main(['--help'])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert '``' not in text and '::\n' not in text
    options = text.split('options:', 1)[1]
    # An option line with nothing after it, and nothing on the next
    # line either, has no help.
    lines = options.splitlines()
    for i, line in enumerate(lines):
        if re.match(r'^  -', line) and len(line.split('  ')) < 3:
            assert i + 1 < len(lines) and lines[i + 1].startswith(' ' * 8), \
                line
