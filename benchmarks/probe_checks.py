"""The GPU probe's checks that run in a step's own process (benchmarks/probe.py runs the steps, and holds no
device itself): the versions of the stack and the devices JAX sees; the Pallas kernels of causal linear
attention against the XLA path, outputs and gradients, at every width the kernels take."""
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from attention.ops import kernel_sums, linear_pallas

# Read beside requirements.txt's pins: the GPU's own stack and the test tools.
EXTRA_PACKAGES = ("triton", "jax-cuda13-plugin", "jax-cuda13-pjrt", "pytest", "pytest-timeout")
# The largest |pallas - xla| over the largest |xla| of an output or gradient that passes. Both paths multiply
# float32 in TF32 on an NVIDIA GPU by default (a 10-bit mantissa) and bfloat16 with an 8-bit one, summing in
# float32; in interpret mode (a CPU) they agree to float32 rounding.
TOLERANCE = {"float32": 1e-2, "bfloat16": 5e-2}
# (sequence length, widths, the width the others keep while one varies, dtypes): the length pads the last chunk.
PALLAS_SIZES = {"full": (1000, linear_pallas.WIDTHS, 64, ("float32", "bfloat16")),
                "smoke": (40, (16,), 16, ("float32",))}


def read_pins(path: str) -> dict[str, str]:
    """name -> version of the `name==version` lines of a requirements file."""
    with open(path) as f:
        lines = [line.split("#")[0].strip() for line in f]
    return dict(line.split("==", 1) for line in lines if "==" in line)


def _installed(name: str) -> dict | None:
    try:
        distribution = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    return {"version": distribution.version, "location": str(distribution.locate_file(""))}


def _pip_check() -> dict:
    """`pip check` over everything importable (the wheelhouse's folder on PYTHONPATH too): its conflicts."""
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=60)
    return {"exit": done.returncode, "lines": (done.stdout + done.stderr).splitlines()[:40]}


def versions(requirements: str) -> dict:
    """Python, every pinned and GPU package (version and where it was found), those not at their pin, pip
    check's conflicts, and the devices JAX sees with the first one's memory."""
    pinned = read_pins(requirements)
    packages = {name: _installed(name) for name in [*pinned, *EXTRA_PACKAGES]}
    devices = jax.devices()
    memory = (devices[0].memory_stats() or {}) if devices[0].platform != "cpu" else {}
    return {"python": platform.python_version(), "executable": sys.executable, "packages": packages,
            "not_as_pinned": {name: {"pinned": version, "installed": (packages[name] or {}).get("version")}
                              for name, version in pinned.items() if (packages[name] or {}).get("version") != version},
            "pip_check": _pip_check(), "backend": jax.default_backend(), "device_kind": devices[0].device_kind,
            "device_count": len(devices), "devices": [str(device) for device in devices],
            "memory_bytes": memory.get("bytes_limit")}


def pallas_cases(widths: tuple[int, ...], kept: int, dtypes: tuple[str, ...]) -> list[tuple[int, int, int, str]]:
    """(feature width, value width, chunk, dtype): every width of each of the three with the other two at
    `kept`, in the first dtype, the case of all three at `kept` first; then that case in each other dtype."""
    base = (kept, kept, kept)
    cases = [(*base, dtypes[0])]
    for axis in range(3):
        for width in widths:
            case = (*base[:axis], width, *base[axis + 1:], dtypes[0])
            if case not in cases:
                cases.append(case)
    return [*cases, *((*base, dtype) for dtype in dtypes[1:])]


def _gradients(implementation: str, inputs, cotangent, chunk: int):
    """(out, (d phi_q, d phi_k, d v)) of sum(out * cotangent), out the causal sums by `implementation`."""
    def loss(phi_q, phi_k, v):
        out = kernel_sums.causal_linear_attention(phi_q, phi_k, v, 1e-6, chunk, implementation=implementation)
        return jnp.sum(out.astype(jnp.float32) * cotangent), out

    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(*inputs)
    return out, grads


def relative_error(value, reference) -> float:
    """max |value - reference| / max |reference|, in float64."""
    value, reference = np.asarray(value, np.float64), np.asarray(reference, np.float64)
    return float(np.max(np.abs(value - reference)) / max(np.max(np.abs(reference)), 1e-30))


def compare_paths(feature_dim: int, value_dim: int, chunk: int, dtype: str, length: int) -> dict:
    """One case: the Pallas kernels' output and gradients against the XLA path's on the same inputs (positive
    features, as elu + 1 gives), B = 2, H = 4."""
    keys = jax.random.split(jax.random.key(feature_dim * 1_000 + value_dim * 10 + chunk), 4)
    shapes = [(2, length, 4, width) for width in (feature_dim, feature_dim, value_dim)]
    inputs = [jax.random.normal(key, shape) for key, shape in zip(keys, shapes)]
    inputs = [(jax.nn.elu(inputs[0]) + 1).astype(dtype), (jax.nn.elu(inputs[1]) + 1).astype(dtype),
              inputs[2].astype(dtype)]
    cotangent = jax.random.normal(keys[3], shapes[2])
    (out, grads), (reference_out, reference_grads) = (_gradients(implementation, inputs, cotangent, chunk)
                                                      for implementation in ("pallas", "xla"))
    errors = {name: relative_error(value, reference) for name, value, reference in
              zip(("out", "d_phi_q", "d_phi_k", "d_v"), (out, *grads), (reference_out, *reference_grads))}
    return {"errors": errors, "max_error": max(errors.values()), "ok": max(errors.values()) <= TOLERANCE[dtype]}


def pallas_against_xla(json_path: str, size: str, deadline_s: float) -> bool:
    """Every case of pallas_cases at PALLAS_SIZES[size], written to `json_path` after each (a step stopped at
    its cap keeps what it found); a case that fails to compile or run is recorded with its error. Starts no
    case past `deadline_s` seconds. True if every case ran and passed."""
    started = time.perf_counter()
    length, widths, kept, dtypes = PALLAS_SIZES[size]
    result = {"platform": jax.default_backend(), "compiled": jax.default_backend() == "gpu", "length": length,
              "tolerance": TOLERANCE, "rows": [], "not_run": []}
    for feature_dim, value_dim, chunk, dtype in pallas_cases(widths, kept, dtypes):
        case = {"feature_dim": feature_dim, "value_dim": value_dim, "chunk": chunk, "dtype": dtype}
        if time.perf_counter() - started > deadline_s:
            result["not_run"].append(case)
            continue
        case_started = time.perf_counter()
        try:
            case.update(compare_paths(feature_dim, value_dim, chunk, dtype, length))
        except Exception as error:  # noqa: BLE001 - a kernel that does not compile here is a finding
            case.update({"error": f"{type(error).__name__}: {error}"[:2_000], "ok": False})
        case["seconds"] = round(time.perf_counter() - case_started, 2)
        result["rows"].append(case)
        print(json.dumps(case), flush=True)
        _write(json_path, result)
    result["ok"] = not result["not_run"] and all(row["ok"] for row in result["rows"])
    _write(json_path, result)
    return result["ok"]


def _write(path: str, result: dict) -> None:
    with open(path + ".partial", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(path + ".partial", path)


def run(options) -> int:
    """The check --check names (scripts/gpu_probe.py), its JSON to --json; the process's exit status."""
    if options.check == "versions":
        result = versions(options.requirements)
        _write(options.json, result)
        print(json.dumps({key: result[key] for key in ("python", "backend", "device_kind", "device_count")}))
        return 0
    return 0 if pallas_against_xla(options.json, "smoke" if options.smoke else "full", options.deadline_s) else 1
