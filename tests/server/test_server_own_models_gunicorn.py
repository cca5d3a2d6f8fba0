"""A user's own models behind the real `disttrain-server` (gunicorn): the kserve SDK's REST client on a
table classifier and on a model with two named inputs, and a model with a custom layer of the user's
module, served with --model-module and refused, with one line, without it."""

import os
import sys

import numpy as np

from kserve_venv import run_with_kserve
from server import own_models
from server.own_models import CUSTOM_MODULE, held_out, own_outputs
from server.serving import http, predict_url, running_server

CALLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kserve_client_calls.py")


def kserve_calls(*args):
    done = run_with_kserve(CALLS, *args)
    sys.stdout.write(done.stdout)
    assert done.returncode == 0, (
        f"the kserve SDK's checks failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}"
    )
    assert "every check passed" in done.stdout


def test_kserve_sdk_on_own_table_models(cancer_root, two_inputs_root, tmp_path):
    x, _ = held_out(cancer_root)
    np.save(tmp_path / "x.npy", x[:6], allow_pickle=False)
    np.save(tmp_path / "expected.npy", own_outputs(cancer_root, x[:6]), allow_pickle=False)
    with running_server(cancer_root, "--workers", "1") as (base, _proc, _log):
        kserve_calls("table", base, tmp_path / "x.npy", tmp_path / "expected.npy")
    x, _ = held_out(two_inputs_root)
    np.save(tmp_path / "x2.npy", x[:5], allow_pickle=False)
    np.save(
        tmp_path / "expected2.npy",
        own_outputs(two_inputs_root, {"age": x[:5, :1], "bmi": x[:5, 1:]}),
        allow_pickle=False,
    )
    with running_server(two_inputs_root, "--workers", "1") as (base, _proc, _log):
        kserve_calls("two-inputs", base, tmp_path / "x2.npy", tmp_path / "expected2.npy")


def test_custom_layer_module_is_served_with_model_module_and_refused_without(tmp_path_factory):
    root = own_models.custom(tmp_path_factory)
    folder = own_models.custom_module_dir(tmp_path_factory)
    own_models.import_custom_module(folder)  # (this process computes the expected values with the same layer)
    x, _ = held_out(root)
    expected = own_outputs(root, x)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}

    with running_server(root, "--workers", "1", "--model-module", CUSTOM_MODULE, env=env) as (base, _proc, _log):
        status, body = http("POST", base + predict_url(), {"instances": x.tolist()})
        assert status == 200, body
        np.testing.assert_allclose(body["predictions"], expected, rtol=1e-6)

    with running_server(root, "--workers", "1", ready_path="/healthz", env=env) as (base, _proc, log):
        status, body = http("GET", base + "/readyz")
        reason = "final/model.keras was trained with code from the module ownlayers: pass --model-module ownlayers so that its layers load"
        assert (status, body) == (503, {"status": "unavailable", "reason": reason})
        status, body = http("POST", base + predict_url(), {"instances": x[:1].tolist()})
        assert status == 503 and reason in body["error"]
        with open(log) as fh:
            assert any(reason in line for line in fh), "the refusal is not in the server's log"

    # a module that is not on the Python path: the server says so at start, in one line, before any worker starts
    from stages import stage

    done = stage("server", "--workdir", root, "--port", 0, "--model-module", "no_such_layers", check=False, timeout=60)
    assert (
        done.returncode != 0
        and "--model-module no_such_layers: no module 'no_such_layers' on the Python path" in done.stderr
    ), done.stderr
