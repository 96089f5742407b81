"""An offline W&B run (no account, no network) holds what the run logged: train, eval and test metrics,
per-layer rank and shape scalars, attention state sizes, the rank and shape tables, the spectra as charts and
the heat maps. What W&B cannot do is refused in one line, in seconds and before the workdir is touched
(online without a key or a server that answers, a wandb_id.txt that holds no run id); a failing finish is a
warning."""
import glob
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
    import wandb

    wandb.teardown()  # W&B's service holds the end of the run's log file until it stops
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


@pytest.fixture
def no_wandb_login(tmp_path, monkeypatch):
    """Online W&B with no API key anywhere: no $WANDB_API_KEY, no ~/.netrc, no W&B settings of this user."""
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NETRC", str(tmp_path / "home" / ".netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "home" / "wandb"))


def _refused_before_the_workdir(config, workdir: str, match: str) -> None:
    import time

    from training import loop
    from training.metrics import WandbError

    before = {name: open(os.path.join(workdir, name), "rb").read() for name in os.listdir(workdir)
              if os.path.isfile(os.path.join(workdir, name))} if os.path.isdir(workdir) else None
    started = time.time()
    with pytest.raises(WandbError, match=match):
        loop.train_and_evaluate(config, workdir)
    assert time.time() - started < 30  # W&B's own retries take minutes
    after = {name: open(os.path.join(workdir, name), "rb").read() for name in os.listdir(workdir)
             if os.path.isfile(os.path.join(workdir, name))} if os.path.isdir(workdir) else None
    assert after == before  # no config.json rewritten, no metrics, no checkpoint: nothing trained


def test_online_without_an_api_key_is_refused_naming_login_and_offline(tiny_config, tmp_path, no_wandb_login):
    _refused_before_the_workdir(tiny_config(), str(tmp_path / "run"),
                                r"no API key: run `wandb login` .*WANDB_MODE=offline")


def test_online_with_a_server_that_does_not_answer_is_refused_in_seconds(tiny_config, tmp_path, no_wandb_login,
                                                                          monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # the discard port: nothing listens there
    _refused_before_the_workdir(tiny_config(), str(tmp_path / "run"),
                                r"the W&B server http://127.0.0.1:9 does not answer .*WANDB_MODE=offline")


def test_a_wandb_id_file_that_holds_no_run_id_is_refused_before_config_json_changes(tiny_config, tmp_path,
                                                                                    monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / "config.json").write_text("{}")  # what a resumed run would rewrite
    (workdir / "wandb_id.txt").write_bytes(b"\x00garbage: not/an id\n")
    config = tiny_config()
    config.num_train_steps, config.resume_with_changes = 30, "num_train_steps"
    _refused_before_the_workdir(config, str(workdir),
                                rf"{re.escape(str(workdir / 'wandb_id.txt'))}: not a W&B run id .*; delete the file")


@pytest.mark.parametrize("key", [None, "0" * 40], ids=["no_key", "unreachable_server"])
def test_train_py_refused_by_wandb_ends_in_one_line(tiny_config, tmp_path, no_wandb_login, key):
    config = tiny_config()
    env = {**os.environ, "ATTENTION_LAB_DEBUG": "0"}
    if key:
        env.update(WANDB_API_KEY=key, WANDB_BASE_URL="http://127.0.0.1:9")
    process = subprocess.run(
        [sys.executable, "train.py", "--config=configs/translation.py:tiny", f"--workdir={tmp_path / 'run'}",
         "--config.dataset.name=files", f"--config.dataset.train_file={config.dataset.train_file}",
         f"--config.dataset.test_file={config.dataset.test_file}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert process.returncode == 2, process.stderr
    lines = process.stderr.strip().splitlines()
    expected = ("error: the W&B server http://127.0.0.1:9 does not answer" if key else
                "error: WANDB_MODE=online, but W&B has no API key")
    assert len(lines) == 1 and lines[0].startswith(expected), process.stderr
    assert not (tmp_path / "run").exists()


def test_a_wandb_finish_that_fails_is_a_warning(tiny_config, tmp_path, capsys):
    from training.metrics import MetricsWriter

    class FailingRun:
        def finish(self):
            raise ConnectionError("upload failed\nretry details")

    writer = MetricsWriter(str(tmp_path), tiny_config(), 0)  # W&B disabled: the failing run is put in its place
    writer.run = FailingRun()
    writer.close()
    assert capsys.readouterr().out.startswith("warning: W&B did not finish its run (ConnectionError: upload failed); "
                                              "the training and its files in the workdir are complete")


def test_the_hosts_after_the_first_never_log_to_wandb(tiny_config, tmp_path, monkeypatch):
    from training.metrics import MetricsWriter

    monkeypatch.setenv("WANDB_MODE", "offline")  # as the whole cluster's environment may say
    writer = MetricsWriter(str(tmp_path), tiny_config(), 0, to_wandb=False)
    writer.close()
    assert writer.run is None and not (tmp_path / "wandb").exists() and not (tmp_path / "wandb_id.txt").exists()
