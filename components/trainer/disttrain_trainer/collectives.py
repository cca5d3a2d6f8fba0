"""Every collective the trainer sends between workers, in one place.

The strategies use MultiWorkerMirroredStrategy's collective ops (gRPC rings over the
TF_CONFIG cluster) for three things:
  * multiworker: the gradients, every step (`all_reduce_sum`, in a replica context);
  * localsgd: the change of the weights since the last sync, every H steps (`all_reduce_sum`; on
    the int8 and int4 wires `sum_blocks`: an all-gather, as TensorFlow's all-reduce and all-gather refuse int8);
  * both: the epoch's training metrics, once per epoch (`sum_across_workers`).
A collective costs a fixed ~1.4 ms on loopback however small (bench/collective.py), so the
trainer sends few of them, and can send them narrower: `--allreduce-dtype float16` halves
the bytes (cast for the wire, cast back before use), and `--allreduce-pack-bytes` sets how
the tensors are packed into collectives (0 = one pack for all of them).
Sparse gradients (an embedding's tf.IndexedSlices) are all-gathered, not all-reduced:
only the rows a batch touched, each once (see Wire._gather_rows).
The cluster itself is joined here too (`join_cluster`), with a heartbeat timeout sized for slow links.
"""

import tensorflow as tf

from disttrain_trainer import wire_codecs


def join_cluster(heartbeat_timeout):
    """MultiWorkerMirroredStrategy over TF_CONFIG's cluster (creating it waits for every worker), with the
    coordination service's heartbeat timeout set to `heartbeat_timeout` seconds instead of TensorFlow's 10.

    Why: the service fails the whole group when a worker's heartbeat has not come for that long, and on a
    slow link the heartbeats share the saturated link with the syncs' bytes. A plain localsgd run of
    MobileNetV2 at 10 Mbit/s (9.1 MB per float32 sync, about 8 s on the link) failed at its seventh sync:
    worker 1's heartbeat call exceeded its 10 s deadline, and the service declared it dead ("stopped sending
    heartbeats"). (In a run of two 16 MB syncs on such a link no heartbeat was late: it is rare, and a long
    run has many syncs.) The strategy takes no option for it, so the service is configured here as the
    strategy itself would (collective_all_reduce_strategy.py, which leaves a configuration made before it
    alone), with the timeout. A worker that dies closes its connections and fails the group's next collective
    at once; the timeout only bounds how long a worker that stalls, or whose host is gone, keeps the others
    waiting (tests/faults/test_stalled_worker.py)."""
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.distribute import multi_worker_util
    from tensorflow.python.eager import context

    spec = tf.distribute.cluster_resolver.TFConfigClusterResolver().cluster_spec()
    if context.context().coordination_service is None:
        jobs = [
            coordination_config_pb2.CoordinatedJob(name=job, num_tasks=spec.num_tasks(job))
            for job in ("chief", "worker")
            if job in spec.jobs
        ]
        context.context().configure_coordination_service(
            service_type="standalone",
            service_leader=multi_worker_util.coordination_leader(spec),
            coordinated_jobs=jobs,
            heartbeat_timeout_in_ms=int(heartbeat_timeout * 1000),
        )
    return tf.distribute.MultiWorkerMirroredStrategy()


# (not bfloat16: options_base.ALLREDUCE_DTYPES says why) int8 and int4 (wire_codecs.BLOCK_WIRES, each value held in an int8
# until it is packed): localsgd's syncs only (sum_blocks), never all_reduce_sum.
WIRE_DTYPES = {"float32": tf.float32, "float16": tf.float16, "int8": tf.int8, "int4": tf.int8}


class Wire:
    """How tensors travel in a collective: their dtype on the wire and the packing."""

    def __init__(self, dtype="float32", pack_bytes=0):
        self.name, self.dtype = dtype, WIRE_DTYPES[dtype]
        self.options = tf.distribute.experimental.CommunicationOptions(bytes_per_pack=pack_bytes)

    def _cast(self, tensor):
        return tf.cast(tensor, self.dtype) if tensor.dtype.is_floating and tensor.dtype != self.dtype else tensor

    def all_reduce_sum(self, tensors):
        """In a replica context: each tensor summed over all workers, back in its own dtype
        (None stays None: a variable without a gradient sends nothing)."""
        if self.name in wire_codecs.BLOCK_WIRES:
            raise ValueError(f"TensorFlow's all-reduce refuses int8: send {self.name} messages with sum_blocks")
        present = [i for i, t in enumerate(tensors) if t is not None]
        result = list(tensors)
        if any(isinstance(tensors[i], tf.IndexedSlices) for i in present):
            summed = self._gather_rows([tensors[i] for i in present])
        elif present:
            summed = tf.distribute.get_replica_context().all_reduce(
                tf.distribute.ReduceOp.SUM, [self._cast(tensors[i]) for i in present], options=self.options
            )
        for i, value in zip(present, summed if present else []):
            result[i] = _cast_like(value, tensors[i].dtype)
        return result

    def sum_blocks(self, messages, sizes):
        """In a replica context: every worker's messages on this block wire (wire_codecs.block_encode's, of
        vectors of `sizes` elements) in one all-gather of int32 (the collectives refuse int8), each decoded and
        the workers' summed in worker order: the same arithmetic on the same bits, so the same sums
        (float32) on every worker."""
        packed = tf.concat([wire_codecs.pack(*m, self.name) for m in messages], 0)
        context = tf.distribute.get_replica_context()
        rows = context.all_gather(packed[None], axis=0, options=self.options)  # [replicas, packed length]
        return sum_block_rows(rows, context.num_replicas_in_sync, sizes, self.name)

    def _gather_rows(self, tensors):
        """Sparse and dense tensors summed with ONE all-gather of tagged rows.

        TensorFlow all-gathers an IndexedSlices as two tensors behind a cond on their
        lengths (4 collectives, and the cond's collectives collide when several steps run
        in one tf.function loop), then all-reduces the dense rest (one more). Here every
        tensor becomes rows of one [rows, tag + width] matrix: a sparse tensor's unique
        rows tagged (tensor, row index); the dense tensors, flattened, cut into rows tagged
        (-1, row number). One all_gather (a length exchange + the data: 2 collectives)
        carries it all; each worker then sums the dense rows and keeps the sparse rows,
        whose repeated indices the optimizer adds up."""
        sparse = [unique_rows(t) if isinstance(t, tf.IndexedSlices) else None for t in tensors]
        width = max(int(t.values.shape[-1]) for t in sparse if t is not None)
        dense = [tf.reshape(self._cast(t), [-1]) for t, s in zip(tensors, sparse) if s is None]
        dense_sizes = [int(d.shape[0]) for d in dense]
        blocks = []
        if dense:
            flat = tf.concat(dense, 0)
            dense_rows = -(-sum(dense_sizes) // width)
            flat = tf.pad(flat, [[0, dense_rows * width - sum(dense_sizes)]])
            blocks.append(
                self._tagged(tf.fill([dense_rows], -1), tf.range(dense_rows), tf.reshape(flat, [dense_rows, width]))
            )
        for j, s in enumerate(sparse):
            if s is not None:
                values = tf.pad(self._cast(s.values), [[0, 0], [0, width - int(s.values.shape[-1])]])
                blocks.append(self._tagged(tf.fill(tf.shape(s.indices), j), tf.cast(s.indices, tf.int32), values))
        rows = tf.distribute.get_replica_context().all_gather(tf.concat(blocks, 0), axis=0, options=self.options)
        tags = rows[:, : self._tag_columns]
        tags = tf.bitcast(
            tags if self.dtype.size == 4 else tf.reshape(tags, [-1, 2, 2]), tf.int32
        )  # (tensor or -1, row)
        values = rows[:, self._tag_columns :]
        results = []
        dense_parts = []
        if dense:
            is_dense = tf.equal(tags[:, 0], -1)
            summed = tf.math.unsorted_segment_sum(
                tf.boolean_mask(values, is_dense), tf.boolean_mask(tags[:, 1], is_dense), dense_rows
            )
            dense_parts = tf.split(tf.reshape(summed, [-1])[: sum(dense_sizes)], dense_sizes)
        for j, (t, s) in enumerate(zip(tensors, sparse)):
            if s is None:
                results.append(tf.reshape(dense_parts.pop(0), tf.shape(t)))
            else:
                mine = tf.equal(tags[:, 0], j)
                results.append(
                    tf.IndexedSlices(
                        tf.boolean_mask(values, mine)[:, : int(s.values.shape[-1])],
                        tf.cast(tf.boolean_mask(tags[:, 1], mine), s.indices.dtype),
                        s.dense_shape,
                    )
                )
        return results

    @property
    def _tag_columns(self):
        return 8 // self.dtype.size  # two int32 tags (8 bytes), bit-cast into wire-dtype columns

    def _tagged(self, tensor_tags, row_tags, values):
        """[n, tag columns + width]: (tensor tag, row tag) as int32 bits, then the values."""
        tags = tf.bitcast(tf.stack([tf.cast(tensor_tags, tf.int32), tf.cast(row_tags, tf.int32)], axis=1), self.dtype)
        return tf.concat([tf.reshape(tags, [-1, self._tag_columns]), values], axis=1)


def sum_block_rows(rows, workers, sizes, wire):
    """[workers, packed length] (each worker's wire_codecs.pack vectors of `sizes` elements on the block wire
    `wire`, end to end) -> the float32 sums of the decoded vectors, added in worker order."""
    lengths = [wire_codecs.packed_length(n, wire) for n in sizes]
    totals = None
    for replica in range(workers):
        parts = tf.split(rows[replica], lengths)
        decoded = [wire_codecs.block_decode(*wire_codecs.unpack(p, n, wire)) for p, n in zip(parts, sizes)]
        totals = decoded if totals is None else [t + d for t, d in zip(totals, decoded)]
    return totals


class SideChannel:
    """Collectives between the workers of a cluster (a MultiWorkerMirroredStrategy) that run on a thread of
    their own, beside the strategy's collectives (localsgd's overlapped syncs).

    The strategy draws a collective's instance key when a function containing it is called, from one
    counter: two threads calling such functions would draw them in whatever order they happen to run, a
    different one on each worker, and the workers' collectives would not match ("Collective instance N
    expected type ..."). These collectives have a group of their own (GROUP_KEY, outside the range the
    strategy numbers its groups from) and take their instance key from the caller, which derives it from
    the training's step: the same on every worker, whenever each thread runs."""

    GROUP_KEY = 1_000_000  # (the strategy's groups are numbered from 1 up, one per set of devices)

    def __init__(self, cluster):
        self.size = cluster.num_replicas_in_sync
        self.device = cluster.extended.worker_devices[0]

    def sum(self, tensor, instance_key):
        """`tensor` summed over the workers (float16 in float16)."""
        with tf.device(self.device):
            return tf.raw_ops.CollectiveReduceV2(
                input=tensor,
                group_size=self.size,
                group_key=self.GROUP_KEY,
                instance_key=instance_key,
                ordering_token=[],
                merge_op="Add",
                final_op="Id",
            )

    def gather(self, tensor, instance_key):
        """The workers' tensors (each of the same shape) stacked in worker order: [workers, *shape]."""
        with tf.device(self.device):
            return tf.raw_ops.CollectiveGatherV2(
                input=tensor[None],
                group_size=self.size,
                group_key=self.GROUP_KEY,
                instance_key=instance_key,
                ordering_token=[],
            )


def _cast_like(value, dtype):
    if isinstance(value, tf.IndexedSlices):
        return tf.IndexedSlices(tf.cast(value.values, dtype), value.indices, value.dense_shape)
    return tf.cast(value, dtype)


def unique_rows(slices):
    """An IndexedSlices with one row per index (repeated rows summed): a batch's
    embedding gradient names a token once per occurrence, and padding many times."""
    indices, positions = tf.unique(slices.indices)
    values = tf.math.unsorted_segment_sum(slices.values, positions, tf.shape(indices)[0])
    return tf.IndexedSlices(values, indices, slices.dense_shape)


def sum_across_workers(cluster, vector):
    """A small float vector summed over the workers of `cluster` (a MultiWorkerMirroredStrategy):
    one collective. Also a barrier: it returns when every worker has sent its part."""
    return _sum_across_workers(cluster, tf.constant(vector, tf.float64)).numpy()


@tf.function
def _sum_across_workers(cluster, vector):
    local_replicas = len(cluster.extended.worker_devices)  # 1 on CPU; with several GPUs each sends its share
    per_replica = cluster.run(lambda: vector / local_replicas)
    return cluster.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
