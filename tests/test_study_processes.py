"""A study's training processes end with it: SIGTERM or SIGINT to the study stops them (each to checkpoint)
before it exits, the kernel ends them when the study is killed, and a workdir that a process still holds is
never trained beside it."""
import os
import signal
import subprocess
import sys
import time

import pytest

from runtime import locks
from studies import children, jobs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]
# The children start through fork (their preexec_fn sets the parent-death signal) in a worker that imported
# JAX, whose fork hook warns; the child only calls prctl and execs.
pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called")


def _gone(pid: int, within_s: float = 20.0) -> bool:
    deadline = time.time() + within_s
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("ends_before_the_wait", [False, True])
def test_a_signal_to_the_study_stops_its_training_processes_first(signum, ends_before_the_wait, capsys,
                                                                    monkeypatch):
    if ends_before_the_wait:  # the order a loaded machine gives: the child is reaped before the study counts
        stop_all = children._stop_all

        def stop_and_reap():
            running = stop_all()
            for process in running:
                process.wait()
            return running
        monkeypatch.setattr(children, "_stop_all", stop_and_reap)
    with pytest.raises(SystemExit) as stopped:
        with children.ended_on_exit():
            process = children.start(SLEEP)
            os.kill(os.getpid(), signum)  # what `kill` or Ctrl-C does to the study
            children.wait(process)
    assert stopped.value.code == 128 + signum
    assert process.returncode == -signal.SIGTERM
    assert "interrupted: 1 training process(es) stopped" in capsys.readouterr().err
    assert children.start(SLEEP[:2] + ["pass"]).wait() == 0  # the next study starts processes again


def test_training_processes_die_with_a_killed_study():
    study = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom studies import children\n"
         f"process = children.start({SLEEP!r})\nprint(process.pid, flush=True)\ntime.sleep(120)"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    child = int(study.stdout.readline())
    assert os.getpgid(child) == child  # a session of its own
    study.kill()  # SIGKILL: no handler runs; the kernel's parent-death signal ends the child
    study.wait()
    assert _gone(child)


def test_a_workdir_held_by_another_process_is_not_trained(tmp_path, monkeypatch, capsys):
    started = []
    monkeypatch.setattr(jobs, "train", lambda command, workdir, env: started.append(workdir) or True)
    held, free = str(tmp_path / "held"), str(tmp_path / "free")
    with locks.held(held, "train.py"):
        failed = jobs.run_jobs([("a seed0", ["train"], held), ("b seed0", ["train"], free)], workers=1)
    assert failed == ["b seed0"] and started == [free]  # b fails: the fake train writes no eval.json
    assert (f"a seed0: trained by another process (process {os.getpid()} (train.py) holds {held}); not trained "
            f"beside it: rerun once it ends to report it") in capsys.readouterr().out


def _finished_by_another_process(command, workdir, env) -> bool:
    """This study's train.py refused (status 2: the lock is taken) while another study's, here this test's
    process, trains the workdir to its end."""
    with locks.held(workdir, "train.py"):
        for name, content in (("config.json", '{"num_train_steps": 10}'), ("eval.json", '{"step": 10}')):
            with open(os.path.join(workdir, name), "w") as f:
                f.write(content)
    return False


def test_a_workdir_another_study_trained_at_the_same_time_is_reported_as_such_not_failed(tmp_path, monkeypatch,
                                                                                        capsys):
    monkeypatch.setattr(jobs, "train", _finished_by_another_process)
    workdir = str(tmp_path / "a")
    assert jobs.run_jobs([("a seed0", ["train"], workdir)], workers=1) == []
    assert (f"[1/1] a seed0: trained by another process (process {os.getpid()} finished {workdir}) in "
            in capsys.readouterr().out)


def test_a_train_py_of_the_study_that_held_the_workdir_and_failed_is_a_failure(tmp_path, capsys):
    workdir = str(tmp_path / "a")
    crash = [sys.executable, "-c", "import sys\nfrom runtime import locks\n"
             f"with locks.held({workdir!r}, 'train.py'):\n    sys.exit(1)"]
    assert jobs.run_jobs([("a seed0", crash, workdir)], workers=1) == ["a seed0"]
    assert f"[1/1] a seed0: FAILED (see {workdir}/train.log)" in capsys.readouterr().out
