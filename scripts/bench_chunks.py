"""Causal linear attention's chunk size, measured: forward+backward time per chunk C against softmax's.

  python -m scripts.bench_chunks                                  # linear, C 16..256, L 1,024, 4,096, 8,192
  python -m scripts.bench_chunks --kinds=linear,performer --chunk_sizes=0,32,64 --lengths=256,1024

The causal form of a kernelised kind (attention/ops/kernel_sums.py, `causal_linear_attention`) is quadratic
inside chunks of C positions and linear across them, through prefix sums of per-chunk states. Per
position, softmax does L D + L Dv multiply-adds (the whole L x L matrix: XLA computes its masked half
too), causal linear attention m Dv (its chunk's state) + m Dv (the earlier chunks' states) + C (m + Dv) / 2
(the causal half of its C x C block). With m = D = Dv their ratio is L / (m + C/2), the limit the
measured time ratio was held to ("within 80%"). The implementation computes whole C x C blocks, so
XLA's own FLOP count (`flops` in the JSON, "counted" in the table; the body of a loop over chunks counted
once per trip, benchmarks/roofline.py) gives about L / (m + C) instead; a
softmax kernel that skips the masked half (cuDNN's causal flash attention) would halve both. Smaller
chunks do less arithmetic but more, smaller matmuls over more chunk states; this script finds where the
two balance on the machine it runs on.

A chunk size of 0 is "auto", the size attention/ops/chunking.py picks for the platform and length.

Each kind at each chunk size is a column of one timing run, and softmax (causal, unmasked, in the
kernel --implementation selects) is timed in the same rounds, so that every ratio is measured within one
run: timing, warm-up, medians and budgets are scripts/bench_attention.py's. Writes chunks.json, chunks.md
and chunks.png under --out.
"""
from absl import flags

from benchmarks.chunks import run
from scripts import command_line

FLAGS = flags.FlagValues()
flags.DEFINE_string("kinds", "linear", "comma-separated kernelised kinds (they take chunk_size)", flag_values=FLAGS)
flags.DEFINE_string("chunk_sizes", "16,32,64,128,256", "comma-separated causal chunk sizes; 0: auto "
                    "(attention/ops/chunking.py)", flag_values=FLAGS)
command_line.define_common_flags(FLAGS, "1024,4096,8192")


def main(argv=None) -> dict:
    return run(command_line.parse(FLAGS, argv, __doc__))


if __name__ == "__main__":
    main()
