"""Which devices a run records, and how a study's training processes (studies/jobs.py) spread over a machine."""

import os
import threading

import pytest

from studies import jobs
from training import devices

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
    assert len(environments) == 3 and all(env["PJRT_NPROC"] == "1" for env in environments)
    assert devices.job_environments(CPU, 1) == [None]


def test_concurrent_jobs_never_share_a_slot(monkeypatch, tmp_path):
    """train_all hands each running job an environment no other running job holds; the first job, alone,
    keeps this process's (every core and device)."""
    environments = [{"CUDA_VISIBLE_DEVICES": str(i)} for i in range(2)]
    running, seen, lock = set(), [], threading.Lock()

    def fake_train(command, workdir, env):
        if env is None:
            assert not running and not seen
            seen.append("all")
            return True
        with lock:
            assert env["CUDA_VISIBLE_DEVICES"] not in running
            running.add(env["CUDA_VISIBLE_DEVICES"])
            seen.append(env["CUDA_VISIBLE_DEVICES"])
        threading.Event().wait(0.02)
        with lock:
            running.remove(env["CUDA_VISIBLE_DEVICES"])
        return True

    monkeypatch.setattr(jobs, "_train_timed", lambda command, workdir, env: (fake_train(command, workdir, env), 0.0))
    labelled = [(f"job{i}", ["train"], str(tmp_path / str(i))) for i in range(6)]
    assert len(list(jobs.train_all(labelled, environments))) == 6
    assert seen[0] == "all" and sorted(set(seen[1:])) == ["0", "1"]
