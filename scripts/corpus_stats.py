"""Size of an MLM config's corpus per split: documents, words, SentencePiece tokens, packed sequences.

  python -m scripts.corpus_stats                       # the default corpus (configs/mlm.py)
  python -m scripts.corpus_stats --corpus=scientific   # the pydoc corpus of the pinned packages
  python -m scripts.corpus_stats --config=configs/mlm.py --config.dataset.vocab_size=8000
"""
import sys

from absl import flags
from ml_collections import config_flags

from data import text_corpus
from demos.corpus_stats import run
from scripts import command_line


def flag_values(argv: list[str]) -> flags.FlagValues:
    """The script's flags for the command line `argv`: config_flags defines a flag for each --config.<field>
    override it finds in the command line it is given."""
    defined = flags.FlagValues()
    config_flags.DEFINE_config_file("config", "configs/mlm.py", "MLM config.", flag_values=defined,
                                    sys_argv=["", *argv])
    flags.DEFINE_enum("corpus", None, text_corpus.CORPORA,
                      "The pydoc corpus to measure (sets dataset.name=pydoc and dataset.corpus).", flag_values=defined)
    return defined


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    run(command_line.parse(flag_values(argv), argv, __doc__))


if __name__ == "__main__":
    main()
