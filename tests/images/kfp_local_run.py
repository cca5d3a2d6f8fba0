"""Run the disttrain Kubeflow pipeline with kfp.local's DockerRunner (run with .venv-kfp's python).

    kfp_local_run.py PIPELINE_ROOT IMAGE_TAG '{"workers": 2, ...}'

The stages run as the images' non-root user with a read-only root filesystem, a /tmp tmpfs and no
network, as tests/images runs them with `docker run`. Two settings make the local runner execute what
a cluster would:
  * entrypoint [""]: KFP's DockerRunner passes a task's command as Docker's CMD and so keeps the image's
    ENTRYPOINT (disttrain-<stage>) in front of it, where Kubernetes replaces the ENTRYPOINT with the
    command; clearing it runs the task's command as it is.
  * the images by their local tags: the runner pulls an image only when no local image has the tag.
"""

import json
import pathlib
import sys

from kfp import local

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "pipelines" / "kfp"))

from pipeline import build, images  # noqa: E402

pipeline_root, tag, params = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
runner = local.DockerRunner(entrypoint=[""], network_mode="none", read_only=True, tmpfs={"/tmp": ""})
local.init(runner=runner, pipeline_root=pipeline_root, raise_on_error=True)
build(images(tag=tag))(**params)
