"""Optimizer, train state and the jitted steps: plain `jax.jit` over `nnx.split` state.

The train state is a dict pytree {step, params, rest, opt_state} (`rest`: every non-Param variable,
such as RNG state), donated to each step and checkpointed as is.
"""
import jax
import jax.numpy as jnp
import optax
from flax import nnx


def learning_rate_schedule(config):
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=config.learning_rate, warmup_steps=config.warmup_steps,
        decay_steps=max(config.num_train_steps, config.warmup_steps + 1), end_value=0.0)


def create_optimizer(config) -> optax.GradientTransformation:
    return optax.chain(
        optax.clip_by_global_norm(config.grad_clip_norm),
        optax.adamw(learning_rate_schedule(config), weight_decay=config.weight_decay))


def init_state(model: nnx.Module, optimizer: optax.GradientTransformation):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    state = {"step": jnp.zeros((), jnp.int32), "params": params, "rest": rest,
             "opt_state": optimizer.init(params)}
    return graphdef, state


def make_train_step(graphdef, optimizer, loss_fn, dropout_key):
    """loss_fn(model, batch) -> (loss, sums). Returns jitted (state, batch) -> (state, step metrics).

    Dropout noise is a function of (dropout_key, step), so a resumed run draws what an uninterrupted
    one would. A step whose loss or gradient is not finite leaves the state unchanged and says so in
    its metrics (`finite`), for the loop to stop on without a host sync per step.
    """

    def train_step(state, batch):
        model = nnx.merge(graphdef, state["params"], state["rest"])
        model.train()
        nnx.reseed(model, dropout=jax.random.fold_in(dropout_key, state["step"]))
        for _, module in nnx.iter_modules(model):  # e.g. random features redrawn on a schedule
            if hasattr(module, "on_train_step"):
                module.on_train_step(state["step"])
        # nnx.value_and_grad (not jax's) carries the RNG-state updates of dropout out of the trace.
        (loss, sums), grads = nnx.value_and_grad(lambda m: loss_fn(m, batch), has_aux=True)(model)
        rest = nnx.state(model, nnx.Not(nnx.Param))
        updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
        grad_norm = optax.global_norm(grads)
        finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
        # Skipping a non-finite update keeps parameters and optimizer state intact to save. (`rest`
        # holds RNG state only, which a bad batch cannot corrupt.)
        params, opt_state = jax.tree.map(
            lambda new, old: jnp.where(finite, new, old),
            (optax.apply_updates(state["params"], updates), opt_state),
            (state["params"], state["opt_state"]))
        new_state = {"step": state["step"] + 1, "params": params, "rest": rest, "opt_state": opt_state}
        return new_state, {**sums, "grad_norm": grad_norm, "finite": finite}

    return jax.jit(train_step, donate_argnums=0)


def make_eval_step(graphdef, loss_fn):
    """Jitted (params, rest, batch) -> metric sums, in evaluation mode (no dropout)."""

    def eval_step(params, rest, batch):
        model = nnx.merge(graphdef, params, rest)
        model.eval()
        return loss_fn(model, batch)[1]

    return jax.jit(eval_step)
