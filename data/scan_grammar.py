"""SCAN (Lake & Baroni, 2018) generated from its phrase-structure grammar, with the released splits.

C -> S and S | S after S | S
S -> V twice | V thrice | V
V -> D[1] opposite D[2] | D[1] around D[2] | D | U
D -> U left | U right | turn left | turn right
U -> walk | look | run | jump
"""

import numpy as np

Pair = tuple[str, str]  # (command, actions), words separated by single spaces

PRIMITIVES = {"walk": "I_WALK", "look": "I_LOOK", "run": "I_RUN", "jump": "I_JUMP"}
TURNS = {"left": "I_TURN_LEFT", "right": "I_TURN_RIGHT"}
REPEATS = {"twice": 2, "thrice": 3}
MAX_TRAIN_ACTIONS_IN_LENGTH_SPLIT = 22
PRIMITIVE_PERIOD = 10  # add_* training files: the primitive alone is every 10th line
# The phrase each add_* split shows only alone in training: its lines never go to validation.
PRIMITIVE_OF_SPLIT = {"add_jump": "jump", "add_turn_left": "turn left"}


def _verb_phrases() -> list[tuple[str, list[str]]]:
    phrases = [(u, [action]) for u, action in PRIMITIVES.items()]
    for x in ("turn", *PRIMITIVES):
        # "turn" only faces a direction; a primitive also does something once it faces it.
        act = [PRIMITIVES[x]] if x in PRIMITIVES else []
        for direction, turn in TURNS.items():
            phrases.append((f"{x} {direction}", [turn, *act]))
            phrases.append((f"{x} opposite {direction}", [turn, turn, *act]))
            phrases.append((f"{x} around {direction}", [turn, *act] * 4))
    return phrases


def _sentences() -> list[tuple[str, list[str]]]:
    sentences = []
    for verb, actions in _verb_phrases():
        sentences.append((verb, actions))
        sentences.extend((f"{verb} {word}", actions * n) for word, n in REPEATS.items())
    return sentences


def generate() -> list[Pair]:
    """Every SCAN command with its actions, in the grammar's enumeration order."""
    sentences = _sentences()
    commands = list(sentences)
    for first, first_actions in sentences:
        for second, second_actions in sentences:
            commands.append((f"{first} and {second}", first_actions + second_actions))
            commands.append((f"{first} after {second}", second_actions + first_actions))
    return [(command, " ".join(actions)) for command, actions in commands]


def interpret(command: str) -> str:
    """Actions of a command, parsed from the string by the rules of the paper."""
    actions = _interpret_command(command.split())
    if actions is None:
        raise ValueError(f"not a SCAN command: {command!r}")
    return " ".join(actions)


def _interpret_command(words: list[str]) -> list[str] | None:
    for conjunction in ("and", "after"):
        if conjunction in words:
            i = words.index(conjunction)
            first, second = _interpret_sentence(words[:i]), _interpret_sentence(words[i + 1 :])
            if first is None or second is None:
                return None
            return first + second if conjunction == "and" else second + first
    return _interpret_sentence(words)


def _interpret_sentence(words: list[str]) -> list[str] | None:
    if words and words[-1] in REPEATS:
        actions = _interpret_verb(words[:-1])
        return None if actions is None else actions * REPEATS[words[-1]]
    return _interpret_verb(words)


def _interpret_verb(words: list[str]) -> list[str] | None:
    match words:
        case [u] if u in PRIMITIVES:
            return [PRIMITIVES[u]]
        case ["turn", d] if d in TURNS:
            return [TURNS[d]]
        case [u, d] if u in PRIMITIVES and d in TURNS:
            return [TURNS[d], PRIMITIVES[u]]
        case ["turn", "opposite", d] if d in TURNS:
            return [TURNS[d], TURNS[d]]
        case [u, "opposite", d] if u in PRIMITIVES and d in TURNS:
            return [TURNS[d], TURNS[d], PRIMITIVES[u]]
        case ["turn", "around", d] if d in TURNS:
            return [TURNS[d]] * 4
        case [u, "around", d] if u in PRIMITIVES and d in TURNS:
            return [TURNS[d], PRIMITIVES[u]] * 4
    return None


def simple() -> tuple[list[Pair], list[Pair]]:
    """A random 80/20 split of all commands, fixed by seed 0."""
    pairs = generate()
    order = np.random.default_rng(seed=0).permutation(len(pairs))
    num_train = len(pairs) * 4 // 5
    return [pairs[i] for i in order[:num_train]], [pairs[i] for i in order[num_train:]]


def length() -> tuple[list[Pair], list[Pair]]:
    """Train on short action sequences, test on longer ones (no command has exactly 23 actions)."""
    train, test = [], []
    for pair in generate():
        is_short = len(pair[1].split()) <= MAX_TRAIN_ACTIONS_IN_LENGTH_SPLIT
        (train if is_short else test).append(pair)
    return train, test


def _add_primitive(primitive: str) -> tuple[list[Pair], list[Pair]]:
    """Training holds every command without the phrase `primitive`, and the primitive alone, repeated
    so that it makes 1 line in 10 (as the released training files have it); test, every other command
    with the phrase."""
    phrase = f" {primitive} "
    train, test = [], []
    for command, actions in generate():
        if command == primitive:
            alone = (command, actions)
        else:
            (test if phrase in f" {command} " else train).append((command, actions))
    repeats = len(train) // (PRIMITIVE_PERIOD - 1)  # repeats / (len(train) + repeats) = 1 / period
    return train + [alone] * repeats, test


def add_jump() -> tuple[list[Pair], list[Pair]]:
    """Train sees "jump" only alone (1,467 of 14,670 lines); test asks for it in every composition."""
    return _add_primitive(PRIMITIVE_OF_SPLIT["add_jump"])


def add_turn_left() -> tuple[list[Pair], list[Pair]]:
    """Train sees "turn left" only alone (2,189 of 21,890 lines); test, the 1,208 commands with it."""
    return _add_primitive(PRIMITIVE_OF_SPLIT["add_turn_left"])


SPLITS = {"simple": simple, "length": length, "add_jump": add_jump, "add_turn_left": add_turn_left}
