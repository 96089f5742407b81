"""Batches made ahead of the step that uses them, by a background thread.

Each task's batch at a step is a pure function of (seed, step) built in numpy on the host; made in the
loop, it would leave the device idle while the host gathers and masks. Made `depth` steps ahead (and
already transferred), it is waiting when the step wants it, and the batches are the same ones in the same
order: determinism and resuming from any step are unchanged.
"""
import queue
import threading

_DONE = object()


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


def prefetch(make_batch, steps, depth: int = 2):
    """Yields make_batch(step) for each of `steps`, computed up to `depth` batches ahead in a thread; an
    error in make_batch is raised here, at the step it belongs to. Closing the generator (or leaving the
    loop that consumes it) stops the thread."""
    ready = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def offer(item) -> bool:
        """Puts `item` once there is room, unless the consumer has gone: False then."""
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce():
        try:
            for step in steps:
                if not offer(make_batch(step)):
                    return
        except BaseException as error:  # noqa: BLE001 - handed to the consumer, which re-raises it
            offer(_Failure(error))
            return
        offer(_DONE)

    thread = threading.Thread(target=produce, name="prefetch", daemon=True)
    thread.start()
    try:
        while (item := ready.get()) is not _DONE:
            if isinstance(item, _Failure):
                raise item.error
            yield item
    finally:
        stop.set()
        thread.join()
