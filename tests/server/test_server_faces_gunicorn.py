"""Face search under real gunicorn with two worker processes sharing one gallery folder."""

from server.face_photos import b64, lfw_photos, other_view, write_seed
from server.serving import answered_only_by, http, loaded_workers, publish, running_server

SEED = {"lfw-004": 4, "lfw-015": 15, "lfw-033": 33}


def searches_on_each_worker(url, query, workers, each=3):
    """[(status, answer)]: `each` searches answered by every worker in turn (the others held)."""
    answers = []
    for pid in sorted(workers):
        with answered_only_by(pid, workers):
            answers += [http("POST", url, query) for _ in range(each)]
    return answers


def test_two_workers_share_one_gallery(face_model, tmp_path):
    publish(face_model, tmp_path)
    seed = write_seed(tmp_path / "seed", {name: [lfw_photos()[i]] for name, i in SEED.items()})
    with running_server(tmp_path, "--workers", "2", "--gallery-seed", seed) as (base, proc, log):
        workers = loaded_workers(proc, log, 2)
        search = base + "/v1/models/disttrain:search"
        # Both workers seeded the same folder at start-up: each photo is in the gallery once.
        status, listed = http("GET", base + "/v1/gallery")
        assert status == 200 and sorted(e["name"] for e in listed["entries"]) == sorted(SEED)

        status, entry = http("POST", base + "/v1/gallery", {"name": "Newcomer", "image": b64(lfw_photos()[50])})
        assert status == 201, entry
        query = {"image": b64(other_view(lfw_photos()[50])), "k": 4}
        answers = searches_on_each_worker(search, query, workers)
        assert all(status == 200 for status, _ in answers), answers
        rankings = {tuple((m["id"], m["distance"]) for m in answer["matches"]) for _, answer in answers}
        assert len(rankings) == 1  # every worker: the same gallery, the same embeddings, the same answer
        (ranking,) = rankings
        assert ranking[0][0] == entry["id"] and len(ranking) == 4

        # A delete through one worker is seen by every worker.
        assert http("DELETE", base + f"/v1/gallery/{entry['id']}")[0] == 200
        for status, answer in searches_on_each_worker(search, query, workers):
            assert status == 200 and entry["id"] not in [m["id"] for m in answer["matches"]]
        assert len(http("GET", base + "/v1/gallery")[1]["entries"]) == 3
