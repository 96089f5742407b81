"""Config blocks every task shares: attention kinds and their options, devices and precision, W&B."""
import ml_collections

from attention import registry


def attention_config() -> ml_collections.ConfigDict:
    attention = ml_collections.ConfigDict()
    attention.name = "softmax"  # every role, unless a role below overrides it
    attention.encoder_self = ""  # empty: attention.name
    attention.decoder_self = ""  # translation only
    attention.cross = ""  # translation only
    # Every kind's options at its constructor's defaults (README: "Attention options"): each kind reads the
    # ones it takes, and a config sets here only what it changes.
    attention.update(registry.option_defaults())
    return attention


def add_device_fields(config: ml_collections.ConfigDict) -> None:
    """How a run spreads over devices and hosts, and its compute precision (README: "Many devices and
    mixed precision"). The global batch is per_device_batch_size times the number of devices."""
    config.sharding = ml_collections.ConfigDict()
    # Parameters and optimizer state: "replicated" on every device, or "fsdp": each array split along
    # its largest axis divisible by the device count (replicated when none is), gathered when used.
    config.sharding.params = "replicated"
    config.compute_dtype = "float32"  # or "bfloat16": forward and backward; params and Adam stay float32
    # Call jax.distributed.initialize() first, for a run over several hosts, each running the same command;
    # the cluster (Cloud TPU, SLURM, Open MPI, Kubernetes) or JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES
    # and JAX_PROCESS_ID tell it the coordinator, the number of hosts and this host's index.
    config.distributed = False


def wandb_config() -> ml_collections.ConfigDict:
    wandb = ml_collections.ConfigDict()
    wandb.mode = "offline"  # online, offline or disabled; WANDB_MODE overrides it
    wandb.project = "attention-lab"
    wandb.group = ""
    return wandb


def add_resume_field(config: ml_collections.ConfigDict) -> None:
    """What a restart may change: a workdir belongs to the config it started with (training/workdirs.py)."""
    # Comma-separated fields or blocks that a restart of the workdir changes on purpose, e.g.
    # "num_train_steps" to extend the run; only the schedule, eval, wandb and sharding may change.
    config.resume_with_changes = ""


def set_attention(config, name):
    config.attention.name = name


def set_tiny_schedule(config) -> None:
    """The seconds-long schedule of every task's `tiny` preset (each task then shrinks its own sizes)."""
    config.num_train_steps = 20
    config.log_every_steps = 5
    config.eval_every_steps = 10
    config.checkpoint_every_steps = 10
    config.warmup_steps = 5
    config.eval.rank_examples = 4
    config.eval.plots = False
    config.wandb.mode = "disabled"
