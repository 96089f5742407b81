"""The training processes a study starts end with it: each runs in a session of its own (so a signal to the
study's process group is not what decides its end) and, on Linux, gets SIGTERM from the kernel when the
study's process dies, even by SIGKILL (prctl PR_SET_PDEATHSIG); SIGTERM or SIGINT to the study sends SIGTERM
to every one (each checkpoints its step and exits), waits for them, and then ends the study with that
signal's status. A rerun then resumes them; none is left running beside it."""
import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
STOP_WAIT_S = 120  # how long a stopped training process may take to checkpoint before it is killed
_running: set[subprocess.Popen] = set()
_signalled: set[subprocess.Popen] = set()  # those sent SIGTERM already
_guard = threading.Lock()
_stopping: list[int] = []  # the signal that stops the study, once one came: no process starts after it


def _prctl():
    """libc's prctl, loaded here rather than in the child: a forked child of a threaded process must not
    load libraries."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def _die_with_parent(parent: int):
    def in_child():
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the study died between the fork and prctl
            os._exit(1)
    return in_child if _PRCTL is not None else None


def start(command: list[str], **options) -> subprocess.Popen | None:
    """subprocess.Popen(command, **options) in a session of its own, ending with this process; None once
    the study is stopping."""
    with _guard:
        if _stopping:
            return None
        process = subprocess.Popen(command, start_new_session=True, preexec_fn=_die_with_parent(os.getpid()),
                                   **options)
        _running.add(process)
    return process


def wait(process: subprocess.Popen) -> int:
    """The exit status of a process start() started. Interrupted (the study is stopping), the process stays
    listed, so that the study waits for it to checkpoint before it exits."""
    status = process.wait()
    with _guard:
        _running.discard(process)
    return status


def _stop_all() -> list[subprocess.Popen]:
    """SIGTERM, once, to each training process still running (a second would kill it mid-checkpoint:
    training takes a second signal as the way out); returns them."""
    with _guard:
        _running.difference_update([process for process in _running if process.poll() is not None])
        running = list(_running)
        fresh = [process for process in running if process not in _signalled]
        _signalled.update(fresh)
    for process in fresh:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)  # the process and whatever it started
    return running


def _end_all() -> int:
    """Stops every running training process and waits for it (SIGKILL past STOP_WAIT_S); returns how many
    this block has stopped, those that ended between the signal's SIGTERM and this wait included."""
    running = _stop_all()
    for process in running:
        try:
            process.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    with _guard:
        _running.difference_update(running)
        return len(_signalled)


class _Stop(BaseException):
    """Raised in the main thread by SIGTERM or SIGINT (BaseException: no `except Exception` swallows it)."""


@contextlib.contextmanager
def ended_on_exit():
    """Within the block, SIGTERM and SIGINT stop the study (see the module's docstring); however the block
    ends, no training process it started is left running."""
    in_main = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)} if in_main else {}

    def handler(signum, frame):
        with _guard:
            _stopping.append(signum)
        _stop_all()  # at once: the pool's threads wait for these processes
        raise _Stop

    for signum in previous:
        signal.signal(signum, handler)
    try:
        yield
    except _Stop:
        stopped = _end_all()
        print(f"interrupted: {stopped} training process(es) stopped, each checkpointed at its step; rerun the "
              f"same command to resume", file=sys.stderr, flush=True)
        raise SystemExit(128 + _stopping[0]) from None
    finally:
        _end_all()
        for signum, previous_handler in previous.items():
            signal.signal(signum, previous_handler)
        with _guard:
            _stopping.clear()
            _signalled.clear()
