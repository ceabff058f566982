import pytest

from relstorage.exceptions import ConfigurationError
from relstorage.exceptions import NotSupportedYet
from relstorage.options import NOT_YET_SUPPORTED
from relstorage.options import OPTIONS
from relstorage.options import Options
from relstorage.options import option_spec

# DESIGN.md section 4: every <relstorage> key and its documented default
# (None where the document names no default).
DESIGN_DEFAULTS = {
    'name': None,
    'read-only': False,
    'keep-history': True,
    'create-schema': True,
    'commit-lock-timeout': 30,
    # DESIGN.md section 3 (Failures): every database call is bounded in
    # time; this project's own option, not RelStorage's.
    'network-timeout': 60,
    'commit-lock-id': 0,
    'blob-dir': None,
    'shared-blob-dir': False,
    'blob-cache-size': None,
    'blob-cache-size-check': 10,
    'blob-cache-size-check-external': False,
    'blob-chunk-size': 1048576,
    'replica-conf': None,
    'ro-replica-conf': None,
    'replica-timeout': 600,
    # This project's own: how long a replica may lag before loads go to
    # the read-write server.
    'replica-max-lag': 2.0,
    'revert_when_stale': False,
    'poll-interval': 0,
    'pack-gc': True,
    'pack-prepack-only': False,
    'pack-skip-prepack': False,
    'pack-batch-timeout': 1.0,
    'pack-commit-busy-delay': 5.0,
    # This project's own: the memory the pre-pack may hold its graph in.
    'pack-graph-mb': 512,
    # This project's own (earlier the RELSTORAGE_PACK_WORKERS variable):
    # None is as many as the CPUs, at most 4, none with one CPU.
    'pack-workers': None,
    'cache-servers': None,
    'cache-module-name': None,
    'cache-prefix': None,
    # DESIGN.md says 10 (RelStorage's, from 2008); raised for today's
    # machines (issue 42: bulk work with default options).
    'cache-local-mb': 100,
    'cache-local-object-max': 16384,
    'cache-local-compression': 'none',
    'cache-local-dir': None,
    # Not given in DESIGN.md; RelStorage's documented default.
    'cache-delta-size-limit': 100000,
    # DESIGN.md section 3 (Seeing inside): this project's own option.
    'metrics': False,
}

SUPPORTED_NOW = {
    'name', 'read-only', 'keep-history', 'create-schema',
    'commit-lock-timeout', 'commit-lock-id', 'cache-local-dir',
    'network-timeout', 'poll-interval', 'pack-gc', 'pack-batch-timeout',
    'pack-commit-busy-delay', 'pack-prepack-only', 'pack-skip-prepack',
    'pack-graph-mb', 'pack-workers', 'cache-local-mb',
    'cache-local-object-max', 'cache-delta-size-limit', 'blob-dir', 'shared-blob-dir',
    # Accepted from RelStorage configurations: memcache's settings are
    # unused (a warning says so), cache-prefix names nothing yet.
    'cache-servers', 'cache-module-name', 'cache-prefix',
    'blob-cache-size', 'blob-cache-size-check',
    'blob-cache-size-check-external', 'blob-chunk-size',
    'replica-conf', 'ro-replica-conf', 'replica-timeout', 'replica-max-lag',
    'revert_when_stale',
    'metrics',
}

# A valid, non-default value for every option.
NON_DEFAULT = {
    'name': 'main',
    'read-only': True,
    'keep-history': False,
    'create-schema': False,
    'commit-lock-timeout': 2.5,
    'network-timeout': 5,
    'commit-lock-id': 7,
    'blob-dir': '/tmp/blobs',
    'shared-blob-dir': True,
    'blob-cache-size': 1 << 30,
    'blob-cache-size-check': 50,
    'blob-cache-size-check-external': True,
    'blob-chunk-size': 4096,
    'replica-conf': '/etc/replicas.conf',
    'ro-replica-conf': '/etc/ro-replicas.conf',
    'replica-timeout': 30.0,
    'replica-max-lag': 0.5,
    'revert_when_stale': True,
    'poll-interval': 2.0,
    'pack-gc': False,
    'pack-prepack-only': True,
    'pack-skip-prepack': True,
    'pack-batch-timeout': 0.25,
    'pack-commit-busy-delay': 1.0,
    'pack-graph-mb': 0,
    'pack-workers': 0,
    'cache-servers': ['127.0.0.1:11211'],
    'cache-module-name': 'some.cache.module',
    'cache-prefix': 'app',
    'cache-local-mb': 64,
    'cache-local-object-max': 65536,
    'cache-local-compression': 'zlib',
    'cache-local-dir': '/var/cache/app',
    'cache-delta-size-limit': 5000,
    'metrics': True,
}


def attr(name):
    return name.replace('-', '_')


def test_option_table_is_exactly_design_section_4():
    assert [spec.name for spec in OPTIONS] == list(DESIGN_DEFAULTS)
    assert Options.option_names() == tuple(DESIGN_DEFAULTS)


@pytest.mark.parametrize('name', list(DESIGN_DEFAULTS))
def test_default_matches_design(name):
    opts = Options()
    value = getattr(opts, attr(name))
    assert value == DESIGN_DEFAULTS[name]
    assert type(value) is type(DESIGN_DEFAULTS[name]) or isinstance(
        value, float)


def test_attribute_names():
    opts = Options()
    assert opts.keep_history is True
    assert opts.poll_interval == 0.0
    assert isinstance(opts.poll_interval, float)
    assert opts.cache_local_mb == 100
    assert opts.revert_when_stale is False
    assert opts.blob_dir is None
    assert opts.commit_lock_timeout == 30
    assert opts.read_only is False
    assert opts.create_schema is True


def test_defaults_helper():
    assert Options.defaults() == Options()
    assert Options.defaults() is not Options.defaults()
    assert Options().changed() == {}


@pytest.mark.parametrize('name', list(NON_DEFAULT))
def test_both_spellings_accepted(name):
    value = NON_DEFAULT[name]
    dashed = Options(**{name: value})
    underscored = Options(**{attr(name): value})
    assert getattr(dashed, attr(name)) == value
    assert dashed == underscored
    assert dashed.changed() == {attr(name): value}


def test_revert_when_stale_keeps_underscores():
    assert option_spec('revert_when_stale').name == 'revert_when_stale'
    assert Options(revert_when_stale=True).revert_when_stale is True


@pytest.mark.parametrize('key', ['keep-histroy', 'bogus', 'cache_local_gb'])
def test_unknown_keyword_names_it(key):
    with pytest.raises(ConfigurationError) as exc:
        Options(**{key: True})
    assert key in str(exc.value)


@pytest.mark.parametrize('name, value', [
    ('keep-history', 'false'),
    ('keep-history', 1),
    ('read-only', None),
    ('poll-interval', -1),
    ('poll-interval', 'soon'),
    ('poll-interval', float('nan')),
    ('poll-interval', True),
    ('cache-local-mb', -1),
    ('cache-local-mb', '10'),
    ('cache-local-object-max', 1.5),
    ('cache-local-object-max', -1),
    ('commit-lock-timeout', -0.5),
    ('commit-lock-timeout', None),
    ('pack-batch-timeout', -1.0),
    ('pack-commit-busy-delay', 'x'),
    ('pack-workers', -1),
    ('pack-workers', 65),
    ('pack-workers', 1.5),
    ('blob-cache-size', -10),
    ('blob-cache-size', '1gb'),
    ('blob-cache-size-check', 101),
    ('blob-chunk-size', 0),
    ('cache-local-compression', 'lz4'),
    ('cache-local-compression', None),
    ('cache-servers', [1, 2]),
    ('cache-delta-size-limit', -5),
    ('name', 42),
    ('blob-dir', 3),
    ('replica-timeout', -1),
])
def test_invalid_value_names_option(name, value):
    with pytest.raises(ConfigurationError) as exc:
        Options(**{name: value})
    assert name in str(exc.value)
    with pytest.raises(ConfigurationError):
        Options(**{attr(name): value})


def test_numbers_are_normalised():
    opts = Options(poll_interval=2, pack_batch_timeout=3,
                   commit_lock_timeout=10, cache_local_mb=2.5,
                   replica_timeout=5)
    assert opts.poll_interval == 2.0 and isinstance(opts.poll_interval, float)
    assert isinstance(opts.pack_batch_timeout, float)
    assert isinstance(opts.replica_timeout, float)
    assert opts.commit_lock_timeout == 10
    assert isinstance(opts.commit_lock_timeout, int)
    assert Options(commit_lock_timeout=0.5).commit_lock_timeout == 0.5
    assert opts.cache_local_mb == 2.5
    assert Options(cache_local_mb=0).cache_local_mb == 0


def test_blob_cache_size_none_is_unbounded():
    assert Options(blob_cache_size=None).blob_cache_size is None
    assert Options(blob_cache_size=0).blob_cache_size == 0


def test_cache_servers_string_is_split():
    opts = Options(cache_servers='a:1  b:2')
    assert opts.cache_servers == ['a:1', 'b:2']
    assert Options(cache_servers=('a:1',)).cache_servers == ['a:1']


def test_compression_is_case_insensitive():
    assert Options(cache_local_compression='ZLIB').cache_local_compression \
        == 'zlib'
    assert Options(cache_local_compression='none').is_default(
        'cache-local-compression')


def test_copy_changes_only_the_copy():
    base = Options(keep_history=False, cache_servers=['a:1'])
    copy = base.copy(poll_interval=5, **{'read-only': True})
    assert copy.poll_interval == 5.0
    assert copy.read_only is True
    assert copy.keep_history is False
    assert base.poll_interval == 0.0
    assert base.read_only is False
    copy.cache_servers.append('b:2')
    assert base.cache_servers == ['a:1']
    assert base.copy() == base
    assert base.copy() is not base


def test_copy_validates():
    with pytest.raises(ConfigurationError, match='poll-interval'):
        Options().copy(poll_interval=-3)
    with pytest.raises(ConfigurationError, match='nonsense'):
        Options().copy(nonsense=1)


def test_assignment_is_validated():
    opts = Options()
    opts.keep_history = False
    assert opts.keep_history is False
    with pytest.raises(ConfigurationError, match='cache-local-mb'):
        opts.cache_local_mb = -1
    assert opts.cache_local_mb == 100
    with pytest.raises(ConfigurationError, match='typo_option'):
        opts.typo_option = 1
    with pytest.raises(AttributeError):
        del opts.keep_history


def test_repr_is_readable_and_round_trips():
    assert repr(Options()) == 'Options()'
    opts = Options(keep_history=False, poll_interval=1.5, name='main')
    text = repr(opts)
    assert text == "Options(name='main', keep_history=False, " \
        "poll_interval=1.5)"
    assert eval(text, {'Options': Options}) == opts


def test_equality():
    assert Options() == Options()
    assert Options(keep_history=False) != Options()
    assert Options() != object()
    with pytest.raises(TypeError):
        hash(Options())


def test_as_dict_has_every_attribute():
    d = Options().as_dict()
    assert set(d) == {attr(n) for n in DESIGN_DEFAULTS}


def test_not_yet_supported_set():
    assert isinstance(NOT_YET_SUPPORTED, frozenset)
    assert NOT_YET_SUPPORTED == {'cache-local-compression'}
    assert NOT_YET_SUPPORTED <= set(DESIGN_DEFAULTS)
    assert NOT_YET_SUPPORTED | SUPPORTED_NOW == set(DESIGN_DEFAULTS)
    assert not NOT_YET_SUPPORTED & SUPPORTED_NOW


def test_defaults_are_supported():
    Options().check_supported()


def test_all_supported_options_set_together_are_accepted():
    Options(**{n: NON_DEFAULT[n] for n in SUPPORTED_NOW}).check_supported()


@pytest.mark.parametrize('name', sorted(SUPPORTED_NOW))
def test_supported_option_non_default_is_accepted(name):
    Options(**{name: NON_DEFAULT[name]}).check_supported()


@pytest.mark.parametrize('name', sorted(NOT_YET_SUPPORTED))
def test_unsupported_option_non_default_is_refused(name):
    opts = Options(**{name: NON_DEFAULT[name]})
    with pytest.raises(NotSupportedYet) as exc:
        opts.check_supported()
    assert exc.value.option == name
    assert str(exc.value).startswith('not supported yet: %s' % name)


@pytest.mark.parametrize('name', sorted(NOT_YET_SUPPORTED))
def test_unsupported_option_at_default_is_accepted(name):
    Options(**{name: DESIGN_DEFAULTS[name]}).check_supported()


def test_compression_none_is_supported_but_zlib_is_not():
    Options(cache_local_compression='none').check_supported()
    with pytest.raises(NotSupportedYet, match='cache-local-compression'):
        Options(cache_local_compression='zlib').check_supported()


def test_an_unsupported_option_is_named_with_its_value():
    opts = Options(replica_timeout=5, replica_conf='/etc/r.conf',
                   cache_local_compression='zlib')
    with pytest.raises(NotSupportedYet) as exc:
        opts.check_supported()
    message = str(exc.value)
    assert 'cache-local-compression' in message
    assert "'zlib'" in message
    assert 'replica' not in message


def test_memcache_settings_are_accepted_with_one_warning(caplog):
    import relstorage.options
    relstorage.options._warned.clear()
    opts = Options(cache_servers=['127.0.0.1:11211'],
                   cache_module_name='relstorage.pylibmc_wrapper')
    with caplog.at_level('WARNING', logger='relstorage.options'):
        opts.check_supported()
        opts.check_supported()
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2, warnings
    assert any('cache-servers is ignored: memcache' in w for w in warnings)
    assert any('cache-module-name is ignored' in w for w in warnings)


def test_unsupported_error_is_a_configuration_error():
    with pytest.raises(ConfigurationError):
        Options(cache_local_compression='zlib').check_supported()
