"""The step loop leaves the device alone between logging windows: each training step runs under
jax.transfer_guard("disallow"), which refuses any implicit transfer (a Python or numpy value fed to the
step, a float() of a device value: on a GPU or TPU; on the CPU, arrays already live on the host and only
host-to-device transfers are guarded), and the window's metrics come to the host once per window (and once
per checkpoint, which saves them), through one explicit jax.device_get."""
import jax
import pytest

from training import evaluation, loop

pytestmark = pytest.mark.accelerator  # make test-accelerator runs it where device-to-host is guarded too


def test_steps_transfer_nothing_implicitly_and_the_host_reads_once_per_window(tiny_config, tmp_path, monkeypatch):
    config = tiny_config()  # 20 steps, logged every 5, checkpointed every 10
    make_train_step = loop.make_train_step

    def guarded_train_step(*args, **kwargs):
        train_step = make_train_step(*args, **kwargs)

        def step(state, batch):
            with jax.transfer_guard("disallow"):
                return train_step(state, batch)

        return step

    reads = []
    host = loop.Window.host
    monkeypatch.setattr(loop, "make_train_step", guarded_train_step)
    monkeypatch.setattr(loop.Window, "host", lambda window: reads.append(len(window.steps)) or host(window))
    # The final evaluation comes after the step loop (decoding, ranks): not what this test watches.
    monkeypatch.setattr(evaluation, "evaluate_and_write", lambda *args: {"metrics": {}, "rank": []})
    loop.train_and_evaluate(config, str(tmp_path / "run"))
    # Windows of 5 steps at 5, 10, 15, 20; a checkpoint at 10 and 20 saves the window just emptied.
    assert reads == [5, 5, 0, 5, 5, 0]
