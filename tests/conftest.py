# Makes tests/ importable (pytest puts a rootdir conftest's folder on sys.path),
# so test files can `from stages import ...`.

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def object_store(tmp_path_factory):
    """A real S3 store (SeaweedFS on loopback) for the session: tests/objectstore.py."""
    from objectstore import seaweedfs

    with seaweedfs(str(tmp_path_factory.mktemp("seaweedfs"))) as store:
        yield store
