"""An offline W&B run (no account, no network) holds what the run logged: train, eval and test metrics,
per-layer rank and shape scalars, attention state sizes, the rank and shape tables, the spectra as charts and the heat maps."""
import glob
import json
import os

import pytest


@pytest.fixture(autouse=True)
def fresh_wandb():
    """W&B reads its settings once per process, at its first run: a run an earlier test in this worker
    started (or its leftovers) would otherwise decide this one's, and its keys might never reach the file."""
    import wandb

    wandb.teardown()
    yield
    wandb.teardown()


def test_an_offline_run_writes_every_logged_key_to_the_workdir(tiny_config, tmp_path, monkeypatch, capfd):
    from training import loop

    monkeypatch.setenv("WANDB_MODE", "offline")
    config = tiny_config()
    config.eval.plots = True
    loop.train_and_evaluate(config, str(tmp_path))
    # The run's own closing line ends what it prints: W&B prints no summary of its own.
    printed = capfd.readouterr()
    assert printed.out.strip().splitlines()[-1].startswith("done: 20 steps in ")
    assert "Run summary:" not in printed.out + printed.err and "Run history:" not in printed.out + printed.err
    (run_dir,) = glob.glob(str(tmp_path / "wandb" / "offline-run-*"))
    (log_file,) = glob.glob(os.path.join(run_dir, "*.wandb"))
    with open(log_file, "rb") as f:
        logged = f.read()
    keys = ["train/loss", "train/learning_rate", "train/grad_norm", "train/steps_per_sec", "train/tokens_per_sec",
            "eval/exact_match", "test/bleu",
            *(f"rank/{role}/layer0/{metric}" for role in ("encoder_self", "decoder_self", "cross")
              for metric in ("numerical", "effective", "stable")),
            *(f"shape/{role}/layer0/{metric}" for role in ("encoder_self", "decoder_self", "cross")
              for metric in ("row_entropy", "top1_weight", "logit_spread")),
            *(f"state/{role}/{size}" for role in ("encoder_self", "decoder_self", "cross")
              for size in ("per_head", "total")), "runtime", "device_kind", "jaxlib"]
    assert [key for key in keys if key.encode() not in logged] == []
    media = os.path.join(run_dir, "files", "media")
    assert glob.glob(os.path.join(media, "table", "rank", "*.table.json"))
    assert glob.glob(os.path.join(media, "table", "shape", "*.table.json"))
    images = glob.glob(os.path.join(media, "images", "plots", "*"))
    assert {os.path.basename(path).split("_")[0] for path in images} == {"attention"}
    # The spectra as data, one line chart per role and layer: s / s_max against its index.
    with open(tmp_path / "spectra.json") as f:
        spectra = json.load(f)
    for role, layers in spectra.items():
        for layer, spectrum in enumerate(layers):
            (path,) = glob.glob(os.path.join(media, "table", "spectra", role, f"layer{layer}_table_*.table.json"))
            with open(path) as f:
                table = json.load(f)
            assert table["columns"] == ["index", "s / s_max"]
            assert table["data"] == [[i, pytest.approx(s)] for i, s in enumerate(spectrum)]
