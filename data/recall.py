"""Multi-query associative recall (MQAR; Arora et al. 2023, "Zoology"), generated in numpy from a seed.

A sequence of `seq_len` tokens over a vocabulary of V:

    k_1 v_1 ... k_N v_N | query region of seq_len - 2N tokens

Keys are N distinct tokens of [1, V/2), values N distinct tokens of [V/2, V). Key k_i appears once more
in the query region, at offset 2 g_i, where the gaps g_1, g_2, ... are drawn one after another without
replacement from [0, (seq_len - 2N) / 2) with P(g) proportional to (g + 1)^(a - 1) (a = `power_a`,
0.01 in Zoology: a power law favouring queries soon after the context). Every other position of the
query region holds a uniform random token of [0, V) (`random_non_queries`, Zoology's option of that name),
or 0 without it (Zoology's Figure 2: the query region is zeros apart from the query keys). This is
Zoology's `multiquery_ar` generator in vectorised numpy; the distributions are the same, the random streams
are not.

Two forms of the task, each scoring the N query answers only:
- "causal": the model reads the sequence left to right and predicts v_i at the position of the second
  k_i (next-token prediction). The token after that k_i stays random: the value is never in the input.
- "bidirectional": the token after the second k_i becomes MASK (id V, past the task's vocabulary) and
  the model, seeing the whole sequence, predicts v_i there, as in masked language modelling.
"""
import math

import numpy as np

FORMS = ("causal", "bidirectional")
_CHUNK = 4096  # examples generated at a time: bounds the [examples, gaps] random draws in memory


def mask_id(vocab_size: int) -> int:
    return vocab_size


def model_vocab_size(vocab_size: int, form: str) -> int:
    """Tokens the model embeds: the task's V, plus MASK in the bidirectional form."""
    return vocab_size + (form == "bidirectional")


def check_sizes(vocab_size: int, seq_len: int, num_kv_pairs: int) -> None:
    """The generator's preconditions (Zoology's asserts, and enough distinct keys and values)."""
    if num_kv_pairs < 1:
        raise ValueError(f"num_kv_pairs={num_kv_pairs} must be >= 1")
    if seq_len % 2 or seq_len < 4 * num_kv_pairs:
        raise ValueError(f"seq_len={seq_len} must be even and >= 4 * num_kv_pairs = {4 * num_kv_pairs}: "
                         f"the context takes 2N tokens and the query region needs N gaps of 2")
    if vocab_size // 2 - 1 < num_kv_pairs:
        raise ValueError(f"vocab_size={vocab_size} has {vocab_size // 2 - 1} keys in [1, V/2), fewer than "
                         f"num_kv_pairs={num_kv_pairs}")


MAX_POWER_A = 100.0  # beyond it every query sits at the longest gap: the law is a point mass, not a power law


def check_power(power_a, seq_len: int, num_kv_pairs: int) -> None:
    """ValueError unless power_a is a number in (0, MAX_POWER_A] whose gap probabilities are finite for
    the query region of seq_len (a large power overflows float64)."""
    is_number = isinstance(power_a, (int, float)) and not isinstance(power_a, bool)
    if not (is_number and math.isfinite(power_a) and 0 < power_a <= MAX_POWER_A):
        raise ValueError(f"power_a={power_a!r} must be a number in (0, {MAX_POWER_A:g}] (1: uniform query "
                         f"gaps, below 1: short gaps more likely)")
    with np.errstate(over="ignore", invalid="ignore"):
        finite = np.isfinite(gap_probabilities((seq_len - 2 * num_kv_pairs) // 2, power_a)).all()
    if not finite:
        raise ValueError(f"power_a={power_a!r}: its gap probabilities overflow at seq_len={seq_len}; lower it")


def gap_probabilities(num_gaps: int, power_a: float) -> np.ndarray:
    """P(gap g) for g in [0, num_gaps): proportional to (g + 1)^(power_a - 1)."""
    weights = np.arange(1, num_gaps + 1, dtype=np.float64) ** (power_a - 1)
    return weights / weights.sum()


def _distinct(rng: np.random.Generator, low: int, high: int, shape: tuple[int, int]) -> np.ndarray:
    """Rows of shape[1] distinct integers of [low, high), each row uniform over ordered tuples.

    Entries equal to an earlier one of their row are redrawn until none is: the procedure treats every
    value alike, so all tuples of distinct values are equally likely.
    """
    values = rng.integers(low, high, shape)
    while True:
        ordered = np.sort(values, axis=1)
        if not (ordered[:, 1:] == ordered[:, :-1]).any():
            return values
        earlier = np.tril(values[:, :, None] == values[:, None, :], k=-1).any(axis=2)
        values[earlier] = rng.integers(low, high, int(earlier.sum()))


def _gaps(rng: np.random.Generator, num_examples: int, num_gaps: int, count: int, power_a: float):
    """[num_examples, count] gaps drawn one after another without replacement with gap_probabilities.

    The `count` largest of log p + Gumbel noise, largest first, are distributed as successive draws
    (Gumbel top-k): the same law as numpy's choice(replace=False, p=p), the draw order included.
    """
    keys = np.log(gap_probabilities(num_gaps, power_a)) + rng.gumbel(size=(num_examples, num_gaps))
    return np.argsort(-keys, axis=1)[:, :count]


def _generate_chunk(rng, num_examples, vocab_size, seq_len, num_kv_pairs, power_a, form, random_non_queries):
    half = vocab_size // 2
    keys = _distinct(rng, 1, half, (num_examples, num_kv_pairs))
    values = _distinct(rng, half, vocab_size, (num_examples, num_kv_pairs))
    inputs = rng.integers(0, vocab_size, (num_examples, seq_len))  # drawn either way: the same keys and gaps
    inputs[:, 0 : 2 * num_kv_pairs : 2] = keys
    inputs[:, 1 : 2 * num_kv_pairs : 2] = values
    context = 2 * num_kv_pairs
    if not random_non_queries:
        inputs[:, context:] = 0
    query_positions = context + 2 * _gaps(rng, num_examples, (seq_len - context) // 2, num_kv_pairs, power_a)
    np.put_along_axis(inputs, query_positions, keys, axis=1)
    positions = query_positions
    if form == "bidirectional":
        positions = query_positions + 1
        np.put_along_axis(inputs, positions, mask_id(vocab_size), axis=1)
    order = np.argsort(positions, axis=1)  # predictions listed in sequence order
    return {"inputs": inputs.astype(np.int32),
            "positions": np.take_along_axis(positions, order, axis=1).astype(np.int32),
            "targets": np.take_along_axis(values, order, axis=1).astype(np.int32),
            "weights": np.ones((num_examples, num_kv_pairs), np.float32)}


def generate(num_examples: int, *, vocab_size: int, seq_len: int, num_kv_pairs: int, seed, form: str = "causal",
             power_a: float = 0.01, random_non_queries: bool = True) -> dict[str, np.ndarray]:
    """`num_examples` MQAR sequences, a function of the arguments (`seed`: an int or a sequence of ints);
    without `random_non_queries`, the same sequences with 0 wherever their query region holds no query.

    Returns int32 inputs [E, seq_len], and per prediction (N of them, in sequence order) int32 positions
    and targets and float32 weights (all 1) [E, N]: the layout of data.mlm.mask_tokens, so that the
    masked-prediction loss serves both tasks.
    """
    if form not in FORMS:
        raise ValueError(f"form={form!r}; choose one of: {', '.join(FORMS)}")
    check_sizes(vocab_size, seq_len, num_kv_pairs)
    check_power(power_a, seq_len, num_kv_pairs)
    rng = np.random.default_rng(seed)
    chunks = [_generate_chunk(rng, min(_CHUNK, num_examples - start), vocab_size, seq_len, num_kv_pairs,
                              power_a, form, random_non_queries)
              for start in range(0, num_examples, _CHUNK)]
    return {name: np.concatenate([chunk[name] for chunk in chunks]) for name in chunks[0]}
