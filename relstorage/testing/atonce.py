"""Running calls at once, for the tests of what processes (or threads)
starting together must agree on."""
import threading


def at_once(calls):
    """Run each of *calls* in a thread of its own, all released together;
    the list of what each returned or, where one raised, its exception."""
    start = threading.Barrier(len(calls))
    results = [None] * len(calls)

    def run(i):
        start.wait()
        try:
            results[i] = calls[i]()
        except Exception as e:  # handed back to the test, which says
            results[i] = e
    threads = [threading.Thread(target=run, args=(i,))
               for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results
