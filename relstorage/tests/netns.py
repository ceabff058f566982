"""A test host of our own: a Linux network namespace joined to this one by
a veth pair, whose link a test can cut without closing any connection,
as a dropped route, a dead switch or a paused VM does.

The namespace, the pair and their addresses (10.213.N.0/30, N from this
process's id) exist only while the test runs; nothing outside this
machine is ever addressed.
"""
import os
import shutil
import subprocess

#: The link-level failure a test injects: the namespace's end goes down,
#: so that nothing it sends or is sent arrives, and nobody is told.
PREFIX = '10.213'


def _ip(*args, check=True):
    return subprocess.run(('ip',) + args, capture_output=True, text=True,
                          check=check, timeout=30)


class Namespace:
    """``with Namespace() as ns``: ``ns.host_address`` is this side's
    address (servers listen there), ``ns.command(argv)`` runs a program
    inside, ``ns.cut()`` and ``ns.restore()`` take the link down and up."""

    def __init__(self):
        tag = os.getpid() % 100000
        self.name = 'rs-test-%d' % tag
        self.host_dev = 'rs%dh' % tag
        self.ns_dev = 'rs%dn' % tag
        net = '%s.%d' % (PREFIX, tag % 250)
        self.host_address = net + '.1'
        self.address = net + '.2'
        self.created = False

    @staticmethod
    def unavailable():
        """Why namespaces cannot be made here, or None when they can."""
        if os.geteuid() != 0:
            return 'network namespaces need root'
        if shutil.which('ip') is None:
            return 'the ip command (iproute2) is not installed'
        probe = 'rs-probe-%d' % os.getpid()
        made = _ip('netns', 'add', probe, check=False)
        if made.returncode != 0:
            return 'the kernel refuses network namespaces: %s' % (
                made.stderr.strip())
        _ip('netns', 'del', probe, check=False)
        return None

    def __enter__(self):
        self.remove()  # what a killed run may have left
        self.created = True
        _ip('netns', 'add', self.name)
        _ip('link', 'add', self.host_dev, 'type', 'veth', 'peer', 'name',
            self.ns_dev)
        _ip('link', 'set', self.ns_dev, 'netns', self.name)
        _ip('addr', 'add', self.host_address + '/30', 'dev', self.host_dev)
        _ip('link', 'set', self.host_dev, 'up')
        self._inside('ip', 'addr', 'add', self.address + '/30', 'dev',
                     self.ns_dev)
        self._inside('ip', 'link', 'set', 'lo', 'up')
        self.restore()
        return self

    def __exit__(self, *exc):
        self.remove()

    def _inside(self, *argv):
        return _ip('netns', 'exec', self.name, *argv)

    def command(self, argv):
        """*argv* to run inside the namespace."""
        return ['ip', 'netns', 'exec', self.name] + list(argv)

    def cut(self):
        self._inside('ip', 'link', 'set', self.ns_dev, 'down')

    def restore(self):
        self._inside('ip', 'link', 'set', self.ns_dev, 'up')

    def remove(self):
        _ip('link', 'del', self.host_dev, check=False)
        _ip('netns', 'del', self.name, check=False)
