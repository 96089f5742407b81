"""Which devices a run records, and how a study's training processes (studies/jobs.py) spread over a machine."""

import os
import re
import threading

import pytest

from runtime import devices
from studies import jobs

GPUS = {"platform": "gpu", "device_kind": "NVIDIA H100 80GB HBM3", "device_count": 4, "process_count": 1,
        "jax": "x", "jaxlib": "x"}
TPU = GPUS | {"platform": "tpu", "device_kind": "TPU v4", "device_count": 4}
CPU = GPUS | {"platform": "cpu", "device_kind": "cpu", "device_count": 1}


def test_runtime_names_platform_device_and_versions():
    import jax
    import jaxlib

    info = devices.runtime()
    assert info == {"platform": "cpu", "device_kind": "cpu", "device_count": jax.device_count(),
                    "process_count": 1, "jax": jax.__version__, "jaxlib": jaxlib.__version__}
    assert devices.probe() == info  # the child process sees what this one does


def test_one_job_per_gpu_each_pinned_to_its_own(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("SOME_VARIABLE", "kept")
    assert devices.default_jobs(GPUS) == 4
    environments = devices.job_environments(GPUS, 6)  # more jobs than GPUs: they take turns
    assert [env["CUDA_VISIBLE_DEVICES"] for env in environments] == ["0", "1", "2", "3", "0", "1"]
    assert all(env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false" and env["SOME_VARIABLE"] == "kept"
               for env in environments)


def test_gpu_pinning_maps_through_the_visible_devices_given(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    environments = devices.job_environments(GPUS | {"device_count": 2}, 2)
    assert [env["CUDA_VISIBLE_DEVICES"] for env in environments] == ["2", "3"]


def test_one_process_owns_a_tpu():
    assert devices.default_jobs(TPU) == 4 and devices.job_environments(TPU, 1) == [None]
    with pytest.raises(ValueError, match="--jobs=2 on a TPU: only one process can own its chips"):
        devices.job_environments(TPU, 2)


def test_cpu_jobs_run_on_one_thread_each():
    assert devices.default_jobs(CPU) == os.cpu_count()
    environments = devices.job_environments(CPU, 3)
    assert len(environments) == 3 and all(env["PJRT_NPROC"] == env["OPENBLAS_NUM_THREADS"] == "1"
                                       for env in environments)
    assert devices.job_environments(CPU, 1) == [None]


def test_concurrent_jobs_never_share_a_slot_and_wait_for_the_first_jobs_data(monkeypatch, tmp_path):
    """train_all hands each running job an environment no other running job holds; the others start only
    once the first job has prepared its data (written its config.json), and then beside it."""
    environments = [{"CUDA_VISIBLE_DEVICES": str(i)} for i in range(2)]
    running, seen, lock = set(), [], threading.Lock()
    monkeypatch.setattr(jobs, "DATA_POLL_S", 0.01)
    (tmp_path / "0").mkdir()
    old_config = tmp_path / "0" / "config.json"  # an earlier attempt's: no sign of prepared data
    old_config.write_text("{}")
    os.utime(old_config, (0, 0))

    def fake_train(command, workdir, env):
        with lock:
            assert env["CUDA_VISIBLE_DEVICES"] not in running
            if workdir.endswith(os.sep + "0"):
                assert not seen  # alone, until its data is prepared
            else:
                assert _prepared(tmp_path / "0")
            running.add(env["CUDA_VISIBLE_DEVICES"])
            seen.append(workdir)
        if workdir.endswith(os.sep + "0"):
            threading.Event().wait(0.05)
            (tmp_path / "0" / "config.json").write_text("{}")
            threading.Event().wait(0.1)  # still training when a second job starts beside it
            with lock:
                overlapped.append(len(running) == 2)
        threading.Event().wait(0.02)
        with lock:
            running.remove(env["CUDA_VISIBLE_DEVICES"])
        return True

    overlapped = []
    monkeypatch.setattr(jobs, "_train_timed", lambda command, workdir, env: (fake_train(command, workdir, env), 0.0))
    labelled = [(f"job{i}", ["train"], str(tmp_path / str(i))) for i in range(6)]
    assert len(list(jobs.train_all(labelled, environments))) == 6
    assert seen[0] == str(tmp_path / "0") and overlapped == [True]


def _prepared(workdir) -> bool:
    config = workdir / "config.json"
    return config.exists() and config.stat().st_mtime > 1


def test_the_other_jobs_start_when_the_first_ends_without_preparing_its_data(monkeypatch, tmp_path):
    monkeypatch.setattr(jobs, "DATA_POLL_S", 0.01)
    order = []
    monkeypatch.setattr(jobs, "_train_timed", lambda command, workdir, env: (order.append(workdir) or False, 0.0))
    labelled = [(f"job{i}", ["train"], str(tmp_path / str(i))) for i in range(3)]
    results = list(jobs.train_all(labelled, [None, None]))
    assert order[0] == str(tmp_path / "0") and len(results) == 3 and not any(ok for _, _, ok, _ in results)


def test_each_running_job_gets_a_status_line_from_this_attempts_log(monkeypatch, tmp_path, capsys):
    """Its last progress line in train.log, not an earlier attempt's, or that it is still preparing."""
    monkeypatch.setattr(jobs, "DATA_POLL_S", 0.01)
    monkeypatch.setattr(jobs, "STATUS_EVERY_S", 0.05)
    earlier = tmp_path / "1"
    earlier.mkdir()
    (earlier / "train.log").write_text("step 15/20 | loss 2.0000 | an earlier attempt\n")
    release = threading.Event()

    def fake_train(command, workdir, env):
        os.makedirs(workdir, exist_ok=True)
        with open(os.path.join(workdir, "train.log"), "a") as log:
            if workdir.endswith(os.sep + "0"):
                (tmp_path / "0" / "config.json").write_text("{}")  # its data prepared: the other job starts
                log.write("devices: cpu\nstep 5/20 | loss 3.0000 | ETA 0m01s\nstep 10/20 | loss 2.5000 | ETA 0m01s\n"
                          "eval at step 10 | loss 2.4000\n")
        release.wait(5)
        return True, 0.0

    monkeypatch.setattr(jobs, "_train_timed", fake_train)
    threading.Timer(0.5, release.set).start()
    labelled = [(f"job{i}", ["train"], str(tmp_path / str(i))) for i in range(2)]
    assert len(list(jobs.train_all(labelled, [None, None]))) == 2
    lines = capsys.readouterr().out.splitlines()
    job0 = [line for line in lines if line.startswith("  job0: ")]
    job1 = [line for line in lines if line.startswith("  job1: ")]
    assert job0 and job1 and len(job0) + len(job1) == len(lines), lines
    assert all(re.fullmatch(r"  job0: step 10/20 \| loss 2\.5000 \| ETA 0m01s \(\d+s\)", line) for line in job0)
    assert all(re.fullmatch(r"  job1: preparing \(data, compilation\) \(\d+s\)", line) for line in job1)
