"""Orbax checkpoints of the train state plus JSON metadata (such as the elapsed training time).

A save cut short (a crash, SIGKILL) never shows as a checkpoint: Orbax writes a step into
`<step>.orbax-checkpoint-tmp` and renames it to `<step>` once complete, and lists only the latter.
"""
import json
import os
import time

import jax
import orbax.checkpoint as ocp


class CheckpointError(RuntimeError):
    pass


def _first_line(error: Exception) -> str:
    # TensorStore's messages run to several long lines; the first says what failed.
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:200] if lines else ''}"


class Checkpoints:
    def __init__(self, directory: str, max_to_keep: int = 2):
        self.directory = os.path.abspath(directory)
        if os.path.exists(self.directory) and not os.path.isdir(self.directory):
            # Orbax would fail in its background threads, and the process would never exit.
            raise CheckpointError(f"{self.directory}: a file, not a directory of checkpoints; move it away "
                                  f"(or delete it), then rerun")
        # max_to_keep >= 2 keeps an older checkpoint to fall back on when the latest does not restore.
        self.manager = ocp.CheckpointManager(
            self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True))

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state, metadata: dict) -> None:
        """Saves in the background. `metadata` is copied as JSON now: Orbax would serialise the caller's
        objects later, in its thread, after the training loop may have changed them (a list it appends
        device arrays to fails there, one save late)."""
        metadata = json.loads(json.dumps(metadata))
        self.manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), metadata=ocp.args.JsonSave(metadata)))

    def restore(self, step: int, like):
        """(state, metadata) of `step`, with `like`'s tree structure, shapes and shardings."""
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
        restored = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract), metadata=ocp.args.JsonRestore()))
        return restored.state, restored.metadata

    def restore_latest(self, like):
        """(step, state, metadata) of the newest checkpoint that restores; None when there is none.

        A checkpoint that does not restore (files truncated or deleted) is passed over with a warning,
        and moved aside once an older one restores, so that training can save its step again. When none
        restores, nothing is moved: the cause may be a changed config rather than damaged files.
        """
        failed = []
        for step in sorted(self.manager.all_steps(), reverse=True):
            try:
                state, metadata = self.restore(step, like)
            # Damage surfaces as whatever Orbax or TensorStore trips on: KeyError, ValueError, JSON errors.
            except Exception as error:
                print(f"warning: checkpoint at step {step} in {self.directory} does not restore "
                      f"({_first_line(error)}); trying an older one", flush=True)
                failed.append((step, error))
                continue
            for bad_step, _ in failed:
                self._move_aside(bad_step)
            return step, state, metadata
        if failed:
            self.close()  # an open manager's threads would print asyncio errors as the process exits
            raise CheckpointError(
                f"no checkpoint in {self.directory} restores (see the warnings above). If the config "
                f"changed since they were written, train in a new workdir; to start over, delete "
                f"{self.directory}") from failed[-1][1]
        return None

    def _move_aside(self, step: int) -> None:
        # Kept for inspection, under a name that Orbax does not read as a step (no `_<digits>` ending).
        path = os.path.join(self.directory, str(step))
        destination = f"{path}.unrestorable-{time.strftime('%Y%m%dT%H%M%S')}"
        os.rename(path, destination)
        self.manager.reload()
        print(f"warning: moved the checkpoint at step {step} that does not restore to {destination}",
              flush=True)

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()
