"""studies/summaries.py (python -m scripts.summarize_runs) on hand-written eval.json files; what the scripts
say of unreadable ones; every script's command line (python -m scripts.<name>, absl flags)."""
import importlib
import inspect
import json
import os
import pkgutil
import re
import subprocess
import sys

import pytest

from runtime.workdirs import WorkdirError
import scripts
from scripts import command_line, compare, summarize_runs
from studies import jobs, summaries

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = sorted(module.name for module in pkgutil.iter_modules(scripts.__path__) if module.name != "command_line")


def _row(role, layer, head, numerical, bound):
    return {"role": role, "layer": layer, "head": head, "seq_len": 6, "numerical_rank": numerical,
            "effective_rank": numerical / 2, "stable_rank": 1.0, "rank_bound": bound}


def test_tables_average_ranks_over_layers_and_heads(tmp_path):
    result = {
        "step": 10, "task": "translation", "split": "test", "num_examples": 3,
        "attention": {"encoder_self": "linear", "decoder_self": "linear", "cross": "softmax"},
        "metrics": {"exact_match": 0.5, "loss": 1.25},
        "rank": [_row("encoder_self", 0, 0, 2.0, 4), _row("encoder_self", 1, 0, 4.0, 4),
                 _row("decoder_self", 0, 0, 6.0, None), _row("cross", 0, 0, 5.0, None)],
    }
    (tmp_path / "eval.json").write_text(json.dumps(result))
    results = {str(tmp_path): summaries.load(str(tmp_path))}
    assert summaries.workdir_metrics_table(results).splitlines()[2] == f"| {tmp_path} | linear/softmax | 0.5000 | 1.2500 |"
    rows = summaries.workdir_rank_table(results).splitlines()[2:]
    assert rows == [f"| {tmp_path} | encoder_self | linear | 6 | 3.00 | 1.50 | 1.00 | 4 |",
                    f"| {tmp_path} | decoder_self | linear | 6 | 6.00 | 3.00 | 1.00 | - |",
                    f"| {tmp_path} | cross | softmax | 6 | 5.00 | 2.50 | 1.00 | - |"]


def _eval_json(directory, task, metrics, rank=()):
    directory.mkdir(parents=True, exist_ok=True)
    result = {"task": task, "attention": {"encoder_self": "softmax"}, "metrics": metrics, "rank": list(rank)}
    (directory / "eval.json").write_text(json.dumps(result))
    return str(directory)


def test_runs_of_two_tasks_get_a_metrics_table_each(tmp_path):
    translation = _eval_json(tmp_path / "scan", "translation", {"exact_match": 0.5})
    mlm = _eval_json(tmp_path / "mlm", "mlm", {"masked_accuracy": 0.25}, [_row("encoder_self", 0, 0, 2.0, 4)])
    results = {workdir: summaries.load(workdir) for workdir in (translation, mlm)}
    first, second = summaries.workdir_metrics_table(results).split("\n\n")
    assert first.splitlines()[0] == "| run | attention | exact_match |"
    assert first.splitlines()[2:] == [f"| {translation} | softmax | 0.5000 |"]
    assert second.splitlines()[0] == "| run | attention | masked_accuracy |"
    assert second.splitlines()[2:] == [f"| {mlm} | softmax | 0.2500 |"]
    # The translation run has no rank rows for its role: the rank table leaves it out.
    assert [row.split(" | ")[0] for row in summaries.workdir_rank_table(results).splitlines()[2:]] == [f"| {mlm}"]


@pytest.mark.parametrize("content, reason", [
    ("{\"task\": ", "not readable as JSON"),
    ("[1, 2]", "holds a JSON list, not an object"),
    ("{\"task\": \"mlm\"}", "no metrics, attention, rank; not an eval.json of this lab"),
    ("{\"task\": \"mlm\", \"metrics\": [1], \"attention\": {}, \"rank\": []}", "metrics is not an object"),
    ("{\"task\": \"mlm\", \"metrics\": {}, \"attention\": {}, \"rank\": [{\"role\": 1}]}", "rank is not a list"),
])
def test_an_unreadable_eval_json_is_named_with_its_reason(tmp_path, content, reason, capsys):
    (tmp_path / "eval.json").write_text(content)
    with pytest.raises(SystemExit) as exit:
        summarize_runs.main([str(tmp_path)])
    assert exit.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'eval.json'}: {reason}")


def test_compare_treats_an_eval_json_cut_short_as_unfinished_and_names_a_bad_config_json(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"num_train_steps": 10}))
    (tmp_path / "eval.json").write_text("{\"step\": 1")
    assert not jobs.is_finished(str(tmp_path))
    assert f"warning: {tmp_path / 'eval.json'}: not readable as JSON" in capsys.readouterr().out
    (tmp_path / "eval.json").write_text(json.dumps({"step": 10}))
    assert jobs.is_finished(str(tmp_path))
    (tmp_path / "config.json").write_bytes(b"\xff\xfe")
    with pytest.raises(WorkdirError, match=re.escape(f"{tmp_path / 'config.json'}: not readable as JSON")):
        jobs.is_finished(str(tmp_path))


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_runs_as_a_module_and_reads_absl_flags_only(name, capsys):
    module = importlib.import_module(f"scripts.{name}")
    with pytest.raises(SystemExit) as exit:
        module.main(["--help"])
    assert exit.value.code == 0 and f"python -m scripts.{name}" in capsys.readouterr().out
    source = inspect.getsource(module)
    assert "sys.path" not in source and "argparse" not in source


def test_a_wrong_flag_is_named_with_status_2_and_a_later_parse_starts_from_the_defaults(capsys):
    with pytest.raises(SystemExit) as exit:
        compare.main(["--task=mlm", "--jobs=0"])
    assert exit.value.code == 2 and "--jobs=0: 0 is not a positive integer" in capsys.readouterr().err
    assert command_line.parse(compare.FLAGS, ["--task=mlm", "--jobs=3"], "").jobs == 3
    assert command_line.parse(compare.FLAGS, ["--task=mlm"], "").jobs is None
    with pytest.raises(SystemExit):
        command_line.parse(compare.FLAGS, ["--task=mlm", "runs/x"], "")
    assert "unexpected arguments runs/x" in capsys.readouterr().err


def test_a_script_runs_with_python_dash_m_from_the_repository_root(tmp_path):
    missing = tmp_path / "absent"
    process = subprocess.run([sys.executable, "-m", "scripts.summarize_runs", str(missing)], cwd=ROOT,
                             capture_output=True, text=True)
    assert process.returncode == 2 and process.stderr.startswith(f"error: {missing / 'eval.json'}: not found")
