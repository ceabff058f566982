"""What the speed test shows: tables on the terminal and PNG charts."""
import os


def _cell(figure, key):
    if not figure:
        return '%12s' % '-'
    return '%12.2f' % figure[key]


def print_write_read(results, objects, levels, contenders):
    table = results['write_read']
    print()
    print('%d objects per transaction: ms per transaction (best of %d runs, '
          'each the mean of %d transactions)'
          % (objects, results['settings']['runs'],
             results['settings']['transactions']))
    header = '%-24s' % 'contender' + ''.join(
        '%12s' % ('write c=%d' % c) for c in levels) + ''.join(
        '%12s' % ('read c=%d' % c) for c in levels)
    print(header)
    print('-' * len(header))
    for c in contenders:
        row = table.get(c.name, {}).get(str(objects), {})
        print('%-24s' % c.name[:24]
              + ''.join(_cell(row.get(str(level)), 'write_ms')
                        for level in levels)
              + ''.join(_cell(row.get(str(level)), 'read_ms')
                        for level in levels))
    print(flush=True)


def print_metrics_cost(results, objects, levels, groups):
    """How much slower each contender is with metrics true, in percent
    of its time per transaction (negative: faster, i.e. noise)."""
    table = results['write_read']
    print('metrics true against false, %d objects per transaction: extra '
          'time per transaction, %%' % objects)
    for group in groups:
        if len(group) < 2:
            continue
        off = table.get(group[0].name, {}).get(str(objects), {})
        on = table.get(group[1].name, {}).get(str(objects), {})
        cells = []
        for key in ('write_ms', 'read_ms'):
            for level in levels:
                a, b = off.get(str(level)), on.get(str(level))
                cells.append('%12s' % '-' if not (a and b) else
                             '%+11.1f%%' % ((b[key] / a[key] - 1) * 100))
        print('%-24s' % group[0].name[:24] + ''.join(cells))
    print(flush=True)


def print_replica_lag(results):
    """Seconds from a commit on the read-write server until the replica
    shows it: median and the largest."""
    print('Replica lag after a commit (ro-replica-conf): ms')
    print('%-36s %12s %12s %8s' % ('contender', 'median', 'max', 'samples'))
    for name, lags in results['replica_lag'].items():
        ordered = sorted(lags)
        print('%-36s %12.2f %12.2f %8d' % (
            name[:36], ordered[len(ordered) // 2] * 1000,
            ordered[-1] * 1000, len(ordered)))
    print(flush=True)


def print_connections(results):
    print('Connection (100 objects per transaction, one process): '
          'ms per transaction')
    print('%-36s %12s %12s' % ('contender', 'write', 'read'))
    for base, variants in results['connections'].items():
        for name, figure in variants.items():
            print('%-36s %12.2f %12.2f' % (name[:36], figure['write_ms'],
                                           figure['read_ms']))
    print(flush=True)


def print_raw_limit(results):
    print("Driver limit: ms per transaction of 1000 rows (plain multi-row "
          "INSERT) against writing 1000 objects with ZODB (objects built "
          "and pickled) and storing their pickles through the storage API")
    print('%-24s %10s %10s %8s %10s %8s' % (
        'contender', 'raw INSERT', 'ZODB write', 'share', 'storage',
        'share'))
    for name, figure in results['raw_limit'].items():
        print('%-24s %10.2f %10.2f %7.0f%% %10.2f %7.0f%%'
              % (name[:24], figure['raw_ms'], figure['write_ms'],
                 figure['fraction_of_limit'] * 100, figure['storage_ms'],
                 figure['storage_fraction_of_limit'] * 100))
    print(flush=True)


def print_growth(results):
    step = results['settings']['growth_step']
    print('Growth: seconds per %d objects added one per transaction, at '
          'the start, middle and end' % step)
    print('%-24s %10s %10s %10s %10s' % ('contender', 'first', 'middle',
                                         'last', 'last/first'))
    for name, times in results['growth'].items():
        if not times:
            continue
        first, middle, last = times[0], times[len(times) // 2], times[-1]
        print('%-24s %10.2f %10.2f %10.2f %10.2f'
              % (name[:24], first, middle, last, last / first))
    print(flush=True)


def can_chart():
    """Whether matplotlib, which charts() needs, can be imported."""
    try:
        import matplotlib  # noqa: F401 -- only whether it imports
    except ImportError:
        return False
    return True


def charts(results, directory):
    """Write the PNG charts; return their paths."""
    import matplotlib
    matplotlib.use('Agg')
    from matplotlib import pyplot

    os.makedirs(directory, exist_ok=True)
    paths = []
    levels = results['settings']['concurrency']
    for kind in ('write', 'read'):
        sizes = results['settings']['objects']
        fig, axes = pyplot.subplots(1, len(sizes),
                                    figsize=(6 * len(sizes), 4.5),
                                    squeeze=False)
        for ax, n in zip(axes[0], sizes):
            for name, by_size in results['write_read'].items():
                row = by_size.get(str(n), {})
                xs = [c for c in levels if str(c) in row]
                if not xs:
                    continue
                ax.plot(xs, [row[str(c)][kind + '_ms'] for c in xs],
                        marker='o', label=name)
            ax.set_title('%s, %d objects per transaction' % (kind, n))
            ax.set_xlabel('concurrent processes')
            ax.set_ylabel('ms per transaction')
            ax.set_xticks(levels)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize='small')
        fig.tight_layout()
        path = os.path.join(directory, '%s.png' % kind)
        fig.savefig(path, dpi=100)
        pyplot.close(fig)
        paths.append(path)
    if results['growth']:
        step = results['settings']['growth_step']
        fig, ax = pyplot.subplots(figsize=(7, 4.5))
        for name, times in results['growth'].items():
            xs = [step * (i + 1) for i in range(len(times))]
            ax.plot(xs, times, label=name)
        ax.set_title('growth: seconds per %d objects, one per transaction'
                     % step)
        ax.set_xlabel('objects in the database')
        ax.set_ylabel('seconds per %d objects' % step)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize='small')
        fig.tight_layout()
        path = os.path.join(directory, 'growth.png')
        fig.savefig(path, dpi=100)
        pyplot.close(fig)
        paths.append(path)
    return paths
