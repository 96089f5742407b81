"""SIGTERM and SIGINT during training become a request that the step loop polls between steps, so that
it can checkpoint and exit cleanly instead of dying mid-step (pre-emption, `kill`, Ctrl-C)."""
import contextlib
import signal
import threading

SIGNALS = (signal.SIGTERM, signal.SIGINT)
INTERRUPTED_STATUS = 128 + signal.SIGINT  # 130: what a shell reports for a process ended by Ctrl-C


class StopRequest:
    """`signum` is the first SIGTERM or SIGINT received, None until then: a plain Python value, so the
    loop can check it after every step without a host sync."""

    def __init__(self):
        self.signum = None

    def exit_status(self) -> int:
        # What a shell reports for a process ended by that signal (143, 130): a wrapper script, make or
        # a scheduler restarting failed jobs sees that the run did not finish, as if it had been killed.
        return 128 + self.signum


@contextlib.contextmanager
def stop_requests():
    """Within the block, the signals only set the yielded request's `signum`; the previous handlers
    come back at its end. Outside the main thread, where Python cannot install handlers (a training
    thread in a notebook), the request never fires and the signals act as before."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}

    def handler(signum, frame):
        request.signum = request.signum or signum
        # A second signal acts as it did before training: the way out when a step or the save hangs.
        signal.signal(signum, previous[signum])

    for signum in SIGNALS:
        signal.signal(signum, handler)
    try:
        yield request
    finally:
        for signum, previous_handler in previous.items():
            signal.signal(signum, previous_handler)
