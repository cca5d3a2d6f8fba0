"""disttrain-server: serve the final model (stage 4 of disttrain).

A Flask app (`disttrain_server.app.create_app`) with TensorFlow Serving's REST API
under /v1, KServe's Open Inference Protocol under /v2, health endpoints and a small web demo at /, run by gunicorn
(`disttrain-server`, see `disttrain_server.main`).
"""

from disttrain_server.app import create_app

__all__ = ["create_app"]
