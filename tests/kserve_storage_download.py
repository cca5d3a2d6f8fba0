"""KServe's storage initializer, as an InferenceService's pod runs it, for tests/integration/test_publish_objectstore.py.

Run with the kserve-storage virtualenv's python (tests/kserve_venv.py), never the dev venv's:

    .venv-kserve-storage/bin/python kserve_storage_download.py STORAGE_URI DIR

It downloads STORAGE_URI into DIR with kserve-storage's Storage.download, which is what the storage
initializer's entry point calls, configured by the environment only (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_REGION), as KServe sets it from the service account's
Secret. It imports nothing of disttrain's.
"""

import sys

from kserve_storage import Storage

uri, directory = sys.argv[1:]
print(Storage.download(uri, directory))
