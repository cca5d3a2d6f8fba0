"""disttrain as a Kubeflow Pipelines (KFP 2) pipeline: copier -> trainers -> aggregator, one container
component per stage, each running its image's own command with the flags the Helm chart passes.

    .venv-kfp/bin/python pipelines/kfp/pipeline.py                       # writes pipelines/kfp/pipeline.yaml
    .venv-kfp/bin/python pipelines/kfp/pipeline.py --registry ghcr.io/me --tag 1.0 --output my-pipeline.yaml

The stages share one working directory as in the chart: WORKDIR_ROOT/run-<pipeline run id>, on a
PersistentVolumeClaim (parameter `workdir_claim`, ReadWriteMany) mounted at `workdir_root` in every
task. The aggregator publishes to WORKDIR_ROOT/final/model.keras (the quality gate compares with the
model published there before), where a disttrain-server Deployment on the same claim serves it and
reloads each newly published model; the server is not a pipeline step.

The trainers, by `trainer_launch`:
  job      (default) an Indexed Job with a headless Service, created by a launcher task
           (trainer_job.py) that waits for it: every strategy, workers in parallel at stable
           addresses, the chart's failure handling. Needs a cluster.
  in-task  every worker one after the other in the trainer task's own container: strategy average
           only (its workers never talk to each other). This is what KFP's local runner can run.
"""

import argparse
import pathlib
import sys

from kfp import compiler, dsl, kubernetes

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from trainer_job import DROP_UNSET_OPTIONS  # noqa: E402  (the launcher's own file, embedded below)

DEFAULT_OUTPUT = HERE / "pipeline.yaml"
# The launcher's Python (a tag: pin it by digest, or point it at a mirror, with --launcher-image) and its only dependency, the official Kubernetes client, with every package it
# pulls in pinned (kubernetes 30.1.0: the release kfp 2.17 itself takes; requirements-kfp.txt), installed
# with --no-deps into the task's /tmp when the task starts.
LAUNCHER_IMAGE = "python:3.11-slim"
LAUNCHER_PACKAGES = (
    "kubernetes==30.1.0",
    "certifi==2026.10.19.post1",
    "six==1.17.0",
    "python-dateutil==4.0.0",
    "tzdata==2026.6",
    "PyYAML==6.0.4",
    "google-auth==2.63.0",
    "pyasn1_modules==0.4.2",
    "pyasn1==0.6.5",
    "cryptography==50.0.2",
    "cffi==2.1.1",
    "pycparser==3.12",
    "typing_extensions==4.16.0",
    "websocket-client==1.9.2",
    "requests==2.33.0",
    "charset-normalizer==3.5.3",
    "idna==3.20",
    "urllib3==2.8.0",
    "requests-oauthlib==2.0.0",
    "oauthlib==4.0.1",
)
LAUNCHER_SOURCE = (HERE / "trainer_job.py").read_text()

# Every stage runs as `sh -c '<drop unset options>; exec "$@"' sh PROGRAM ARGS...`, so that an option the
# pipeline leaves unset ("--flag=") is not passed at all, as the chart leaves it out.
RUN_STAGE = DROP_UNSET_OPTIONS + '; exec "$@"'
# strategy average, every worker in this container, one after the other (worker i: --worker-index i)
RUN_WORKERS_IN_TASK = DROP_UNSET_OPTIONS + (
    '; n=$1; strategy=$2; shift 2'
    '; [ "$strategy" = average ] || { echo "error: trainer_launch in-task runs the workers one after the other:'
    ' strategy average only, not $strategy (use trainer_launch job)" >&2; exit 2; }'
    '; i=0; while [ "$i" -lt "$n" ]; do echo "== worker $i of $n"; "$@" --worker-index "$i" || exit; i=$((i + 1)); done'
)


def images(registry="", tag="latest"):
    prefix = f"{registry.rstrip('/')}/" if registry else ""
    return {c: f"{prefix}disttrain-{c}:{tag}" for c in ("copier", "trainer", "aggregator")}


def run_dir(workdir_root, run_id):
    return f"{workdir_root}/run-{run_id}"


def build(image, launcher_image=LAUNCHER_IMAGE):
    """The pipeline function, with the stage images `image` (from images()) and the trainer launcher's image."""

    @dsl.container_component
    def copier(
        workdir_root: str,
        run_id: str,
        source: str,
        workers: int,
        test_fraction: float,
        data_seed: int,
        max_tokens: int,
        image_size: int,
        channels: int,
        task: str,
        label_column: str,
        problem: str,
        max_label_skew: float,
        allow_duplicates: bool,
        allow_label_skew: bool,
        allow_missing_classes: bool,
        dp_vocab_epsilon: str,
        dp_vocab_delta: str,
        dp_vocab_max_tokens_per_example: str,
    ):
        return dsl.ContainerSpec(
            image=image["copier"],
            command=["sh", "-c", RUN_STAGE, "sh", "disttrain-copier"],
            args=[
                "--source",
                source,
                "--n-shards",
                workers,
                "--workdir",
                run_dir(workdir_root, run_id),
                "--test-fraction",
                test_fraction,
                "--seed",
                data_seed,
                "--max-tokens",
                max_tokens,
                "--image-size",
                image_size,
                "--channels",
                channels,
                "--task",
                task,
                f"--label-column={label_column}",
                "--problem",
                problem,
                "--max-label-skew",
                max_label_skew,
                f"--allow-duplicates={allow_duplicates}",
                f"--allow-label-skew={allow_label_skew}",
                f"--allow-missing-classes={allow_missing_classes}",
                "--cache-dir",
                f"{workdir_root}/.cache",
                # the private vocabulary: ε and δ both or neither (the copier refuses half a set in one line)
                f"--dp-vocab-epsilon={dp_vocab_epsilon}",
                f"--dp-vocab-delta={dp_vocab_delta}",
                f"--dp-vocab-max-tokens-per-example={dp_vocab_max_tokens_per_example}",
            ],
        )

    def trainer_args(
        workdir_root,
        run_id,
        workers,
        strategy,
        epochs,
        batch,
        learning_rate,
        optimizer,
        seed,
        validation_fraction,
        model_file,
        threads,
        malloc,
        dp_l2_clip,
        dp_noise_multiplier,
        dp_delta,
    ):
        """disttrain-trainer's arguments for every strategy (the chart's, less --job/--service/--port)."""
        return [
            "--workdir",
            run_dir(workdir_root, run_id),
            "--strategy",
            strategy,
            "--epochs",
            epochs,
            "--batch",
            batch,
            f"--learning-rate={learning_rate}",
            f"--optimizer={optimizer}",
            "--seed",
            seed,
            "--workers",
            workers,
            f"--threads={threads}",
            f"--malloc={malloc}",
            f"--validation-fraction={validation_fraction}",
            f"--model-file={model_file}",
            # DP-SGD: all three or none (the trainer refuses half a set in one line)
            f"--dp-l2-clip={dp_l2_clip}",
            f"--dp-noise-multiplier={dp_noise_multiplier}",
            f"--dp-delta={dp_delta}",
        ]

    @dsl.container_component
    def trainer_in_task(
        workdir_root: str,
        run_id: str,
        workers: int,
        strategy: str,
        epochs: int,
        batch: int,
        learning_rate: str,
        optimizer: str,
        seed: int,
        validation_fraction: str,
        model_file: str,
        threads: int,
        malloc: str,
        dp_l2_clip: str,
        dp_noise_multiplier: str,
        dp_delta: str,
    ):
        return dsl.ContainerSpec(
            image=image["trainer"],
            command=["sh", "-c", RUN_WORKERS_IN_TASK, "sh", workers, strategy, "disttrain-trainer"],
            args=trainer_args(
                workdir_root,
                run_id,
                workers,
                strategy,
                epochs,
                batch,
                learning_rate,
                optimizer,
                seed,
                validation_fraction,
                model_file,
                threads,
                malloc,
                dp_l2_clip,
                dp_noise_multiplier,
                dp_delta,
            ),
        )

    @dsl.container_component
    def trainer_job(
        workdir_root: str,
        workdir_claim: str,
        run_id: str,
        workers: int,
        strategy: str,
        epochs: int,
        batch: int,
        learning_rate: str,
        sync_every: str,
        optimizer: str,
        allreduce_dtype: str,
        parameter_servers: int,
        seed: int,
        validation_fraction: str,
        model_file: str,
        trainer_port: int,
        outer_optimizer: str,
        outer_learning_rate: float,
        outer_momentum: float,
        outer_overlap: str,
        sync_at_epoch_end: bool,
        sync_batch_norm_batches: str,
        heartbeat_timeout_seconds: int,
        threads: int,
        malloc: str,
        dp_l2_clip: str,
        dp_noise_multiplier: str,
        dp_delta: str,
    ):
        install = (
            "pip install --quiet --no-cache-dir --no-deps --disable-pip-version-check --target /tmp/launcher "
            + " ".join(LAUNCHER_PACKAGES)
        )
        return dsl.ContainerSpec(
            image=launcher_image,
            command=["sh", "-c", f'{install} && PYTHONPATH=/tmp/launcher exec python3 -c "$0" "$@"', LAUNCHER_SOURCE],
            args=[
                "--name",
                f"disttrain-{run_id}",
                "--image",
                image["trainer"],
                "--port",
                trainer_port,
                "--claim",
                workdir_claim,
                "--mount",
                workdir_root,
                "--",
                *trainer_args(
                    workdir_root,
                    run_id,
                    workers,
                    strategy,
                    epochs,
                    batch,
                    learning_rate,
                    optimizer,
                    seed,
                    validation_fraction,
                    model_file,
                    threads,
                    malloc,
                    dp_l2_clip,
                    dp_noise_multiplier,
                    dp_delta,
                ),
                # the launcher keeps those of the strategy (trainer_job.STRATEGY_OPTIONS)
                f"--sync-every={sync_every}",
                f"--allreduce-dtype={allreduce_dtype}",
                f"--ps={parameter_servers}",
                f"--outer-optimizer={outer_optimizer}",
                f"--outer-lr={outer_learning_rate}",
                f"--outer-momentum={outer_momentum}",
                f"--outer-overlap={outer_overlap}",
                f"--sync-at-epoch-end={sync_at_epoch_end}",
                f"--sync-batch-norm-batches={sync_batch_norm_batches}",
                f"--heartbeat-timeout={heartbeat_timeout_seconds}",
            ],
        )

    @dsl.container_component
    def aggregator(
        workdir_root: str,
        run_id: str,
        workers: int,
        combine: str,
        exports: str,
        max_drop_vs_best_worker: float,
        max_regression: float,
        max_relative_drop_vs_best_worker: float,
        max_relative_regression: float,
        min_gain_vs_trivial: float,
        min_relative_gain_vs_trivial: float,
        force: bool,
        publish_to: str,
    ):
        workdir = run_dir(workdir_root, run_id)
        return dsl.ContainerSpec(
            image=image["aggregator"],
            command=["sh", "-c", RUN_STAGE, "sh", "disttrain-aggregator"],
            args=[
                "--workdir",
                workdir,
                "--dir",
                f"{workdir}/train",
                "--savefile",
                f"{workdir_root}/final/model.keras",
                "--expect",
                workers,
                "--combine",
                combine,
                "--exports",
                exports,
                "--max-drop-vs-best-worker",
                max_drop_vs_best_worker,
                "--max-regression",
                max_regression,
                "--max-relative-drop-vs-best-worker",
                max_relative_drop_vs_best_worker,
                "--max-relative-regression",
                max_relative_regression,
                "--min-gain-vs-trivial",
                min_gain_vs_trivial,
                "--min-relative-gain-vs-trivial",
                min_relative_gain_vs_trivial,
                f"--force={force}",
                f"--publish-to={publish_to}",
            ],
        )

    @dsl.pipeline(name="disttrain", description="copier -> trainers -> aggregator (quality gate, publish)")
    def disttrain(
        # the chart's values, by their names there
        source: str = "sample:movie-reviews",
        workers: int = 2,
        epochs: int = 5,
        batch: int = 64,
        strategy: str = "average",
        learning_rate: str = "",
        sync_every: str = "",
        outer_optimizer: str = "none",
        outer_learning_rate: float = 0.7,
        outer_momentum: float = 0.9,
        outer_overlap: str = "none",
        sync_at_epoch_end: bool = False,
        sync_batch_norm_batches: str = "",
        optimizer: str = "",
        allreduce_dtype: str = "float32",
        parameter_servers: int = 1,
        seed: int = 42,
        model_file: str = "",
        dp_l2_clip: str = "",
        dp_noise_multiplier: str = "",
        dp_delta: str = "",
        task: str = "auto",
        label_column: str = "",
        problem: str = "classification",
        test_fraction: float = 0.2,
        data_seed: int = 0,
        max_tokens: int = 20000,
        image_size: int = 32,
        channels: int = 3,
        max_label_skew: float = 0.2,
        allow_duplicates: bool = False,
        allow_label_skew: bool = False,
        allow_missing_classes: bool = False,
        dp_vocab_epsilon: str = "",
        dp_vocab_delta: str = "",
        dp_vocab_max_tokens_per_example: str = "",
        validation_fraction: str = "",
        combine: str = "average",
        exports: str = "saved_model,tflite",
        gate_max_drop_vs_best_worker: float = 1.0,
        gate_max_regression: float = 1.0,
        gate_max_relative_drop_vs_best_worker: float = 5.0,
        gate_max_relative_regression: float = 5.0,
        gate_min_gain_vs_trivial: float = 1.0,
        gate_min_relative_gain_vs_trivial: float = 1.0,
        gate_force: bool = False,
        publish_to: str = "",
        trainer_port: int = 12345,
        trainer_threads: int = 0,
        trainer_malloc: str = "tuned",
        trainer_heartbeat_timeout_seconds: int = 120,
        # where the stages meet, and how the trainers run
        workdir_root: str = "/workdir",
        workdir_claim: str = "disttrain-workdir",
        trainer_launch: str = "job",
    ):
        run_id = dsl.PIPELINE_JOB_ID_PLACEHOLDER
        data = copier(
            workdir_root=workdir_root,
            run_id=run_id,
            source=source,
            workers=workers,
            test_fraction=test_fraction,
            data_seed=data_seed,
            max_tokens=max_tokens,
            image_size=image_size,
            channels=channels,
            task=task,
            label_column=label_column,
            problem=problem,
            max_label_skew=max_label_skew,
            allow_duplicates=allow_duplicates,
            allow_label_skew=allow_label_skew,
            allow_missing_classes=allow_missing_classes,
            dp_vocab_epsilon=dp_vocab_epsilon,
            dp_vocab_delta=dp_vocab_delta,
            dp_vocab_max_tokens_per_example=dp_vocab_max_tokens_per_example,
        )
        on_volume = [data]
        training = dict(
            workdir_root=workdir_root,
            run_id=run_id,
            workers=workers,
            strategy=strategy,
            epochs=epochs,
            batch=batch,
            learning_rate=learning_rate,
            optimizer=optimizer,
            seed=seed,
            validation_fraction=validation_fraction,
            model_file=model_file,
            threads=trainer_threads,
            malloc=trainer_malloc,
            dp_l2_clip=dp_l2_clip,
            dp_noise_multiplier=dp_noise_multiplier,
            dp_delta=dp_delta,
        )

        def aggregate(after):
            # one aggregator in each branch: a task after a branch that did not run would depend on how the
            # backend treats a skipped condition
            task = aggregator(
                workdir_root=workdir_root,
                run_id=run_id,
                workers=workers,
                combine=combine,
                exports=exports,
                max_drop_vs_best_worker=gate_max_drop_vs_best_worker,
                max_regression=gate_max_regression,
                max_relative_drop_vs_best_worker=gate_max_relative_drop_vs_best_worker,
                max_relative_regression=gate_max_relative_regression,
                min_gain_vs_trivial=gate_min_gain_vs_trivial,
                min_relative_gain_vs_trivial=gate_min_relative_gain_vs_trivial,
                force=gate_force,
                publish_to=publish_to,
            ).after(after)
            on_volume.append(task)

        with dsl.If(trainer_launch == "in-task", name="trainers-in-task"):
            workers_here = trainer_in_task(**training).after(data)
            on_volume.append(workers_here)
            aggregate(workers_here)
        with dsl.Else(name="trainers-as-indexed-job"):
            aggregate(
                trainer_job(
                    workdir_claim=workdir_claim,
                    trainer_port=trainer_port,
                    sync_every=sync_every,
                    allreduce_dtype=allreduce_dtype,
                    parameter_servers=parameter_servers,
                    outer_optimizer=outer_optimizer,
                    outer_learning_rate=outer_learning_rate,
                    outer_momentum=outer_momentum,
                    outer_overlap=outer_overlap,
                    sync_at_epoch_end=sync_at_epoch_end,
                    sync_batch_norm_batches=sync_batch_norm_batches,
                    heartbeat_timeout_seconds=trainer_heartbeat_timeout_seconds,
                    **training,
                ).after(data)
            )

        for task in on_volume:
            task.set_caching_options(False)  # every stage reads and writes the shared volume, not KFP artifacts
            kubernetes.mount_pvc(task, pvc_name=workdir_claim, mount_path="/workdir")

    return disttrain


def main(argv=None):
    parser = argparse.ArgumentParser(description="Compile the disttrain pipeline to KFP's YAML (IR).")
    parser.add_argument("--registry", default="", help="the registry (and path) of the images, e.g. ghcr.io/me")
    parser.add_argument("--tag", default="latest", help="the images' tag (default latest)")
    parser.add_argument(
        "--launcher-image",
        default=LAUNCHER_IMAGE,
        help=f"a Python 3 image for the trainer launcher task (default {LAUNCHER_IMAGE}), e.g. by digest",
    )
    parser.add_argument("--output", default=str(DEFAULT_OUTPUT), help=f"default {DEFAULT_OUTPUT.name} beside this file")
    args = parser.parse_args(argv)
    compiler.Compiler().compile(build(images(args.registry, args.tag), args.launcher_image), args.output)


if __name__ == "__main__":
    main()
