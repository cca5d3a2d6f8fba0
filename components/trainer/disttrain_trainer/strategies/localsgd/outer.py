"""What a localsgd sync does with the workers' mean change since the last sync (--outer-optimizer), the same
arithmetic on every worker, so that every worker then holds the same weights and the same outer momentum:

  none      anchor' = anchor + mean_change: the average of the workers' weights (the default)
  nesterov  DiLoCo's outer step (Douillard et al. 2023, "DiLoCo: Distributed Low-Communication Training of
            Language Models", arXiv 2311.08105): the mean change is the outer gradient (negated) of a
            Nesterov-momentum step, as torch.optim.SGD(nesterov=True) takes it:
              momentum' = mu * momentum + mean_change
              anchor'   = anchor + lr * (mean_change + mu * momentum')
            with lr = --outer-lr, mu = --outer-momentum (lr 1 and mu 0: the average). It moves the trainable
            weights; the non-trainable ones (batch-norm moving statistics) are averaged, and keep no momentum.
The inner optimizer's state is not synced: each worker keeps its own (Adam moments, step count) across syncs, as
DiLoCo keeps each worker's inner AdamW state: they describe its own gradients, and averaging them would double the
bytes of every sync.
"""

import numpy as np
import tensorflow as tf


class OuterOptimizer:
    """The outer step of a run's syncs (the module's docstring); `momentum` its state under nesterov (checkpointed),
    one float32 vector over the weights as the sync's anchor is (bind)."""

    def __init__(self, settings):
        """`settings`: the run's options.LocalSGDSettings."""
        self.nesterov = settings.outer_optimizer == "nesterov"
        self.lr, self.mu = settings.outer_lr, settings.outer_momentum
        self.moved = self.momentum = None

    def bind(self, weights, sizes):
        """`weights` (the model's float ones, in the anchor's order) of `sizes` values each."""
        if self.nesterov:
            # the outer optimizer moves the trainable weights; the others (batch-norm statistics) are averaged
            self.moved = tf.constant(np.concatenate([np.full(n, w.trainable) for w, n in zip(weights, sizes)]))
            self.momentum = tf.Variable(tf.zeros([sum(sizes)]), trainable=False, name="outer_momentum")

    def moved_anchor(self, anchor, mean):
        """The anchor moved by the workers' mean change (and the momentum updated)."""
        if self.nesterov:
            step, momentum = nesterov_step(mean, self.momentum.value(), self.lr, self.mu)
            # only the trainable weights move by the outer step (and keep a momentum); the others: the average
            self.momentum.assign(tf.where(self.moved, momentum, 0.0))
            return anchor + tf.where(self.moved, step, mean)
        return anchor + mean  # the average


def nesterov_step(mean_change, momentum, lr, mu):
    """DiLoCo's outer step: Nesterov momentum as torch.optim.SGD(nesterov=True) takes it, on the outer
    gradient -mean_change, written in the direction of the change. Returns (the step to add to the
    anchor, the new momentum): momentum' = mu * momentum + mean_change, step = lr * (mean_change +
    mu * momentum'). lr 1 and mu 0: the mean change itself, i.e. plain averaging."""
    momentum = mu * momentum + mean_change
    return lr * (mean_change + mu * momentum), momentum
