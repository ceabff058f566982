from setuptools import find_packages
from setuptools import setup

with open('README.txt') as f:
    long_description = f.read()

setup(
    name='relstorage',
    version='5.0.0.dev0',
    description='A ZODB storage that keeps pickles in PostgreSQL, '
                'MySQL/MariaDB, Oracle or an embedded SQLite file.',
    long_description=long_description,
    long_description_content_type='text/plain',
    license='ZPL-2.1',
    python_requires='>=3.11',
    packages=find_packages(include=['relstorage', 'relstorage.*',
                                    'speedtest', 'speedtest.*']),
    include_package_data=True,
    package_data={'relstorage': ['component.xml', '*.conf']},
    zip_safe=False,
    install_requires=[
        'ZODB >= 5.8',
        'persistent',
        'BTrees',
        'zope.interface',
        'transaction >= 3.0',
        'ZConfig',
    ],
    extras_require={
        'postgresql': ['psycopg2 >= 2.9'],
        # <postgresql> driver psycopg (psycopg 3); auto prefers psycopg2.
        'psycopg': ['psycopg[binary] >= 3.1'],
        'mysql': ['mysqlclient >= 2.1'],
        # Pure-Python fallback where mysqlclient cannot be built.
        'pymysql': ['PyMySQL >= 1.0'],
        # python-oracledb, in thin mode: no Oracle client libraries.
        'oracle': ['oracledb >= 2.0'],
        # zodburi's postgres://, mysql://, oracle:// and sqlite:// URIs.
        'zodburi': ['zodburi'],
        # speedtest.shootout: zodbshootout 0.8.0 (pyperf 2.4 and later
        # clash with its --profile option; it imports six undeclared).
        'bench': ['zodbshootout == 0.8.0', 'pyperf == 2.3.1', 'six'],
        # The speed test's charts and its ZEO contender.
        'speedtest': ['matplotlib', 'ZEO'],
        # <relstorage> metrics true, and relstorage-metrics.
        'metrics': ['prometheus_client >= 0.17'],
        # Cooperative database waits under gevent.
        'gevent': ['gevent >= 23.9'],
        'test': [
            'matplotlib',
            'ZEO',
            'ZODB[test]',
            'zodburi',
            'hypothesis',
            'zope.testing',
            'pytest',
            'pytest-timeout',
            'gevent >= 23.9',
            # speedtest.shootout's own side is run by its tests.
            'zodbshootout == 0.8.0', 'pyperf == 2.3.1', 'six',
            'psycopg2 >= 2.9',
            'psycopg[binary] >= 3.1',
            'mysqlclient >= 2.1',
            'PyMySQL >= 1.0',
            # The Oracle adapter's driver layer is tested for real, and
            # its SQL against Oracle's grammar (sqlglot's dialect).
            'oracledb >= 2.0',
            'sqlglot >= 30',
            'prometheus_client >= 0.17',
        ],
    },
    entry_points={
        'console_scripts': [
            'zodbconvert = relstorage.zodbconvert:main',
            'zodbpack = relstorage.zodbpack:main',
            'zodbinfo = relstorage.zodbinfo:main',
            'zodbcheck = relstorage.zodbcheck:main',
            'speedtest = speedtest.main:main',
            'relstorage-demo = relstorage.demo:main',
            'relstorage-upgrade = relstorage.upgrade:main',
            'relstorage-metrics = relstorage.metrics.server:main',
        ],
        'zodburi.resolvers': [
            'postgres = relstorage.uriresolver:postgresql',
            'postgresql = relstorage.uriresolver:postgresql',
            'mysql = relstorage.uriresolver:mysql',
            'oracle = relstorage.uriresolver:oracle',
            'sqlite = relstorage.uriresolver:sqlite',
        ],
    },
    classifiers=[
        'Framework :: ZODB',
        'Programming Language :: Python :: 3',
    ],
)
