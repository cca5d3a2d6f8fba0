"""collectives.Wire: sums across replicas, dense and sparse, in every wire dtype.

The collectives run for real: a MirroredStrategy over two logical CPU devices in a fresh
process (logical devices must be configured before TensorFlow starts), with replicas that
send different numbers of sparse rows, as two workers' batches do."""

import json
import subprocess
import sys

import pytest

SCRIPT = r'''
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from disttrain_trainer.collectives import Wire, unique_rows

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
rng = np.random.default_rng(0)
dense = [rng.normal(size=(2, 3, 4)).astype("float32") for _ in range(2)]   # per replica
bias = [rng.normal(size=(5,)).astype("float32") for _ in range(2)]
rows = [np.array([3, 7, 3, 0, 0]), np.array([7, 9, 1])]                     # replica 0 repeats rows 3 and 0
values = [rng.normal(size=(len(r), 4)).astype("float32") for r in rows]

def run(wire, with_sparse):
    def replica_fn():
        i = tf.distribute.get_replica_context().replica_id_in_sync_group
        d = tf.gather(tf.constant(np.stack(dense)), i)
        b = tf.gather(tf.constant(np.stack(bias)), i)
        if not with_sparse:
            return wire.all_reduce_sum([d, None, b])
        r = tf.cond(tf.equal(i, 0), lambda: tf.constant(rows[0]), lambda: tf.constant(rows[1]))
        v = tf.cond(tf.equal(i, 0), lambda: tf.constant(values[0]), lambda: tf.constant(values[1]))
        s = tf.IndexedSlices(v, r, tf.constant([12, 4], tf.int64))
        out = wire.all_reduce_sum([d, s, None, b])
        return [out[0], tf.convert_to_tensor(out[1]), out[3]]
    result = tf.function(lambda: strategy.run(replica_fn))()
    return [strategy.experimental_local_results(x) for x in result if x is not None]

expected_sparse = np.zeros((12, 4), "float32")
for r, v in zip(rows, values):
    np.add.at(expected_sparse, r, v)
reports = {}
for dtype in sys.argv[1:]:  # every wire in one process: each process is a TensorFlow start-up
    report = reports[dtype] = {}
    for with_sparse in (False, True):
        got = run(Wire(dtype), with_sparse)
        want = [sum(dense), expected_sparse, sum(bias)] if with_sparse else [sum(dense), sum(bias)]
        report[str(with_sparse)] = {
            "max_error": max(float(np.abs(replica.numpy() - w).max()) for g, w in zip(got, want) for replica in g),
            "replicas_equal": all(np.array_equal(g[0].numpy(), g[1].numpy()) for g in got),
            "dtypes": sorted({replica.dtype.name for g in got for replica in g}),
        }
    u = unique_rows(tf.IndexedSlices(tf.constant(values[0]), tf.constant(rows[0]), tf.constant([12, 4])))
    report["unique"] = sorted(u.indices.numpy().tolist())
print(json.dumps(reports))
'''


def run_script(script, *wires):
    """{wire: the script's report} from one fresh process for all the wires."""
    out = subprocess.run([sys.executable, "-c", script, *wires], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def sums():
    return run_script(SCRIPT, "float32", "float16")


@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-6), ("float16", 1e-2)])
def test_dense_and_sparse_sums_across_two_replicas(sums, dtype, tolerance):
    report = sums[dtype]
    for case in ("False", "True"):  # dense only (one all-reduce); dense + sparse (one all-gather of tagged rows)
        assert report[case]["max_error"] <= tolerance, report
        assert report[case]["replicas_equal"], report  # every worker gets exactly the same sum
        assert report[case]["dtypes"] == ["float32"], report  # back in the variables' dtype after the wire
    assert report["unique"] == [0, 3, 7]  # repeated rows sent once


BLOCK_WIRE_SCRIPT = r'''
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from disttrain_trainer import wire_codecs
from disttrain_trainer.collectives import Wire

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
rng = np.random.default_rng(0)
sizes = [3, 700]
vectors = [[rng.normal(size=n).astype("float32") * (i + 1) for n in sizes] for i in range(2)]  # per replica

def run(wire):
    def replica_fn():
        i = tf.distribute.get_replica_context().replica_id_in_sync_group
        flats = [tf.gather(tf.constant(np.stack([v[k] for v in vectors])), i) for k in range(len(sizes))]
        return wire.sum_blocks([wire_codecs.block_encode(f, wire.name) for f in flats], sizes)
    return [strategy.experimental_local_results(t) for t in tf.function(lambda: strategy.run(replica_fn))()]

reports = {}
for name in sys.argv[1:]:  # every wire in one process: each process is a TensorFlow start-up
    wire = Wire(name)
    got = run(wire)
    decoded = [[wire_codecs.block_decode(*wire_codecs.block_encode(tf.constant(x), wire.name)).numpy() for x in v] for v in vectors]
    want = [decoded[0][k] + decoded[1][k] for k in range(len(sizes))]  # worker 0's, then worker 1's
    try:
        wire.all_reduce_sum([tf.constant([1.0])])
        refused = False
    except ValueError:
        refused = True
    reports[name] = {
        "exact": all(np.array_equal(r.numpy(), w) for g, w in zip(got, want) for r in g),
        "replicas_equal": all(np.array_equal(g[0].numpy(), g[1].numpy()) for g in got),
        "max_error_vs_float32": max(float(np.abs(r.numpy() - (v0 + v1)).max()) for g, v0, v1 in zip(got, *vectors) for r in g),
        "refused": refused,
    }
print(json.dumps(reports))
'''


@pytest.fixture(scope="module")
def block_sums():
    return run_script(BLOCK_WIRE_SCRIPT, "int8", "int4")


@pytest.mark.parametrize("wire, bound", [("int8", 0.05), ("int4", 0.9)])
def test_block_wire_messages_are_all_gathered_and_summed_in_replica_order(block_sums, wire, bound):
    """Wire.sum_blocks: every replica gets exactly decode(worker 0) + decode(worker 1), bit for bit;
    all_reduce_sum refuses a block wire instead of sending what TensorFlow would refuse."""
    report = block_sums[wire]
    assert report["exact"] and report["replicas_equal"] and report["refused"], report
    # (steps of the values' scale / 127 or / 7 per worker: the values are a few units, up to 2 x 3.5 sigma)
    assert 0 < report["max_error_vs_float32"] < bound, report
