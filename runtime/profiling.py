"""A jax.profiler trace of a window of training steps, config.profile_steps = "start,stop": from the end of
step `start` to the end of step `stop`, in <workdir>/profile, where TensorBoard's profile tab reads it."""
import os

import jax

from training.config_checks import ConfigError

PROFILE_DIR = "profile"


def window(config) -> tuple[int, int] | None:
    """(start, stop) of config.profile_steps, None when empty; a ConfigError unless 1 <= start < stop <=
    num_train_steps."""
    if not config.profile_steps:
        return None
    parts = config.profile_steps.split(",")
    if len(parts) != 2 or not all(part.strip().isdigit() for part in parts):
        raise ConfigError(f"config.profile_steps={config.profile_steps!r} must be \"start,stop\", two step "
                          f"numbers (e.g. \"10,20\"), or empty")
    start, stop = (int(part) for part in parts)
    if not 1 <= start < stop <= config.num_train_steps:
        raise ConfigError(f"config.profile_steps={config.profile_steps!r} must have 1 <= start < stop <= "
                          f"num_train_steps={config.num_train_steps}; the first step is compilation")
    return start, stop


class StepTrace:
    """Call after_step(done, state) after each training step."""

    def __init__(self, config, workdir: str):
        self.window = window(config)
        self.directory = os.path.join(workdir, PROFILE_DIR)
        self.tracing = False

    def after_step(self, done: int, state) -> None:
        if self.window is None:
            return
        start, stop = self.window
        if done == start:
            jax.block_until_ready(state)  # the trace starts with the next step, not with this one's end
            jax.profiler.start_trace(self.directory)
            self.tracing = True
        elif done == stop and self.tracing:  # not tracing: a resume past start
            jax.block_until_ready(state)  # the traced steps run asynchronously
            jax.profiler.stop_trace()
            self.tracing = False
