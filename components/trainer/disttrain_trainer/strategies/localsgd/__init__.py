"""localsgd: periodic model averaging (local SGD; Lin et al., "Don't Use Large Mini-Batches, Use Local SGD",
ICLR 2020), or DiLoCo's outer step. Each worker takes --sync-every H optimizer steps alone on its own shard, then
the workers sync their weights with one collective over the same cluster as multiworker (TF_CONFIG). H=1
communicates every step; an H longer than the whole run syncs once, at the end (one-shot averaging, like `average`
but inside the trainer). Every worker computes the same sums, so after a sync every worker holds exactly the same
weights and the same outer state (each epoch's record carries a checksum of the synced weights to show it).

One module per technique, composed in one class, strategy.Strategy (this package's `Strategy`):
  schedule.py    when to sync (every H steps, at the run's end, with --sync-at-epoch-end at each epoch's end too)
                 and which syncs re-estimate the batch-norm statistics; no TensorFlow (the advisor counts with it)
  wire.py        what a sync sends (--allreduce-dtype): the weights' change, its codecs and error feedback
  outer.py       what a sync does with the workers' mean change (--outer-optimizer): average, or DiLoCo's
                 Nesterov step
  overlap.py     the exchange beside the next H steps (--outer-overlap delayed or eager)
  statistics.py  the batch-norm statistics re-estimated after a sync (--sync-batch-norm-batches)
  strategy.py    the composition: the anchor, the sync itself, the loop's hooks, the checkpoints
  cost.py        its cost model for the advisor (no TensorFlow)
Importing this package does not import TensorFlow: `Strategy` is imported from strategy.py when first asked for.
"""

from disttrain_trainer.strategies import training_class

__getattr__ = training_class(__name__)
