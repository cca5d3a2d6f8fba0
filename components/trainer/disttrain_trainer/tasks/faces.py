"""faces: an L2-normalised face embedding trained with semi-hard triplets mined in batches of
people x augmented views (triplets.py); evaluated by retrieval on held-out people."""

import tensorflow as tf

from disttrain_contract.evaluation import evaluate
from disttrain_contract.faces import FACE_PREPROCESSING  # view_batches and evaluate use it; the artifact records it
from disttrain_trainer.models import build_face_model
from disttrain_trainer.tasks import base
from disttrain_trainer.triplets import semi_hard_triplet_loss, view_batches


class Task(base.Task):
    name = "faces"

    def __init__(self, manifest, config):
        super().__init__(manifest, config)
        self.views = config.views  # an epoch shows every photo --views times, each time differently augmented

    def dataset(self, x, y, batch, seed, index):
        # people x augmented views, for in-batch triplet mining
        spec = self.manifest.input
        return tf.data.Dataset.from_generator(
            lambda: view_batches(x, y, batch, self.config.views, self.config.seed + index),
            output_signature=(
                tf.TensorSpec([None, spec["height"], spec["width"], spec["channels"]], tf.uint8),
                tf.TensorSpec([None], tf.int64),
            ),
        )

    def build(self):
        spec = self.manifest.input
        return build_face_model(spec["height"], spec["width"], spec["channels"], self.config.embedding_size)

    @property
    def head(self):
        return "embedding"

    def loss_and_score(self, y, outputs):
        return semi_hard_triplet_loss(y, outputs, self.config.margin)

    def evaluate(self, inference, x, y):
        return evaluate(inference, "faces", x, y, seed=self.manifest.seed)

    def metadata(self, published):
        return {
            **super().metadata(published),
            "embedding_size": self.config.embedding_size,
            "margin": self.config.margin,
            "face_preprocessing": FACE_PREPROCESSING,
        }
