"""Face search under real gunicorn with two worker processes sharing one gallery folder."""

import re
import time
from concurrent.futures import ThreadPoolExecutor

from server.face_photos import b64, lfw_photos, other_view, write_seed
from server.serving import http, publish, running_server

SEED = {"lfw-004": 4, "lfw-015": 15, "lfw-033": 33}


def searches_until_both_workers_answered(url, query, log, at_least=12, timeout=90):
    """[(status, answer)] of pairs of concurrent searches (while one worker is busy, the other takes the next
    connection), until the access log shows both worker pids and there are `at_least` answers. /readyz was
    answered by the first worker up; the second may still be loading TensorFlow then."""
    answers, deadline = [], time.monotonic() + timeout
    with ThreadPoolExecutor(2) as pool:
        while True:
            answers += pool.map(lambda _: http("POST", url, query), range(2))
            with open(log) as fh:
                pids = set(re.findall(r'"POST /v1/models/disttrain:search HTTP/1.1" 200 .* pid=<(\d+)>', fh.read()))
            if len(pids) == 2 and len(answers) >= at_least:
                return answers
            assert time.monotonic() < deadline, f"the searches did not reach both workers (only {pids})"


def test_two_workers_share_one_gallery(face_model, tmp_path):
    publish(face_model, tmp_path)
    seed = write_seed(tmp_path / "seed", {name: [lfw_photos()[i]] for name, i in SEED.items()})
    with running_server(tmp_path, "--workers", "2", "--gallery-seed", seed) as (base, _proc, log):
        # Both workers seeded the same folder at start-up: each photo is in the gallery once.
        status, listed = http("GET", base + "/v1/gallery")
        assert status == 200 and sorted(e["name"] for e in listed["entries"]) == sorted(SEED)

        status, entry = http("POST", base + "/v1/gallery", {"name": "Newcomer", "image": b64(lfw_photos()[50])})
        assert status == 201, entry
        query = {"image": b64(other_view(lfw_photos()[50])), "k": 4}
        answers = searches_until_both_workers_answered(base + "/v1/models/disttrain:search", query, log)
        assert all(status == 200 for status, _ in answers), answers
        rankings = {tuple((m["id"], m["distance"]) for m in answer["matches"]) for _, answer in answers}
        assert len(rankings) == 1  # every worker: the same gallery, the same embeddings, the same answer
        (ranking,) = rankings
        assert ranking[0][0] == entry["id"] and len(ranking) == 4

        # A delete through one worker is seen by every worker.
        assert http("DELETE", base + f"/v1/gallery/{entry['id']}")[0] == 200
        for _ in range(6):
            status, answer = http("POST", base + "/v1/models/disttrain:search", query)
            assert status == 200 and entry["id"] not in [m["id"] for m in answer["matches"]]
        assert len(http("GET", base + "/v1/gallery")[1]["entries"]) == 3
