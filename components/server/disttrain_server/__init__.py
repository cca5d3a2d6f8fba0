"""disttrain-server: serve the final model (stage 4 of disttrain).

A Flask app (`disttrain_server.app.create_app`) with a TensorFlow-Serving-shaped
JSON API under /v1, health endpoints and a small web demo at /, run by gunicorn
(`disttrain-server`, see `disttrain_server.main`).
"""

from disttrain_server.app import create_app

__all__ = ["create_app"]
