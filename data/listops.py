"""ListOps (Nangia & Bowman, 2018) as Long Range Arena (Tay et al., 2020) generates it: a nested prefix
expression over the digits 0-9 whose value, a digit, is the label (10 classes).

    [MAX 2 9 [MIN 4 7 ] 0 ]   ->   9

Tokens are separated by single spaces: an operator opens with "[MIN", "[MAX", "[MED" or "[SM" and closes
with "]"; a digit is one token. MIN and MAX are the least and greatest argument, MED the median truncated to
an integer (LRA's int(np.median(args)): [MED 3 4 ] is 3), SM the sum modulo 10. An expression's length is
its number of tokens.

The trees are drawn as LRA's generator draws them: a node is an operator with probability 1/4 (a digit
otherwise, and always at max_depth), with a uniform operator and a uniform number of arguments in
[2, max_args]; a digit is uniform. Depth counts the levels of the tree, digits included, as LRA does: a
lone digit has depth 1, the example above 3, so operators nest at most max_depth - 1 deep. Trees whose
length falls outside the range are drawn again. At LRA's settings (lengths 500-2000, max_depth 10,
max_args 10) about 1 tree in 12 is kept, but three quarters of all trees are a lone digit: rejection is
cheap (2,000 examples in about 2 s), so the sampler stays LRA's and so does the length distribution.

Deliberate differences from LRA:
- no "(" and ")": LRA's files hold them from a tree format; they carry no information and only lengthen
  the sequences.
- the length range is inclusive: min_length <= length <= max_length (LRA: min_length < length < max_length).
- the splits are drawn independently, each from its own seed, without removing repeats (LRA draws all
  examples into one set); at these lengths two equal expressions are vanishingly unlikely.
- the random streams are Python's, so the data are not LRA's files, only from the same distribution.
"""
import io
import os
import random
import statistics
import zipfile

import numpy as np

from data import paths
from runtime import atomic

OPERATORS = ("MIN", "MAX", "MED", "SM")
_OPENERS = tuple(f"[{operator}" for operator in OPERATORS)
_DIGITS = tuple(str(digit) for digit in range(10))
TOKENS = (*_OPENERS, "]", *_DIGITS)
NUM_CLASSES = 10
SPLITS = ("train", "validation", "test")
OPERATOR_PROBABILITY = 0.25  # LRA's 1 - VALUE_P
MAX_MISSES = 2_000_000  # trees drawn in a row outside the length window before generation gives up

_DIGIT_VALUES = {token: int(token) for token in _DIGITS}
_OPERATIONS = {"[MIN": min, "[MAX": max, "[MED": lambda args: int(statistics.median(args)),
               "[SM": lambda args: sum(args) % 10}


def _longest(max_depth: int, max_args: int) -> int:
    """Tokens of the longest possible expression: every node above max_depth an operator of max_args."""
    length = 1
    for _ in range(max_depth - 1):
        length = 2 + max_args * length
    return length


def _lengths(max_depth: int, max_args: int, max_length: int) -> int:
    """The lengths up to max_length that some expression has, as the bits of an int (bit n: length n): a
    digit is 1 token, an operator 2 around the lengths of its 2 to max_args arguments of one level less."""
    mask, lengths = (1 << (max_length + 1)) - 1, 1 << 1
    for _ in range(max_depth - 1):
        sums, operators = lengths, 0  # sums: the lengths of k arguments, from k = 1
        for _ in range(2, max_args + 1):
            sums = _sum_sets(sums, lengths, mask)
            operators |= sums
        lengths = (1 << 1) | (operators << 2) & mask
    return lengths


def _sum_sets(a: int, b: int, mask: int) -> int:
    """{x + y: x in a, y in b} as bits, cut at mask."""
    total, shift = 0, 0
    while b >> shift:
        if (b >> shift) & 1:
            total |= (a << shift) & mask
        shift += 1
    return total


def _check_window(max_depth: int, max_args: int, min_length: int, max_length: int) -> None:
    """ValueError when no expression has a length in [min_length, max_length]: generating would never end."""
    window = ((1 << (max_length + 1)) - 1) ^ ((1 << min_length) - 1)
    if not _lengths(max_depth, max_args, max_length) & window:
        raise ValueError(f"no expression of max_depth={max_depth}, max_args={max_args} has a length in "
                         f"[{min_length}, {max_length}] (a digit is 1 token, an operator at least 4); widen "
                         f"the window")


def _check(num_examples, seed, max_depth, max_args, min_length, max_length) -> None:
    if num_examples < 0:
        raise ValueError(f"num_examples={num_examples} must be >= 0")
    if seed < 0:  # Python's Random would treat seed and -seed alike
        raise ValueError(f"seed={seed} must be >= 0")
    if max_depth < 1:
        raise ValueError(f"max_depth={max_depth} must be >= 1 (a lone digit has depth 1)")
    if max_args < 2:
        raise ValueError(f"max_args={max_args} must be >= 2")
    if min_length < 1:
        raise ValueError(f"min_length={min_length} must be >= 1")
    if min_length > max_length:
        raise ValueError(f"min_length={min_length} must be <= max_length={max_length}")
    if min_length > _longest(max_depth, max_args):
        raise ValueError(f"min_length={min_length} is more than the {_longest(max_depth, max_args)} tokens of "
                         f"the longest expression of max_depth={max_depth}, max_args={max_args}")
    _check_window(max_depth, max_args, min_length, max_length)


def check_settings(max_depth: int, max_args: int, min_length: int, max_length: int) -> None:
    """ValueError naming the first generation setting out of range (what config validation checks)."""
    _check(0, 0, max_depth, max_args, min_length, max_length)


def _draw(rng: random.Random, max_depth: int, max_args: int, max_length: int) -> list[str] | None:
    """The tokens of one tree in prefix order, or None as soon as it is longer than max_length.

    A loop over a stack of open operators, not recursion: any depth is safe. Stopping early keeps the
    kept trees' distribution, since such a tree would be rejected whole.
    """
    tokens = []
    arguments_left = []  # of each open operator, innermost last
    while True:
        if arguments_left:
            arguments_left[-1] -= 1
        if len(arguments_left) + 1 < max_depth and rng.random() < OPERATOR_PROBABILITY:
            tokens.append(rng.choice(_OPENERS))
            arguments_left.append(rng.randint(2, max_args))
        else:
            tokens.append(rng.choice(_DIGITS))
            while arguments_left and arguments_left[-1] == 0:
                arguments_left.pop()
                tokens.append("]")
            if not arguments_left:
                return tokens if len(tokens) <= max_length else None
        if len(tokens) > max_length:
            return None


def generate(num_examples: int, seed: int, *, max_depth: int, max_args: int, min_length: int,
             max_length: int) -> list[tuple[str, int]]:
    """(expression, label) pairs, deterministic in seed, each expression's token count in [min_length, max_length]."""
    _check(num_examples, seed, max_depth, max_args, min_length, max_length)
    rng = random.Random(seed)
    examples, misses = [], 0
    while len(examples) < num_examples:
        tokens = _draw(rng, max_depth, max_args, max_length)
        if tokens is not None and len(tokens) >= min_length:
            expression = " ".join(tokens)
            examples.append((expression, evaluate(expression)))
            misses = 0
        elif (misses := misses + 1) > MAX_MISSES:
            raise ValueError(f"lengths in [{min_length}, {max_length}] are too rare at max_depth={max_depth}, "
                             f"max_args={max_args}: none in {MAX_MISSES:,} draws; widen the window")
    return examples


def evaluate(expression: str) -> int:
    """The value of an expression string (used for labels); ValueError if it is not an expression."""
    values = [[]]  # the argument values read so far of each open operator, innermost last, under the top level's
    operations = []
    for position, token in enumerate(expression.split()):
        if token in _OPERATIONS:
            operations.append(_OPERATIONS[token])
            values.append([])
        elif token in _DIGIT_VALUES:
            values[-1].append(_DIGIT_VALUES[token])
        elif token == "]" and operations and values[-1]:
            arguments = values.pop()
            values[-1].append(operations.pop()(arguments))
        else:
            raise ValueError(f"not a ListOps expression: unexpected {token!r} at token {position}")
    if operations or len(values[0]) != 1:
        raise ValueError(f"not a ListOps expression: {len(operations)} operators left open, "
                         f"{len(values[0])} values at the top level (1 expected)")
    return values[0][0]


def load_split(split: str, size: int, *, max_depth: int, max_args: int, min_length: int, max_length: int,
               seed: int = 0) -> list[tuple[str, int]]:
    """One split, from a seed derived from (seed, split) so splits differ; raises ValueError naming the allowed
    splits for an unknown split."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r}; choose one of: {', '.join(SPLITS)}")
    if seed < 0:
        raise ValueError(f"seed={seed} must be >= 0")
    split_seed = int(np.random.SeedSequence((seed, SPLITS.index(split))).generate_state(1)[0])
    return generate(size, split_seed, max_depth=max_depth, max_args=max_args, min_length=min_length,
                    max_length=max_length)


# --- the model's view: token ids, and splits cached beside the other datasets ---------------------------

PAD, CLS = 0, 1  # ids before the tokens; a [CLS] token opens every sequence for the cls pooling head
VOCAB_SIZE = 2 + len(TOKENS)
_IDS = {token: index for index, token in enumerate(TOKENS, start=2)}
_CACHE_FIELDS = ("max_depth", "max_args", "min_length", "max_length", "seed")


def encode(examples: list[tuple[str, int]], max_length: int) -> dict[str, np.ndarray]:
    """(expression, label) pairs -> inputs int32 [N, 1 + max_length] ([CLS], the tokens, PAD), targets
    int32 [N, 1] and weights float32 [N, 1] (ones: padding rows that batching adds weigh nothing)."""
    inputs = np.full((len(examples), 1 + max_length), PAD, np.int32)
    inputs[:, 0] = CLS
    for row, (expression, _) in enumerate(examples):
        ids = [_IDS[token] for token in expression.split()]
        inputs[row, 1 : 1 + len(ids)] = ids
    targets = np.asarray([[label] for _, label in examples], np.int32).reshape(-1, 1)
    return {"inputs": inputs, "targets": targets, "weights": np.ones((len(examples), 1), np.float32)}


def decode(ids) -> list[str]:
    """The tokens of one row of `inputs`, [CLS] included, padding dropped."""
    names = ("[PAD]", "[CLS]", *TOKENS)
    return [names[int(i)] for i in ids if int(i) != PAD]


def cached_arrays(dataset, split: str) -> dict[str, np.ndarray]:
    """encode(load_split(...)) of one split of `dataset` (the config block), generated once and kept in
    <data_dir>/listops/<settings>.npz: LRA's lengths take minutes to generate."""
    settings = {field: dataset[field] for field in _CACHE_FIELDS}
    size = dataset[f"{split}_size"]
    name = "_".join(f"{field}{value}" for field, value in settings.items()) + f"_{split}{size}.npz"
    path = os.path.join(paths.data_dir(dataset.data_dir), "listops", name)
    if os.path.exists(path):
        try:
            with np.load(path) as arrays:
                return dict(arrays)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:  # cut short, or not an .npz
            print(f"warning: {path}: not a readable cache ({type(error).__name__}); generating it again",
                  flush=True)
    arrays = encode(load_split(split, size, **settings), dataset.max_length)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    atomic.write_bytes(path, buffer.getvalue())  # parallel runs never read half a file
    return arrays
