"""Config blocks every task shares: attention kinds and their options, devices and precision, W&B."""
import ml_collections


def attention_config() -> ml_collections.ConfigDict:
    attention = ml_collections.ConfigDict()
    attention.name = "softmax"  # every role, unless a role below overrides it
    attention.encoder_self = ""  # empty: attention.name
    attention.decoder_self = ""  # translation only
    attention.cross = ""  # translation only
    attention.dropout_rate = 0.0  # softmax kinds: dropout on the attention weights
    # dot and softmax kinds: "auto" (cuDNN flash attention where the GPU, dtype and mask allow it, else
    # XLA), "xla" or "cudnn" (an error where it cannot run); see attention/fused.py
    attention.implementation = "auto"
    attention.eps = 1e-6  # kernelised kinds: added to the normaliser
    attention.chunk_size = 64  # kernelised kinds: causal chunk length; 0: auto (attention/chunking.py)
    attention.hidden_dim = 0  # additive: width of the score MLP; 0 = head_dim
    attention.window = 3  # local kinds: keys within +-window of the aligned position
    attention.top_k = 1  # hard: keys attended in the forward pass (1 = classic hard attention)
    attention.relu_eps = 1e-3  # relu: added to the features so the normaliser stays positive
    attention.num_features = 64  # performer: random features m (the rank bound)
    attention.orthogonal = True  # performer: orthogonal random blocks, else iid rows
    attention.redraw_every_steps = 0  # performer: redraw the features every N steps; 0 = fixed
    attention.taylor_order = 2  # taylor: even order of the truncated exp series
    attention.exp_limit_n = 2  # exp_limit: even n of (1 + q.k/(n sqrt d))^n
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
