"""Orbax checkpoints of the train state plus JSON metadata (such as the elapsed training time).

A save cut short (a crash, SIGKILL, a full disk) never shows as a checkpoint: Orbax writes a step into
`<step>.orbax-checkpoint-tmp` and renames it to `<step>` once complete, and lists only the latter; the next
start removes such leftovers.

A save that fails (a full disk, a file-size limit, a read-only or too long path) surfaces in the main thread
at the next save or at close(), as one CheckpointError (DiskError for the disk), after the writer is closed
in order. What Orbax's threads print about it meanwhile (their log records, asyncio's unretrieved futures,
TensorStore callbacks into the event loop Orbax already closed) repeats that error in tracebacks, and is
left out (_quiet_orbax_threads); so are the warnings, at exit, of the write coroutines the failed save
abandoned (_quiet_abandoned_writes). A restore that fails is one warning line (restore_latest): the reads
Orbax abandoned then, whose tracebacks would repeat it, are left out too.
"""
import contextlib
import errno
import importlib.util
import json
import logging
import os
import sys
import time
import warnings

import jax

from runtime import atomic


class CheckpointError(RuntimeError):
    pass


# Found, not imported: runtime/cli.py imports CheckpointError before a command is checked; Checkpoints imports Orbax.
_ORBAX_DIRECTORY = os.path.dirname(os.path.abspath(importlib.util.find_spec("orbax.checkpoint").origin))
_LOOP_CLOSED = "Event loop is closed"
_IN_FLIGHT = ".orbax-checkpoint-tmp"  # in the path of every file of a save still being written
_NAME_TOO_LONG = os.strerror(errno.ENAMETOOLONG)  # TensorStore keeps only the words


def _from_orbax(traceback) -> bool:
    while traceback is not None:
        if traceback.tb_frame.f_code.co_filename.startswith(_ORBAX_DIRECTORY):
            return True
        traceback = traceback.tb_next
    return False


def _not_an_orbax_thread_error(record: logging.LogRecord) -> bool:
    """False for the ERROR records of Orbax's threads and of the futures of its event loops: the failure
    they describe is raised in the main thread, where the lab reports it in one line. A future's exception
    raised by TensorStore has no Python frame of Orbax's; it names the step's temporary folder instead."""
    if record.levelno < logging.ERROR:
        return True
    if record.pathname.startswith(_ORBAX_DIRECTORY):
        return False
    return not (record.exc_info and (_from_orbax(record.exc_info[2]) or _IN_FLIGHT in str(record.exc_info[1])))


def _quiet_orbax_threads() -> None:
    """Installs the filters once per process (see the module's docstring)."""
    if getattr(sys.unraisablehook, "quiets_orbax", False):
        return
    for name in ("absl", "asyncio"):
        logging.getLogger(name).addFilter(_not_an_orbax_thread_error)
    previous_hook = sys.unraisablehook

    def unraisable(report):
        # TensorStore completes the writes still in flight after Orbax closed their event loop on the first
        # failure; their callbacks can no longer reach it. Nothing else here runs a loop from another thread.
        if isinstance(report.exc_value, RuntimeError) and str(report.exc_value) == _LOOP_CLOSED:
            return
        # The reads a failed restore abandoned raise as Python closes them, whenever collected: process-wide.
        if not _from_orbax(report.exc_traceback):
            previous_hook(report)

    unraisable.quiets_orbax = True
    sys.unraisablehook = unraisable


def _quiet_abandoned_writes() -> None:
    """After a failed save, Orbax's coroutines still queued for its closed event loop are never awaited; Python
    warns of each when it collects them (at exit, as `sys:1`). The lab itself runs no coroutines."""
    warnings.filterwarnings("ignore", message=r"coroutine '.*' was never awaited", category=RuntimeWarning)


def write_error(path: str, error: BaseException) -> CheckpointError | atomic.DiskError:
    """The one-line error for a checkpoint at `path` that could not be written."""
    if cause := atomic.disk_cause(error):  # named by the step, not by a file deep in Orbax's temporary one
        return atomic.DiskError(atomic.disk_message(path, reason=cause[1]))
    if any(isinstance(cause, OSError) and cause.errno == errno.ENAMETOOLONG or _NAME_TOO_LONG in str(cause)
           for cause in atomic.causes(error)):
        return CheckpointError(f"{path}: the files of a checkpoint in it would have paths longer than the "
                               f"filesystem allows ({len(path)} characters already); train in a --workdir of a "
                               f"shorter path")
    return CheckpointError(f"{path}: the checkpoint could not be written ({atomic.first_line(error)}); the "
                           f"checkpoints before it are as they were: rerun the same command to resume from the latest")


class Checkpoints:
    """Use as a context manager: the writer is closed on every way out of the block, so no save is left
    running while the interpreter shuts down (its threads would print tracebacks, and its step be lost)."""

    def __init__(self, directory: str, max_to_keep: int = 2):
        self.directory = os.path.abspath(directory)
        self._saving, self._closed = None, False
        if os.path.exists(self.directory) and not os.path.isdir(self.directory):
            # Orbax would fail in its background threads, and the process would never exit.
            raise CheckpointError(f"{self.directory}: a file, not a directory of checkpoints; move it away "
                                  f"(or delete it), then rerun")
        _quiet_orbax_threads()
        import orbax.checkpoint as ocp  # a third of a second: not at the top, which runtime/cli.py imports

        # max_to_keep >= 2 keeps an older checkpoint to fall back on when the latest does not restore. The
        # leftovers of saves cut short are removed: the workdir's lock keeps any other writer out.
        try:
            self.manager = ocp.CheckpointManager(self.directory, options=ocp.CheckpointManagerOptions(
                max_to_keep=max_to_keep, create=True, cleanup_tmp_directories=True))
        except OSError as error:
            raise write_error(self.directory, error) from error

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if error is None:
            self.close()
        else:  # the error on its way out is the one to report, not what the save in flight then hits
            self._close_quietly()

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state, metadata: dict) -> None:
        """Saves in the background. `metadata` is copied as JSON now: Orbax would serialise the caller's
        objects later, in its thread, after the training loop may have changed them (a list it appends
        device arrays to fails there, one save late)."""
        import orbax.checkpoint as ocp  # imported by __init__ already

        metadata = json.loads(json.dumps(metadata))
        try:  # raises the failure of the save before, if it failed in the background
            self.manager.save(step, args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), metadata=ocp.args.JsonSave(metadata)))
        except Exception as error:  # noqa: BLE001 - Orbax and TensorStore raise whatever they hit
            self._fail(error, self._saving or step)
        self._saving = step

    def restore(self, step: int, like):
        """(state, metadata) of `step`, with `like`'s tree structure, shapes and shardings."""
        import orbax.checkpoint as ocp  # imported by __init__ already

        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
        restored = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract), metadata=ocp.args.JsonRestore()))
        return restored.state, restored.metadata

    def restore_latest(self, like):
        """(step, state, metadata) of the newest checkpoint that restores; None when there is none.

        A checkpoint that does not restore (files truncated or deleted) is passed over, and moved aside once
        an older one restores, with one warning line each, so that training can save its step again. When
        none restores, nothing is moved: the cause may be a changed config rather than damaged files.
        """
        failed = []
        for step in sorted(self.manager.all_steps(), reverse=True):
            try:
                state, metadata = self.restore(step, like)
            # Damage surfaces as whatever Orbax or TensorStore trips on: KeyError, ValueError, JSON errors.
            except Exception as error:
                failed.append((step, error))
                continue
            for bad_step, error in failed:
                print(f"warning: checkpoint at step {bad_step} in {self.directory} does not restore "
                      f"({atomic.first_line(error)}); moved to {self._move_aside(bad_step)}, resuming from step {step}",
                      flush=True)
            return step, state, metadata
        if failed:
            reasons = "; ".join(f"step {step}: {atomic.first_line(error)}" for step, error in failed)
            raise CheckpointError(
                f"no checkpoint in {self.directory} restores ({reasons}). If the config changed since they were "
                f"written, train in a new workdir; to start over, delete {self.directory}") from failed[-1][1]
        return None

    def _move_aside(self, step: int) -> str:
        """Kept for inspection, under a name that Orbax does not read as a step (no `_<digits>` ending)."""
        path = os.path.join(self.directory, str(step))
        destination = f"{path}.unrestorable-{time.strftime('%Y%m%dT%H%M%S')}"
        os.rename(path, destination)
        self.manager.reload()
        return destination

    def _fail(self, error: Exception, step: int):
        self._close_quietly()
        _quiet_abandoned_writes()
        raise write_error(os.path.join(self.directory, str(step)), error) from error

    def close(self) -> None:
        """Waits for the save in flight; CheckpointError (DiskError) if it failed. Closing twice is closing once."""
        if self._closed:
            return
        try:
            self.manager.wait_until_finished()
        except Exception as error:  # noqa: BLE001 - see save()
            self._fail(error, self._saving)
        self._closed = True
        self.manager.close()

    def _close_quietly(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):  # a failed save raises once, then the manager closes
            self.manager.wait_until_finished()
        with contextlib.suppress(Exception):
            self.manager.close()
