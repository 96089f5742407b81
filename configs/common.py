"""The config every task starts from (base_config): the schedule, the optimiser, the Transformer's shared
fields, attention kinds and their options, evaluation, devices and precision, W&B and restarts. A task's
get_config sets what it trains differently and adds its own fields (docs/design.md, "Configs")."""
import ml_collections

from attention import registry


def base_config(task: str) -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    config.task = task
    config.seed = 0  # parameters, dropout and data order derive from it (generated examples: dataset.seed)
    config.num_train_steps = 3_000
    config.log_every_steps = 100  # train metrics and the progress line
    config.eval_every_steps = 1_000  # metrics on the validation split
    config.checkpoint_every_steps = 1_000
    # "start,stop": a jax.profiler trace of steps start + 1 to stop in <workdir>/profile (TensorBoard's
    # profile tab); "": none. start >= 1, since the first step's time is its compilation.
    config.profile_steps = ""
    config.per_device_batch_size = 32
    config.learning_rate = 1e-3  # peak, after linear warmup; cosine decay to 0 at the last step
    config.warmup_steps = 200
    config.weight_decay = 0.01  # AdamW
    # Whether AdamW's weight decay reaches the decays' parameters (key_gates.DecayParam): False, the field's practice
    # (Mamba2, Gated DeltaNet); True, the ablation, and how the gated kinds trained before 2026-11-29.
    config.weight_decay_on_decays = False
    config.grad_clip_norm = 1.0  # global norm; 0: no clipping
    # A step with a non-finite loss or gradient never updates the parameters; then "stop" ends the run
    # with an error naming the step, "skip" trains on and counts such steps (`skipped_steps` in metrics).
    config.nonfinite = "stop"
    config.label_smoothing = 0.0

    config.model = ml_collections.ConfigDict()
    config.model.num_layers = 2
    config.model.d_model = 64
    config.model.num_heads = 2
    config.model.mlp_dim = 256  # the blocks' hidden width; 0: attention-only blocks
    config.model.dropout_rate = 0.0
    config.model.positions = "sinusoidal"  # or "learned"
    config.model.qk_head_dim = 0  # width of each head's queries and keys; 0: d_model / num_heads
    config.model.conv_kernel = 0  # a depthwise convolution before each self-attention; 0: none
    config.model.conv_centered = False  # that convolution two-sided (odd conv_kernel); bidirectional roles only
    # One self-attention kind per layer, comma-separated (Based's interleaving: "local,taylor"), in every
    # self-attention role; empty: each layer takes its role's kind (attention.name or the role's override).
    config.model.layer_kinds = ""

    config.attention = attention_config()
    config.dataset = ml_collections.ConfigDict()  # the task's: its name, split and sizes

    config.eval = ml_collections.ConfigDict()
    config.eval.batch_size = 128
    config.eval.rank_examples = 16  # test examples whose attention matrices are analysed
    config.eval.plots = True  # attention heat maps and spectra in the workdir's plots/
    # Training stops at the first validation whose stop_metric (the task's progress metric, or "" for never)
    # reaches stop_at: Zoology's stop at 99% recall. eval.json is then of that step.
    config.eval.stop_metric = ""
    config.eval.stop_at = 1.0

    add_device_fields(config)
    config.wandb = wandb_config()
    add_resume_field(config)
    return config


def attention_config() -> ml_collections.ConfigDict:
    attention = ml_collections.ConfigDict()
    attention.name = "softmax"  # every role, unless a role below overrides it
    attention.encoder_self = ""  # empty: attention.name
    attention.decoder_self = ""  # translation only
    attention.cross = ""  # translation only
    # Every kind's options at its constructor's defaults (docs/attention.md: "Attention options"): each kind reads the
    # ones it takes, and a config sets here only what it changes.
    attention.update(registry.option_defaults())
    return attention


def add_device_fields(config: ml_collections.ConfigDict) -> None:
    """How a run spreads over devices and hosts, and its compute precision (docs/accelerators.md: "Many devices and
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
    """What a restart may change: a workdir belongs to the config it started with (runtime/workdirs.py)."""
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
