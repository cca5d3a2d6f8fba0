"""image: the small CNN, or MobileNetV2/ResNet50 from scratch (--model), on uint8 pixels scaled inside the model."""

from disttrain_trainer.models import build_image_model
from disttrain_trainer.tasks import base


class Task(base.Task):
    name = "image"

    def check_flags(self, config):
        pass  # --model and --image-size are this task's (the trainer's flag checks)

    def build(self):
        spec = self.manifest.input
        return build_image_model(
            spec["height"],
            spec["width"],
            spec["channels"],
            len(self.manifest.labels),
            self.config.dropout,
            self.config.model,
            self.config.image_size,
            hidden=self.config.width,
        )

    def describe(self):
        return f"image ({self.config.model})"
