"""multiworker: synchronous data parallelism with MultiWorkerMirroredStrategy. Every step
sums the workers' gradients (one collective, in --allreduce-dtype), so every worker applies
the same update and holds the same model. The chief (index 0) evaluates, keeps the
checkpoints and publishes the model; the others write their part of each checkpoint to
scratch (MultiWorkerMirroredStrategy needs every worker to take part in a save) and
restore the chief's copy on a restart."""

import os
import shutil

from disttrain_trainer.strategies.base import Connected


class Strategy(Connected):
    name = "multiworker"

    def __init__(self, config, placement):
        super().__init__(config, placement)
        self.tf_strategy = self.cluster  # the model's variables are mirrored on every worker
        self.reduce_gradients = self.wire.all_reduce_sum

    @property
    def evaluates(self):
        return self.is_chief  # every worker holds the same model

    @property
    def writes_model(self):
        return self.is_chief

    def checkpoint_dirs(self, own_dir, chief_dir):
        chief = os.path.join(chief_dir, "checkpoints")
        return chief, chief if self.is_chief else os.path.join(own_dir, "scratch-checkpoints")

    def cleanup(self, write_dir):
        if self.is_chief or not os.path.isdir(write_dir):
            return
        # The scratch copy is never read. Rename it out of the way first, so that nobody
        # scanning the volume sees a checkpoint index naming files that are being deleted.
        doomed = f"{write_dir}.tmp-{os.getpid()}"
        os.replace(write_dir, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
