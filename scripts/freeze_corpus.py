"""Collects the pydoc corpora from this installation into data/corpora/ (the frozen copies every MLM run
reads), with their provenance in data/corpora/manifest.json. Run it only to change the corpora: a corpus
collected anew gets a dataset directory and a vocabulary of its own, and old runs' numbers stay with the old.

  python -m scripts.freeze_corpus                        # both corpora
  python -m scripts.freeze_corpus --corpus=scientific
"""
import sys

from absl import flags

from data import text_corpus
from scripts import command_line


def flag_values() -> flags.FlagValues:
    defined = flags.FlagValues()
    flags.DEFINE_multi_enum("corpus", list(text_corpus.CORPORA), text_corpus.CORPORA, "The corpora to collect.",
                            flag_values=defined)
    return defined


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    values = command_line.parse(flag_values(), argv, __doc__)
    for corpus in values.corpus:
        entry = text_corpus.freeze(corpus)
        print(f"{corpus}: {len(entry['shards'])} shards in {text_corpus.FROZEN_DIR}, {entry['documents']:,} documents, "
              f"{entry['words']:,} words, Python {entry['python']}")


if __name__ == "__main__":
    main()
