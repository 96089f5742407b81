"""The device stream of MLM batches (data/device_stream.py) against the host stream (data/mlm.py): the same rules,
another stream of random numbers. Over an epoch every row once and the same number of predictions; the masks'
shares of MASK, random and kept tokens, and of the recall slice, those of the host stream."""
import numpy as np
import pytest

from data import device_stream, mlm, mlm_baselines
from data.tokenizer import MASK, PAD

MASKING = {"vocab_size": 40, "max_predictions": 5}
N, L, B = 96, 32, 16


def _rows(seed=0):
    """Rows of a small vocabulary (repeated left neighbours: a recall slice), some ending in padding."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(5, MASKING["vocab_size"], (N, L)).astype(np.int32)
    for row, length in enumerate(rng.integers(L // 2, L + 1, N)):
        rows[row, length:] = PAD
    return rows


def _epoch(batches):
    return {name: np.concatenate([np.asarray(batch[name]) for batch in batches]) for name in batches[0]}


def test_an_epoch_holds_every_row_once_and_the_host_streams_number_of_predictions():
    rows = _rows()
    at_step = device_stream.DeviceBatches(rows, B, seed=3, **MASKING)
    device = _epoch([at_step(step) for step in range(N // B)])
    host = _epoch([mlm.batch_at_step(rows, B, 3, step, **MASKING) for step in range(N // B)])
    # The targets at their positions rebuild each row; every row of the table once.
    rebuilt = device["inputs"].copy()
    real = device["weights"] > 0
    rebuilt[np.nonzero(real)[0], device["positions"][real]] = device["targets"][real]
    assert sorted(map(bytes, rebuilt)) == sorted(map(bytes, rows))
    assert device["weights"].sum() == host["weights"].sum()
    again = device_stream.DeviceBatches(rows, B, seed=3, **MASKING)(2)  # a function of (seed, step)
    assert all(np.array_equal(again[name], at_step(2)[name]) for name in again)


def test_the_masks_shares_are_the_host_streams():
    """80% MASK, 10% random, 10% kept among the predicted tokens, and the recall slice's share, within 3 points of
    the host stream's over 40 batches of each."""
    rows = _rows(1)
    at_step = device_stream.DeviceBatches(rows, B, seed=0, **MASKING)
    shares = {}
    for name, batches in (("device", [at_step(step) for step in range(40)]),
                          ("host", [mlm.batch_at_step(rows, B, 0, step, **MASKING) for step in range(40)])):
        batch = _epoch(batches)
        used = batch["weights"] > 0
        shown = np.take_along_axis(batch["inputs"], batch["positions"], axis=1)[used]
        targets = batch["targets"][used]
        recall = mlm_baselines.recall_slice(batch["inputs"], batch["positions"], batch["targets"])[used]
        shares[name] = np.array([(shown == MASK).mean(), (shown == targets).mean(), recall.mean()])
        outside = np.ones_like(batch["inputs"], bool)
        outside[np.nonzero(used)[0], batch["positions"][used]] = False
        assert np.all((batch["inputs"] != MASK) | ~outside)  # nothing masked outside the predicted positions
    assert np.all(np.abs(shares["device"] - shares["host"]) < 0.03), shares


def test_a_batch_that_runs_past_the_epoch_takes_the_next_epochs_order():
    """20 rows in batches of 16: step 1 ends epoch 0 with 4 rows and starts epoch 1 with 12; steps 0 and 1 together
    hold epoch 0's 20 rows once, and the 12 are epoch 1's first."""
    orders = [np.random.default_rng(epoch).permutation(20) for epoch in (0, 1)]
    first, second = (np.asarray(device_stream.batch_rows(orders, 20, 16, step)) for step in (0, 1))
    assert sorted([*first, *second[:4]]) == list(range(20)) and list(second[4:]) == list(orders[1][:12])
    stream = device_stream.DeviceBatches(_rows()[:20], 16, seed=0, **MASKING)
    stream(1)
    assert sorted(stream._orders) == [0, 1]  # step 1 ran past epoch 0: both orders, each computed once


def test_the_loop_takes_the_device_stream_where_the_config_says_so(tmp_path):
    """config.dataset.stream="device": the loop's batches are the device stream's, on the run's mesh; packed training,
    which builds its batches on the host, refuses it."""
    import types

    import tasks
    from configs import mlm as mlm_config
    from training import loop, packed, sharding, validate

    config = mlm_config.get_config("tiny")
    config.dataset.stream = "device"
    validate.validate(config)
    task = tasks.get("mlm")
    data = task.prepare_data(config, str(tmp_path))
    run = types.SimpleNamespace(task=task, config=config, data=data, mesh=sharding.data_mesh())
    first = next(loop.train_batches(run, 4, range(3, 5)))
    want = device_stream.DeviceBatches(data.train, 4, config.seed, **data.masking)(3)
    assert all(np.array_equal(first[name], want[name]) for name in want)
    assert first["inputs"].sharding == sharding.batch_sharding(run.mesh, 2)
    with pytest.raises(validate.ConfigError, match="^config.dataset.stream='device': packed runs build"):
        packed.check_packable([config, config])
    config.dataset.stream = "disk"
    with pytest.raises(validate.ConfigError, match="dataset.stream"):
        validate.validate(config)
