"""What a run ran on, and how the multi-run scripts share this machine's devices between processes.

A JAX process takes every accelerator it can see (and, on a GPU, 75% of its memory at start; on a TPU,
only one process may own a chip, and the others silently fall back to the CPU). So the scripts that
train several runs at once (compare.py, sweep.py) ask a child process what this machine has, run one
process per accelerator, each pinned to its own, and on a CPU one per core, each on one core.
"""
import json
import os
import subprocess
import sys

import jax
import jaxlib

ACCELERATORS = ("gpu", "tpu")


def runtime() -> dict:
    """This process's platform, device kind and counts, and the versions of jax and jaxlib: recorded in
    config.json, eval.json and W&B, so that a run that fell back to the CPU says so."""
    devices = jax.devices()
    return {"platform": devices[0].platform, "device_kind": devices[0].device_kind,
            "device_count": len(devices), "process_count": jax.process_count(),
            "jax": jax.__version__, "jaxlib": jaxlib.__version__}


def describe(info: dict) -> str:
    return (f"{info['device_count']} x {info['device_kind']} ({info['platform']}), "
            f"{info['process_count']} process(es), jax {info['jax']}, jaxlib {info['jaxlib']}")


def probe() -> dict:
    """`runtime()` of a child process, so that this one never takes an accelerator (nor its memory)."""
    code = f"import json, sys; sys.path.insert(0, {os.path.dirname(os.path.dirname(__file__))!r}); " \
           "from runtime import devices; print(json.dumps(devices.runtime()))"
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def default_jobs(info: dict) -> int:
    """Training processes at once: one per accelerator, or one per CPU core."""
    return info["device_count"] if info["platform"] in ACCELERATORS else os.cpu_count()


def job_environments(info: dict, jobs: int) -> list[dict | None]:
    """The environment of each of `jobs` concurrent training processes (None: inherit this one's).

    GPU: job i sees only GPU i mod count (CUDA_VISIBLE_DEVICES, mapped through the one this process was
    given) and allocates memory as it needs it. TPU: one process owns the chips, so one job at a time.
    CPU: each of several jobs runs XLA on one thread (PJRT_NPROC), not one per core each, and OpenBLAS too:
    the LAPACK behind eigh and svd on the CPU (softmax_rank, every final evaluation's ranks) otherwise spins a
    thread per core waiting for cores the other jobs hold (softmax_rank32's MLM steps took 9-12 s where two such jobs
    shared 2 cores with other work, 1.1 s alone)."""
    if jobs == 1:
        return [None]
    platform = info["platform"]
    if platform == "tpu":
        raise ValueError(f"--jobs={jobs} on a TPU: only one process can own its chips; use --jobs=1")
    if platform == "gpu":
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = visible.split(",") if visible else [str(i) for i in range(info["device_count"])]
        return [{**os.environ, "CUDA_VISIBLE_DEVICES": ids[i % len(ids)], "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
                for i in range(jobs)]
    # PJRT_NPROC sizes the XLA CPU client's thread pool (one thread per core by default);
    # --xla_cpu_multi_thread_eigen=false does not shrink it (measured on jax 0.10.2).
    return [{**os.environ, "PJRT_NPROC": "1", "OPENBLAS_NUM_THREADS": "1"}] * jobs
