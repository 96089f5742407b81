"""ListOps: labels against an evaluator written here (innermost brackets reduced by regular expression,
not the module's stack), hand-worked values of each operator, and the lengths, depths, widths, tokens,
seeds and splits of generated data."""
import collections
import re

import numpy as np
import pytest

from data import listops

QUICK = dict(max_depth=6, max_args=10, min_length=32, max_length=256)
LRA = dict(max_depth=10, max_args=10, min_length=500, max_length=2000)
DEEP = dict(max_depth=20, max_args=3, min_length=100, max_length=1000)  # narrow, so deep trees stay short

_INNERMOST = re.compile(r"\[(MIN|MAX|MED|SM)((?: \d)+) \]")  # an operator whose arguments are all digits
_REFERENCE = {"MIN": min, "MAX": max, "MED": lambda args: int(np.median(args)), "SM": lambda args: sum(args) % 10}


def _reference_value(expression: str) -> int:
    while not re.fullmatch(r"\d", expression):
        expression, reduced = _INNERMOST.subn(
            lambda match: str(_REFERENCE[match[1]]([int(digit) for digit in match[2].split()])), expression)
        assert reduced, f"no innermost operator in {expression!r}"
    return int(expression)


def _depth_and_widest(expression: str) -> tuple[int, int]:
    """The tree's levels (a lone digit is 1, as in LRA) and the most arguments of one operator."""
    arguments_seen = []  # of each open operator
    depth, widest = 1, 0
    for token in expression.split():
        if token == "]":
            widest = max(widest, arguments_seen.pop())
            continue
        if arguments_seen:
            arguments_seen[-1] += 1
        if token.startswith("["):
            arguments_seen.append(0)
        else:
            depth = max(depth, len(arguments_seen) + 1)
    return depth, widest


@pytest.fixture(scope="module")
def quick():
    return listops.generate(400, 0, **QUICK)


@pytest.fixture(scope="module")
def lra():
    return listops.generate(100, 0, **LRA)


@pytest.fixture(scope="module")
def deep():
    return listops.generate(20, 0, **DEEP)


@pytest.mark.parametrize("expression, value", [
    ("7", 7),
    ("[MIN 4 7 2 9 ]", 2),
    ("[MAX 2 9 [MIN 4 7 ] 0 ]", 9),
    ("[MED 3 1 2 ]", 2),
    ("[MED 3 4 ]", 3),  # even count: the mean of the middle two, 3.5, truncated as int(np.median) does
    ("[MED 9 1 8 2 ]", 5),
    ("[MED 0 9 4 5 ]", 4),
    ("[SM 9 8 7 ]", 4),  # 24 wraps to 4
    ("[SM 5 5 ]", 0),
    ("[SM 9 9 9 9 9 9 9 9 9 8 ]", 9),  # 89
    ("[SM [MAX 3 8 ] [MIN 7 [MED 9 5 ] ] 6 ]", 1),  # 8 + min(7, 7) + 6 = 21
    ("[MED [SM 5 6 ] [MAX 0 3 ] 9 2 ]", 2),  # median of 1 3 9 2: 2.5
])
def test_hand_worked_values(expression, value):
    assert listops.evaluate(expression) == value
    assert _reference_value(expression) == value


@pytest.mark.parametrize("expression", ["", "12", "3 4", "[MAX 3", "[MAX ]", "]", "[MAX 3 ] ]", "( 3 )", "[FIRST 3 ]"])
def test_evaluate_rejects_what_is_not_an_expression(expression):
    with pytest.raises(ValueError, match="not a ListOps expression"):
        listops.evaluate(expression)


def test_tokens():
    assert listops.TOKENS == ("[MIN", "[MAX", "[MED", "[SM", "]", *"0123456789")
    assert listops.NUM_CLASSES == 10


@pytest.mark.parametrize("name", ["quick", "lra", "deep"])
def test_labels_equal_the_reference_evaluation(name, request):
    for expression, label in request.getfixturevalue(name):
        assert label == _reference_value(expression), expression


@pytest.mark.parametrize("name, settings", [("quick", QUICK), ("lra", LRA), ("deep", DEEP)])
def test_lengths_depths_widths_and_tokens_within_the_settings(name, settings, request):
    examples = request.getfixturevalue(name)
    assert _depth_and_widest("[MAX 2 9 [MIN 4 7 ] 0 ]") == (3, 4)
    shapes = [_depth_and_widest(expression) for expression, _ in examples]
    for expression, _ in examples:
        tokens = expression.split()
        assert settings["min_length"] <= len(tokens) <= settings["max_length"]
        assert set(tokens) <= set(listops.TOKENS)
        assert " ".join(tokens) == expression  # single spaces, nothing around
    assert max(depth for depth, _ in shapes) == settings["max_depth"]  # reached, never passed
    assert max(widest for _, widest in shapes) == settings["max_args"]


def test_lengths_spread_over_the_range(quick):
    lengths = np.array([len(expression.split()) for expression, _ in quick])
    low, high = QUICK["min_length"], QUICK["max_length"]
    quarter = (high - low) / 4
    assert (lengths < low + quarter).mean() > 0.2  # about 0.38: most trees are small
    assert (lengths > high - quarter).mean() > 0.05  # about 0.12
    assert len(set(lengths)) > 100


@pytest.mark.parametrize("name", ["quick", "lra"])
def test_every_class_appears_and_none_dominates(name, request):
    counts = collections.Counter(label for _, label in request.getfixturevalue(name))
    assert set(counts) == set(range(listops.NUM_CLASSES))
    assert max(counts.values()) < 0.3 * sum(counts.values())  # 0 and 9 lead, at about 0.17 each


def test_deterministic_in_the_seed(quick):
    assert listops.generate(400, 0, **QUICK) == quick
    other = listops.generate(400, 1, **QUICK)
    assert not {expression for expression, _ in other} & {expression for expression, _ in quick}


def test_splits_differ_and_are_deterministic():
    splits = {split: listops.load_split(split, 100, **QUICK) for split in listops.SPLITS}
    expressions = [{expression for expression, _ in examples} for examples in splits.values()]
    assert all(len(found) == 100 for found in expressions)
    assert not (expressions[0] & expressions[1] or expressions[0] & expressions[2] or expressions[1] & expressions[2])
    assert listops.load_split("test", 100, **QUICK) == splits["test"]
    assert listops.load_split("test", 100, **QUICK, seed=1) != splits["test"]


@pytest.mark.parametrize("change, named", [
    (dict(num_examples=-1), "num_examples=-1 must"),
    (dict(seed=-1), "seed=-1 must"),
    (dict(max_depth=0), "max_depth=0 must"),
    (dict(max_args=1), "max_args=1 must"),
    (dict(min_length=0), "min_length=0 must"),
    (dict(min_length=300, max_length=200), "min_length=300 must be <= max_length=200"),
    (dict(max_depth=2, max_args=3, min_length=6, max_length=10), "min_length=6 is more than the 5 tokens"),
])
def test_bad_arguments_are_named(change, named):
    arguments = dict(num_examples=0, seed=0, **QUICK) | change  # no examples: a missed check fails, not hangs
    with pytest.raises(ValueError, match=f"^{named}"):
        listops.generate(**arguments)


def test_unknown_split_names_the_allowed_ones():
    with pytest.raises(ValueError, match="train, validation, test"):
        listops.load_split("valid", 10, **QUICK)
    with pytest.raises(ValueError, match="seed"):
        listops.load_split("train", 10, **QUICK, seed=-1)
