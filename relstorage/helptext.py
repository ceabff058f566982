"""The command-line help of the console scripts, taken from their module
docstrings, which are reStructuredText: shown as plain text."""
import re

_LITERAL = re.compile(r'``([^`]+)``')


def help_text(doc):
    """The first paragraph of the docstring *doc*, as plain text: inline
    literals without their backquotes, and a paragraph's closing ``::``
    as one colon."""
    text = doc.strip().split('\n\n')[0]
    text = _LITERAL.sub(r'\1', text)
    return re.sub(r'::$', ':', text)
