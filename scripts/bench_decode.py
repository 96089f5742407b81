"""Per-token time of incremental decoding through ONE causal self-attention layer, by buffer length.

  python -m scripts.bench_decode                       # softmax (KV cache) and linear (state); L 128..8192
  python -m scripts.bench_decode --kinds=softmax,linear,performer --lengths=256,4096 --repeats=3
  python -m scripts.bench_decode --quick               # seconds: small lengths and heads (smoke test)

The layer is `attention.MultiHeadAttention(kind)` (projections included) decoding with its cache:
`init_cache(B, L)` then `decode_step` for the last --steps positions L - steps .. L - 1 of a buffer of L
positions, one `lax.scan` per timing, inputs [B, 1, H * D] standard normal float32. A softmax step
scores all L cached keys (fixed shapes: O(L) per token); a linear step updates and reads its
[H, m, D + 1] state (O(1) per token), so its per-token time should not grow with L.

Each program is compiled once per (kind, L) and called once to warm up; then timing rounds alternate
between the kinds, so that noise from a shared machine falls on all of them alike. One timing is as
many calls as make it last ~50 ms, each ending in block_until_ready; a kind's time per token is the
median of --repeats timings divided by --steps (a call also copies the cache once: amortised over the
steps). Writes under --out: decode.json (machine, settings, one row per (kind, L)), decode.md (ms per
token, tokens/s, and each kind's ratio of per-token time at the largest vs the smallest L) and
decode.png (log-log per-token time against L).
"""
from absl import flags

from benchmarks.decode import QUICK, run
from scripts import command_line

FLAGS = flags.FlagValues()
flags.DEFINE_string("kinds", "softmax,linear", "comma-separated registered kinds", flag_values=FLAGS)
command_line.define_shape_flags(FLAGS, "128,512,2048,8192")  # lengths: of the buffer
flags.DEFINE_integer("steps", 64, "tokens decoded per call (the last positions)", lower_bound=1, flag_values=FLAGS)
flags.DEFINE_bool("quick", False, "smoke-test sizes: " + ", ".join(f"--{k}={v}" for k, v in QUICK.items()),
                  flag_values=FLAGS)


def main(argv=None) -> dict:
    return run(command_line.parse(FLAGS, argv, __doc__))


if __name__ == "__main__":
    main()
