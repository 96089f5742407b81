"""Encoder-decoder Transformer on SCAN (generated from its grammar, built locally as a TFDS dataset).

Presets in the argument, comma separated:
  attention=<kind>   every role uses <kind> (see `attention.names()`)
  split=<split>      SCAN split: simple, length, add_jump or add_turn_left
  full_train         train on the whole released training file (no validation split), as published
                     results do
  rnn                the recurrent encoder-decoder with Luong's multiplicative attention, one head
  tiny               a seconds-long run for tests and smoke checks
e.g. `--config=configs/translation.py:attention=linear,split=length`.
"""
import ml_collections

from configs import common, presets


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    config.task = "translation"
    config.seed = 0  # parameters, dropout and data order all derive from it
    config.num_train_steps = 3_000
    config.log_every_steps = 100  # train metrics and the progress line
    config.eval_every_steps = 1_000  # teacher-forced metrics on the whole validation split
    config.checkpoint_every_steps = 1_000
    config.per_device_batch_size = 64
    config.learning_rate = 2e-3  # peak, after linear warmup; cosine decay to 0 at the last step
    config.warmup_steps = 200
    config.weight_decay = 0.01  # AdamW
    config.grad_clip_norm = 1.0  # global norm; 0: no clipping
    # A step with a non-finite loss or gradient never updates the parameters; then "stop" ends the run
    # with an error naming the step, "skip" trains on and counts such steps (`skipped_steps` in metrics).
    config.nonfinite = "stop"
    config.label_smoothing = 0.0

    config.model = ml_collections.ConfigDict()
    config.model.name = "transformer"  # or "rnn": the recurrent encoder-decoder (models/rnn.py)
    config.model.num_layers = 2  # per stack: encoder and decoder each
    config.model.d_model = 64  # a 3,000-step run takes minutes on 2 CPU cores
    config.model.num_heads = 4
    config.model.mlp_dim = 256
    config.model.dropout_rate = 0.0  # SCAN is noiseless: nothing to regularise against
    config.model.positions = "sinusoidal"  # or "learned"
    config.model.qk_head_dim = 0  # width of each head's queries and keys; 0: d_model / num_heads
    config.model.conv_kernel = 0  # a causal depthwise convolution before each encoder self-attention; 0: none
    config.model.tied_embeddings = True  # output projection = target embedding^T
    config.model.cell = "lstm"  # rnn: lstm or gru (d_model is the hidden size; mlp_dim, positions unused)
    config.model.bidirectional = True  # rnn: a bidirectional encoder
    # rnn: static attention, one query (the encoder's final state), so one context for every decoder step
    config.model.static_attention = False
    # rnn: "key_value" or "key_value_predict" attention of the decoder over its own last memory_window
    # states, each state split in key, value (and predict) parts (Daniluk et al. 2017); "none"
    config.model.decoder_memory = "none"
    config.model.memory_window = 5  # rnn: decoder states the decoder memory attends to

    config.attention = common.attention_config()

    config.dataset = ml_collections.ConfigDict()
    config.dataset.name = "scan"  # "scan" (generated) or "files" (train_file / test_file)
    config.dataset.split = "simple"  # SCAN split as released: simple, length, add_jump, add_turn_left
    # Hold ~10% of the training commands out as the validation split (those whose CRC-32 is 0 mod 10;
    # an add_* split's primitive stays in training): periodic evaluation and tuning read it, only eval.json
    # reads test. False: train on the whole released training file, as published results do, with no
    # periodic evaluation.
    config.dataset.hold_out_validation = True
    config.dataset.train_file = ""  # files: `IN: ... OUT: ...` lines or `source<TAB>target`
    config.dataset.test_file = ""
    # files: the longest source and target, in words, a line may have (longer ones are an error naming
    # file:line); every batch pads to the longest line, so they bound memory.
    config.dataset.max_source_len = 256
    config.dataset.max_target_len = 256
    config.dataset.data_dir = "datasets"  # where the TFDS dataset is built

    config.eval = ml_collections.ConfigDict()
    config.eval.batch_size = 512  # teacher-forced evaluation and decoding
    config.eval.beam_size = 1  # decoding of the test outputs: 1 is greedy, more is beam search
    config.eval.length_penalty = 0.0  # beam search ranks log p / ((5 + length) / 6)^alpha (GNMT); 0: none
    config.eval.rank_examples = 32  # test examples whose attention matrices are analysed
    config.eval.plots = True

    common.add_device_fields(config)
    config.wandb = common.wandb_config()
    common.add_resume_field(config)

    presets.apply(config, arg, {"attention": common.set_attention, "split": _set_split, "rnn": _set_rnn,
                                "full_train": _set_full_train, "tiny": _set_tiny})
    return config


def _set_split(config, split):
    config.dataset.split = split


def _set_full_train(config, _):
    config.dataset.hold_out_validation = False


def _set_rnn(config, _):
    config.model.name = "rnn"
    config.model.num_heads = 1  # Luong's attention has one head
    config.attention.name = "multiplicative"  # Luong's "general" score


def _set_tiny(config, _):
    common.set_tiny_schedule(config)
    config.per_device_batch_size = 16
    config.model.num_layers = 1
    config.model.d_model = 32
    config.model.num_heads = 2
    config.model.mlp_dim = 64
    config.eval.batch_size = 256
