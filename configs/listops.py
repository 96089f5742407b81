"""Encoder Transformer with a pooling head on ListOps (nested MIN / MAX / MED / SM expressions over digits,
10 classes), generated locally with fixed seeds (data/listops.py).

Presets in the argument, comma separated:
  attention=<kind>   the encoder's self-attention kind (see `attention.names()`)
  pooling=<head>     cls, mean, feed_forward or structured (models/pooling.py)
  quick              the study's budget on a 2-core CPU (python -m scripts.compare --task=listops --preset=quick)
  full               Long Range Arena's lengths and sizes (500-2,000 tokens, depth 10, 96,000 examples),
                     for an accelerator
  tiny               a seconds-long run for tests and smoke checks
e.g. `--config=configs/listops.py:attention=performer,pooling=mean`.
"""
import functools

import ml_collections

from configs import common, grids, presets


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    config = common.base_config("listops")
    config.eval_every_steps = 500  # accuracy on the validation split
    config.checkpoint_every_steps = 500
    config.model.mlp_dim = 128  # the blocks' and the classifier's hidden width, and the pooling scores'
    config.model.pooling = "cls"  # cls, mean, feed_forward or structured (models/pooling.py)
    config.model.pooling_hops = 4  # structured: the r rows of A
    config.model.pooling_penalty = 1.0  # structured: weight of ||A A^T - I||_F^2 in the loss (Lin et al.'s)

    config.dataset.name = "listops"  # generated (data/listops.py), cached under data_dir
    config.dataset.max_depth = 6  # levels of the tree, digits included (LRA's count): operators nest 5 deep
    config.dataset.max_args = 10  # arguments per operator, at most (LRA's)
    config.dataset.min_length = 32  # tokens per expression
    config.dataset.max_length = 128  # the model reads a [CLS] token and at most this many
    config.dataset.train_size = 20_000
    config.dataset.validation_size = 1_000  # periodic evaluation and model choices
    config.dataset.test_size = 2_000  # eval.json (LRA's size)
    config.dataset.seed = 0  # the examples of every split: the same for every run and config.seed
    config.dataset.split = "test"  # the split eval.json reports: test or validation
    config.dataset.data_dir = "datasets"  # generated splits cached here; relative: to the repository

    config.eval.batch_size = 256

    presets.apply(config, arg, {"attention": common.set_attention, "pooling": _set_pooling, "quick": _set_quick,
                                "full": _set_full, "tiny": _set_tiny},
                  exclusive=("tiny", "quick", "full"))
    return config


def _set_pooling(config, pooling):
    config.model.pooling = pooling


def _set_quick(config, _):
    config.num_train_steps = 1_500
    config.eval_every_steps = 500
    config.checkpoint_every_steps = 1_500
    config.eval.plots = False


def _set_full(config, _):
    # Long Range Arena's ListOps: 96,000 / 2,000 / 2,000 examples of 500-2,000 tokens, depth 10, 10 arguments.
    config.dataset.max_depth = 10
    config.dataset.max_args = 10
    config.dataset.min_length = 500
    config.dataset.max_length = 2_000
    config.dataset.train_size = 96_000
    config.dataset.validation_size = 2_000
    config.num_train_steps = 5_000
    config.eval_every_steps = 1_000
    config.checkpoint_every_steps = 1_000
    config.eval.batch_size = 64
    config.eval.plots = False


def _set_tiny(config, _):
    common.set_tiny_schedule(config)
    config.per_device_batch_size = 16
    config.model.d_model = 32
    config.model.mlp_dim = 64
    config.dataset.max_depth = 3
    config.dataset.max_args = 3
    config.dataset.min_length = 4
    config.dataset.max_length = 24
    config.dataset.train_size = 320
    config.dataset.validation_size = 32
    config.dataset.test_size = 48


# The studies of `python -m scripts.compare --task=listops --preset=<name>`: grids of runs on this config.
def _runs(local_window: int) -> list[grids.Run]:
    """LRA's separating kinds with the [CLS] head, and softmax with each other pooling head."""
    kinds = [grids.kind_run("softmax"), grids.kind_run("linear"), grids.kind_run("performer"),
             grids.kind_run("taylor", taylor_order=2), grids.kind_run("local", window=local_window)]
    heads = [grids.Run(f"softmax_{head}", {"attention.name": "softmax", "model.pooling": head})
             for head in ("mean", "feed_forward", "structured")]
    return kinds + heads


def _study_quick() -> grids.Study:
    """Expressions of 32-128 tokens (depth 6, up to 10 arguments per operator): a CPU's budget."""
    return grids.Study("configs/listops.py:quick", {}, _runs(local_window=16), seeds=2)


def _study_full() -> grids.Study:
    """Long Range Arena's ListOps (500-2,000 tokens), for an accelerator."""
    return grids.Study("configs/listops.py:full", {}, _runs(local_window=64), seeds=3)


STUDIES = {
    "tiny": functools.partial(grids.tiny_study, "configs/listops.py"),
    "tiny_sweep": functools.partial(grids.tiny_study, "configs/listops.py", sweep=True),
    "quick": _study_quick,
    "full": _study_full,
}
