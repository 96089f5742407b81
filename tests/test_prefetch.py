"""Batches made ahead in a thread: the host's batches, step for step, from any start; errors surface at
their step; the thread stays within its lead and stops with the loop."""
import threading
import time

import jax
import numpy as np
import pytest

from data.prefetch import prefetch
import tasks
from training import sharding

pytestmark = pytest.mark.accelerator


def _prefetch_threads():
    return [thread for thread in threading.enumerate() if thread.name == "prefetch" and thread.is_alive()]


@pytest.mark.parametrize("start", [0, 7])  # a fresh run, and one resumed at step 7
def test_prefetched_device_batches_are_the_host_batches_step_for_step(tiny_config, tmp_path, start):
    config = tiny_config()
    task = tasks.get(config.task)
    data = task.prepare_data(config, str(tmp_path))
    mesh = sharding.data_mesh()
    steps = range(start, start + 12)  # past an epoch of the 300 training pairs at batch 64

    def make_batch(step):
        return sharding.put_batch(task.train_batch(config, data, 64, step), mesh)

    for step, batch in zip(steps, prefetch(make_batch, steps)):
        host = task.train_batch(config, data, 64, step)
        assert all(isinstance(array, jax.Array) for array in batch.values())
        assert batch.keys() == host.keys()
        for name in host:
            np.testing.assert_array_equal(np.asarray(batch[name]), host[name])
    assert not _prefetch_threads()


def test_an_error_is_raised_at_its_step():
    def make_batch(step):
        if step == 3:
            raise ValueError("bad row at step 3")
        return step

    batches = prefetch(make_batch, range(10))
    assert [next(batches) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="bad row at step 3"):
        next(batches)


def test_the_thread_stays_within_its_lead_and_stops_with_the_loop():
    made = []
    batches = prefetch(lambda step: made.append(step) or step, range(1000), depth=2)
    assert next(batches) == 0
    time.sleep(0.3)  # time for the thread to run ahead as far as it may
    # Two batches wait in the queue and a third is made, waiting for room: never the whole range.
    assert len(made) <= 4
    batches.close()
    assert not _prefetch_threads()
