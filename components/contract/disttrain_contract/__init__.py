"""The contract the four disttrain stages agree on.

Every stage reads and writes only inside one shared working directory (an NFS
ReadWriteMany volume on Kubernetes, a plain folder locally). This package is the
single definition of what lives where in it, how files are written (atomically),
how a stage says it is done (a marker file) and what the data and model
artifacts look like. The stages import it instead of repeating any of it.
"""

from disttrain_contract.errors import ContractError, GroupLost, StageTimeout, run_cli
from disttrain_contract.layout import Workdir, default_workdir, job_completion_index
from disttrain_contract.atomic import atomic_path, atomic_write_bytes, atomic_write_json, read_json, sha256_file
from disttrain_contract.markers import read_marker, wait_for_marker, wait_for_markers, wait_for_quorum, write_marker
from disttrain_contract.manifest import Manifest, SplitInfo, read_split, iter_split_text

__all__ = [
    "ContractError",
    "GroupLost",
    "StageTimeout",
    "run_cli",
    "Workdir",
    "default_workdir",
    "job_completion_index",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_json",
    "read_json",
    "sha256_file",
    "read_marker",
    "wait_for_marker",
    "wait_for_markers",
    "wait_for_quorum",
    "write_marker",
    "Manifest",
    "SplitInfo",
    "read_split",
    "iter_split_text",
]
