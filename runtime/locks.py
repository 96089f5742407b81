"""One process at a time in a workdir, and one builder at a time of a dataset or a tokenizer (building()).

train.py and eval.py hold an exclusive flock on `<workdir>/.lock`
(the file holds the holder's PID and command) for as long as they run, so a second train.py, an eval.py
during training, or a study rerun beside a training it left running is refused in one line naming the PID,
before it reads or writes anything. The kernel releases the lock when the process ends, however it ends
(kill -9 included); the file itself stays, empty of meaning, since deleting it would let two processes
lock two different files."""
import contextlib
import fcntl
import os

from runtime import atomic
from runtime.workdirs import WorkdirError

LOCK_FILE = ".lock"


def _holder_text(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    words = os.read(fd, 200).decode("utf-8", "replace").split()
    return f"process {words[0]} ({' '.join(words[1:]) or 'unknown command'})" if words else "another process"


def last_holder_pid(workdir: str) -> int | None:
    """The PID of the last process that held the workdir's lock (held or not now); None without one."""
    try:
        with open(os.path.join(workdir, LOCK_FILE), "rb") as f:
            first = f.read(200).split(maxsplit=1)
    except OSError:
        return None
    return int(first[0]) if first and first[0].isdigit() else None


def holder(workdir: str) -> str | None:
    """'process <pid> (<command>)' of the process that holds the workdir's lock; None when none does."""
    try:
        fd = os.open(os.path.join(workdir, LOCK_FILE), os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return _holder_text(fd)
    finally:
        os.close(fd)  # releases the probe's shared lock


def _open(path: str) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise atomic.user_error(path, error) from None


def _claim(fd: int, command: str) -> None:
    """Writes the holder's PID and command into the lock file it holds."""
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()} {command}\n".encode())


def _open_locked(workdir: str, command: str) -> int:
    path = os.path.join(workdir, LOCK_FILE)
    fd = _open(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        who = _holder_text(fd)
        os.close(fd)
        raise WorkdirError(f"--workdir={workdir}: in use by {who}, which holds {path}; wait for it to end or "
                           f"stop it (SIGTERM: training checkpoints first), then rerun") from None
    _claim(fd, command)
    return fd


@contextlib.contextmanager
def building(target: str):
    """The block runs holding an exclusive flock on `<target>.lock`, waiting (and saying so) while another
    process holds it: of two processes that build the same dataset or tokenizer, the second waits, then
    finds it built (the block checks again what it holds the lock for)."""
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    fd = _open(f"{target}.lock")
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for {_holder_text(fd)}, which builds {target}", flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        _claim(fd, f"building {os.path.basename(target)}")
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def held(workdir: str, command: str, lock: bool = True):
    """The block runs holding `workdir`'s lock (`lock=False`: without it, for the hosts of a multi-host run
    other than the first, which share the workdir). Makes the workdir if it is missing, and removes it again
    if the block fails and leaves nothing in it."""
    existed = os.path.isdir(workdir)
    try:
        os.makedirs(workdir, exist_ok=True)
    except OSError as error:
        raise atomic.user_error(workdir, error) from None
    fd = _open_locked(workdir, command) if lock else None
    try:
        yield
    except BaseException:
        if not existed and set(os.listdir(workdir)) <= {LOCK_FILE}:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(workdir, LOCK_FILE))
                os.rmdir(workdir)
        raise
    finally:
        if fd is not None:
            os.close(fd)
