"""Many devices: a tiny run on 4 CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=4) follows
the 1-device run of the same global batch, and so does one resumed under FSDP from the 1-device run's
checkpoint; tokens_per_sec counts the tokens the batches hold. The 1-device runs happen in this process, the
4-device ones in a subprocess, since the device count is fixed when JAX starts. And bfloat16 compute stays close
to float32 with float32 state."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from jax.sharding import PartitionSpec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GLOBAL_BATCH, STEPS = 16, 10
EVAL_BATCH = 30  # not a multiple of 4: the 4-device evaluation pads it to 32
RUNS = {1: {"reference": {}},
        4: {"replicated": {}, "resumed": {"sharding.params": "fsdp",  # the same global batch on 4 devices:
                                          "resume_with_changes": "sharding,per_device_batch_size"}}}
# Float32 sums over 4 devices add in another order than over 1: last-bit differences, which Adam's
# normalised steps carry into the parameters at about the same relative size...
LOSS_RTOL, PARAMS_ATOL = 1e-5, 1e-5
# ...but for the key projections' biases: softmax ignores a score shift shared by a query's keys, so their
# gradient is rounding noise, which Adam scales up to steps of up to about the learning rate.
NOISE_DRIVEN, NOISE_ATOL = "['key']['bias']", 2e-3  # the tiny config's peak learning rate


def _config(files, devices: int, overrides: dict):
    from configs import translation as translation_config

    config = translation_config.get_config("tiny")
    config.dataset.name = "files"
    config.dataset.train_file, config.dataset.test_file = files
    config.num_train_steps, config.log_every_steps = STEPS, 1
    config.eval_every_steps, config.checkpoint_every_steps = STEPS, 5
    config.per_device_batch_size = GLOBAL_BATCH // devices
    config.eval.batch_size = EVAL_BATCH
    for field, value in overrides.items():
        parent, _, name = field.rpartition(".")
        (config[parent] if parent else config)[name] = value
    return config


def _train(out: str, devices: int, files) -> None:
    """Trains the runs of RUNS[devices] in `out`/<run>; writes the final state's parameters, and the
    dtypes and partition specs of its arrays, next to them."""
    import jax
    from jax.tree_util import keystr, tree_flatten_with_path

    from runtime.checkpoints import Checkpoints
    from tasks import translation
    from training import loop

    assert jax.device_count() == devices
    save, final = Checkpoints.save, {}
    decode, final["decoded_on"] = translation.greedy_decode, []

    def recording_decode(model, source, max_len, ids):  # how the final evaluation's batches are placed
        jax.debug.inspect_array_sharding(source, callback=lambda placement: final["decoded_on"].append(
            [placement.num_devices, list(getattr(placement, "spec", None) or [])]))
        return decode(model, source, max_len, ids=ids)

    def recording_save(self, step, state, metadata):
        if step == STEPS:
            leaves = tree_flatten_with_path(state)[0]
            final["dtypes"] = {keystr(path): x.dtype.name for path, x in leaves}
            final["specs"] = {keystr(path): list(x.sharding.spec) for path, x in leaves}
            np.savez(final["params_path"], **{keystr(path): np.asarray(x)
                                              for path, x in tree_flatten_with_path(state["params"])[0]})
        save(self, step, state, metadata)

    with pytest.MonkeyPatch.context() as patch:  # undone after: the 1-device runs share the test's process
        patch.setattr(translation, "greedy_decode", recording_decode)
        patch.setattr(Checkpoints, "save", recording_save)
        for run, overrides in RUNS[devices].items():
            workdir = os.path.join(out, run)
            if run == "resumed":  # the 1-device run cut back to its step-5 checkpoint (not finished: no eval.json)
                shutil.copytree(os.path.join(out, "reference"), workdir)
                shutil.rmtree(os.path.join(workdir, "checkpoints", str(STEPS)))
                os.remove(os.path.join(workdir, "eval.json"))
            final["params_path"] = os.path.join(out, f"{run}_params.npz")
            loop.train_and_evaluate(_config(files, devices, overrides), workdir)
            with open(os.path.join(out, f"{run}_state.json"), "w") as f:
                json.dump({"dtypes": final["dtypes"], "specs": final["specs"], "decoded_on": final["decoded_on"]}, f)
            final["decoded_on"] = []


@pytest.fixture(scope="module")
def runs(data_files, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("sharding"))
    _train(out, 1, data_files)  # first: the resumed 4-device run starts from its checkpoint
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu",  # CPU devices even beside a GPU
           "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4"}
    child = subprocess.run([sys.executable, __file__, out, "4", *data_files], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stdout + child.stderr

    def load(run):
        with open(os.path.join(out, run, "metrics.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        with open(os.path.join(out, f"{run}_state.json")) as f:
            state = json.load(f)
        with open(os.path.join(out, run, "eval.json")) as f:
            evaluated = json.load(f)
        return {"train": [line for line in lines if line["split"] == "train"],
                "eval": [line for line in lines if line["split"] == "eval"], "final": evaluated,
                "params": dict(np.load(os.path.join(out, f"{run}_params.npz"))), **state}

    return {run: load(run) for names in RUNS.values() for run in names}


def _assert_same_training(run: dict, reference: dict, first_step: int = 1) -> None:
    train = [line for line in reference["train"] if line["step"] >= first_step]
    lines = [line for line in run["train"] if line["step"] >= first_step]
    assert [line["step"] for line in lines] == [line["step"] for line in train]
    for line, expected in zip(lines, train):
        assert line["loss"] == pytest.approx(expected["loss"], rel=LOSS_RTOL), line["step"]
        assert line["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-4), line["step"]
    [evaluated], [expected] = run["eval"], reference["eval"]
    assert evaluated["loss"] == pytest.approx(expected["loss"], rel=LOSS_RTOL)
    # Padding rows weigh nothing: the same counts over the same validation examples.
    assert evaluated["token_accuracy"] == pytest.approx(expected["token_accuracy"], abs=1e-6)
    assert evaluated["exact_match"] == pytest.approx(expected["exact_match"], abs=1e-6)
    assert run["params"].keys() == reference["params"].keys()
    for name, value in reference["params"].items():
        atol = NOISE_ATOL if NOISE_DRIVEN in name else PARAMS_ATOL
        np.testing.assert_allclose(run["params"][name], value, rtol=0, atol=atol, err_msg=name)


def test_four_devices_follow_the_one_device_run_of_the_same_global_batch(runs):
    assert {line["step"] for line in runs["reference"]["train"]} == set(range(1, STEPS + 1))
    _assert_same_training(runs["replicated"], runs["reference"])
    assert all(spec == [] for spec in runs["replicated"]["specs"].values())  # nothing split


@pytest.mark.parametrize("run", ["replicated", "resumed"])
def test_four_devices_evaluate_the_final_model_like_one_device(runs, run):
    """eval.json: greedy exact match, BLEU, teacher-forced metrics and ranks, with the decoding batches
    padded (30 rows to 32) and split over the 4 devices as the periodic evaluation's are."""
    final, reference = runs[run]["final"], runs["reference"]["final"]
    assert runs[run]["decoded_on"] == [[4, ["data"]]]  # one compilation serves both batches of 32
    assert [devices for devices, _ in runs["reference"]["decoded_on"]] == [1]
    assert final["num_examples"] == reference["num_examples"] == 40
    assert final["metrics"]["exact_match"] == reference["metrics"]["exact_match"]
    assert final["metrics"]["bleu"] == pytest.approx(reference["metrics"]["bleu"], abs=1e-9)
    for name in ("token_accuracy", "loss"):
        assert final["metrics"][name] == pytest.approx(reference["metrics"][name], rel=LOSS_RTOL)
    assert [(row["role"], row["layer"]) for row in final["rank"]] == [
        (row["role"], row["layer"]) for row in reference["rank"]]
    for row, expected in zip(final["rank"], reference["rank"]):
        for name, value in expected.items():
            if isinstance(value, float):
                assert row[name] == pytest.approx(value, rel=1e-3, abs=1e-6), (row["role"], name)
            else:
                assert row[name] == value, (row["role"], name)


def _expected_fsdp_spec(shape: tuple, devices: int = 4) -> list:
    """The largest axis of a size divisible by the devices (the first of equals), as PartitionSpec reads."""
    candidates = [(size, -axis) for axis, size in enumerate(shape) if size % devices == 0]
    if not candidates:
        return []
    axis = -max(candidates)[1]
    return [None] * axis + ["data"] + [None] * (len(shape) - axis - 1)


def _trimmed(spec: list) -> list:
    while spec and spec[-1] is None:  # P("data", None) and P("data") are the same placement
        spec = spec[:-1]
    return spec


def test_fsdp_splits_params_and_adam_moments_along_their_largest_divisible_axis(runs):
    run = runs["resumed"]  # restored from a 1-device checkpoint onto these shardings
    split = 0
    for name, value in run["params"].items():
        expected = _trimmed(_expected_fsdp_spec(value.shape))
        assert _trimmed(run["specs"]["['params']" + name]) == expected, name
        split += bool(expected)
        moments = [key for key in run["specs"] if key.startswith("['opt_state']") and key.endswith(name)]
        assert len(moments) == 2, moments  # Adam's mu and nu
        assert all(_trimmed(run["specs"][key]) == expected for key in moments), name
    assert split >= len(run["params"]) // 2  # most arrays of the tiny model do split over 4


def test_a_one_device_checkpoint_resumes_to_the_same_training_on_four_devices_under_fsdp(runs):
    run = runs["resumed"]
    assert [line["step"] for line in run["train"]] == list(range(1, STEPS + 1))
    _assert_same_training(run, runs["reference"], first_step=6)


def test_bfloat16_compute_keeps_float32_state_and_a_loss_close_to_float32(runs, data_files, tmp_path):
    import jax
    from flax import nnx

    from data import pipeline
    from tasks import translation
    from training import steps

    config = _config(data_files, 1, {})  # the reference run's config, batches and schedule
    data = translation.prepare_data(config, str(tmp_path))
    optimizer = steps.create_optimizer(config)
    graphdef, state = steps.init_state(translation.create_model(config, data), optimizer)
    seen = set()  # the dtypes of the parameters the model computes with

    def loss_fn(model, batch):
        seen.update(x.dtype.name for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
        return translation.metric_sums(model, batch)

    train_step = steps.make_train_step(graphdef, optimizer, loss_fn, jax.random.key(0),
                                       compute_dtype="bfloat16")
    losses = []
    for step in range(STEPS):
        batch = pipeline.batch_at_step(data.train, GLOBAL_BATCH, config.seed, step)
        state, metrics = train_step(state, batch)
        losses.append(float(metrics["loss"] / metrics["tokens"]))
    assert seen == {"bfloat16"}
    stored = {x.dtype.name for x in jax.tree.leaves((state["params"], state["opt_state"]))}
    assert stored == {"float32", "int32"}  # int32: Adam's step count
    assert np.all(np.isfinite(losses))
    # bfloat16 keeps 8 bits of mantissa (relative rounding 2**-9 = 0.2%) in every matmul of a 3-layer-deep
    # model; over 10 steps the rounding drifts the loss by well under 5%, while a wrong cast (integer ids,
    # float32 lost) would be off by far more.
    np.testing.assert_allclose(losses, [line["loss"] for line in runs["reference"]["train"]], rtol=0.05)


def test_tokens_per_sec_counts_the_non_padding_tokens_of_each_step(runs, data_files, tmp_path):
    from data import pipeline
    from tasks import translation

    data = translation.prepare_data(_config(data_files, 1, {}), str(tmp_path))
    for line in runs["replicated"]["train"]:  # logged every step: the window is that step
        batch = pipeline.batch_at_step(data.train, GLOBAL_BATCH, 0, line["step"] - 1)
        tokens = np.count_nonzero(batch["source"]) + np.count_nonzero(batch["decoder_input"])  # PAD is 0
        assert line["tokens_per_sec"] == pytest.approx(line["steps_per_sec"] * tokens, rel=1e-6)


@pytest.mark.parametrize("shape, spec", [((6, 8), PartitionSpec(None, "data")),
                                         ((8, 8), PartitionSpec("data", None)),
                                         ((16, 3, 4), PartitionSpec("data", None, None)),
                                         ((3, 5), PartitionSpec()), ((), PartitionSpec())])
def test_fsdp_spec_picks_the_largest_axis_divisible_by_the_devices(shape, spec):
    from training import sharding

    assert sharding.fsdp_spec(shape, 4) == spec


@pytest.mark.parametrize("field, value, message", [
    ("sharding.params", "zero3", "sharding.params='zero3'.*choose one of: replicated, fsdp"),
    ("compute_dtype", "float16", "compute_dtype='float16'.*choose one of: float32, bfloat16")])
def test_bad_device_fields_fail_before_compilation(tiny_config, tmp_path, field, value, message, monkeypatch):
    from training import loop
    from training.validate import ConfigError

    config = tiny_config()
    parent, _, name = field.rpartition(".")
    (config[parent] if parent else config)[name] = value
    monkeypatch.setattr(loop, "make_train_step", lambda *args, **kwargs: pytest.fail("compiled"))
    with pytest.raises(ConfigError, match=message):
        loop.train_and_evaluate(config, str(tmp_path))


if __name__ == "__main__":
    _train(sys.argv[1], int(sys.argv[2]), sys.argv[3:5])
