"""Multi-query associative recall (MQAR, Zoology's task; data/recall.py), generated from a seed: no download.

A 2-layer, 1-head, MLP-free Transformer with learned positions and a short causal convolution before
each attention, as in Zoology's and Based's recall models, trained on next-token prediction at the
query positions (form "causal") or on predicting the [MASK] after each query (form "bidirectional").

Presets in the argument, comma separated:
  attention=<kind>   the attention kind (see `attention.names()`)
  form=<form>        causal (a decoder-only language model) or bidirectional (an encoder)
  quick              the study's budget on a 2-core CPU (python -m scripts.compare --task=recall --preset=quick)
  full               the accelerator study's sizes: L = 256, V = 8,192, 4,000 steps of 128
  tiny               a seconds-long run for tests and smoke checks
e.g. `--config=configs/recall.py:attention=linear,form=bidirectional --config.dataset.num_kv_pairs=16`.
"""
import ml_collections

from configs import common, presets
from configs.recall_studies import STUDIES  # noqa: F401  (its studies and their prose, a module of their own)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    config = common.base_config("recall")
    config.num_train_steps = 1_000
    config.log_every_steps = 50
    config.eval_every_steps = 250  # query accuracy on the validation split
    config.checkpoint_every_steps = 500
    config.per_device_batch_size = 64
    config.learning_rate = 3e-3
    config.warmup_steps = 100
    config.weight_decay = 0.1
    config.model.num_heads = 1  # Zoology's attention baselines use one head
    config.model.mlp_dim = 0  # attention-only blocks, as Zoology's recall models
    config.model.positions = "learned"
    config.model.tied_embeddings = True  # logits = final states . token embeddings (the only choice here)
    config.model.qk_head_dim = 0  # Based's d'; 0: d_model / num_heads
    # A causal depthwise convolution before each attention: a position sees its predecessor without
    # spending attention on it. Without it even softmax can sit on a plateau for 1,000+ steps.
    config.model.conv_kernel = 3

    config.dataset.name = "mqar"  # generated in memory from dataset.seed (data/recall.py)
    config.dataset.form = "causal"  # "causal": predict the value at the query; "bidirectional": at [MASK]
    config.dataset.vocab_size = 8_192  # keys from [1, V/2), values from [V/2, V) (Zoology's V)
    config.dataset.seq_len = 64  # L: 2N context tokens, then the query region
    config.dataset.num_kv_pairs = 8  # N: key-value pairs, each queried once
    config.dataset.power_a = 0.01  # query gaps drawn with P(g) ~ (g + 1)^(a - 1) (Zoology's alpha)
    # The query region's other tokens: True, uniform random tokens (Zoology's generator's default, harder:
    # filler can look like keys); False, zeros apart from the query keys (Zoology's Figure 2).
    config.dataset.random_non_queries = True
    config.dataset.train_size = 100_000  # training examples (Zoology's)
    config.dataset.validation_size = 1_000  # periodic evaluation and learning-rate selection
    config.dataset.test_size = 3_000  # eval.json (Zoology's)
    config.dataset.seed = 0  # the examples of every split: the same for every run and config.seed
    config.dataset.split = "test"  # the split eval.json reports: test or validation

    config.eval.batch_size = 500

    presets.apply(config, arg, {"attention": common.set_attention, "form": _set_form, "quick": _set_quick,
                                "full": _set_full, "tiny": _set_tiny},
                  exclusive=("tiny", "quick", "full"))
    return config


def _set_form(config, form):
    config.dataset.form = form


def _set_quick(config, _):
    # Sized by a pilot on 2 CPU cores (docs/results.md, "Associative recall"): softmax is at 100% well before the
    # last step at every size of the study. V = 8,192 made a step 3x slower (its logits dominate) for the
    # same recall problem: N keys among V/2, values among V/2.
    config.dataset.vocab_size = 256
    config.num_train_steps = 800
    config.dataset.train_size = 51_200  # what 800 steps of 64 read: one epoch, as fresh examples
    config.eval_every_steps = 400
    config.checkpoint_every_steps = 800
    config.eval.plots = False


def _set_full(config, _):
    # The accelerator grid's sizes (STUDIES below, full): Zoology's vocabulary and data sizes,
    # a length with room for N = 64 pairs, and a schedule long enough for the slowest kinds to settle.
    config.dataset.seq_len = 256
    config.num_train_steps = 4_000
    config.per_device_batch_size = 128
    config.warmup_steps = 200
    config.eval_every_steps = 1_000
    config.checkpoint_every_steps = 1_000
    config.eval.plots = False


def _set_tiny(config, _):
    common.set_tiny_schedule(config)
    config.per_device_batch_size = 16
    config.model.d_model = 32
    config.dataset.vocab_size = 64
    config.dataset.seq_len = 16
    config.dataset.num_kv_pairs = 2
    config.dataset.train_size = 320
    config.dataset.validation_size = 32
    config.dataset.test_size = 48
    config.eval.batch_size = 32
