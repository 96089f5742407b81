"""Whole-file writes that a full disk, a file-size limit, a read-only filesystem or a kill cannot cut: the
text goes to a temporary file in the same directory, is flushed to the disk, and replaces the file with one
os.replace. A write that fails leaves the previous file as it was and raises DiskError, one line naming the
file and what to do (runtime/cli.py prints it as `error: ...`, status 2)."""
import contextlib
import errno
import os
import re
import tempfile

from runtime.workdirs import WorkdirError

# What a full or read-only disk raises (EFBIG: the file-size limit, ulimit -f; EDQUOT: a quota).
DISK_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EROFS, errno.EDQUOT)
_DISK_WORDS = ("No space left on device", "File too large", "Read-only file system", "Disk quota exceeded")
_OBJECT = re.compile(r"<(bound method|built-in method|function|[\w.]+ object at 0x)")  # a repr in a message


class DiskError(WorkdirError):
    """A write refused by the disk: its message is the one line the user sees."""


def disk_message(path: str, error: OSError | None = None, reason: str = "") -> str:
    reason = reason or (os.strerror(error.errno) if error is not None and error.errno else "not writable")
    directory = os.path.dirname(os.path.abspath(path)) or "."
    return (f"{path}: {reason}; the files already in {directory} are as they were. Free space on its disk "
            f"(or make it writable, or raise `ulimit -f`), then rerun the same command")


def _file_mode() -> int:
    """What open() would give a new file under the process's umask (mkstemp's own is 0600, which would keep
    a shared lab's results from its other users)."""
    return 0o666 & ~_umask()


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it: setting it to read it would, for
    an instant, give files other threads create (Orbax's) no mask at all."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration):
        umask = os.umask(0o077)  # the strictest mask for the instant it is in force
        os.umask(umask)
        return umask


def write_text(path: str, text: str) -> None:
    """Replaces `path` by `text` atomically (see the module's docstring)."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str, data: bytes) -> None:
    """Replaces `path` by `data` atomically (see the module's docstring)."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    except OSError as error:
        raise user_error(path, error) from error
    try:
        with os.fdopen(handle, "wb") as f:
            os.fchmod(f.fileno(), _file_mode())
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise user_error(path, error) from error
    _sync_directory(directory)


def user_error(path: str, error: OSError) -> WorkdirError:
    """The one-line error for an OSError on `path`: DiskError for a full or read-only disk (or no write
    permission), a WorkdirError with the system's reason otherwise."""
    if error.errno in (*DISK_ERRNOS, errno.EACCES):
        return DiskError(disk_message(path, error))
    return WorkdirError(f"{path}: {error.strerror or error}; name a place this user can write to")


def _sync_directory(directory: str) -> None:
    """The rename itself on the disk (POSIX: a directory's entries are synced through the directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def disk_cause(error: BaseException) -> tuple[str | None, str] | None:
    """(the path it names, or None; the reason) of an error that a full or read-only disk caused, anywhere
    in its chain of causes (Orbax and TensorStore wrap the OSError, or only keep its words); None for any
    other error."""
    for cause in causes(error):
        if isinstance(cause, OSError) and cause.errno in DISK_ERRNOS:
            return cause.filename, os.strerror(cause.errno)
        text = str(cause)
        for words in _DISK_WORDS:
            if words in text:
                return _path_in(text), words
    return None


def first_line(error: BaseException) -> str:
    """`Type: the first line of its message`: TensorStore's and W&B's messages run to several long lines,
    and the first says what failed. Where that line quotes a Python object (Orbax's read error quotes a
    TensorStore method, `<bound method pybind11_...`), the first of its causes whose line quotes none says
    it in words; without one, the line is cut before the object."""
    for cause in causes(error):
        if not _OBJECT.search(line := _first(cause)):
            return f"{type(cause).__name__}: {line[:200]}"
    line = _first(error)
    return f"{type(error).__name__}: {line[:_OBJECT.search(line).start()].rstrip(' :.')[:200]}"


def _first(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


def causes(error: BaseException | None):
    """`error`, then what caused it, and so on."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def disk_problem(error: BaseException) -> str | None:
    """The one line for an error that a full or read-only disk caused (see disk_cause), naming the path the
    error names; None for any other error."""
    if (cause := disk_cause(error)) is None:
        return None
    path, reason = cause
    return disk_message(path or "the workdir", reason=reason)


def _path_in(text: str) -> str | None:
    """The first absolute path quoted in an error message, where it names one."""
    for quote in ("'", '"'):
        for part in text.split(quote)[1::2]:
            if part.startswith(os.sep) and " " not in part:
                return part
    return None
