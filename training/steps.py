"""Optimizer, train state and the jitted steps: plain `jax.jit` over `nnx.split` state.

The train state is a dict pytree {step, params, rest, opt_state} (`rest`: every non-Param variable,
such as RNG state), donated to each step and checkpointed as is. Parameters and optimizer state stay
float32; the steps compute in `compute_dtype` (see _in_compute_dtype).
"""
import jax
import jax.numpy as jnp
import optax
from flax import nnx

from attention import aux_losses, key_gates
from training import sharding


def learning_rate_schedule(config, peak: float | None = None):
    """Warmup then cosine decay to 0, peaking at `peak` (config.learning_rate where None)."""
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=config.learning_rate if peak is None else peak, warmup_steps=config.warmup_steps,
        decay_steps=max(config.num_train_steps, config.warmup_steps + 1), end_value=0.0)


def decayed(params):
    """The weight-decay mask of a params State, in its structure: True for every parameter but a decay's
    (key_gates.DecayParam)."""
    return jax.tree.map(lambda variable: jax.tree.map(lambda _: not isinstance(variable, key_gates.DecayParam),
                                                      variable),
                        params, is_leaf=lambda node: isinstance(node, nnx.Variable))


def _decayed_weights(weight_decay: float, exempt_decays: bool) -> optax.GradientTransformation:
    """optax.add_decayed_weights (updates + weight_decay x params), the decays' parameters left out where
    `exempt_decays`. Its own and not optax's mask, whose state wraps the inner one: this keeps AdamW's state as
    optax.adamw's, so that every checkpoint written before the exemption restores."""
    def update(updates, state, params):
        keep = decayed(params) if exempt_decays else jax.tree.map(lambda _: True, params)
        return jax.tree.map(lambda u, p, k: u + weight_decay * p if k else u, updates, params, keep), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def create_optimizer(config, peak: float | None = None) -> optax.GradientTransformation:
    """AdamW under learning_rate_schedule(config, peak), after clipping, its weight decay on every parameter but
    the decays' (`decayed`) unless config.weight_decay_on_decays: optax.adamw's chain with its decay step
    masked. Packed runs (training/packed.py) share the one of peak 1 and scale each run's update by its own rate:
    AdamW's update is linear in the rate, weight decay's term included."""
    clip = optax.clip_by_global_norm(config.grad_clip_norm) if config.grad_clip_norm else optax.identity()
    return optax.chain(
        clip,
        optax.chain(optax.scale_by_adam(),
                    _decayed_weights(config.weight_decay, not config.weight_decay_on_decays),
                    optax.scale_by_learning_rate(learning_rate_schedule(config, peak))))


def init_state(model: nnx.Module, optimizer: optax.GradientTransformation):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    # Strongly typed jax arrays, as a step gives them back: a jitted step that meets a numpy leaf (the sinusoidal
    # table) or a weakly typed one (a bias from jnp.full) at its first call compiles again at its second.
    params, rest = jax.tree.map(lambda x: jnp.asarray(x, x.dtype), (params, rest))
    state = {"step": jnp.zeros((), jnp.int32), "params": params, "rest": rest,
             "opt_state": optimizer.init(params)}
    return graphdef, state


COMPUTE_DTYPES = ("float32", "bfloat16")  # config.compute_dtype


def _in_compute_dtype(params, compute_dtype: str):
    """The floating parameters cast for the forward pass. Differentiating through the cast gives float32
    gradients of the float32 parameters, and the model code needs no dtype of its own."""
    dtype = jnp.dtype(compute_dtype)
    return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, params)


def _metrics_sharding(shardings):
    return sharding.replicated(jax.tree.leaves(shardings)[0].mesh)


def make_train_step(graphdef, optimizer, loss_fn, dropout_key, *, compute_dtype: str = "float32",
                    shardings=None):
    """loss_fn(model, batch) -> (loss, sums). Returns jitted (state, batch) -> (state, step metrics), the
    state donated: train_step_fn's step of this run's dropout key and unscaled updates."""
    step = train_step_fn(graphdef, optimizer, loss_fn, compute_dtype)
    train_step = lambda state, batch: step(state, batch, dropout_key, 1.0)  # noqa: E731
    if shardings is None:
        return jax.jit(train_step, donate_argnums=0)
    return jax.jit(train_step, in_shardings=(shardings, None),
                   out_shardings=(shardings, _metrics_sharding(shardings)), donate_argnums=0)


def train_step_fn(graphdef, optimizer, loss_fn, compute_dtype: str = "float32"):
    """The train step as a function to jit (make_train_step) or to vmap over runs (training/packed.py):
    (state, batch, dropout_key, update_scale) -> (state, step metrics), the optimizer's update times
    `update_scale` (a packed run's own learning rate under an optimizer of peak 1).

    The loss differentiated is loss_fn's plus the auxiliary losses the model's modules add in training
    (attention/aux_losses.py), whose sum is also returned as the metric `aux_loss` when there are any.

    Dropout noise is a function of (dropout_key, step), so a resumed run draws what an uninterrupted
    one would. A step whose loss or gradient is not finite leaves the state unchanged and says so in
    its metrics (`finite`), for the loop to stop on without a host sync per step. Under make_train_step's
    `shardings` (those of sharding.state_shardings) the state's placement is fixed in and out; the batch keeps
    the one sharding.put_batch gave it, and the metrics come back replicated.
    """

    def loss_of(params, rest, batch, step, dropout_key):
        # Fresh Variables for this trace (jax passes `rest` in as the outer trace's objects): nnx lets
        # reseeding and dropout advance the RNG state only in the trace its Variables were made in.
        rest = jax.tree.map(lambda x: x, rest)
        model = nnx.merge(graphdef, _in_compute_dtype(params, compute_dtype), rest)
        model.train()
        nnx.reseed(model, dropout=jax.random.fold_in(dropout_key, step))
        for _, module in nnx.iter_modules(model):  # e.g. random features redrawn on a schedule
            if hasattr(module, "on_train_step"):
                module.on_train_step(step)
        loss, sums = loss_fn(model, batch)
        if (aux_loss := aux_losses.pop_total(model)) is not None:  # popped: no state for the next step
            loss, sums = loss + aux_loss, {**sums, aux_losses.NAME: aux_loss}
        # The RNG state that dropout advanced, carried out of the trace.
        return loss, (sums, nnx.state(model, nnx.Not(nnx.Param)))

    def train_step(state, batch, dropout_key, update_scale):
        (loss, (sums, rest)), grads = jax.value_and_grad(loss_of, has_aux=True)(
            state["params"], state["rest"], batch, state["step"], dropout_key)
        updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
        updates = jax.tree.map(lambda update: update * update_scale, updates)
        grad_norm = optax.global_norm(grads)
        finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
        # Skipping a non-finite update keeps parameters and optimizer moments intact to save. (`rest`
        # holds RNG state only, which a bad batch cannot corrupt.) The optimizer's step counts (integers)
        # advance all the same, so the learning-rate schedule follows the step, as logged.
        params, opt_state = jax.tree.map(
            lambda new, old: jnp.where(finite, new, old) if jnp.issubdtype(new.dtype, jnp.inexact) else new,
            (optax.apply_updates(state["params"], updates), opt_state),
            (state["params"], state["opt_state"]))
        new_state = {"step": state["step"] + 1, "params": params, "rest": rest, "opt_state": opt_state}
        return new_state, {**sums, "grad_norm": grad_norm, "finite": finite}

    return train_step


def make_eval_step(graphdef, loss_fn, *, compute_dtype: str = "float32", shardings=None):
    """Jitted (params, rest, batch) -> metric sums, in evaluation mode (no dropout). `shardings`: as in
    make_train_step."""
    eval_step = eval_step_fn(graphdef, loss_fn, compute_dtype)
    if shardings is None:
        return jax.jit(eval_step)
    return jax.jit(eval_step, in_shardings=(shardings["params"], shardings["rest"], None),
                   out_shardings=_metrics_sharding(shardings))


def eval_step_fn(graphdef, loss_fn, compute_dtype: str = "float32"):
    """The eval step as a function to jit (make_eval_step) or to vmap over runs (training/packed.py)."""

    def eval_step(params, rest, batch):
        model = nnx.merge(graphdef, _in_compute_dtype(params, compute_dtype), rest)
        model.eval()
        return loss_fn(model, batch)[1]

    return eval_step
