"""How the tools and the logs say a count: ``1 batch``, ``3 batches``."""

#: Endings English makes plural with -es.
_ES = ('s', 'x', 'z', 'ch', 'sh')


def plural(noun):
    """*noun* (the last word of a phrase) in the plural: ``batches``,
    ``object records``, ``worker processes``."""
    return noun + ('es' if noun.endswith(_ES) else 's')


def counted(n, noun, grouped=False):
    """*n* and *noun* as the number takes it: ``1 batch``, ``0 batches``,
    ``2 dangling references``; with *grouped*, thousands separated
    (``2,500 objects``)."""
    number = '{:,}'.format(n) if grouped else '%d' % n
    return '%s %s' % (number, noun if n == 1 else plural(noun))
