"""The ``<mysql>`` section's TLS keys (``ssl-mode``, ``ssl-ca`` ...), as
each MySQL driver must be told them.

The modes are MySQL's client's: DISABLED (no TLS), PREFERRED (TLS where
the server offers it, unverified), REQUIRED (TLS, unverified), VERIFY_CA
(TLS, the certificate signed by ``ssl-ca``, else by a CA the system
trusts) and VERIFY_IDENTITY (also naming the host connected to). The
drivers' own readings of these differ (PyMySQL checks no name without a
CA file; mysqlclient on MariaDB Connector/C offers no TLS in PREFERRED
and checks the name in VERIFY_CA), so each is given what makes it do
exactly what the mode says.
"""
import ssl

from ...exceptions import ConfigurationError

#: The ``<mysql>`` section's TLS keys (also a mysql:// URI's).
TLS_KEYS = ('ssl_mode', 'ssl_ca', 'ssl_capath', 'ssl_cert', 'ssl_key',
            'ssl_cipher')

#: ``ssl_mode`` values, weakest first (MySQL's client's names).
TLS_MODES = ('DISABLED', 'PREFERRED', 'REQUIRED', 'VERIFY_CA',
             'VERIFY_IDENTITY')
#: The TLS keys other than ssl_mode -> the driver's ``ssl`` dict's keys.
_TLS_FILES = {'ssl_ca': 'ca', 'ssl_capath': 'capath', 'ssl_cert': 'cert',
              'ssl_key': 'key', 'ssl_cipher': 'cipher'}
#: What says who the server is: the CA file and directory.
_AUTHORITIES = ('ca', 'capath')
#: MySQL's client error "SSL connection error": raised where the server
#: offers no TLS and the driver was told to require it.
SSL_CONNECTION_ERROR = 2026


def tls_settings(params):
    """``(mode, {ca:, cert:, ...})`` of the TLS keys in *params* (which
    loses them), or ``(None, {})`` where none is set. A CA makes the
    mode VERIFY_CA by default, any other key REQUIRED."""
    files = {_TLS_FILES[key]: params.pop(key) for key in _TLS_FILES
             if params.get(key) is not None}
    for key in _TLS_FILES:
        params.pop(key, None)
    mode = params.pop('ssl_mode', None)
    if mode is None:
        if not files:
            return None, {}
        mode = 'VERIFY_CA' if set(_AUTHORITIES) & set(files) else 'REQUIRED'
    mode = mode.upper().replace('-', '_')
    if mode not in TLS_MODES:
        raise ConfigurationError('ssl-mode: %r is not one of %s' % (
            mode, ', '.join(TLS_MODES)))
    return mode, files


def strength(params):
    """The index in TLS_MODES of the section's mode (-1: none set)."""
    mode, _ = tls_settings(dict(params))
    return -1 if mode is None else TLS_MODES.index(mode)


def requires_tls(params):
    """Whether the section's TLS keys require an encrypted connection."""
    return strength(params) >= TLS_MODES.index('REQUIRED')


def tls_label(params):
    """`` ssl-mode=VERIFY_CA`` (the section's mode, as connections take
    it), or nothing where the section sets no TLS key."""
    mode, _ = tls_settings(dict(params))
    return '' if mode is None else ' ssl-mode=%s' % mode


def prefers_tls(params):
    """Whether the section asks for PREFERRED: TLS if the server offers
    it, else a connection in the clear."""
    return strength(params) == TLS_MODES.index('PREFERRED')


def without_tls(params):
    """*params* for the connection in the clear that PREFERRED falls
    back to."""
    return dict(params, ssl_mode='DISABLED')


def offers_no_tls(error):
    """Whether a driver's *error* is MySQL's "SSL connection error", as
    where the server offers no TLS and the driver was told to require
    it. (Taken for that also where a handshake failed: PREFERRED going on
    in the clear then is no weaker than where a server's offer of TLS
    was lost on the way, which PREFERRED accepts.)"""
    args = getattr(error, 'args', ())
    return bool(args) and args[0] == SSL_CONNECTION_ERROR


def authorities(mode, files):
    """``{ca:, capath:}`` that certificates are checked against in the
    VERIFY modes: the section's ``ssl-ca``/``ssl-capath``, else the
    system's store (OpenSSL's default file and directory, which
    SSL_CERT_FILE and SSL_CERT_DIR change); none in the modes that check
    no certificate."""
    if TLS_MODES.index(mode) < TLS_MODES.index('VERIFY_CA'):
        return {}
    given = {key: files[key] for key in _AUTHORITIES if key in files}
    if given:
        return given
    system = ssl.get_default_verify_paths()
    found = {'ca': system.cafile, 'capath': system.capath}
    return {key: value for key, value in found.items() if value}


def ssl_context(mode, files):
    """The ``ssl.SSLContext`` of *mode* (not DISABLED) and the section's
    *files*: certificates required and checked against ``authorities``
    from VERIFY_CA on, the host's name checked in VERIFY_IDENTITY."""
    verify = TLS_MODES.index(mode) >= TLS_MODES.index('VERIFY_CA')
    found = authorities(mode, files)
    if verify:
        context = ssl.create_default_context(cafile=found.get('ca'),
                                             capath=found.get('capath'))
        # As MySQL's and MariaDB's clients: the certificates these
        # servers generate for themselves lack extensions the strict
        # check requires.
        context.verify_flags &= ~getattr(ssl, 'VERIFY_X509_STRICT', 0)
    else:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = mode == 'VERIFY_IDENTITY'
    context.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    if 'cert' in files:
        context.load_cert_chain(files['cert'], files.get('key'))
    if 'cipher' in files:
        context.set_ciphers(files['cipher'])
    return context


def connector_c(client_version):
    """Whether a client library of *client_version* (``3.3.20``) is
    MariaDB's (Connector/C 2.x-3.x, or a MariaDB server's own library,
    10.x on), whose TLS options are not MySQL's ``ssl_mode``."""
    try:
        major = int(str(client_version).split('.', 1)[0])
    except ValueError:
        return False
    return major < 5 or major >= 10


def mysqlclient_options(mode, files, mariadb):
    """mysqlclient's ``ssl_mode`` and ``ssl`` for *mode* and *files*,
    on MariaDB's client library if *mariadb*, else on MySQL's.

    MySQL's library does what the names say. MariaDB's (whose modes
    mysqlclient emulates) uses TLS only once told to require it, checks
    a certificate once it is given a CA and checks the name too when
    told to verify: there REQUIRED stands for PREFERRED too (it goes on
    in the clear where the server offers no TLS; REQUIRED is then
    refused once connected, PREFERRED accepted), and REQUIRED with the
    CA for VERIFY_CA."""
    found = authorities(mode, files)
    ssl_dict = {key: value for key, value in files.items()
                if key not in _AUTHORITIES}
    ssl_dict.update(found)
    if mode == 'DISABLED':
        return 'DISABLED', None
    if mariadb and mode in ('PREFERRED', 'VERIFY_CA'):
        mode = 'REQUIRED'
    return mode, ssl_dict or None
