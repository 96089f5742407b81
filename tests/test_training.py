"""The whole loop on tiny data: files written, resume, evaluation, loss going down, config errors."""
import glob
import json
import os
import shutil
import struct
import zlib

import jax
import numpy as np
import pytest

from analysis import plots
from data import pipeline
from data.files import DataFileError
from runtime import devices
from studies import jobs
from tasks import translation
from training import evaluation, loop, metrics, steps
from training.loop import evaluate
from training.validate import ConfigError

pytestmark = pytest.mark.accelerator  # make test-accelerator runs these on the GPU or TPU


@pytest.fixture(scope="module")
def trained(tiny_run):
    """(config, workdir, eval.json) of the session's tiny run (with plots); tests copy it before writing."""
    config, workdir = tiny_run
    with open(os.path.join(workdir, "eval.json")) as f:
        return config, workdir, json.load(f)


def _lines(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_eval_json_has_the_documented_keys(trained):
    config, _, written = trained
    assert set(written) == {"step", "task", "split", "num_examples", "attention", "metrics", "rank", "shape",
                            "state", "config", "runtime"}
    assert written["config"] == json.loads(json.dumps(config.to_dict()))
    assert written["runtime"] == devices.runtime()  # platform, device kind and count, jax and jaxlib
    assert (written["step"], written["task"], written["num_examples"]) == (20, "translation", 40)
    assert written["attention"] == {"encoder_self": "softmax", "decoder_self": "softmax", "cross": "softmax"}
    assert set(written["metrics"]) == {"exact_match", "token_accuracy", "bleu", "loss"}
    rows = written["rank"]
    layers, heads = config.model.num_layers, config.model.num_heads
    head_dim = config.model.d_model // heads
    for role, state in written["state"].items():  # softmax keeps every key and value of a head
        assert (state["kind"], state["feature_dim"]) == ("softmax", None)
        assert state["per_head"] == state["seq_len"] * 2 * head_dim
        assert state["total"] == state["per_head"] * heads * layers
    assert written["state"]["cross"]["seq_len"] == written["state"]["encoder_self"]["seq_len"]  # the source's
    assert len(rows) == 3 * layers * heads
    assert {(r["role"], r["layer"], r["head"]) for r in rows} == {
        (role, layer, head) for role in ("encoder_self", "decoder_self", "cross")
        for layer in range(layers) for head in range(heads)}
    for row in rows:
        assert set(row) == {"role", "layer", "head", "seq_len", "numerical_rank", "effective_rank",
                            "stable_rank", "max_numerical_rank", "rank_bound", "matrices", "matrices_bindable",
                            "matrices_over_bound"}
        assert row["rank_bound"] is None  # softmax
        # Means over examples of per-matrix values, so only orderings that hold per matrix are checked.
        assert 1 <= row["stable_rank"] <= row["numerical_rank"] + 1e-6
    # Shapes of the same matrices: every row of each, the decoder's (target) rows in its self- and
    # cross-attention alike; softmax has a logit spread.
    shapes = written["shape"]
    assert [(r["role"], r["layer"], r["head"], r["query_rows"]) for r in shapes] == [
        (r["role"], r["layer"], r["head"], "all") for r in rows]
    target_rows = {r["rows"] for r in shapes if r["role"] in ("decoder_self", "cross")}
    assert len(target_rows) == 1 and all(r["logit_spread"] is not None for r in shapes)


def test_workdir_holds_config_metrics_checkpoints_and_plots(trained):
    config, workdir, _ = trained
    with open(os.path.join(workdir, "config.json")) as f:
        recorded = json.load(f)
    assert recorded["attention"]["name"] == "softmax" and recorded["runtime"] == devices.runtime()
    lines = _lines(workdir)
    train_lines = [line for line in lines if line["split"] == "train"]
    eval_lines = [line for line in lines if line["split"] == "eval"]
    assert [line["step"] for line in train_lines] == [5, 10, 15, 20]
    assert [line["step"] for line in eval_lines] == [10, 20]
    for line in train_lines:
        assert {"loss", "learning_rate", "steps_per_sec", "elapsed_s"} <= set(line)
    for line in eval_lines:
        assert {"loss", "token_accuracy", "exact_match"} <= set(line)
    assert os.path.isdir(os.path.join(workdir, "checkpoints", "20"))
    for plot in ("attention.png", "spectra.png", "curves.png"):
        with open(os.path.join(workdir, "plots", plot), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # The example attention.png draws, kept for a study's side-by-side figure: softmax rows of its unpadded
    # block sum to 1, in every role, layer and head.
    example = evaluation.read_attention_example(os.path.join(workdir, "plots", evaluation.ATTENTION_EXAMPLE))
    assert set(example) == {"encoder_self", "decoder_self", "cross"}
    for entry in example.values():
        layers, heads, queries, keys = entry["weights"].shape
        assert (layers, heads) == (config.model.num_layers, config.model.num_heads)
        assert (len(entry["query_tokens"]), len(entry["key_tokens"])) == (queries, keys)
        np.testing.assert_allclose(entry["weights"].sum(-1), 1.0, atol=3e-3)  # float16 on disk


def test_the_attention_and_spectra_figures_are_titled_with_the_run_the_kind_and_the_step(trained, tmp_path,
                                                                                        monkeypatch):
    _, workdir, result = trained
    copy = str(tmp_path / "run")
    shutil.copytree(workdir, copy)
    titles = {}
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: titles.setdefault(os.path.basename(path),
                                                                                  fig.get_suptitle()))
    evaluation.draw_evaluation_plots(copy, result)
    assert titles == {"attention.png": f"{copy} | softmax | step 20", "spectra.png": f"{copy} | softmax | step 20"}


def test_resume_continues_from_the_latest_checkpoint(trained, tmp_path):
    config, workdir, _ = trained
    resumed = str(tmp_path / "resumed")
    shutil.copytree(workdir, resumed)
    config = config.copy_and_resolve_references()
    config.num_train_steps = 30
    config.profile_steps = "22,24"
    # Without it, the restart is refused (test_workdirs.py).
    config.resume_with_changes = "num_train_steps,profile_steps"
    loop.train_and_evaluate(config, resumed)
    lines = [line for line in _lines(resumed) if line["split"] == "train"]
    assert [line["step"] for line in lines] == [5, 10, 15, 20, 25, 30]
    elapsed = [line["elapsed_s"] for line in lines]
    assert elapsed == sorted(elapsed)  # elapsed_s is carried across the restart
    assert glob.glob(os.path.join(resumed, "profile", "plugins", "profile", "*", "*.xplane.pb"))
    assert not glob.glob(os.path.join(workdir, "profile"))  # profile_steps="" traces nothing


def _event_values(workdir: str) -> list[tuple[int, object]]:
    """(step, Summary.Value) of every value in the workdir's TensorBoard event files: TFRecords (length, its
    CRC, the record, its CRC) of tensorboardX's Event protos."""
    from tensorboardX.proto import event_pb2

    values = []
    for path in glob.glob(os.path.join(workdir, "events.out.tfevents.*")):
        with open(path, "rb") as f:
            data = f.read()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
            offset += 12 + length + 4
            values += [(event.step, value) for value in event.summary.value]
    return values


def _event_scalars(workdir: str) -> dict[tuple[str, int], float]:
    """(tag, step) -> value of the scalars in the workdir's TensorBoard event files."""
    return {(value.tag, step): value.simple_value for step, value in _event_values(workdir)
            if value.WhichOneof("value") == "simple_value"}


def _flat(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        flat.update(_flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return flat


def test_tensorboard_events_hold_the_config_the_hparams_and_the_figures(trained):
    """What TensorBoard's text, hparams and images tabs read, from the plugins' data in the event files."""
    from tensorboardX.proto import plugin_hparams_pb2

    _, workdir, _ = trained
    with open(os.path.join(workdir, "config.json")) as f:
        config = {key: value for key, value in json.load(f).items() if key != "runtime"}
    by_plugin = {}
    for step, value in _event_values(workdir):
        by_plugin.setdefault(value.metadata.plugin_data.plugin_name or value.WhichOneof("value"), []).append(
            (step, value))
    [(step, text)] = by_plugin["text"]
    assert (step, text.tag) == (0, "config/text_summary")
    assert json.loads(text.tensor.string_val[0].decode()) == config
    hparams = [plugin_hparams_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
               for _, value in by_plugin["hparams"]]
    [experiment] = [data.experiment for data in hparams if data.HasField("experiment")]
    assert [metric.name.tag for metric in experiment.metric_infos] == ["eval/exact_match", "test/exact_match"]
    [start] = [data.session_start_info for data in hparams if data.HasField("session_start_info")]
    scalar_fields = {field: value for field, value in _flat(config).items()
                     if not isinstance(value, (list, type(None)))}
    assert set(start.hparams) == set(scalar_fields)
    for field, value in scalar_fields.items():
        stored = start.hparams[field]
        assert (stored.string_value if isinstance(value, str) else stored.bool_value if isinstance(value, bool)
                else stored.number_value) == value, field
    [end] = [data.session_end_info for data in hparams if data.HasField("session_end_info")]
    assert end.status == 1  # STATUS_SUCCESS: the run trained to its end and was evaluated
    images = {value.tag: (step, value.image) for step, value in by_plugin["image"]}
    assert set(images) == {"plots/attention", "plots/spectra"}
    for tag, (step, image) in images.items():
        with open(os.path.join(workdir, "plots", f"{tag.split('/')[1]}.png"), "rb") as f:
            width, height = struct.unpack(">II", f.read(24)[16:24])  # the PNG's IHDR chunk
        assert (step, image.width, image.height) == (20, width, height)
        assert image.encoded_image_string.startswith(b"\x89PNG")


def test_tensorboard_events_hold_every_metric_the_run_logged(trained):
    _, workdir, result = trained
    scalars = _event_scalars(workdir)
    logged = {(f"{line['split']}/{key}", line["step"]): value for line in _lines(workdir)
              for key, value in line.items() if key not in ("step", "split", "elapsed_s")}
    logged.update({(tag, 20): value for tag, value in metrics.evaluation_scalars(result).items()})
    assert {"train/loss", "eval/exact_match", "test/bleu", "rank/cross/layer0/stable",
            "shape/cross/layer0/row_entropy", "shape/decoder_self/layer0/logit_spread"} <= {tag for tag, _ in logged}
    assert scalars == pytest.approx(logged, rel=1e-6)


def test_evaluation_scalars_average_shape_rows_over_heads_and_name_a_selection():
    def row(head, query_rows, entropy, spread):
        return {"role": "encoder_self", "layer": 1, "head": head, "query_rows": query_rows, "rows": 8,
                "row_entropy": entropy, "entropy_fraction": None, "top1_weight": 0.5, "top1_above_half": 0.25,
                "logit_spread": spread}

    result = {"metrics": {"loss": 1.0}, "rank": [],
              "shape": [row(0, "all", 1.0, None), row(1, "all", 2.0, None), row(0, "recall", 3.0, 4.0)]}
    assert metrics.evaluation_scalars(result) == {
        "test/loss": 1.0,
        "shape/encoder_self/layer1/row_entropy": 1.5, "shape/encoder_self/layer1/top1_weight": 0.5,
        "shape/encoder_self/layer1/top1_above_half": 0.25,
        "shape/encoder_self/layer1/recall/row_entropy": 3.0, "shape/encoder_self/layer1/recall/top1_weight": 0.5,
        "shape/encoder_self/layer1/recall/top1_above_half": 0.25, "shape/encoder_self/layer1/recall/logit_spread": 4.0}
    assert metrics.evaluation_scalars({"metrics": {}, "rank": []}) == {}  # a task that writes no shape rows


def test_eval_py_restores_the_trained_parameters(trained, tmp_path):
    config, workdir, result = trained
    copy = str(tmp_path / "copy")
    shutil.copytree(workdir, copy)
    restored = evaluate(config, copy)
    assert restored["metrics"]["exact_match"] == result["metrics"]["exact_match"]
    assert restored["metrics"]["loss"] == pytest.approx(result["metrics"]["loss"], rel=1e-5)


def test_an_evaluation_without_plots_still_keeps_the_attention_example(trained, tmp_path):
    config, workdir, _ = trained
    copy = str(tmp_path / "copy")
    shutil.copytree(workdir, copy, ignore=shutil.ignore_patterns("plots"))
    config = config.copy_and_resolve_references()
    config.eval.plots = False
    evaluate(config, copy)
    assert os.listdir(os.path.join(copy, "plots")) == [evaluation.ATTENTION_EXAMPLE]


def test_a_few_training_steps_lower_the_loss(tiny_config, tmp_path):
    config = tiny_config()
    config.num_train_steps = 200  # a schedule that is still near its peak over the 30 steps below
    data = translation.prepare_data(config, str(tmp_path))
    optimizer = steps.create_optimizer(config)
    graphdef, state = steps.init_state(translation.create_model(config, data), optimizer)
    train_step = steps.make_train_step(graphdef, optimizer, translation.metric_sums, jax.random.key(1))
    batch = pipeline.batch_at_step(data.train, 16, seed=0, step=0)
    losses = []
    for _ in range(30):
        state, metrics = train_step(state, batch)
        losses.append(float(metrics["loss"] / metrics["tokens"]))
    assert losses[-1] < 0.5 * losses[0]


def test_validation_is_held_out_of_the_training_file_unless_switched_off(tiny_config, data_files, tmp_path):
    from data import files

    config = tiny_config()
    data = translation.prepare_data(config, str(tmp_path))
    lines = files.read_parallel_file(data_files[0], 256, 256)
    held = [pair for pair in lines if zlib.crc32(pair[0].encode("utf-8")) % 10 == 0]
    assert len(data.validation["source"]) == len(held) > 0
    assert len(data.train["source"]) == len(lines) - len(held)
    assert not {r.tobytes() for r in data.validation["source"]} & {r.tobytes() for r in data.train["source"]}
    assert len(data.test["source"]) == 40

    config.dataset.hold_out_validation = False
    data = translation.prepare_data(config, str(tmp_path))
    assert data.validation is None and len(data.train["source"]) == len(lines)


def test_a_training_file_with_no_validation_command_says_so(tiny_config, data_files, tmp_path):
    train = tmp_path / "train.tsv"
    train.write_text("walk\tI_WALK\nwalk after run\tI_RUN I_WALK\n")  # CRC-32 mod 10: neither is 0
    config = tiny_config(files=(str(train), data_files[1]))
    with pytest.raises(ConfigError, match="none of the 2 training commands falls in the validation rule"):
        translation.prepare_data(config, str(tmp_path))


def test_training_on_the_full_file_runs_no_periodic_evaluation(tiny_config, tmp_path):
    config = tiny_config(arg="tiny,full_train")  # the tiny schedule: the trained fixture's compiled train step
    config.eval_every_steps = 2  # due at every other step, yet none runs
    result = loop.train_and_evaluate(config, str(tmp_path))
    with open(tmp_path / "metrics.jsonl") as f:
        assert {json.loads(line)["split"] for line in f} == {"train"}
    assert result["split"] == "test"
    with open(tmp_path / "eval.json") as f:
        assert json.load(f) == json.loads(json.dumps(result))  # what train_and_evaluate returns is written


ERRORS = [
    ({"attention.name": "nope"}, ConfigError, "attention.name='nope'.*choose one of: .*linear.*softmax"),
    ({"attention.cross": "nope"}, ConfigError, "attention.cross"),
    ({"model.num_heads": 3}, ConfigError, "d_model=32 is not divisible by config.model.num_heads=3"),
    ({"dataset.name": "scan", "dataset.split": "nope", "dataset.train_file": "", "dataset.test_file": ""},
     ConfigError, "simple, length, add_jump, add_turn_left"),
    ({"dataset.name": "scan"}, ConfigError, "dataset.train_file='.*' is read only when dataset.name='files'"),
    ({"dataset.train_file": "/nonexistent/train.tsv"}, ConfigError, "/nonexistent/train.tsv.*not found"),
    ({"attention.num_fetures": 3}, ConfigError, "num_fetures"),
    ({"attention.name": "taylor", "attention.taylor_order": 3}, ConfigError, "taylor_order"),
    ({"attention.cross": "local", "attention.window": -1}, ConfigError, "kind 'local'.*window"),
    ({"nonfinite": "ignore"}, ConfigError, "nonfinite='ignore'.*choose one of: stop, skip"),
    ({"profile_steps": "5"}, ConfigError, "profile_steps='5' must be \"start,stop\""),
    ({"profile_steps": "0,5"}, ConfigError, r"profile_steps='0,5' must have 1 <= start < stop <= num_train_steps=20"),
]


@pytest.mark.parametrize("overrides, error, message", ERRORS)
def test_bad_configs_fail_before_compilation(tiny_config, tmp_path, monkeypatch, overrides, error, message):
    config = tiny_config()
    with config.unlocked():
        for field, value in overrides.items():
            parent, _, name = field.rpartition(".")
            (config[parent] if parent else config)[name] = value
    monkeypatch.setattr(loop, "make_train_step", _no_compilation)
    with pytest.raises(error, match=message):
        loop.train_and_evaluate(config, str(tmp_path))


def test_malformed_data_file_names_file_and_line(tiny_config, data_files, tmp_path, monkeypatch):
    bad = tmp_path / "bad.tsv"
    bad.write_text("walk\tI_WALK\nwalk twice I_WALK I_WALK\n")
    config = tiny_config((str(bad), data_files[1]))
    monkeypatch.setattr(loop, "make_train_step", _no_compilation)
    with pytest.raises(DataFileError, match=f"{bad}:2:"):
        loop.train_and_evaluate(config, str(tmp_path / "run"))


def _no_compilation(*args, **kwargs):
    raise AssertionError("the error should have come before the train step was built")


def test_steps_per_second_leave_out_evaluation_and_checkpoint_time():
    now = [100.0]
    progress = loop.Progress(step=0, total=30, clock=lambda: now[0])
    now[0] += 2.0  # 10 steps of training
    with progress.paused():
        now[0] += 8.0  # an evaluation and a checkpoint
    assert progress.update(10)[0] == 5.0
    now[0] += 4.0  # the next window: no pause carried over
    assert progress.update(20)[0] == 2.5


def test_the_eta_is_at_the_pace_after_the_first_step_whose_call_compiles_and_counts_the_evaluations():
    now = [0.0]
    progress = loop.Progress(step=50, total=150, eval_every=50, clock=lambda: now[0])  # a run resumed at step 50
    now[0] += 30.0  # step 51: compilation
    progress.first_step_done(51)
    assert progress.update(51) == (pytest.approx(1 / 30), "-")  # no pace known yet
    now[0] += 9.0  # steps 52 to 60, a second each
    assert progress.update(60) == (pytest.approx(1.0), "1m30s + evaluation")  # 90 steps; no evaluation timed yet
    now[0] += 40.0  # steps 61 to 100, logged before their evaluation
    assert progress.update(100) == (pytest.approx(1.0), "0m50s + evaluation")
    with progress.paused(evaluation=True):
        now[0] += 20.0  # the evaluation at step 100
    now[0] += 10.0  # steps 101 to 110
    # 40 steps at that pace, then the evaluation at step 150 and the final one, 20 s each as the one timed
    assert progress.update(110) == (pytest.approx(1.0), "1m20s")


def test_training_stops_at_the_first_validation_that_reaches_the_early_stop(tiny_config, tmp_path, capsys):
    """eval.stop_metric reached at the validation of step 10 of 20: a checkpoint there, eval.json of step 10,
    and a rerun, also one whose final evaluation was interrupted, trains no further."""
    config = tiny_config()
    config.eval.stop_metric, config.eval.stop_at = "token_accuracy", 0.0  # any accuracy reaches it
    workdir = str(tmp_path)
    result = loop.train_and_evaluate(config, workdir)
    lines = metrics.read_metrics(workdir)
    assert result["step"] == 10 and max(line["step"] for line in lines) == 10
    assert [line["step"] for line in lines if line["split"] == "train"] == [5, 10]
    assert "reached eval.stop_at=0.0 at step 10 of 20" in capsys.readouterr().out
    assert jobs.is_finished(workdir)  # a study reports it done, not failed
    assert loop.train_and_evaluate(config, workdir) == result
    assert "done: 10 steps, trained and evaluated before" in capsys.readouterr().out
    os.remove(os.path.join(workdir, evaluation.EVAL_FILE))
    assert loop.train_and_evaluate(config, workdir)["step"] == 10 and metrics.read_metrics(workdir) == lines
    config.eval.stop_at = 1.5  # an accuracy never reaches it: refused, not run to the end silently
    with pytest.raises(ConfigError, match=r"^config.eval.stop_at=1.5 must be a number in \[0, 1\]; token_accuracy "
                                          "is a fraction: above 1 training would never stop early$"):
        loop.train_and_evaluate(config, str(tmp_path / "other"))
    config.eval.stop_metric = ""  # a stop value without its metric would be ignored
    with pytest.raises(ConfigError, match=r"^config.eval.stop_at=1.5 is read only with eval.stop_metric, which is "
                                          "empty; set config.eval.stop_metric='token_accuracy' to stop there$"):
        loop.train_and_evaluate(config, str(tmp_path / "other"))
    config.eval.stop_metric = "bleu"
    with pytest.raises(ConfigError, match="eval.stop_metric='bleu'.*token_accuracy"):
        loop.train_and_evaluate(config, str(tmp_path / "other"))
