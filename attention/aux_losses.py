"""Auxiliary losses: terms that a module adds to the training loss from inside its call.

A module in training mode calls `add(self, value)` with a scalar it has already weighted; the train step
(training/steps.py) takes every term out of the model after the task's loss (`pop_total`), adds their sum to
the loss it differentiates and logs that sum as `aux_loss` on the train lines of metrics.jsonl. A module adds
terms in training only (nnx's `train()`, not `eval()`), so evaluation and inference compute none, and a model
whose modules add none trains exactly as without this mechanism.
"""
import operator

import jax
from flax import nnx

NAME = "aux_loss"  # the attribute under which a module sows its term


class AuxiliaryLoss(nnx.Intermediate):
    """A term of the training loss sown by a module: its own type, so that popping the terms leaves any other
    intermediate (MultiHeadAttention's captured weights) where it is."""


def add(module: nnx.Module, value) -> None:
    """Adds the scalar `value` to the training loss; the terms of repeated calls of `module` add up."""
    module.sow(AuxiliaryLoss, NAME, value, init_fn=lambda: 0.0, reduce_fn=operator.add)


def pop_total(model: nnx.Module):
    """The sum of the terms the modules of `model` added since the last pop, taken out of the model (so that
    none is left in its state), or None when none was added."""
    terms = jax.tree.leaves(nnx.pop(model, AuxiliaryLoss))
    return sum(terms) if terms else None
