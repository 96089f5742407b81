"""A workdir survives what an ordinary user does to it: a full disk during a restart leaves config.json and
metrics.jsonl byte-identical, a cut metrics line is repaired, a second process is refused naming the PID
of the first, a run is never shortened, and paths that cannot be workdirs end in one line."""
import errno
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import warnings

import pytest

from runtime import atomic, locks, workdirs
from runtime.checkpoints import CheckpointError, Checkpoints, write_error
from runtime.workdirs import CONFIG_FILE, WorkdirError
from tasks import translation
from training import evaluation, loop
from training.metrics import METRICS_FILE, MetricsWriter, read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def finished(tiny_config, tmp_path_factory):
    """(config, workdir) of a finished 6-step tiny run checkpointed at 3 and 6, without its final evaluation."""
    config = tiny_config()
    config.num_train_steps, config.log_every_steps, config.checkpoint_every_steps = 6, 2, 3
    config.eval_every_steps = 3
    workdir = str(tmp_path_factory.mktemp("finished"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(evaluation, "evaluate_and_write", lambda *args: {"metrics": {}, "rank": []})
        loop.train_and_evaluate(config, workdir)
    return config, workdir


@pytest.fixture
def copy(finished, tmp_path):
    workdir = str(tmp_path / "run")
    shutil.copytree(finished[1], workdir)
    return workdir


def _contents(workdir: str, *names: str) -> dict[str, bytes]:
    result = {}
    for name in names:
        with open(os.path.join(workdir, name), "rb") as f:
            result[name] = f.read()
    return result


def _train_flags(config, workdir: str) -> list[str]:
    return ["--config=configs/translation.py:tiny", f"--workdir={workdir}", "--config.num_train_steps=6",
            "--config.log_every_steps=2", "--config.checkpoint_every_steps=3", "--config.eval_every_steps=3",
            "--config.dataset.name=files", f"--config.dataset.train_file={config.dataset.train_file}",
            f"--config.dataset.test_file={config.dataset.test_file}"]


# train.py where no file may grow past 256 bytes (a full disk, as far as any write can tell): a write past it
# fails with EFBIG rather than killing the process with SIGXFSZ.
SMALL_DISK_TRAIN = ("import resource, runpy, signal, sys\n"
                    "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
                    "resource.setrlimit(resource.RLIMIT_FSIZE, (256, resource.RLIM_INFINITY))\n"
                    "sys.argv = ['train.py', *sys.argv[1:]]\n"
                    "runpy.run_path('train.py', run_name='__main__')")


def test_a_full_disk_during_a_restart_leaves_config_and_metrics_byte_identical(finished, copy):
    # Without the latest checkpoint the restart resumes at step 3: it would rewrite metrics.jsonl too.
    shutil.rmtree(os.path.join(copy, "checkpoints", "6"))
    before = _contents(copy, CONFIG_FILE, METRICS_FILE)
    env = {**os.environ, "WANDB_MODE": "disabled", "JAX_PLATFORMS": "cpu"}
    env.pop("ATTENTION_LAB_DEBUG", None)
    process = subprocess.run([sys.executable, "-c", SMALL_DISK_TRAIN, *_train_flags(finished[0], copy)], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=300)
    assert process.returncode == 2, process.stdout + process.stderr
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {os.path.join(copy, METRICS_FILE)}: File too large"), \
        process.stderr
    assert "are as they were" in lines[0] and "rerun the same command" in lines[0]
    assert _contents(copy, CONFIG_FILE, METRICS_FILE) == before
    assert not [name for name in os.listdir(copy) if name.endswith(".tmp")]


def test_a_restart_the_file_size_limit_stops_ends_in_one_line_with_nothing_of_tensorboardx(finished, copy):
    """`ulimit -f 1` on a run extended: config.json's rewrite fails, while tensorboardX's thread is writing the
    event file and its close at exit flushes it; neither may add a traceback to the one line."""
    flags = [*_train_flags(finished[0], copy), "--config.num_train_steps=9",
             "--config.resume_with_changes=num_train_steps"]
    env = {**os.environ, "WANDB_MODE": "disabled", "JAX_PLATFORMS": "cpu"}
    env.pop("ATTENTION_LAB_DEBUG", None)
    process = subprocess.run([sys.executable, "-c", SMALL_DISK_TRAIN.replace("(256,", "(1024,"), *flags], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=300)
    assert process.returncode == 2, process.stdout + process.stderr
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {os.path.join(copy, CONFIG_FILE)}: File too large"), \
        process.stderr
    assert "Traceback" not in process.stdout + process.stderr, process.stdout


@pytest.mark.parametrize("fails", ["write", "flush"])
def test_an_event_file_the_disk_refuses_is_the_one_line_naming_it(finished, tmp_path, monkeypatch, capfd, fails):
    """tensorboardX writes the event file in its own thread, and flushes it there and in this one: the first
    failure is raised here, at the next flush or at close, as the error of the workdir's other files."""
    from tensorboardX import record_writer

    monkeypatch.setattr(threading, "excepthook", threading.__excepthook__)  # Python's, which prints; not pytest's
    writer = MetricsWriter(str(tmp_path), finished[0], resume_step=0)
    def full_disk(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(record_writer.RecordWriter, fails, full_disk)
    with pytest.raises(atomic.DiskError) as refused:
        writer.write(1, "train", 0.0, {"loss": 1.0})
        writer.close()  # where the thread had not written the line's events yet
    assert re.fullmatch(rf"{re.escape(str(tmp_path))}/events\.out\.tfevents\.[^/]+: No space left on device; the "
                        rf"files already in {re.escape(str(tmp_path))} are as they were\..*", str(refused.value))
    writer.events.close()  # what tensorboardX's atexit does: quiet, the error above said it
    captured = capfd.readouterr()
    assert "Traceback" not in captured.out + captured.err, captured.err


def test_a_failed_metrics_rewrite_leaves_the_file_intact(finished, copy, monkeypatch):
    before = _contents(copy, METRICS_FILE)

    def full_disk(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic.os, "fsync", full_disk)
    with pytest.raises(atomic.DiskError, match=f"{METRICS_FILE}: No space left on device; the files already in"):
        MetricsWriter(copy, finished[0], resume_step=3)
    monkeypatch.undo()
    assert _contents(copy, METRICS_FILE) == before
    assert not [name for name in os.listdir(copy) if name.endswith(".tmp")]


def test_a_cut_last_metrics_line_is_dropped_on_resume_with_a_warning(finished, copy, capsys):
    path = os.path.join(copy, METRICS_FILE)
    complete = read_metrics(copy)
    with open(path, "a") as f:
        f.write('{"step": 7, "split": "tr')  # a kill or a full disk midway through a line
    assert read_metrics(copy) == complete
    assert "its last line is cut short" in capsys.readouterr().out
    MetricsWriter(copy, finished[0], resume_step=6)
    with open(path) as f:
        assert f.read().endswith("}\n")
    with open(path, "a") as f:
        f.write("not json\n{\"step\": 8}\n")
    with pytest.raises(WorkdirError, match=rf"{METRICS_FILE}:\d+: not a line of metrics"):
        read_metrics(copy)


def test_a_second_process_on_the_workdir_is_refused_naming_the_pid(finished, copy):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom runtime import locks\n"
         "with locks.held(sys.argv[1], 'train.py'):\n    print('held', flush=True)\n    time.sleep(120)", copy],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        checkpoints = sorted(os.listdir(os.path.join(copy, "checkpoints")))
        assert locks.holder(copy) == f"process {holder.pid} (train.py)"
        for entry in (loop.train_and_evaluate, loop.evaluate):
            with pytest.raises(WorkdirError, match=f"in use by process {holder.pid} \\(train.py\\)"):
                entry(finished[0], copy)
        assert sorted(os.listdir(os.path.join(copy, "checkpoints"))) == checkpoints  # nothing moved aside
    finally:
        holder.kill()
        holder.wait()
    assert locks.holder(copy) is None  # the kernel let go of the lock with the process


def test_a_restart_that_w_and_b_refuses_leaves_config_and_metrics_as_they_were(finished, copy, monkeypatch):
    """W&B starts after the restart's other checks and before config.json and metrics.jsonl are rewritten."""
    shutil.rmtree(os.path.join(copy, "checkpoints", "6"))  # resumed at step 3: metrics.jsonl would lose lines
    config = finished[0].copy_and_resolve_references()
    config.num_train_steps, config.resume_with_changes = 9, "num_train_steps"
    monkeypatch.setenv("WANDB_MODE", "offline")
    def refused(*args):
        raise WorkdirError("W&B refused the run")
    monkeypatch.setattr(MetricsWriter, "_start_wandb", staticmethod(refused))
    before = _contents(copy, CONFIG_FILE, METRICS_FILE)
    with pytest.raises(WorkdirError, match="W&B refused the run"):
        loop.train_and_evaluate(config, copy)
    assert _contents(copy, CONFIG_FILE, METRICS_FILE) == before


def test_a_run_is_not_shortened_below_its_latest_checkpoint(finished, copy):
    config = finished[0].copy_and_resolve_references()
    config.num_train_steps, config.resume_with_changes = 4, "num_train_steps"
    before = _contents(copy, CONFIG_FILE, METRICS_FILE)
    with pytest.raises(WorkdirError, match="config.num_train_steps=4 is below step 6 of the latest checkpoint"):
        loop.train_and_evaluate(config, copy)
    assert _contents(copy, CONFIG_FILE, METRICS_FILE) == before
    assert not os.path.exists(os.path.join(copy, "eval.json"))


def _tree(workdir: str) -> dict[str, bytes]:
    """Every file under `workdir` but the lock (which holds the PID of the last process)."""
    contents = {}
    for parent, _, names in os.walk(workdir):
        for name in set(names) - {locks.LOCK_FILE}:
            path = os.path.join(parent, name)
            with open(path, "rb") as f:
                contents[os.path.relpath(path, workdir)] = f.read()
    return contents


def test_checkpoints_without_their_config_json_are_not_resumed_under_another_config(finished, copy):
    os.remove(os.path.join(copy, CONFIG_FILE))
    config = finished[0].copy_and_resolve_references()
    config.learning_rate, config.num_train_steps = config.learning_rate * 10, 9
    before = _tree(copy)
    with pytest.raises(WorkdirError) as refused:
        loop.train_and_evaluate(config, copy)
    assert str(refused.value) == (
        f"{copy}/config.json: missing, but {copy}/checkpoints holds step 6: the config these checkpoints trained "
        f"is unknown, so they are not resumed under this one; restore config.json (a finished run's eval.json "
        f"holds it under \"config\"), or train in a new --workdir")
    assert _tree(copy) == before


def test_ctrl_c_in_the_final_evaluation_says_the_step_and_how_to_resume(finished, copy, monkeypatch, capsys):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(translation, "evaluate_model", interrupted)
    with pytest.raises(SystemExit) as stopped:
        loop.train_and_evaluate(finished[0], copy)
    assert stopped.value.code == 130
    assert "interrupted at step 6 during the final evaluation" in capsys.readouterr().out


def test_paths_that_cannot_be_workdirs_are_one_line(finished, tmp_path):
    config, file = finished[0], tmp_path / "file"
    file.write_text("")
    for entry in (loop.train_and_evaluate, loop.evaluate):
        with pytest.raises(WorkdirError, match="--workdir is empty"):
            entry(config, "")
        with pytest.raises(WorkdirError, match="is a file, not a directory"):
            entry(config, str(file))
    with pytest.raises(CheckpointError, match="a file, not a directory of checkpoints"):
        Checkpoints(str(file))


def test_a_workdir_past_the_filesystems_limits_is_one_line_before_anything_is_written(finished, tmp_path):
    config = finished[0]
    name_max, path_max = os.pathconf(tmp_path, "PC_NAME_MAX"), os.pathconf(tmp_path, "PC_PATH_MAX")
    long_name = str(tmp_path / ("n" * (name_max + 1)) / "run")
    # Shorter than PATH_MAX itself (it could be made), too long for a checkpoint's files under it.
    parts, rest = divmod(path_max - 60 - len(str(tmp_path)), 100)
    deep = str(tmp_path.joinpath(*["d" * 99] * parts, "e" * max(rest - 1, 1)))
    assert path_max - workdirs.LONGEST_INSIDE < len(deep) < path_max - 50
    for entry in (loop.train_and_evaluate, loop.evaluate):
        with pytest.raises(WorkdirError) as refused:
            entry(config, long_name)
        assert str(refused.value) == (f"--workdir={long_name[:40]}...{long_name[-40:]}: a name in it is "
                                      f"{name_max + 1} bytes long, over the filesystem's limit of {name_max} "
                                      f"(NAME_MAX); name a shorter workdir")
        with pytest.raises(WorkdirError) as refused:
            entry(config, deep)
        assert str(refused.value) == (f"--workdir={deep[:40]}...{deep[-40:]}: {len(deep)} bytes long as an absolute "
                                      f"path; with the 160 a run's files add under it, it would pass the "
                                      f"filesystem's limit of {path_max} (PATH_MAX); name a shorter workdir")
    assert os.listdir(tmp_path) == []


def test_disk_errors_are_found_inside_the_errors_that_wrap_them():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/runs/x/checkpoints/6/state")
        except OSError as error:
            raise ValueError("tensorstore write failed") from error
    except ValueError as wrapped:
        assert atomic.disk_problem(wrapped).startswith("/runs/x/checkpoints/6/state: No space left on device")
    message = atomic.disk_problem(RuntimeError("Error writing \"/runs/y/metrics\": Read-only file system"))
    assert message.startswith("/runs/y/metrics: Read-only file system")
    assert atomic.disk_problem(ValueError("shapes differ")) is None


def _no_proc(*args, **kwargs):
    raise FileNotFoundError("/proc/self/status")


@pytest.mark.parametrize("umask", [0o022, 0o077])
@pytest.mark.parametrize("proc", [True, False], ids=["proc", "no_proc"])
def test_atomic_writes_give_the_file_the_mode_of_an_ordinary_one(tmp_path, monkeypatch, umask, proc):
    """Not mkstemp's 0600: a workdir's eval.json is read by the lab's other users, as its metrics.jsonl;
    the umask read from /proc where there is one, else by setting it."""
    if not proc:
        monkeypatch.setattr(atomic, "open", _no_proc, raising=False)
    previous = os.umask(umask)
    try:
        atomic.write_text(str(tmp_path / "eval.json"), "{}")
        with open(tmp_path / "metrics.jsonl", "w") as f:
            f.write("")
    finally:
        os.umask(previous)
    mode = stat.S_IMODE(os.stat(tmp_path / "eval.json").st_mode)
    assert mode == 0o666 & ~umask == stat.S_IMODE(os.stat(tmp_path / "metrics.jsonl").st_mode)


def _tree_bytes(directory: str) -> dict[str, bytes]:
    contents = {}
    for parent, _, names in os.walk(directory):
        for name in names:
            with open(os.path.join(parent, name), "rb") as f:
                contents[os.path.relpath(os.path.join(parent, name), directory)] = f.read()
    return contents


def test_a_checkpoint_the_disk_refuses_ends_in_one_line_and_keeps_the_ones_before(finished, copy):
    """Orbax writes in its own threads: the failure is reported once, by the main thread, with nothing of
    Orbax's tracebacks, its event loops or its unretrieved futures, and checkpoints 3 and 6 stay as they were."""
    checkpoints = os.path.join(copy, "checkpoints")
    before = {step: _tree_bytes(os.path.join(checkpoints, step)) for step in ("3", "6")}
    # 20 kB: config.json, metrics.jsonl and the compiled steps fit; a checkpoint's files do not.
    small_disk = SMALL_DISK_TRAIN.replace("(256,", "(20_000,")
    flags = [*_train_flags(finished[0], copy), "--config.num_train_steps=9",
             "--config.resume_with_changes=num_train_steps"]
    env = {**os.environ, "WANDB_MODE": "disabled", "JAX_PLATFORMS": "cpu"}
    env.pop("ATTENTION_LAB_DEBUG", None)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # its entries are larger than the limit
    process = subprocess.run([sys.executable, "-c", small_disk, *flags], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=300)
    assert process.returncode == 2, process.stdout + process.stderr
    assert process.stderr.strip().splitlines() == [
        f"error: {os.path.join(checkpoints, '9')}: File too large; the files already in {checkpoints} are as "
        f"they were. Free space on its disk (or make it writable, or raise `ulimit -f`), then rerun the same "
        f"command"], process.stderr
    assert "Traceback" not in process.stdout and "Event loop" not in process.stdout, process.stdout
    assert "step 9/9" in process.stdout  # training reached its end; only the save failed
    assert {step: _tree_bytes(os.path.join(checkpoints, step)) for step in ("3", "6")} == before
    assert sorted(name for name in os.listdir(checkpoints) if name.isdigit()) == ["3", "6"]


def test_after_a_failed_save_the_write_coroutines_it_abandoned_are_not_warned_of_at_exit(tmp_path):
    """Those warnings come at interpreter exit as `sys:1: RuntimeWarning: coroutine ... was never awaited`,
    after the one-line error; before any failure they are shown as Python shows them."""
    async def write_fragment():
        pass

    def abandoned_warnings() -> list[str]:
        with warnings.catch_warnings(record=True) as shown:
            write_fragment()  # noqa: RUF006 - abandoned on purpose: collected at once, unawaited
            return [str(warning.message) for warning in shown]

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert len(abandoned_warnings()) == 1 and "was never awaited" in abandoned_warnings()[0]
        checkpoints = Checkpoints(str(tmp_path / "checkpoints"))
        with pytest.raises(CheckpointError, match="checkpoints/9: the checkpoint could not be written"):
            checkpoints._fail(KeyError("shape"), 9)
        assert abandoned_warnings() == []


def test_checkpoint_write_errors_name_the_step_and_the_fix(tmp_path):
    step = "/runs/x/checkpoints/9"
    full = ValueError('OUT_OF_RANGE: Error writing local file "/runs/x/checkpoints/9.orbax-checkpoint-tmp/d/1": '
                      'No space left on device')
    assert str(write_error(step, full)) == atomic.disk_message(step, reason="No space left on device")
    read_only = RuntimeError("commit failed")
    read_only.__cause__ = OSError(errno.EROFS, os.strerror(errno.EROFS), "/runs/x/checkpoints/9.orbax-checkpoint-tmp")
    assert isinstance(write_error(step, read_only), atomic.DiskError)
    assert str(write_error(step, read_only)).startswith(f"{step}: Read-only file system; the files already in "
                                                        f"/runs/x/checkpoints are as they were")
    other = write_error(step, KeyError("shape"))
    assert str(other).startswith(f"{step}: the checkpoint could not be written (KeyError: 'shape')")


def test_a_checkpoint_path_over_the_filesystem_limit_is_one_error(tmp_path, capfd):
    """Each name fits, the directory exists, but the files a checkpoint writes under it pass PATH_MAX."""
    import jax.numpy as jnp

    path, previous = str(tmp_path), os.getcwd()
    try:
        os.chdir(tmp_path)
        while len(path) < 3990:  # made relative to the current directory: mkdir itself refuses a long path
            name = "d" * min(200, 3990 - len(path))
            os.mkdir(name)
            os.chdir(name)
            path = os.path.join(path, name)
    finally:
        os.chdir(previous)
    with pytest.raises(CheckpointError, match="would have paths longer than the filesystem allows"):
        with Checkpoints(os.path.join(path, "checkpoints")) as checkpoints:
            checkpoints.save(1, {"x": jnp.arange(4.0)}, {})
    captured = capfd.readouterr()
    assert "Traceback" not in captured.err + captured.out, captured.err
