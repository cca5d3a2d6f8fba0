"""What a newcomer sees: `make demo`'s script (scripts/run-local.sh, the same command line
the Makefile runs) on a small digits run, read line by line until the server has loaded
its model in every gunicorn worker and answered a prediction. Every line it printed must
be one of ours: no TensorFlow start-up line (oneDNN, absl, cpu_feature_guard), no
warning, no traceback; at most one progress line per worker per epoch; the URL."""

import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request

from disttrain_contract.tensorflow_import import TENSORFLOW_NOTICE
from stages import BIN, free_port_block

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EPOCHS, WORKERS, GUNICORN_WORKERS = 3, 2, 2  # the server's default --workers is 2

# every kind of line the demo may print (run-local.sh's own lines, the trainers' filtered
# lines, the aggregator's summary, gunicorn's and our server's log lines)
OURS = [
    r"== (copier|trainer|server): .*|== aggregator",
    r"copier: .*|aggregator: .*|pipeline wall time: .*",
    r"worker \d+/\d+: .*",
    r"worker \d+/\d+ epoch \d+/\d+: loss=.*",
    r"disttrain-server: serving .* at http://127\.0\.0\.1:\d+/",
    r"\[[\d\- :+]+\] \[\d+\] \[INFO\] .*",  # gunicorn and our server's log, at INFO
    r'127\.0\.0\.1 - - \[.*\] "(GET|POST) .*',  # gunicorn's access log
]
NOT_OURS = re.compile(r"onednn|absl|cpu_feature_guard|tensorflow|warning|error|traceback", re.IGNORECASE)


def test_make_demo_prints_only_our_lines(tmp_path):
    port, trainer_port = free_port_block(1), free_port_block(WORKERS)
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "DISTTRAIN_LOG_LEVEL")},
        "TASK": "digits",
        "WORKERS": str(WORKERS),
        "EPOCHS": str(EPOCHS),
        "BATCH": "64",
        "STRATEGY": "average",
        "PORT": str(port),
        "TRAINER_PORT": str(trainer_port),
        "WORKDIR": str(tmp_path / "demo"),
        "BIN": BIN,
        # 3 epochs are too few for the average to reach the better worker (3.9 points below, measured):
        # the quality gate would refuse it, and it is not what this test is about
        "AGGREGATOR_ARGS": "--force",
    }
    demo = subprocess.Popen(
        ["bash", os.path.join(ROOT, "scripts", "run-local.sh")],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(line.rstrip("\n") for line in demo.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 420
        while sum(" loaded " in line for line in lines) < GUNICORN_WORKERS:
            assert demo.poll() is None, "the demo stopped:\n" + "\n".join(lines)
            assert time.monotonic() < deadline, "no model loaded in every server worker:\n" + "\n".join(lines)
            time.sleep(0.5)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/models/disttrain:predict",
            method="POST",
            data=json.dumps({"instances": [[[[0]] * 8] * 8]}).encode(),  # one 8x8x1 digit
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert len(json.load(response)["predictions"]) == 1
        time.sleep(1)  # the access log line
    finally:
        os.killpg(demo.pid, signal.SIGTERM)
        demo.wait(timeout=60)
        reader.join(timeout=10)

    transcript = "\n".join(lines)
    assert not [line for line in lines if TENSORFLOW_NOTICE.match(line)], transcript
    assert not [line for line in lines if NOT_OURS.search(line)], transcript
    # the aggregator's report table is ours too: its lines sit between its start and the wall time
    table = lines[
        lines.index("== aggregator") + 1 : next(
            i for i, line in enumerate(lines) if line.startswith("pipeline wall time")
        )
    ]
    strangers = [
        line for line in lines if line not in table and not any(re.fullmatch(pattern, line) for pattern in OURS)
    ]
    assert not strangers, f"lines that are not ours: {strangers}\n{transcript}"
    for worker in range(WORKERS):
        for epoch in range(1, EPOCHS + 1):
            progress = [line for line in lines if line.startswith(f"worker {worker}/{WORKERS} epoch {epoch}/{EPOCHS}:")]
            assert len(progress) == 1, transcript
    assert any(f"http://127.0.0.1:{port}/" in line for line in lines), transcript
