"""Forward+backward time and planned memory of ONE attention layer, by sequence length, in one run.

  python -m scripts.bench_attention                      # softmax, linear, performer, reference; L 256..16384
  python -m scripts.bench_attention --kinds=softmax,linear,performer,taylor,cosformer,reference \\
      --lengths=256,1024,4096 --repeats=3 --max_seconds=5
  python -m scripts.bench_attention --dtype=bfloat16 --implementation=auto --lengths=1024,8192,65536 \\
      --max_memory_gb=40                                 # on a GPU: cuDNN flash attention where it can run

Inputs q, k, v [B, L, H, D] (--dtype, float32 or bfloat16, standard normal) go through one registered
kind, `attention.create(kind, num_heads=H, head_dim=D, rngs=nnx.Rngs(0), **options)` called as
`module(q, k, v, mask=mask, causal=causal)`, or, as the kind "reference", through
`jax.nn.dot_product_attention(q, k, v, is_causal=causal, key_value_seq_lengths=lengths)` (same
[B, L, H, D] layout). The module's floating state (parameters, Performer's projection) is cast to --dtype
as the training step casts it. Kernelised kinds that take `num_features` (performer) get --num_features,
64 = D by default: as many features as the head width, the same rank bound as `linear` (phi = elu + 1 has
D features), so the two differ only in the feature map. The kinds that take `softmax_implementation`
(softmax, dot: see attention/fused.py) get --implementation; the reference runs the implementation that
softmax selects for the same inputs ("auto": cuDNN's flash kernel on an NVIDIA GPU in bfloat16, else
XLA's), so the two compare one kernel with and without our code around it. --implementation=cudnn where
cuDNN cannot run (no NVIDIA GPU, float32) is refused before anything compiles.

Modes (--masks): "none", no mask: bidirectional and causal; here our softmax kind makes the same single
call as the reference, so softmax/reference is a sanity check, ~1.0 by construction. "padding", right
padding of the keys: the last --padding fraction of the keys of every row (10%) are masked out. Every
kind gets the mask [B, 1, 1, L] (boolean) as the models give it; the reference gets the same padding as
key lengths [B] (`key_value_seq_lengths`), the cheapest form `jax.nn.dot_product_attention` takes. There
softmax/reference measures what our masked path costs: under XLA, the boolean mask given to the kernel
and the zeroing of rows without keys; under cuDNN, the key lengths counted from the mask, and the same
zeroing. Mask and lengths are arguments of the compiled program, not constants it could fold.

Time: the jitted gradient of sum(out * cotangent) with respect to q, k and v only: the module's state
(performer's random projection, hedgehog's weights) is an argument of the jitted function, merged inside
it with nnx.merge and held constant, so a kind's parameter gradients are not part of the time. Each
program is compiled once and called twice to warm up; then, per length, timing rounds alternate between
the kinds so that noise from a shared machine falls on all of them alike, each timing after one untimed
call (see seconds_per_call: the first call after another kind's is slow). One timing is as many calls
as make it last ~50 ms (short programs are otherwise swamped by timer and dispatch noise), each ending in
block_until_ready; a kind's time is the median of --repeats timings.

Memory: XLA's planned buffer sizes of the compiled program, from `compiled.memory_analysis()`:
temp + argument + output - alias bytes. This is what XLA's buffer assignment allocates for the program
(on the CPU backend of jax 0.10.2 `peak_memory_in_bytes` counts arguments and outputs only, so temp is
added here), not the process RSS, and not what a GPU allocator would reserve on top.

The roofline (benchmarks/roofline.py): FLOPs and bytes from XLA's cost analysis of the same program (each
loop's body counted once per trip; None where the backend gives none), and this machine's matmul rate and
memory bandwidth, measured before the first program and after the last (the better counts). Each row gets
its FLOP rate, its share of the matmul rate and its time over max(FLOPs / matmul rate, bytes / bandwidth).
A column of --kinds may be a variant `kind:implementation` of a kind that takes `softmax_implementation` or
`kernelized_implementation`, e.g. `linear:autodiff` (the kernelised kinds' autodiff path) beside `linear`.

Budget: a kind whose planned memory exceeds --max_memory_gb is not run at that length; a kind whose
forward+backward takes longer than --max_seconds (median, or the warm-up call alone, in which case it is
timed once more only) is measured at that length; in both cases the larger lengths of that kind, in that
mode, are skipped and recorded as such with the reason.

Writes under --out: attention.json (machine, settings, one row per (kind, causal, masked, L)),
attention.md (tables per mode: ms, MiB and time over the roofline per kind, ratios softmax/linear and
softmax/reference) and
attention.png (log-log time against L, a panel per mode). scripts/bench_chunks.py times the causal chunk
sizes of the kernelised kinds with the same helpers.
"""
from absl import flags

from benchmarks.attention import MASKS, REFERENCE, run
from scripts import command_line

DEFAULT_LENGTHS = ",".join(str(2**p) for p in range(8, 15))  # 256 .. 16,384

FLAGS = flags.FlagValues()
flags.DEFINE_string("kinds", "softmax,linear,performer," + REFERENCE, "comma-separated registered kinds "
                    f"and/or '{REFERENCE}' (jax.nn.dot_product_attention)", flag_values=FLAGS)
command_line.define_common_flags(FLAGS, DEFAULT_LENGTHS)
flags.DEFINE_string("masks", ",".join(MASKS), "comma-separated: none (no mask), padding (the last --padding "
                    "of the keys masked)", flag_values=FLAGS)
flags.DEFINE_float("padding", 0.1, "fraction of the keys padded in mode padding", flag_values=FLAGS)
flags.register_validator("padding", lambda padding: 0 <= padding < 1, "--padding must be in [0, 1)",
                         flag_values=FLAGS)


def main(argv=None) -> dict:
    return run(command_line.parse(FLAGS, argv, __doc__))


if __name__ == "__main__":
    main()
