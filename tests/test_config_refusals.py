"""Configs and data an ordinary user gets wrong are refused in one line before anything runs: presets given
twice, with a value they do not take or in a clashing pair; recall's power_a out of range; a ListOps length
window no expression fits; dataset fields the chosen dataset never reads; a header line in a parallel file;
a SentencePiece vocabulary smaller than the corpus's characters. A cut ListOps cache is built again."""
import numpy as np
import pytest

from configs import listops as listops_config
from configs import mlm as mlm_config
from configs import recall as recall_config
from configs import translation as translation_config
from data import files, listops, tokenizer
from tasks import mlm, recall, translation
from training.config_checks import ConfigError


@pytest.mark.parametrize("module, arg, message", [
    (translation_config, "attention=linear,attention=taylor", "config preset 'attention' is given twice"),
    (recall_config, "form=causal,form=bidirectional", "config preset 'form' is given twice"),
    (recall_config, "tiny,quick", "config presets tiny and quick exclude each other"),
    (listops_config, "full,tiny", "config presets full and tiny exclude each other"),
    (mlm_config, "tiny=no", "config preset 'tiny' takes no value"),
    (translation_config, "attention", "config preset 'attention' takes a value: attention=<value>"),
])
def test_presets_given_twice_clashing_or_with_the_wrong_value_are_refused(module, arg, message):
    with pytest.raises(ValueError, match=message):
        module.get_config(arg)


@pytest.mark.parametrize("power_a, message", [
    (float("inf"), "must be a number in \\(0, 100\\]"), (1000.0, "must be a number in \\(0, 100\\]"),
    (float("nan"), "must be a number"), (0.0, "must be a number"), (100.0, "overflow at seq_len"),
])
def test_recall_power_a_keeps_the_gap_probabilities_well_defined(power_a, message):
    config = recall_config.get_config("tiny")
    config.dataset.power_a, config.dataset.seq_len = power_a, 8192
    with pytest.raises(ConfigError, match=f"config.dataset.power_a={power_a!r}.*{message}"):
        recall.check_config(config)


def test_a_listops_length_window_no_expression_fits_is_refused_before_generation():
    config = listops_config.get_config("tiny")
    config.dataset.min_length, config.dataset.max_length = 2, 3
    with pytest.raises(ValueError, match=r"no expression of max_depth=\d+, max_args=\d+ has a length in \[2, 3\]"):
        listops.check_settings(config.dataset.max_depth, config.dataset.max_args, 2, 3)
    assert [len(e.split()) for e, _ in listops.generate(20, 0, max_depth=3, max_args=2, min_length=7,
                                                          max_length=7)] == [7] * 20


def test_a_cut_listops_cache_is_built_again(tmp_path, capsys):
    dataset = listops_config.get_config("tiny").dataset
    dataset.data_dir = str(tmp_path)
    arrays = listops.cached_arrays(dataset, "test")
    [path] = (tmp_path / "listops").iterdir()
    path.write_bytes(path.read_bytes()[:100])
    again = listops.cached_arrays(dataset, "test")
    assert "not a readable cache" in capsys.readouterr().out
    np.testing.assert_array_equal(again["inputs"], arrays["inputs"])


@pytest.mark.parametrize("module, check, fields, message", [
    (translation_config, translation.check_config, {"name": "files", "split": "length"},
     "config.dataset.split='length' is read only when dataset.name='scan'"),
    (mlm_config, mlm.check_config, {"name": "text_files", "corpus": "scientific"},
     "config.dataset.corpus='scientific' is read only when dataset.name='pydoc'"),
    (mlm_config, mlm.check_config, {"name": "text_files", "text_key": "body"},
     "config.dataset.text_key='body' is read only when dataset.name='tfds'"),
])
def test_dataset_fields_the_chosen_dataset_never_reads_are_refused(module, check, fields, message, data_files):
    config = module.get_config("tiny")
    config.dataset.update(fields)
    config.dataset.train_file, config.dataset.test_file = data_files
    with pytest.raises(ConfigError, match=message):
        check(config)


def test_a_header_line_in_a_parallel_file_is_named_with_file_and_line(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("\nsource\ttarget\nwalk\tI_WALK\n")
    with pytest.raises(files.DataFileError, match=f"{path}:2: a header line"):
        files.read_parallel_file(str(path), 10, 10)


def test_a_vocabulary_smaller_than_the_corpus_characters_names_the_size_needed(tmp_path):
    model = tmp_path / "spm.model"
    with pytest.raises(files.DataFileError, match=r"vocab_size=8 is smaller than the \d+ pieces"):
        tokenizer.train_sentencepiece(["hello world abcdefg xyz"], str(model), 8)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind, option, value, readers", [
    ("softmax", "window", 8, "based, local, local_predictive"),  # a score kind's (local's window)
    ("linear", "dropout_rate", 0.1, "additive, dot, forced_forward"),  # every score kind's, under a kernelised kind
    ("linear", "taylor_order", 4, "based, taylor"),  # a kernelised kind's
    ("delta", "decay_bias", 5.0, "gated_delta, gated_linear"),  # the gated kinds'
    ("softmax", "rank", 8, "landmark_softmax, softmax_rank"),  # the rank controls'
    ("linear", "logit_cap", 2.0, "softmax_capped"),
])
def test_an_option_no_kind_in_use_reads_is_refused_naming_its_readers(tiny_config, kind, option, value, readers):
    """Set away from its default, an option the kinds in use ignore would change nothing, silently: refused in
    one line that names the kinds that read it. At its default it is no mistake."""
    from training import validate
    config = tiny_config()
    config.attention.name = kind
    validate.validate(config)
    config.attention[option] = value
    with pytest.raises(ConfigError, match=rf"^config.attention.{option}={value!r} is read by no kind in use "
                                          rf"\(encoder_self: {kind}, decoder_self: {kind}, cross: {kind}\), only by "
                                          rf"{readers}[^;]*; leave it at "):
        validate.validate(config)


def test_an_unread_option_with_a_value_every_reader_refuses_says_why_too(tiny_config):
    from training import validate
    config = tiny_config()
    config.attention.chunk_size = -1
    with pytest.raises(ConfigError, match=r"^config.attention.chunk_size=-1 is read by no kind in use .*, only by "
                                          r"based, .* \(kind 'based' refuses it: chunk_size=-1 must be an integer >= 0"):
        validate.validate(config)
