"""train.py and eval.py as a user runs them: a mistake in the flags, the config, the data or the workdir is
one line on stderr and exit status 2, with nothing written; --debug brings the traceback back."""
import json
import os
import shutil
import subprocess
import sys

import pytest

import attention
from configs import workdir as configs_workdir
from data import paths
from kind_harness import package_kinds
from runtime import locks
from script_runner import ScriptRunner
from tasks import translation
from training import evaluation, loop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def run_script():
    """run_script(script, *flags, debug=False, cwd=ROOT) -> the CompletedProcess of `python <script> <flags>`
    in `cwd`: a process of its own, forked from one that imported what the scripts import, which leaves out
    most of each command's start (tests/script_runner.py)."""
    env = {key: value for key, value in os.environ.items() if key != "ATTENTION_LAB_DEBUG"}
    env["WANDB_MODE"] = "disabled"
    runner = ScriptRunner(env)

    def run(script: str, *flags: str, debug: bool = False, cwd: str = ROOT) -> subprocess.CompletedProcess:
        return runner.run(script, *flags, *(["--debug"] if debug else []), cwd=str(cwd))

    yield run
    runner.close()


def _one_error_line(process: subprocess.CompletedProcess) -> str:
    """The only line of stderr, which must be an error; exit status 2."""
    assert process.returncode == 2, process.stdout + process.stderr
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), process.stderr
    return lines[0]


@pytest.fixture(scope="module")
def trained(tiny_run):
    """(workdir, the train.py flags of its config) of a finished tiny run (the session's: tests copy it)."""
    config, workdir = tiny_run
    flags = ["--config=configs/translation.py:tiny", "--config.eval.plots=True",
             "--config.dataset.name=files", f"--config.dataset.train_file={config.dataset.train_file}",
             f"--config.dataset.test_file={config.dataset.test_file}"]
    return workdir, flags


def _files(workdir: str) -> dict[str, bytes]:
    contents = {}
    for parent, _, names in os.walk(workdir):
        for name in set(names) - {locks.LOCK_FILE}:  # the lock holds the PID of the last process
            with open(os.path.join(parent, name), "rb") as f:
                contents[os.path.relpath(os.path.join(parent, name), workdir)] = f.read()
    return contents


@pytest.mark.parametrize("flags, line", [
    (["--config.attention.nonsense=1"],
     f"error: --config.attention.nonsense: no such field of {ROOT}/configs/translation.py; did you mean "),
    (["--config.learning_rate=-1"], "error: config.learning_rate=-1.0 must be a number in (0, inf)"),
    (["--config.model.dropout_rate=1.5"], "error: config.model.dropout_rate=1.5 must be a number in [0, 1)"),
    (["--config.attention.num_features=0", "--config.attention.name=performer"],
     "error: config.attention options for kind 'performer': num_features=0 must be an integer >= 1"),
    (["--config.attention.eps=0", "--config.attention.name=linear"],
     "error: config.attention options for kind 'linear': eps=0.0 must be a number > 0"),
    (["--config=configs/translation.py:tiny,attention=linear", "--config.attention.num_features=128"],
     "error: config.attention.num_features=128 is read by no kind in use (encoder_self: linear, decoder_self: linear, "
     "cross: linear), only by performer; leave it at 64"),
    (["--config=configs/translation.py:tiny", "--config.attention.window=8"],
     "error: config.attention.window=8 is read by no kind in use (encoder_self: softmax, decoder_self: softmax, "
     "cross: softmax), only by based, local, local_predictive; leave it at 3"),
    (["--config=configs/translation.py:nope"], "error: unknown config preset 'nope'; known presets: "),
    (["--config=configs/translation.py:tny"], "error: unknown config preset 'tny'; known presets: attention, "
                                              "full_train, rnn, split, tiny; did you mean tiny?"),
    (["--config.dataset.train_file=/tmp/x.tsv"],
     "error: config.dataset.train_file='/tmp/x.tsv' is read only when dataset.name='files' (it is 'scan'); "
     "add --config.dataset.name=files, or leave train_file out"),
    (["--config.learning_rate=fast"], "error: flag --config.learning_rate=fast: "),
    (["--config.attention.softmax_implementation=cudnn"],  # refused before the first step compiles, not by it
     "error: config.attention.softmax_implementation='cudnn' (kind 'softmax') cannot run here: it needs an NVIDIA "
     "GPU; this process runs on cpu; use 'auto' (it takes what runs here) or 'xla'"),
    (["--config.attention.implementation=cudnn"],  # the option before its split: no alias, its replacements named
     f"error: --config.attention.implementation: no such field of {ROOT}/configs/translation.py; it is replaced by "
     "softmax_implementation (auto, xla, cudnn; read by dot, scaled_dot, softmax) and kernelized_implementation "
     "(auto, xla, pallas, autodiff; read by based, "),
])
def test_a_bad_config_is_one_line_and_creates_no_workdir(run_script, tmp_path, flags, line):
    workdir = tmp_path / "run"
    error = _one_error_line(run_script("train.py", f"--workdir={workdir}", *flags))
    assert error.startswith(line), error
    assert not workdir.exists()


@pytest.mark.parametrize("body, overrides, what", [
    ('def get_config():\n    return {"task": "translation"}\n', [],
     "get_config() returned a dict, not an ml_collections ConfigDict; "),
    ('def get_config():\n    return {"seed": 0}\n', ["--config.seed=1"],
     "get_config() returned a dict, not an ml_collections ConfigDict; "),
    ("SEED = 0\n", [], "defines no get_config(); "),
])
def test_a_config_files_own_mistake_is_named_with_the_file(run_script, tmp_path, body, overrides, what):
    config_file = tmp_path / "my_config.py"
    config_file.write_text(body)
    for script in ("train.py", "eval.py"):
        error = _one_error_line(run_script(script, f"--config={config_file}", f"--workdir={tmp_path / 'run'}",
                                           *overrides))
        assert error.startswith(f"error: {config_file}: {what}"), error
    assert not (tmp_path / "run").exists()


def test_a_misspelled_kind_is_named_with_the_closest_kinds(run_script):
    error = _one_error_line(run_script("train.py", "--workdir=unused", "--config.attention.name=softmx"))
    assert error.endswith(f"{', '.join(package_kinds())}; did you mean softmax, softmax_rank, softmax_capped?"), error


# Seconds to import, for training, evaluation and reports only: a refused config answers without them.
MACHINERY = ("training.loop", "training.packed", "orbax.checkpoint", "scipy", "matplotlib")


@pytest.mark.parametrize("script", ["train.py", "eval.py"])
def test_a_misspelled_preset_value_is_refused_before_the_machinery_is_imported(script, tmp_path):
    """A process of its own (run_script's would have imported everything already), with -X importtime, whose
    lines on stderr name each module imported before the error."""
    env = {key: value for key, value in os.environ.items() if key != "ATTENTION_LAB_DEBUG"}
    process = subprocess.run([sys.executable, "-X", "importtime", script, f"--workdir={tmp_path / 'run'}",
                              "--config=configs/translation.py:tiny,attention=linaer"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    lines = process.stderr.splitlines()
    imported = {line.rpartition("|")[2].strip() for line in lines if line.startswith("import time:")}
    error = _one_error_line(subprocess.CompletedProcess(process.args, process.returncode, process.stdout, "\n".join(
        line for line in lines if not line.startswith("import time:"))))
    assert error.startswith("error: config.attention.name='linaer' is not allowed; ") and error.endswith(
        "; did you mean linear?"), error
    assert "training.validate" in imported and {"tasks.translation", "tasks.mlm"} <= imported  # the whole check
    assert sorted(imported & set(MACHINERY)) == []
    assert not (tmp_path / "run").exists()


def test_a_misspelled_config_file_is_named_with_the_closest_config_files(run_script, tmp_path):
    error = _one_error_line(run_script("train.py", "--config=configs/translaton.py:tiny"))
    assert error == ("error: --config=configs/translaton.py:tiny: configs/translaton.py: no such config file; did "
                     "you mean configs/translation.py?")
    (tmp_path / "mine.py").write_text("def get_config():\n    pass\n")
    (tmp_path / "mini.py").write_text("SEED = 0\n")  # not a config file: no get_config
    error = _one_error_line(run_script("eval.py", f"--workdir={tmp_path}", f"--config={tmp_path}/mime.py"))
    assert error.endswith(f"no such config file; did you mean {tmp_path}/mine.py?"), error
    error = _one_error_line(run_script("train.py", "--config=elsewhere/x.py"))
    assert error.endswith(": no such config file; the configs are in configs/"), error


def test_print_config_prints_the_resolved_config_and_what_the_overrides_changed(run_script, tmp_path):
    process = run_script("train.py", "--print_config", f"--config={ROOT}/configs/translation.py:tiny",
                   "--config.num_train_steps=7", "--config.model.d_model=32", cwd=str(tmp_path))
    assert process.returncode == 0, process.stderr
    *printed, last = process.stdout.strip().splitlines()
    # d_model=32 is what the tiny preset sets: no change to report.
    assert last == "config: configs/translation.py:tiny; changed: num_train_steps=7 (preset: 20)"
    resolved = json.loads("\n".join(printed))
    assert (resolved["num_train_steps"], resolved["model"]["d_model"], resolved["task"]) == (7, 32, "translation")
    assert os.listdir(tmp_path) == []  # no workdir, nothing written where it ran
    # The fields softmax and the Transformer read: no option of another kind, no field of the RNN.
    assert sorted(resolved["attention"]) == ["cross", "decoder_self", "dropout_rate", "encoder_self", "name",
                                             "softmax_implementation"]
    assert "cell" not in resolved["model"] and "mlp_dim" in resolved["model"]
    assert process.stderr.strip().endswith("left out (--print_config=all prints every field)")
    every = run_script("train.py", "--print_config=all", f"--config={ROOT}/configs/translation.py:tiny")
    resolved = json.loads("\n".join(every.stdout.strip().splitlines()[:-1]))
    assert {"num_features", "window"} <= set(resolved["attention"]) and "cell" in resolved["model"]
    error = _one_error_line(run_script("train.py", "--config=configs/translation.py:tiny"))
    assert error.startswith("error: --workdir is missing"), error
    error = _one_error_line(run_script("eval.py"))
    assert error.startswith("error: --workdir is missing; name the run to evaluate"), error


def test_a_finished_run_says_so_and_writes_nothing_unless_asked_to_evaluate_again(run_script, trained, tmp_path,
                                                                                    monkeypatch):
    workdir, flags = trained
    copy = str(tmp_path / "run")
    shutil.copytree(workdir, copy)
    before = _files(copy)
    process = run_script("train.py", f"--workdir={copy}", *flags)
    assert process.returncode == 0, process.stderr
    with open(os.path.join(copy, "eval.json")) as f:
        exact_match = json.load(f)["metrics"]["exact_match"]
    first, *_, last = process.stdout.strip().splitlines()
    assert first.startswith("config: configs/translation.py:tiny; changed: dataset.name='files' (preset: 'scan')")
    assert last.startswith(f"done: 20 steps, trained and evaluated before; test exact_match {exact_match:.4f}, ")
    assert last.endswith(f"eval.json in {copy} (--evaluate_again to evaluate it again)")
    assert _files(copy) == before  # no second event file, no config.json rewritten
    evaluated = []
    monkeypatch.setattr(evaluation, "evaluate_and_write", lambda *args: evaluated.append(args[-1]) or
                        {"metrics": {}, "rank": []})
    config = configs_workdir.get_config(copy)
    loop.train_and_evaluate(config, copy, evaluate_again=True)
    assert evaluated == [20]


def test_the_default_config_and_the_datasets_are_the_repositorys_from_any_directory(run_script, tmp_path, monkeypatch):
    error = _one_error_line(run_script("train.py", "--workdir=run", "--config.model.num_layer=1", cwd=str(tmp_path)))
    assert error.startswith(f"error: --config.model.num_layer: no such field of {ROOT}/configs/translation.py; "
                            f"did you mean model.num_layers")
    monkeypatch.chdir(tmp_path)
    assert paths.data_dir("datasets") == os.path.join(ROOT, "datasets")
    assert paths.data_dir("/elsewhere/datasets") == "/elsewhere/datasets"


def test_a_data_file_that_is_not_utf8_is_one_line_with_file_and_line(run_script, tmp_path, data_files):
    bad = tmp_path / "latin1.tsv"
    bad.write_bytes("walk\tI_WALK\ncaf\u00e9\tI_RUN\n".encode("latin-1"))
    error = _one_error_line(run_script("train.py", f"--workdir={tmp_path / 'run'}",
                                       "--config=configs/translation.py:tiny", "--config.dataset.name=files",
                                       f"--config.dataset.train_file={bad}",
                                       f"--config.dataset.test_file={data_files[1]}"))
    assert error.startswith(f"error: {bad}:2: not UTF-8"), error
    assert not (tmp_path / "run").exists()


def test_a_refused_restart_and_a_refused_eval_leave_the_workdir_as_it_was(run_script, trained, tmp_path):
    workdir, flags = trained
    copy = str(tmp_path / "run")
    shutil.copytree(workdir, copy)
    before = _files(copy)
    error = _one_error_line(run_script("train.py", f"--workdir={copy}", *flags, "--config.attention.name=dot"))
    assert error == (f"error: {copy}/config.json: this workdir trained another config (attention.name 'softmax' "
                     f"-> 'dot'); train this one in a new --workdir")
    error = _one_error_line(run_script("eval.py", f"--workdir={copy}", *flags, "--config.attention.name=dot"))
    assert "attention.name 'softmax' -> 'dot'); leave out --config to evaluate it as it was trained" in error
    assert _files(copy) == before


def test_eval_reads_the_workdir_config_and_takes_eval_overrides(run_script, trained, tmp_path):
    workdir, _ = trained
    copy = str(tmp_path / "run")
    shutil.copytree(workdir, copy)
    process = run_script("eval.py", f"--workdir={copy}", "--config.eval.beam_size=2")
    assert process.returncode == 0, process.stderr
    with open(os.path.join(copy, "eval.json")) as f:
        result = json.load(f)
    assert result["config"]["eval"]["beam_size"] == 2
    assert process.stdout.strip().splitlines()[-1] == (
        f"evaluated the checkpoint at step 20 on the {result['split']} split: "
        f"exact_match {result['metrics']['exact_match']:.4f}, token_accuracy "
        f"{result['metrics']['token_accuracy']:.4f}, bleu {result['metrics']['bleu']:.4f}, loss "
        f"{result['metrics']['loss']:.4f}; written to {copy}/eval.json")


def test_eval_of_a_missing_workdir_creates_nothing(run_script, tmp_path):
    missing = tmp_path / "absent"
    error = _one_error_line(run_script("eval.py", f"--workdir={missing}"))
    assert error.startswith(f"error: --workdir={missing}: no such directory"), error
    assert not missing.exists()
    # An empty --workdir leaves eval.py without its default config: named before the config is read.
    assert _one_error_line(run_script("eval.py", "--workdir=")).startswith("error: --workdir is empty")


def test_debug_shows_the_traceback(run_script, tmp_path):
    process = run_script("train.py", f"--workdir={tmp_path / 'run'}", "--config.learning_rate=-1", debug=True)
    assert process.returncode != 0 and "Traceback" in process.stderr
    assert "config.learning_rate=-1.0 must be a number in (0, inf)" in process.stderr


def test_help_lists_each_configs_presets_and_every_kind_with_its_options(run_script):
    process = run_script("train.py", "--help")  # absl's help exits with status 1
    assert process.stderr == ""
    for preset in ("split=<split>", "pooling=<head>", "form=<form>", "corpus=<name>", "configs/workdir.py:runs/x"):
        assert preset in process.stdout
    kinds = {line.split()[0]: line.split(maxsplit=1)[1] for line in process.stdout.splitlines()
             if line.startswith("  ") and line.split()[0] in attention.names()}
    assert kinds.keys() == set(package_kinds())  # not a kind a test registered in this process
    assert kinds["performer"] == ", ".join(attention.options("performer"))
