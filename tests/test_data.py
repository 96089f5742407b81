"""Data package: SCAN against the paper's counts and examples, the TFDS builder, user files, vocabularies."""

import errno
import os
import re
import subprocess
import sys
import zlib

import numpy as np
import pytest

from data import scan, scan_grammar
from data.files import DataFileError, read_parallel_file
from data.vocab import Vocabulary
from runtime import atomic

NUM_SCAN_COMMANDS = 20_910
ACTION_NAMES = {"I_WALK", "I_LOOK", "I_RUN", "I_JUMP", "I_TURN_LEFT", "I_TURN_RIGHT"}

# Examples written out by hand from the interpretation rules of Lake & Baroni (2018), most from its Figure 1.
L, R, WALK, JUMP = "I_TURN_LEFT", "I_TURN_RIGHT", "I_WALK", "I_JUMP"
HAND_WRITTEN = {
    "jump": [JUMP],
    "jump left": [L, JUMP],
    "jump around right": [R, JUMP] * 4,
    "turn left twice": [L, L],
    "jump thrice": [JUMP] * 3,
    "jump opposite left and walk thrice": [L, L, JUMP, WALK, WALK, WALK],
    "jump opposite left after walk around left": [L, WALK] * 4 + [L, L, JUMP],
    "jump around left twice": [L, JUMP] * 8,
    "walk opposite left thrice": [L, L, WALK] * 3,
    "turn opposite right thrice": [R] * 6,
    "turn around left": [L] * 4,
    "turn left after walk": [WALK, L],
    "look right and run": [R, "I_LOOK", "I_RUN"],
}


@pytest.fixture(scope="module")
def scan_pairs():
    return scan_grammar.generate()


def test_generate_has_every_command_once_within_the_published_bounds(scan_pairs):
    commands = [command for command, _ in scan_pairs]
    assert len(commands) == len(set(commands)) == NUM_SCAN_COMMANDS
    assert max(len(command.split()) for command in commands) == 9
    assert max(len(actions.split()) for _, actions in scan_pairs) == 48
    assert {word for _, actions in scan_pairs for word in actions.split()} == ACTION_NAMES


def test_generator_and_interpreter_agree_on_every_command(scan_pairs):
    disagreements = [(c, a) for c, a in scan_pairs if scan_grammar.interpret(c) != a]
    assert disagreements == []


@pytest.mark.parametrize("command", HAND_WRITTEN)
def test_hand_written_examples(scan_pairs, command):
    expected = " ".join(HAND_WRITTEN[command])
    assert dict(scan_pairs)[command] == expected
    assert scan_grammar.interpret(command) == expected


@pytest.mark.parametrize(
    "command", ["", "turn", "walk walk", "jump and", "walk twice twice", "walk and run and look", "fly left"]
)
def test_interpret_rejects_non_scan_commands(command):
    with pytest.raises(ValueError, match=repr(command)):
        scan_grammar.interpret(command)


# (lines, distinct commands, test commands) of the released files; the add_* files repeat their primitive.
RELEASED = {"simple": (16_728, 16_728, 4_182), "length": (16_990, 16_990, 3_920),
            "add_jump": (14_670, 13_204, 7_706), "add_turn_left": (21_890, 19_702, 1_208)}


@pytest.mark.parametrize("split", sorted(RELEASED))
def test_split_sizes_and_partition(scan_pairs, split):
    train, test = scan_grammar.SPLITS[split]()
    assert (len(train), len(set(train)), len(test)) == RELEASED[split]
    train_commands, test_commands = {c for c, _ in train}, {c for c, _ in test}
    assert not train_commands & test_commands
    assert train_commands | test_commands == {c for c, _ in scan_pairs}
    assert set(train) | set(test) == set(scan_pairs)


def test_length_split_separates_at_23_actions(scan_pairs):
    train, test = scan_grammar.length()
    assert max(len(actions.split()) for _, actions in train) <= 22
    assert min(len(actions.split()) for _, actions in test) >= 24
    assert all(len(actions.split()) != 23 for _, actions in scan_pairs)


@pytest.mark.parametrize("split, primitive, actions, repeats", [("add_jump", "jump", "I_JUMP", 1_467),
                                                                ("add_turn_left", "turn left", "I_TURN_LEFT", 2_189)])
def test_add_splits_show_their_primitive_only_alone_and_in_one_line_of_ten(split, primitive, actions, repeats):
    train, test = scan_grammar.SPLITS[split]()
    with_phrase = [pair for pair in train if f" {primitive} " in f" {pair[0]} "]
    assert with_phrase == [(primitive, actions)] * repeats
    assert repeats * 10 == len(train)
    assert all(f" {primitive} " in f" {command} " for command, _ in test)


@pytest.mark.parametrize("split, command, expected", [
    ("add_jump", "jump twice after walk", "test"),
    ("add_jump", "turn left", "train"),
    ("add_turn_left", "turn left twice", "test"),
    ("add_turn_left", "walk and turn left", "test"),
    ("add_turn_left", "turn opposite left", "train"),  # not the phrase "turn left"
    ("add_turn_left", "jump left", "train"),
    ("add_turn_left", "turn right after walk left", "train"),
])
def test_hand_picked_commands_of_the_add_splits(split, command, expected):
    train, test = scan_grammar.SPLITS[split]()
    assert command in {c for c, _ in (train if expected == "train" else test)}


def test_validation_is_a_tenth_of_the_commands_by_their_hash():
    train, _ = scan_grammar.add_jump()
    kept, validation = scan.hold_out_validation(train, keep=("jump",))
    held = {c for c, _ in train if zlib.crc32(c.encode("utf-8")) % 10 == 0}
    assert {c for c, _ in validation} == held
    assert not {c for c, _ in kept} & held
    assert sorted(kept + validation) == sorted(train)
    assert kept.count(("jump", "I_JUMP")) == 1_467
    assert 0.09 < len(held) / len(set(train)) < 0.11
    assert ("look thrice", "I_LOOK I_LOOK I_LOOK") in validation and ("walk after run", "I_RUN I_WALK") in kept


def test_validation_keeps_every_copy_of_a_kept_command_in_training():
    train = [("look", "I_LOOK")] * 3 + [("look left", "I_TURN_LEFT I_LOOK"), ("walk", "I_WALK")]
    kept, validation = scan.hold_out_validation(train, keep=("look",))  # both "look" commands hash to 0
    assert kept == [("look", "I_LOOK")] * 3 + [("walk", "I_WALK")]
    assert validation == [("look left", "I_TURN_LEFT I_LOOK")]


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tensorflow_datasets"))


def test_tfds_builder_returns_the_split_in_sorted_order(tfds_dir, capfd):
    train, test = scan.load_split("simple", tfds_dir)
    # One line of ours, not TFDS's "Downloading and preparing dataset Unknown size" nor its progress bars.
    output = "".join(capfd.readouterr())
    assert output == f"building dataset scan/simple/1.1.0 in {tfds_dir} (once; later runs read it)\n"
    expected_train, expected_test = scan_grammar.simple()
    assert set(train) == set(expected_train) and len(train) == len(expected_train)
    assert set(test) == set(expected_test) and len(test) == len(expected_test)
    assert train == sorted(train) and test == sorted(test)
    assert scan.load_split("simple", tfds_dir) == (train, test)  # reads the files already built


def test_unknown_split_is_rejected_before_building(tmp_path):
    with pytest.raises(ValueError, match="dataset.split='xyz'.*simple, length, add_jump, add_turn_left"):
        scan.load_split("xyz", str(tmp_path))
    assert list(tmp_path.iterdir()) == []


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOAD_SIMPLE = ("import sys\nfrom data import scan\ntrain, test = scan.load_split('simple', sys.argv[1])\n"
               "print('read', len(train), len(test), flush=True)")


def test_two_processes_building_a_dataset_build_it_once_and_remove_what_a_killed_build_left(tmp_path):
    leftover = tmp_path / "scan" / "simple" / "incomplete.KILLED_1.1.0"  # TFDS's folder of a build cut short
    leftover.mkdir(parents=True)
    (leftover / "train.array_record-00000-of-00001").write_bytes(b"half")
    builders = [subprocess.Popen([sys.executable, "-c", LOAD_SIMPLE, str(tmp_path)], cwd=ROOT, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for _ in range(2)]
    outputs = [builder.communicate(timeout=600)[0] for builder in builders]
    assert [builder.returncode for builder in builders] == [0, 0], outputs
    train, test = scan_grammar.simple()
    assert [output.strip().splitlines()[-1] for output in outputs] == [f"read {len(train)} {len(test)}"] * 2, outputs
    assert sum(output.count("building dataset scan/simple/1.1.0") for output in outputs) == 1, outputs
    assert not [name for name in os.listdir(tmp_path / "scan" / "simple") if name.startswith("incomplete.")]


def test_a_full_disk_during_a_build_names_the_dataset_folder_and_leaves_nothing_half_built(tmp_path, monkeypatch):
    def disk_full(self, pairs):
        yield 0, {"source": "walk", "target": "I_WALK"}
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(scan.Scan, "_generate_examples", disk_full)
    target = tmp_path / "scan" / "simple" / "1.1.0"
    with pytest.raises(atomic.DiskError, match=rf"^{re.escape(str(target))}: No space left on device; "):
        scan.load_split("simple", str(tmp_path))
    assert not [name for name in os.listdir(tmp_path / "scan" / "simple") if not name.endswith(".lock")]


LIMITS = (256, 256)  # max source and target words: the config's defaults


def test_read_scan_format(tmp_path):
    path = tmp_path / "tasks.txt"
    path.write_text("IN: jump twice OUT: I_JUMP I_JUMP\n\nIN: turn left OUT: I_TURN_LEFT\n")
    assert read_parallel_file(str(path), *LIMITS) == [("jump twice", "I_JUMP I_JUMP"), ("turn left", "I_TURN_LEFT")]


def test_read_tab_separated(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("\nein Haus\ta house\r\nzwei\ttwo\n")
    assert read_parallel_file(str(path), *LIMITS) == [("ein Haus", "a house"), ("zwei", "two")]


def test_missing_file(tmp_path):
    path = str(tmp_path / "absent.tsv")
    with pytest.raises(DataFileError, match=re.escape(f"{path}: file not found")):
        read_parallel_file(path, *LIMITS)


def test_file_without_pairs(tmp_path):
    path = tmp_path / "blank.tsv"
    path.write_text("\n  \n")
    with pytest.raises(DataFileError, match=re.escape(str(path))):
        read_parallel_file(str(path), *LIMITS)


@pytest.mark.parametrize(
    "lines",
    [
        ["IN: walk OUT: I_WALK", "IN: run OUT: I_RUN", "IN: jump I_JUMP"],  # no OUT:
        ["IN: walk OUT: I_WALK", "IN: run OUT: I_RUN", "IN: OUT: I_JUMP"],  # empty source
        ["a\tb", "c\td", "no tab here"],
        ["a\tb", "c\td", "one\ttwo\tthree"],
        ["a\tb", "c\td", "target missing\t "],
    ],
)
def test_malformed_line_is_reported_with_its_number(tmp_path, lines):
    path = tmp_path / "bad.txt"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFileError) as error:
        read_parallel_file(str(path), *LIMITS)
    assert str(error.value).startswith(f"{path}:3: ")


def test_vocabulary_special_ids():
    vocab = Vocabulary.build(["walk"])
    assert (Vocabulary.PAD, Vocabulary.BOS, Vocabulary.EOS, Vocabulary.UNK) == (0, 1, 2, 3)
    assert vocab.encode("<pad> <bos> <eos> <unk>") == [0, 1, 2, 3]
    assert len(vocab) == 5


def test_vocabulary_encode_decode():
    vocab = Vocabulary.build(["walk left", "jump", "walk"])
    assert vocab.encode("jump left walk") == [4, 5, 6]  # words in sorted order after the 4 special ids
    assert vocab.encode("walk fly") == [6, Vocabulary.UNK]
    assert vocab.decode(vocab.encode("walk left")) == "walk left"
    assert vocab.decode(np.array([1, 4, 0, 6, 2, 5, 0])) == "jump walk"


def test_vocabulary_save_load(tmp_path):
    vocab = Vocabulary.build(["I_TURN_LEFT I_WALK", "I_JUMP"])
    vocab.save(str(tmp_path / "vocab.json"))
    assert Vocabulary.load(str(tmp_path / "vocab.json")) == vocab
    assert vocab != Vocabulary.build(["I_JUMP"])


def test_a_file_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "latin1.tsv"
    path.write_bytes("walk\tI_WALK\ncaf\u00e9\tI_RUN\n".encode("latin-1"))
    with pytest.raises(DataFileError, match=re.escape(f"{path}:2: not UTF-8 (invalid continuation byte at byte 3)")):
        read_parallel_file(str(path), *LIMITS)


def test_a_directory_is_not_a_data_file(tmp_path):
    with pytest.raises(DataFileError, match=re.escape(f"{tmp_path}: a directory, not a data file")):
        read_parallel_file(str(tmp_path), *LIMITS)


@pytest.mark.parametrize("side, line", [("source", "walk " * 9 + "\tI_WALK"), ("target", "walk\t" + "I_WALK " * 6)])
def test_a_line_over_the_length_limit_names_file_line_and_field(tmp_path, side, line):
    path = tmp_path / "long.tsv"
    path.write_text(f"walk\tI_WALK\n{line}\n")
    words = 9 if side == "source" else 6
    message = f"{path}:2: the {side} has {words} words, over config.dataset.max_{side}_len=5"
    with pytest.raises(DataFileError, match=re.escape(message)):
        read_parallel_file(str(path), 5, 5)
    assert len(read_parallel_file(str(path), 9, 6)) == 2  # at the limit: read
