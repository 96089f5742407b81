"""Orbax checkpoints of the train state plus JSON metadata (such as the elapsed training time)."""
import os

import jax
import orbax.checkpoint as ocp


class Checkpoints:
    def __init__(self, directory: str, max_to_keep: int = 2):
        self.manager = ocp.CheckpointManager(
            os.path.abspath(directory),
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True))

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state, metadata: dict) -> None:
        self.manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), metadata=ocp.args.JsonSave(metadata)))

    def restore(self, step: int, like):
        """(state, metadata) of `step`, with `like`'s tree structure, shapes and shardings."""
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
        restored = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract), metadata=ocp.args.JsonRestore()))
        return restored.state, restored.metadata

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()
