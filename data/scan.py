"""SCAN as a TFDS dataset built from the grammar (no download), stored as array_record files."""

import zlib

import tensorflow_datasets as tfds

from data import local_builder, scan_grammar
from data.local_builder import LocalBuilder

_CITATION = """\
@inproceedings{lake2018generalization,
  title = {Generalization without Systematicity: On the Compositional Skills of
           Sequence-to-Sequence Recurrent Networks},
  author = {Lake, Brenden M. and Baroni, Marco},
  booktitle = {Proceedings of the 35th International Conference on Machine Learning},
  pages = {2873--2882},
  year = {2018},
}
"""

Pairs = list[tuple[str, str]]


# TFDS ships a downloading builder of the same name, loaded lazily; staying out of the registry keeps
# the two from colliding whichever is imported first.
class Scan(LocalBuilder, skip_registration=True):
    """SCAN commands and their action sequences, one config per split of Lake & Baroni (2018)."""

    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES = {"1.0.0": "Generated from the phrase-structure grammar.",
                     "1.1.0": "add_jump repeats the primitive as released; the add_turn_left split."}
    BUILDER_CONFIGS = [tfds.core.BuilderConfig(name=name) for name in scan_grammar.SPLITS]

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description="SCAN: navigation commands in simplified English paired with action sequences.",
            features=tfds.features.FeaturesDict(
                {"source": tfds.features.Text(), "target": tfds.features.Text()}
            ),
            supervised_keys=("source", "target"),
            citation=_CITATION,
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # generated, nothing to download
        train, test = scan_grammar.SPLITS[self.builder_config.name]()
        return {"train": self._generate_examples(train), "test": self._generate_examples(test)}

    def _generate_examples(self, pairs: Pairs):
        for key, (source, target) in enumerate(pairs):
            yield key, {"source": source, "target": target}


def load_split(split: str, data_dir: str) -> tuple[Pairs, Pairs]:
    """(train, test) pairs of a SCAN split as released, building its array_record files under data_dir
    once."""
    if split not in scan_grammar.SPLITS:
        raise ValueError(
            f"dataset.split={split!r} is not a SCAN split; choose one of: {', '.join(scan_grammar.SPLITS)}"
        )
    builder = local_builder.prepared(Scan, config=split, data_dir=data_dir, file_format="array_record")
    return _read(builder, "train"), _read(builder, "test")


def _read(builder: Scan, split: str) -> Pairs:
    # TFDS writes records in the order of their hashed keys, so the order is restored by sorting.
    source = builder.as_data_source(split=split)
    pairs = [(ex["source"].decode("utf-8"), ex["target"].decode("utf-8")) for ex in source]
    return sorted(pairs)


def hold_out_validation(train: Pairs, keep: tuple[str, ...] = ()) -> tuple[Pairs, Pairs]:
    """(train, validation): every line of a command whose CRC-32 is 0 mod 10 (about 1 command in 10)
    goes to validation, except the commands in `keep`. A command's copies stay together, so validation
    shares no command with training, and the rule depends on the command alone, not on its file."""
    kept, held_out = [], []
    for source, target in train:
        held = source not in keep and zlib.crc32(source.encode("utf-8")) % 10 == 0
        (held_out if held else kept).append((source, target))
    return kept, held_out
