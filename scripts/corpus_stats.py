"""Size of an MLM config's corpus per split: documents, words, SentencePiece tokens, packed sequences.

  python -m scripts.corpus_stats                       # the default corpus (configs/mlm.py)
  python -m scripts.corpus_stats --corpus=scientific   # the pydoc corpus of the pinned packages
  python -m scripts.corpus_stats --config=configs/mlm.py --config.dataset.vocab_size=8000
"""
import sys

from absl import flags, logging
from ml_collections import config_flags

from data import mlm_corpus, text_corpus
from data.mlm import pack
from scripts import command_line
from tasks import mlm
from training import validate


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
    args = command_line.parse(flag_values(argv), argv, __doc__)
    logging.set_verbosity(logging.WARNING)
    config = args.config
    if args.corpus:
        config.dataset.name, config.dataset.corpus = "pydoc", args.corpus
    validate.validate(config)
    data = mlm.prepare_data(config, workdir="")
    dataset = config.dataset
    print(f"vocabulary: {data.tokenizer.vocab_size} {dataset.tokenizer} pieces; sequences of {dataset.seq_len}")
    print("| split | documents | words | tokens | sequences |\n|---|---:|---:|---:|---:|")
    for split in (dataset.train_split, dataset.validation_split, dataset.split):
        texts = mlm_corpus.load_texts(dataset, split)
        token_lists = data.tokenizer.encode_batch(texts)
        tokens = sum(len(ids) for ids in token_lists)
        words = sum(len(text.split()) for text in texts)
        sequences = len(pack(token_lists, dataset.seq_len))
        print(f"| {split} | {len(texts):,} | {words:,} | {tokens:,} | {sequences:,} |")


if __name__ == "__main__":
    main()
