"""Sphinx configuration of relstorage's documentation.

Built by the tests (relstorage/tests/test_docs.py) with warnings as
errors::

    python -m sphinx -W --keep-going -n -b html docs docs/_build/html
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The checkout's relstorage (the reference is generated from it) and the
# local extension.
sys.path[:0] = [os.path.dirname(HERE), os.path.join(HERE, '_ext')]

import relstorage  # noqa: E402

project = 'relstorage'
author = 'the relstorage contributors'
copyright = 'the relstorage contributors; ZPL 2.1'
release = relstorage.__version__
version = '.'.join(release.split('.')[:2])

extensions = ['configref']
root_doc = 'index'
exclude_patterns = ['_build']
nitpicky = True
html_theme = 'alabaster'
html_title = 'relstorage %s' % release
html_static_path = []
