"""disttrain-copier: split a dataset into N disjoint shards plus a held-out test split.

    disttrain-copier --source sample:movie-reviews --n-shards 2 --workdir workdir

Reads the source once as a stream (array sources are counted first so shards
can be preallocated), so memory stays bounded whatever the input size. Each
example goes to the test split with probability --test-fraction, otherwise to
the next shard in turn: shards are disjoint, their union is the training set,
and their sizes differ by at most one. The whole output directory is built
under a temporary name and renamed into place with its _SUCCESS marker inside,
so a trainer never sees a half-written dataset.

Own data: --source table:PATH (a CSV, TSV or Parquet file of feature columns and a label column,
--label-column: numbers only are the task table; text columns or missing values the task typed_table,
tables.py) or npz:PATH (any numeric x); --problem regression makes the label a numeric
target. Every PATH (and images:DIR) may be an s3://bucket/key (DIR: a prefix) in an S3 or
S3-compatible store, configured by the standard AWS_* variables (sources.py says how it is read). The manifest then records the task (table, array), the problem, the target and, for the
model's normalisation, each feature's statistics over the training shards.

Before publishing, the data is validated (validation.py): statistics of every split go to
stats.json and stats.png beside the shards, and a failed check (train/test leakage, label skew
between shards, a class missing from a split, a --schema violation) stops the copier with exit 2
and nothing published, unless its --allow-* flag turns it into a warning. The manifest records the
result.

Text: the vocabulary is the training split's most frequent tokens (--max-tokens), or, with
--dp-vocab-epsilon and --dp-vocab-delta, a differentially private one (private_vocab.py): only tokens
that enough examples share, so that the published model holds no word of one example alone.
"""

import argparse
import collections
import concurrent.futures
import itertools
import json
import os
import sys
import time

import numpy as np

from disttrain_contract import (
    ContractError,
    Workdir,
    atomic_path,
    default_workdir,
    objectstore,
    run_cli,
    sha256_file,
    write_marker,
)
from disttrain_contract.manifest import VOCAB, Manifest, SplitInfo, shard_name, split_files, tokenize
from disttrain_contract.privacy import delta_problem
from disttrain_contract.tasks import task_of
from disttrain_contract.typed_table import is_typed
from disttrain_copier import private_vocab
from disttrain_copier.sources import open_source
from disttrain_copier.tables import DEFAULT_MAX_CATEGORIES, DEFAULT_NA_VALUES, TableOptions, parse_column_types
from disttrain_copier.validation import (
    DEFAULT_MAX_LABEL_SKEW,
    DEFAULT_MAX_MISSING_SKEW,
    SCHEMA_HELP,
    STATS,
    STATS_PLOT,
    Validator,
    read_schema,
    write_stats,
)

TEST = "test"


def parse_args(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    check_args(p, args)
    return args


def build_parser():
    """The copier's flags, in --help's order (the epilog: the sources)."""
    p = argparse.ArgumentParser(
        prog="disttrain-copier",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Split a dataset into N disjoint shards plus a held-out test split (stage 1 of disttrain).",
        epilog="Sources: sample:movie-reviews, sample:digits, csv:PATH (text,label columns), images:DIR (one sub-folder per class), "
        "keras:imdb (downloads), keras:imdb=DIR (local imdb.npz + imdb_word_index.json), and your own numeric data:\n"
        "  table:PATH  a .csv, .tsv, .parquet or .pq file: every column but --label-column is a feature; numbers\n"
        "              only: task table (stored float32 [n, features]); with text columns or missing values: task\n"
        "              typed_table (the raw typed columns, NAME.parquet; see the table:PATH flags)\n"
        "  npz:PATH    arrays x [n, ...] (any numeric dtype) and y [n] (optional label_names): image-shaped x\n"
        "              ([n,h,w] or [n,h,w,1|3]) is an image task as before (uint8 pixels); any other x, and any\n"
        "              x with --problem regression, is task array (x kept in its own dtype and shape)\n"
        "  --problem regression: y is a float32 target (table: the label column; npz: y); labels [].\n"
        "Object storage: table:, csv: and npz: take s3://BUCKET/KEY, images: s3://BUCKET/PREFIX (the classes are the\n"
        "  first \"folders\" under it); the store is configured by AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,\n"
        "  AWS_SECRET_ACCESS_KEY, AWS_REGION (and AWS_CA_BUNDLE). A table or csv: object is downloaded once beside\n"
        "  the output directory (it is read twice) and removed at the end; npz: and images: stream.\n\n" + SCHEMA_HELP,
    )
    add_location_flags(p)
    add_split_flags(p)
    add_input_flags(p)
    add_validation_flags(p)
    private_vocab.add_flags(p)
    return p


def add_location_flags(p):
    """Where the data comes from, into how many shards it is split, and where they are written."""
    p.add_argument("--source", required=True, help="where the data comes from (see below)")
    p.add_argument(
        "--n-shards",
        "--n_container",
        dest="n_shards",
        type=int,
        default=2,
        help="number of shards = number of trainer workers (default 2)",
    )
    p.add_argument(
        "--workdir",
        default=default_workdir(),
        help="shared working directory (default $DISTTRAIN_WORKDIR or ./workdir)",
    )
    p.add_argument("--out", "--savedir", dest="out", help="output directory (default WORKDIR/data)")


def add_split_flags(p):
    """How the examples are divided: the held-out fraction and the split's seed."""
    p.add_argument("--test-fraction", type=float, default=0.2, help="fraction held out for evaluation (default 0.2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split (default 0)")


def add_input_flags(p):
    """How the source is read (text vocabulary, image size and channels, the task, a table's label, the problem)
    and where downloaded samples are kept."""
    p.add_argument("--max-tokens", type=int, default=20000, help="text: vocabulary size (default 20000)")
    p.add_argument("--image-size", type=int, default=32, help="images:DIR: resize to SIZE x SIZE (default 32)")
    p.add_argument(
        "--channels", type=int, choices=(1, 3), default=3, help="images:DIR: 1 = grayscale, 3 = RGB (default 3)"
    )
    p.add_argument(
        "--task",
        choices=("auto", "faces"),
        default="auto",
        help="faces: images:DIR holds one folder per person; faces are detected and cropped (default auto)",
    )
    p.add_argument(
        "--label-column", help="table:PATH: the column to predict; every other column is a feature (default label)"
    )
    p.add_argument(
        "--problem",
        choices=("classification", "regression"),
        default="classification",
        help="table:PATH and npz:PATH: classification (the labels are classes) or regression (a numeric "
        "target, stored float32) (default classification)",
    )
    p.add_argument(
        "--cache-dir", help="where downloaded samples are kept (default $DISTTRAIN_CACHE or ~/.cache/disttrain)"
    )
    add_table_flags(p)


def add_table_flags(p):
    """How a table:PATH's columns are read: their types, missing values, the categories of text columns."""
    table = p.add_argument_group("table:PATH columns (types, missing values, categories)")
    table.add_argument(
        "--column-types",
        metavar="NAME=TYPE,...",
        help="set columns' types instead of inferring them: float, integer, boolean or string (a value that "
        "does not read as its column's type is an error); a string column makes the table a typed table",
    )
    table.add_argument(
        "--na-values",
        metavar="TEXT,...",
        help="the spellings of a missing value, besides an empty cell, NaN and a Parquet null (default NA; "
        "--na-values '' for none: then a category spelled NA is a value)",
    )
    table.add_argument(
        "--drop-columns", metavar="NAME,...", help="columns to leave out (not features), e.g. an ID column"
    )
    table.add_argument(
        "--max-categories",
        type=int,
        default=DEFAULT_MAX_CATEGORIES,
        help="the most distinct values a text column may have in the training rows; a column with more is an "
        f"ID or free text, not a category, and is refused: --drop-columns it (default {DEFAULT_MAX_CATEGORIES})",
    )
    table.add_argument(
        "--min-category-count",
        type=int,
        default=1,
        help="a text column's vocabulary holds the values seen in at least this many training rows; rarer "
        "ones are out of vocabulary, as values never seen are (default 1: every value seen)",
    )


def add_validation_flags(p):
    """The data validation's checks and what turns a failed one into a warning."""
    check = p.add_argument_group("data validation (a failed check: exit 2, nothing published)")
    check.add_argument(
        "--allow-duplicates",
        action="store_true",
        help="accept held-out inputs that also occur in a training shard (leakage) with a warning",
    )
    check.add_argument(
        "--max-label-skew",
        type=float,
        default=DEFAULT_MAX_LABEL_SKEW,
        help="largest total-variation distance of a shard's label distribution from the training "
        f"distribution (0..1, default {DEFAULT_MAX_LABEL_SKEW:g}); regression: of the shard's target "
        "histogram from the training targets' one, over quantile bins of the training targets (10 bins, "
        "fewer when the smallest shard has under 250 examples: one per 25, at least 2)",
    )
    check.add_argument("--allow-label-skew", action="store_true", help="a shard beyond --max-label-skew is a warning")
    check.add_argument(
        "--allow-missing-classes",
        action="store_true",
        help="a class with no example in a shard or in the held-out split is a warning "
        "(regression: skipped, there are no classes)",
    )
    check.add_argument(
        "--max-missing-skew",
        type=float,
        default=DEFAULT_MAX_MISSING_SKEW,
        help="typed tables: the largest difference between a split's share of missing values in a column "
        f"and the training rows' share (0..1, default {DEFAULT_MAX_MISSING_SKEW:g}; a difference within 4 "
        "standard errors of sampling passes too)",
    )
    check.add_argument(
        "--allow-missing-skew", action="store_true", help="a split beyond --max-missing-skew is a warning"
    )
    check.add_argument("--schema", metavar="FILE", help="JSON file the data must satisfy (format below)")
    check.add_argument(
        "--no-stats-plot",
        dest="stats_plot",
        action="store_false",
        help="do not draw stats.png (stats.json is always written; the plot costs ~0.2-0.5 s a copy)",
    )


def check_args(p, args):
    """The checks of the flags' values (p.error: one line, exit 2); fills in --label-column's default."""
    if not 0.0 <= args.max_label_skew <= 1.0:
        p.error(f"--max-label-skew must be between 0 and 1, got {args.max_label_skew}")
    if args.n_shards < 1:
        p.error(f"--n-shards must be >= 1, got {args.n_shards}")
    if not 0.0 < args.test_fraction < 1.0:
        p.error(f"--test-fraction must be between 0 and 1 (exclusive), got {args.test_fraction}")
    if args.max_tokens < 1 or args.image_size < 1:
        p.error("--max-tokens and --image-size must be positive")
    if args.label_column is not None and not args.source.startswith("table:"):
        p.error("--label-column applies to --source table:PATH only (npz:PATH takes its labels from y)")
    if args.label_column is None:
        args.label_column = "label"
    if not 0.0 <= args.max_missing_skew <= 1.0:
        p.error(f"--max-missing-skew must be between 0 and 1, got {args.max_missing_skew}")
    if args.max_categories < 1 or args.min_category_count < 1:
        p.error("--max-categories and --min-category-count must be positive")
    given = [f for f in ("column_types", "na_values", "drop_columns") if getattr(args, f) is not None]
    if given and not args.source.startswith("table:"):
        p.error(f"--{given[0].replace('_', '-')} applies to --source table:PATH only")
    try:
        args.column_types = parse_column_types(args.column_types)
    except ContractError as err:
        p.error(str(err))
    args.na_values = DEFAULT_NA_VALUES if args.na_values is None else tuple(_listed(args.na_values))
    args.drop_columns = tuple(_listed(args.drop_columns or ""))
    private_vocab.check(args, p.error)


def _listed(text):
    """A comma list of names or spellings, stripped, the empty ones left out."""
    return [v.strip() for v in text.split(",") if v.strip()]


def split_assignments(seed, test_fraction, n_shards, block=1 << 16):
    """Endless stream of destinations: -1 = test, else a shard index.

    Depends only on (seed, position), so a second pass over the same source sees
    the same assignment; drawn in blocks so memory is constant."""
    rng = np.random.default_rng(seed)
    next_shard = 0
    while True:
        for is_test in rng.random(block) < test_fraction:
            if is_test:
                yield -1
            else:
                yield next_shard
                next_shard = (next_shard + 1) % n_shards


class SplitCodes:
    """split_assignments' destinations, the same sequence, as numpy arrays of any length (`take`): the
    batch path's split, without a Python step per example. In each block of draws the k-th training
    position goes to shard (first + k - 1) mod n_shards, `first` being where the previous block left off."""

    def __init__(self, seed, test_fraction, n_shards, block=1 << 16):
        self.rng, self.test_fraction, self.n_shards, self.block = (
            np.random.default_rng(seed),
            test_fraction,
            n_shards,
            block,
        )
        self.next_shard, self.pending = 0, np.empty(0, dtype=np.int64)

    def _draw(self):
        is_test = self.rng.random(self.block) < self.test_fraction
        train = np.cumsum(~is_test)
        codes = np.where(is_test, -1, (self.next_shard + train - 1) % self.n_shards)
        self.next_shard = int((self.next_shard + train[-1]) % self.n_shards)
        return codes

    def take(self, n):
        parts, have = [self.pending], len(self.pending)
        while have < n:
            parts.append(self._draw())
            have += len(parts[-1])
        codes = np.concatenate(parts) if len(parts) > 1 else parts[0]
        self.pending = codes[n:]
        return codes[:n]


class Progress:
    def __init__(self, total, every=2.0):
        self.total, self.every, self.count = total, every, 0
        self.start = self.last = time.monotonic()

    def step(self, n=1):
        self.count += n
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self.report(now)

    def report(self, now=None):
        elapsed = (now or time.monotonic()) - self.start
        of = f"/{self.total}" if self.total else ""
        print(
            f"copier: {self.count}{of} examples ({self.count / max(elapsed, 1e-9):,.0f}/s)", file=sys.stderr, flush=True
        )


class TextShards:
    """JSONL files, one per split, appended as examples stream by."""

    storage = "jsonl"

    def __init__(self, out_dir, names):
        self.files = {name: open(os.path.join(out_dir, f"{name}.jsonl"), "w", encoding="utf-8") for name in names}
        self.counts = collections.Counter()

    def add(self, name, x, y):
        self.files[name].write(json.dumps({"text": x, "label": y}, ensure_ascii=False) + "\n")
        self.counts[name] += 1

    def close(self):
        for fh in self.files.values():
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()


class ArrayShards:
    """.npy files whose size is known up front: the header first, then rows
    appended through a buffered file, so memory stays flat however large the
    input (a memory map would keep every written page resident).

    x: images uint8 [n, h, w, c]; table float32 [n, features]; array the
    source's dtype and shape. y: int64 label indices, or float32 targets."""

    storage = "npy"

    def __init__(self, out_dir, sizes, spec, numeric=False, regression=False):
        if numeric:  # tasks.Task.numeric: x in the source's own dtype and shape
            shape, self.x_dtype = tuple(spec["shape"]), np.dtype(spec["dtype"])
        else:
            shape, self.x_dtype = (spec["height"], spec["width"], spec["channels"]), np.dtype(np.uint8)
        self.y_dtype = np.dtype(np.float32 if regression else np.int64)
        self.files = {}
        for name, n in sizes.items():
            x_path, y_path = (os.path.join(out_dir, f) for f in split_files(name, "npy"))
            self.files[name] = (self._open(x_path, self.x_dtype, (n, *shape)), self._open(y_path, self.y_dtype, (n,)))
        self.sizes = dict(sizes)
        self.counts = collections.Counter()

    @staticmethod
    def _open(path, dtype, shape):
        fh = open(path, "wb", buffering=1 << 20)
        header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape}
        np.lib.format.write_array_header_1_0(fh, header)
        return fh

    def add(self, name, x, y):
        x_file, y_file = self.files[name]
        x_file.write(np.ascontiguousarray(x, dtype=self.x_dtype).tobytes())
        y_file.write(np.asarray(y, dtype=self.y_dtype).tobytes())
        self.counts[name] += 1

    def add_batch(self, name, x, y):
        """Rows x [m, ...] and their y [m] at once (the batch path)."""
        x_file, y_file = self.files[name]
        x_file.write(np.ascontiguousarray(x, dtype=self.x_dtype).tobytes())
        y_file.write(np.ascontiguousarray(y, dtype=self.y_dtype).tobytes())
        self.counts[name] += len(y)

    def close(self):
        for handles in self.files.values():
            for fh in handles:
                fh.flush()
                os.fsync(fh.fileno())
                fh.close()

    def check_complete(self):
        """The headers promised these row counts; a source that yields fewer is an error."""
        short = {name: (self.counts[name], n) for name, n in self.sizes.items() if self.counts[name] != n}
        if short:
            raise ContractError(f"the source yielded a different number of examples than announced: {short}")


class ParquetShards:
    """A typed table's splits: NAME.parquet (the typed columns with nulls, one row group a batch written)
    and NAME.y.npy (its header first, rows appended, as ArrayShards' y), in the copier's temporary
    directory; each file complete (closed and synced) before the directory is renamed into place."""

    storage = "parquet"
    WRITES_IN_FLIGHT = 6

    def __init__(self, out_dir, sizes, spec, regression=False):
        import pyarrow as pa
        import pyarrow.parquet as pq

        from disttrain_copier.tables import ARROW_TYPES

        self.schema = pa.schema([(c["name"], pa.type_for_alias(ARROW_TYPES[c["type"]])) for c in spec["columns"]])
        self.y_dtype = np.dtype(np.float32 if regression else np.int64)
        self.paths, self.writers, self.y_files = [], {}, {}
        # dictionary pages for text columns (categories: small), plain numbers; LZ4: measured on a 100 MB
        # mixed table, 0.36 s and 33 MB against snappy with dictionaries everywhere 0.49 s and 35 MB
        text = [c["name"] for c in spec["columns"] if c["type"] == "string"]
        for name, n in sizes.items():
            x_path, y_path = (os.path.join(out_dir, f) for f in split_files(name, self.storage))
            self.writers[name] = pq.ParquetWriter(x_path, self.schema, compression="lz4", use_dictionary=text)
            self.y_files[name] = ArrayShards._open(y_path, self.y_dtype, (n,))
            self.paths.append(x_path)
        self.sizes = dict(sizes)
        self.counts = collections.Counter()
        self.thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="parquet-shards")
        self.pending = collections.deque()

    def add_batch(self, name, x, y):
        # written by one background thread (pyarrow's writer releases the GIL: the encoding overlaps the
        # next batch's reading), in order; at most WRITES_IN_FLIGHT batches wait, which bounds the memory
        self.pending.append(self.thread.submit(self.writers[name].write_batch, x))
        if len(self.pending) > self.WRITES_IN_FLIGHT:
            self.pending.popleft().result()
        self.y_files[name].write(np.ascontiguousarray(y, dtype=self.y_dtype).tobytes())
        self.counts[name] += len(y)

    def close(self):
        try:
            while self.pending:
                self.pending.popleft().result()
        finally:
            self.thread.shutdown(wait=True, cancel_futures=True)
        for writer in self.writers.values():
            writer.close()
        for path in self.paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for fh in self.y_files.values():
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()

    def check_complete(self):
        ArrayShards.check_complete(self)


def copy(args):
    schema = read_schema(args.schema) if args.schema else None  # a bad schema fails before any data is read
    out_dir = args.out or Workdir(args.workdir).data
    # an s3:// table is downloaded once beside the output directory, on its volume (sources.py)
    dataset = open_source(
        args.source,
        image_size=args.image_size,
        channels=args.channels,
        cache_dir=args.cache_dir,
        task=args.task,
        label_column=args.label_column,
        problem=args.problem,
        spool_dir=os.path.dirname(os.path.abspath(out_dir)),
        table_options=table_options(args, schema),
    )
    try:
        return _copy(args, schema, dataset, out_dir)
    finally:
        dataset.close()


def table_options(args, schema):
    """How a table:PATH is read (tables.TableOptions): the table flags and the --schema file's column types."""
    return TableOptions(
        column_types=dict(args.column_types),
        schema_types=dict((schema or {}).get("column_types") or {}),
        na_values=tuple(args.na_values),
        drop_columns=tuple(args.drop_columns),
        max_categories=args.max_categories,
        min_category_count=args.min_category_count,
    )


def _copy(args, schema, dataset, out_dir):
    for where, reason in dataset.skipped:
        print(f"copier: skipped {where}: {reason}", file=sys.stderr)
    task = task_of(dataset)
    names = [shard_name(i) for i in range(args.n_shards)]
    selection = _private_selection(args, task, dataset)
    with atomic_path(out_dir) as tmp:
        os.makedirs(tmp)
        shards = _open_shards(tmp, args, task, dataset, names)
        validator = Validator(
            dataset.task,
            dataset.labels,
            dataset.input,
            names,
            dataset.source_dtype,
            allow_duplicates=args.allow_duplicates,
            max_label_skew=args.max_label_skew,
            allow_label_skew=args.allow_label_skew,
            allow_missing_classes=args.allow_missing_classes,
            schema=schema,
            known_duplicates=dataset.known_duplicates,
            problem=dataset.problem,
            target=dataset.target,
            table=dataset.table,
            max_missing_skew=args.max_missing_skew,
            allow_missing_skew=args.allow_missing_skew,
        )
        if dataset.batches is not None:
            token_counts = collections.Counter()
            examples = _write_batches(
                dataset, SplitCodes(args.seed, args.test_fraction, args.n_shards), shards, validator, names
            )
        else:
            token_counts, examples = _write_splits(
                dataset, split_destinations(args, task, dataset, names), shards, validator, task.vocabulary, selection
            )
        _check_sizes(shards.counts, names)
        stats = _validate(tmp, shards, validator, args.stats_plot)
        vocab = _write_vocabulary(
            tmp, task, selection, token_counts, args.max_tokens, sum(shards.counts[n] for n in names)
        )
        manifest = _manifest(args, dataset, task, tmp, shards, names, validator, stats, vocab)
        manifest.write(tmp)
        write_marker(tmp, "copier", n_shards=args.n_shards, examples=examples)
    return out_dir, manifest


def _private_selection(args, task, dataset):
    """The differentially private vocabulary's selection (private_vocab.Selection), None without
    --dp-vocab-epsilon; ContractError for a task without a vocabulary, and for a table's text columns."""
    if not private_vocab.enabled(args):
        return None
    text_columns = [n for n, t in (dataset.table.types.items() if dataset.table else ()) if t == "string"]
    if text_columns:
        # each text column's vocabulary would be one more private selection (one value an example, its own
        # ε share): not built; its categories would be published exactly as counted
        raise ContractError(
            f"--dp-vocab-epsilon: a private vocabulary is built for text sources only, not for the text columns "
            f"{text_columns} of {args.source}, whose categories the model would hold as seen in training: leave "
            "them out (--drop-columns) or copy without --dp-vocab-epsilon"
        )
    if not task.vocabulary:
        raise ContractError(
            f"--dp-vocab-epsilon applies to text sources only: {args.source} holds {task.name} "
            "data, without a vocabulary"
        )
    return private_vocab.Selection(args.dp_vocab_epsilon, args.dp_vocab_delta, args.dp_vocab_max_tokens_per_example)


def split_destinations(args, task, dataset, names):
    """Where each example goes, in stream order: TEST or one of the shards' `names`. The same on every call
    (split_assignments depends on the seed and the position only), so that an array source's counting pass
    and its writing pass agree."""
    if task.split_by_person:
        # split by person, not by photo: the held-out split is people the model never saw
        by_person = split_assignments(args.seed, args.test_fraction, args.n_shards)
        person_destination = [next(by_person) for _ in dataset.labels]
        assignments = (person_destination[label] for label in dataset.example_labels)
    else:
        assignments = split_assignments(args.seed, args.test_fraction, args.n_shards)
    return (TEST if where < 0 else names[where] for where in assignments)


def _open_shards(tmp, args, task, dataset, names):
    """The splits' writers in `tmp`: TextShards, or ArrayShards of the sizes a first pass over the split counts
    (an empty split fails here, before any example is read)."""
    if task.storage == TextShards.storage:
        return TextShards(tmp, names + [TEST])
    sizes = collections.Counter({name: 0 for name in names + [TEST]})
    if task.split_by_person:
        for name in itertools.islice(split_destinations(args, task, dataset, names), dataset.examples):
            sizes[name] += 1
    else:  # the same destinations, counted a block at a time
        codes, left = SplitCodes(args.seed, args.test_fraction, args.n_shards), dataset.examples
        while left:
            counts = np.bincount(codes.take(min(left, 1 << 20)) + 1, minlength=len(names) + 1)
            for code, count in enumerate(counts.tolist()):
                sizes[TEST if code == 0 else names[code - 1]] += count
            left -= min(left, 1 << 20)
    _check_sizes(sizes, names)
    regression = dataset.problem == "regression"
    if task.storage == ParquetShards.storage:
        return ParquetShards(tmp, sizes, dataset.input, regression=regression)
    return ArrayShards(tmp, sizes, dataset.input, numeric=task.numeric, regression=regression)


def _write_splits(dataset, destinations, shards, validator, vocabulary, selection):
    """Stream the dataset once: each example to its split's file and to the validator. Returns (the training
    splits' token counts, the number of examples); the counts are of each example's tokens, or, with a private
    `selection`, of its bounded contributions (private_vocab.py), and empty without a `vocabulary`."""
    token_counts = collections.Counter()
    progress = Progress(dataset.examples)
    try:
        for x, y in dataset.stream():
            name = next(destinations)
            shards.add(name, x, y)
            tokens = None
            if vocabulary:
                tokens = tokenize(x)
                if name != TEST:
                    token_counts.update(selection.contribution(tokens) if selection else tokens)
            validator.add(name, x, y, tokens)
            progress.step()
    finally:
        shards.close()
    if isinstance(shards, ArrayShards):
        shards.check_complete()
    progress.report()
    return token_counts, progress.count


def _write_batches(dataset, codes, shards, validator, names):
    """Stream a table's batches once (no step per example): each batch's rows to their splits' files and to
    the validator, by the destinations `codes` gives for their positions. Returns the number of examples."""
    progress = Progress(dataset.examples)
    splits = [(TEST, -1), *((name, i) for i, name in enumerate(names))]
    # the validator's work on a batch (hashes, statistics) runs in one background thread, in batch order,
    # beside the next batch's reading and writing (numpy and pyarrow release the GIL); at most 2 batches wait
    thread, pending = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="validation"), collections.deque()
    try:
        for x, y in dataset.batches():
            where = codes.take(len(y))
            parts = []
            for name, code in splits:
                mask = where == code
                if mask.any():
                    part = x.filter(mask) if hasattr(x, "filter") else x[mask]
                    shards.add_batch(name, part, y[mask])
                    parts.append((name, part, y[mask], mask))
            pending.append(thread.submit(_validate_batch, validator, x, parts))
            if len(pending) > 2:
                pending.popleft().result()
            progress.step(len(y))
        while pending:
            pending.popleft().result()
    finally:
        thread.shutdown(wait=True, cancel_futures=True)
        shards.close()
    shards.check_complete()
    progress.report()
    return progress.count


def _validate_batch(validator, x, parts):
    """One batch to the validator: its row hashes once, then each split's part (name, rows, y, mask)."""
    hashes = validator.hashes(x)
    for name, part, y, mask in parts:
        validator.add_batch(name, part, y, hashes[mask])


def _validate(tmp, shards, validator, stats_plot):
    """Run the data checks and write stats.json (and stats.png with `stats_plot`) in `tmp`: the statistics,
    whose "validation" the manifest records. A failed check raises: nothing is published."""
    stats = validator.finish(tmp, shards.storage)
    write_stats(tmp, stats, validator.values() if stats_plot else None)
    for warning in stats["validation"]["warnings"]:
        print(f"copier: warning: {warning}", file=sys.stderr)
    return stats


def _write_vocabulary(tmp, task, selection, token_counts, max_tokens, training_examples):
    """Write the vocabulary of a task that has one in `tmp`: the manifest's vocab record (None for another task)."""
    if not task.vocabulary:
        return None
    if selection:
        tokens = private_vocabulary(selection, token_counts, max_tokens, training_examples)
    else:
        # most frequent first, ties alphabetical: the same corpus always gives the same vocabulary
        tokens = [t for t, _ in sorted(token_counts.items(), key=lambda kv: (-kv[1], kv[0]))[:max_tokens]]
    with open(os.path.join(tmp, VOCAB), "w", encoding="utf-8") as fh:
        fh.write("".join(t + "\n" for t in tokens))
    return {
        "file": VOCAB,
        "sha256": sha256_file(os.path.join(tmp, VOCAB)),
        "size": len(tokens),
        **({"private": selection.record(len(tokens))} if selection else {}),
    }


def _manifest(args, dataset, task, tmp, shards, names, validator, stats, vocab):
    """The Manifest of the dataset written in `tmp`: its splits' files and their checksums, the statistics
    a model's Normalization needs, the validation's result."""

    def split_info(name):
        files = split_files(name, shards.storage)
        return SplitInfo(name, shards.counts[name], {f: sha256_file(os.path.join(tmp, f)) for f in files})

    input_spec = dict(dataset.input)
    if task.numeric:  # what a model's Normalization needs: the training shards' statistics
        input_spec["statistics"] = validator.feature_statistics()
    if is_typed(input_spec):  # the columns' types and statistics (typed_table.TableSpec), the training shards'
        input_spec = validator.table_spec().to_json()
    return Manifest(
        task=dataset.task,
        source=args.source,
        seed=args.seed,
        test_fraction=args.test_fraction,
        labels=list(dataset.labels),
        input=input_spec,
        storage=shards.storage,
        shards=[split_info(name) for name in names],
        test=split_info(TEST),
        vocab=vocab,
        skipped=[{"input": where, "reason": reason} for where, reason in dataset.skipped],
        validation={
            **stats["validation"],
            "stats": STATS,
            "plot": STATS_PLOT if args.stats_plot else None,
            "stats_sha256": sha256_file(os.path.join(tmp, STATS)),
        },
        problem=dataset.problem,
        target=dataset.target,
        target_statistics=validator.target_statistics() if dataset.problem == "regression" else None,
    )


def private_vocabulary(selection, weights, max_tokens, training_examples):
    """The tokens the private selection releases; δ >= 1/n or nothing released is an error (nothing published)."""
    # (at δ >= 1/n, releasing one example's words outright would meet the "guarantee")
    problem = delta_problem(f"--dp-vocab-delta {selection.delta:g}", selection.delta, training_examples)
    if problem:
        raise ContractError(problem)
    tokens = selection.select(weights, max_tokens)
    if not tokens:
        raise ContractError(
            f"the private vocabulary is empty: no token's noisy weight passed the threshold {selection.threshold:.1f} "
            f"(ε = {selection.epsilon:g}, {training_examples} training examples); use more data or a larger "
            "--dp-vocab-epsilon"
        )
    return tokens


def _check_sizes(counts, names):
    if counts[TEST] == 0:
        raise ContractError("the test split is empty: use more data or a larger --test-fraction")
    empty = [n for n in names if counts[n] == 0]
    if empty:
        raise ContractError(f"{len(empty)} of {len(names)} shards would be empty: use more data or fewer --n-shards")


def main(argv=None):
    args = parse_args(argv)
    out_dir, manifest = copy(args)
    sizes = ", ".join(str(s.examples) for s in manifest.shards)
    if manifest.is_regression:
        what = f"regression of {manifest.target!r}"
    else:
        what = (
            f"{len(manifest.labels)} labels ({', '.join(manifest.labels[:5])}"
            f"{', ...' if len(manifest.labels) > 5 else ''})"
        )
    inputs = task_of(manifest).describe_input(manifest.input)
    inputs = f", {inputs}" if inputs else ""
    print(
        f"copier: {manifest.train_examples} training examples in {manifest.n_shards} shards ({sizes}), "
        f"{manifest.test.examples} held out; task {manifest.task}{inputs}, {what} -> {out_dir}"
    )
    validation = manifest.validation
    ran = [name for name, result in validation["checks"].items() if result["status"] != "skipped"]
    # "warning" only when there is one: make demo's output test reads the word as a problem
    warned = f" with {len(validation['warnings'])} warning(s), above" if validation["warnings"] else ""
    if manifest.vocab and manifest.vocab.get("private"):
        private = manifest.vocab["private"]
        print(
            f"copier: differentially private vocabulary: {manifest.vocab['size']} tokens released at "
            f"ε = {private['epsilon']:g}, δ = {private['delta']:g} (at most {private['max_tokens_per_example']} "
            "distinct tokens per example)"
        )
    print(
        f"copier: data validation passed{warned} ({', '.join(ran)}); "
        f"statistics: {', '.join(os.path.join(out_dir, f) for f in (STATS, validation['plot']) if f)}"
    )
    fetched = objectstore.fetched()
    if fetched["requests"]:  # (a second read of the source would show here)
        requests = f"{fetched['requests']} GET request{'s' if fetched['requests'] != 1 else ''}"
        print(f"copier: fetched {fetched['bytes']:,} bytes from the object store in {requests}")
    return 0


def cli():
    run_cli(main)


if __name__ == "__main__":
    cli()
