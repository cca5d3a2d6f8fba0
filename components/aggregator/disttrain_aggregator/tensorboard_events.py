"""TensorBoard event files of the aggregator's held-out evaluation, beside the trainers' own.

    WORKDIR/tensorboard/final          the model being published
    WORKDIR/tensorboard/worker-NNNNN   each worker model as the aggregator evaluated it (average;
                                       the other strategies: the one model the chief wrote)

The scalars are the report's held-out metrics under the trainers' names (test_accuracy, test_loss;
faces: test_top1_accuracy, ...; regression: test_rmse, test_mae, test_r2, and test_loss, the mean
squared error, as the trainers' epoch records name them) at step = the epochs trained, so `tensorboard --logdir WORKDIR`
draws them as the last point of each held-out curve, with the final model's beside the workers'.
Outside final/, whose files the server watches and the fault tests list; the whole folder is
replaced in one rename, so a reader sees one run's files or the previous run's.
"""

import os

from disttrain_contract import atomic_path
from disttrain_contract.layout import worker_dirname


def held_out_scalars(metrics):
    return {
        key: float(value)
        for key, value in metrics.items()
        if key.startswith("test_") and isinstance(value, (int, float)) and not isinstance(value, bool)
    }


def write_event_files(workdir_root, report):
    """WORKDIR/tensorboard from the report's (contract report.Report) final and per-worker held-out metrics;
    returns its path."""
    import tensorflow as tf  # already loaded by the aggregator; tf.summary's scalars come from the tensorboard package

    runs = {"final": report.final.metrics, **{worker_dirname(row.worker_index): row.metrics for row in report.workers}}
    target = os.path.join(workdir_root, "tensorboard")
    with atomic_path(target) as tmp:
        for run, metrics in runs.items():
            writer = tf.summary.create_file_writer(os.path.join(tmp, run))
            with writer.as_default(step=report.epochs):
                for tag, value in held_out_scalars(metrics).items():
                    tf.summary.scalar(tag, value)
            writer.close()
    return target
