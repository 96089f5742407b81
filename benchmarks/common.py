"""What the benchmarks share: their list arguments, how a program is timed, XLA's count of its FLOPs and bytes,
where it ran (the machine block of the JSON, the machine line of the report) and the report files."""
import json
import os
import platform
import time

import jax

TIMING_SECONDS = 0.05  # one timing lasts about this long: enough calls to rise above timer noise
MAX_CALLS_PER_TIMING = 1000


def parse_ints(flag: str, text: str, minimum: int) -> list[int]:
    """The distinct integers of a comma-separated flag value, sorted, each at least `minimum`."""
    try:
        values = sorted({int(value) for value in text.split(",")})
    except ValueError:
        raise SystemExit(f"{flag}: {text!r} is not a comma-separated list of integers") from None
    if values[0] < minimum:
        raise SystemExit(f"{flag}: values must be >= {minimum}, got {text!r}")
    return values


def parse_lengths(text: str) -> list[int]:
    return parse_ints("--lengths", text, 1)


def seconds_per_call(program, arguments, calls: int) -> float:
    """Mean seconds of `calls` calls after one untimed call. The call that follows another program's pays
    for its buffers again (first touch of memory the other program used and freed): measured on this
    machine, linear attention at L=8,192 took 380-470 ms on its first call after softmax's and 100-120 ms
    on the next ones, so an interleaved timing without that call measured the neighbour, not the kind."""
    jax.block_until_ready(program(*arguments))
    started = time.perf_counter()
    for _ in range(calls):
        jax.block_until_ready(program(*arguments))
    return (time.perf_counter() - started) / calls


def calls_per_timing(warmup_s: float) -> int:
    """Calls of a program that `warmup_s` long per call that make one timing last ~TIMING_SECONDS."""
    return min(MAX_CALLS_PER_TIMING, max(1, int(TIMING_SECONDS / max(warmup_s, 1e-6))))


def xla_cost(compiled) -> dict:
    """{"flops", "bytes"}: the floating-point operations and bytes accessed of XLA's cost analysis of a compiled
    program, each None where the backend gives none. A while loop's body counts once, whatever its trip count
    (benchmarks/roofline.py counts it per trip)."""
    try:
        analysis = compiled.cost_analysis()
    except Exception:  # noqa: BLE001  (a backend without cost analysis)
        analysis = None
    analysis = (analysis[0] if isinstance(analysis, (list, tuple)) and analysis else analysis) or {}
    return {field: float(analysis[key]) if key in analysis else None
            for field, key in (("flops", "flops"), ("bytes", "bytes accessed"))}


def counted_flops(compiled) -> float | None:
    """XLA's cost analysis of a compiled program: its floating-point operations, or None if not given."""
    return xla_cost(compiled)["flops"]


def machine(matmul_precision: bool = True) -> dict:
    """Where a benchmark ran, with JAX's default matmul precision unless `matmul_precision` is False: on a GPU,
    float32 matmuls run in TF32 unless it says "highest" (JAX_DEFAULT_MATMUL_PRECISION)."""
    device = jax.devices()[0]
    found = {"platform": device.platform, "device": device.device_kind, "device_count": jax.device_count(),
             "cpu_count": os.cpu_count(), "processor": platform.processor() or platform.machine(),
             "jax": jax.__version__}
    return {**found, "matmul_precision": jax.config.jax_default_matmul_precision} if matmul_precision else found


def machine_text(m: dict) -> str:
    """Where a benchmark ran, as its report's settings line says it."""
    return f"{m['platform']} ({m['device']}), {m['cpu_count']} CPUs, jax {m['jax']}"


def report_markdown(title: str, settings: str, *body: str) -> str:
    """A benchmark's report: its title, the settings it ran with, then its tables."""
    return "\n".join([f"# {title}\n", f"{settings}\n", *body])


def write_reports(result: dict, out: str, stem: str, to_markdown, to_plot=None) -> list[str]:
    """<out>/<stem>.json and .md of a benchmark's result, and .png when it draws one (`to_plot`)."""
    os.makedirs(out, exist_ok=True)
    extensions = ("json", "md", "png") if to_plot else ("json", "md")
    paths = [os.path.join(out, f"{stem}.{extension}") for extension in extensions]
    with open(paths[0], "w") as f:
        json.dump(result, f, indent=1)
    with open(paths[1], "w") as f:
        f.write(to_markdown(result))
    if to_plot:
        to_plot(result, paths[2])
    return paths
