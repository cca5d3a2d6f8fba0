"""Run a translated release (cluster_plan.Release) with Docker, as one node's kubelet plus the Job
and Deployment controllers would: real images, real containers, one network per release.

* A pod is a "pause" container holding the pod's network namespace, hostname and DNS names,
  plus its init containers (one after the other, each to completion) and then its containers,
  all joined to that namespace (``network_mode=container:<pause>``) as in Kubernetes.
* DNS: the release network's embedded DNS serves ``<hostname>.<subdomain>.<ns>.svc.<domain>``
  (a pod of a headless Service) and ``<service>.<ns>.svc.<domain>``; every pod gets Kubernetes'
  search path (``<ns>.svc.<domain> svc.<domain> <domain>``, ndots 5), so ``<job>-0.<service>``
  resolves the way it does in a cluster.
* Volumes: each claim is one host directory shared by every pod (group fsGroup, setgid, as the
  kubelet prepares it); an emptyDir is a tmpfs volume of the pod with its sizeLimit; a Secret or
  a ConfigMap is a read-only directory of files (its keys, or its items' paths, with defaultMode).
  The termination-message file is mounted at terminationMessagePath in every container and read
  when it ends.
* A ClusterIP/LoadBalancer/NodePort Service is a small proxy container (cluster_proxy.py) that
  carries the Service's DNS name and forwards to the ready endpoints; its ports are published
  on 127.0.0.1. Readiness comes from the containers' probes.
* Jobs: Indexed Jobs get one pod per index (hostname <job>-<i>, JOB_COMPLETION_INDEX, the index
  label and annotation); failed pods are replaced as backoffLimit / backoffLimitPerIndex /
  maxFailedIndexes / podFailurePolicy say, after the controller's backoff (10 s, doubling),
  and only once the failed pod is gone; activeDeadlineSeconds and ttlSecondsAfterFinished hold.
* NetworkPolicy (Ingress: podSelector peers or any source, TCP ports; policies add up) is
  enforced with iptables rules on the release's bridge in the DOCKER-USER chain (needs root and
  br_netfilter; removed on close). Egress rules and peers outside the release are documented no-ops.
* Servers outside the release (`Outside`: an object store in another namespace) are containers on
  the release network with DNS names of their own, started before any pod; their port is
  published on 127.0.0.1 for the test.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import pathlib
import random
import re
import shutil
import socket
import ssl
import string
import subprocess
import threading
import time
import urllib.error
import urllib.request

import docker
import docker.errors
import docker.types
import requests

from cluster_plan import Job, PodTemplate, Release, network_policy_rules, selector_matches

PROXY = pathlib.Path(__file__).with_name("cluster_proxy.py")
BACKOFF_BASE = 10.0  # the Job controller's pod-failure backoff: 10 s, 20 s, 40 s ... (max 6 min)
MESSAGE_LIMIT = 4096  # bytes of a termination message the kubelet keeps
FALLBACK_LINES, FALLBACK_BYTES = 80, 2048  # FallbackToLogsOnError: the last 80 lines / 2 KiB of the log


def suffix(n=5):
    return "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(n))


@dataclasses.dataclass(frozen=True)
class Outside:
    """A server outside the release that its pods reach by DNS name, as they would a store or a
    database in another namespace of a cluster: one container on the release network."""

    name: str
    image: str
    args: tuple  # after the image's ENTRYPOINT
    aliases: tuple  # its DNS names on the release network, e.g. seaweedfs.storage.svc.cluster.local
    port: int  # its HTTP port: published on 127.0.0.1; it is ready once it answers there
    tls: bool = False  # it speaks https there (readiness only asks for an answer, not a trusted certificate)
    files: tuple = ()  # (path in the container, host file): mounted read-only
    scratch: tuple = ()  # writable paths in the container (its data, /tmp): empty tmpfs mounts; the root is read-only


@dataclasses.dataclass
class ContainerStatus:
    name: str
    exit_code: int | None = None
    reason: str = ""
    message: str = ""  # the termination message, as `kubectl describe pod` shows it
    restarts: int = 0
    logs: str = ""


class Pod:
    """One pod instance: pause + init containers + containers, run in a thread."""

    def __init__(self, cluster, template: PodTemplate, name, hostname, labels, annotations, extra_env=None):
        self.cluster, self.template, self.name, self.hostname = cluster, template, name, hostname
        self.labels, self.annotations = labels, annotations
        self.extra_env = extra_env or {}
        self.phase = "Pending"
        self.ready = False
        self.ip = None
        self.statuses: dict[str, ContainerStatus] = {}
        self.containers = {}  # name -> docker container
        self.created = {}  # name -> the container's inspect data at creation
        self.pause = None
        self.volumes = []
        self.deleted = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.dir = cluster.root / "pods" / name
        self.dir.mkdir(parents=True)

    # -------------------------------------------------------------------- life cycle
    def start(self):
        self.thread.start()
        return self

    def _run(self):
        try:
            self._start_sandbox()
            self.phase = "Running"
            for spec in self.template.init_containers:
                while True:
                    status = self._run_to_completion(spec)
                    if status.exit_code == 0 or self.deleted.is_set():
                        break
                    if self.template.restart_policy == "Never":
                        self.phase = "Failed"
                        return
                    self._sleep_backoff(status.restarts)  # Always: the kubelet retries the init container
                if self.deleted.is_set():
                    self.phase = "Failed"
                    return
            started = {spec.name: self._create(spec) for spec in self.template.containers}
            for container in started.values():
                container.start()
            self.cluster.event(f"pod {self.name}: started {', '.join(started)}")
            prober = threading.Thread(target=self._probe_loop, daemon=True)
            prober.start()
            results = [
                threading.Thread(target=self._supervise, args=(spec,), daemon=True) for spec in self.template.containers
            ]
            for t in results:
                t.start()
            for t in results:
                t.join()
            codes = [self.statuses[s.name].exit_code for s in self.template.containers]
            self.phase = "Succeeded" if all(c == 0 for c in codes) else "Failed"
        except Exception as err:  # a harness or Docker error: the pod fails visibly, never silently
            self.phase = "Failed"
            self.statuses.setdefault("<harness>", ContainerStatus("<harness>", -1, "HarnessError", str(err)))
            self.cluster.event(f"pod {self.name}: harness error: {err}")
        finally:
            self.ready = False
            self.cluster.pod_changed(self)
            self._teardown()
            self.done.set()

    def _start_sandbox(self):
        c = self.cluster
        aliases = c.dns_names(self)
        first = (self.template.init_containers + self.template.containers)[0]
        self._prepare_volumes()
        # The pause container also mounts the pod's emptyDirs: a tmpfs volume is unmounted (and
        # emptied) when no container uses it, and an emptyDir lives as long as its pod.
        keep = [
            docker.types.Mount(f"/.pod-volumes/{name}", source, type="volume")
            for name, (kind, source) in self.mounts.items()
            if kind == "volume"
        ]
        self.pause = c.client.containers.run(
            first.image,
            entrypoint=["sleep", "infinity"],
            command=[],
            name=f"{c.prefix}-{self.name}",
            hostname=self.hostname,
            detach=True,
            network=c.network.name,
            user="65535:65535",
            read_only=True,
            cap_drop=["ALL"],
            mem_limit="32m",
            dns_search=[
                f"{c.release.namespace}.svc.{c.release.cluster_domain}",
                f"svc.{c.release.cluster_domain}",
                c.release.cluster_domain,
            ],
            dns_opt=["ndots:5"],
            labels=c.labels(pod=self.name, role="pause"),
            healthcheck={"test": ["NONE"]},
            networking_config={c.network.name: c.client.api.create_endpoint_config(aliases=aliases or None)},
            mounts=keep,
        )
        self.pause.reload()
        self.ip = self.pause.attrs["NetworkSettings"]["Networks"][c.network.name]["IPAddress"]
        c.event(f"pod {self.name}: scheduled, IP {self.ip}" + (f", DNS {', '.join(aliases)}" if aliases else ""))
        c.pod_changed(self)  # headless names are published before the pod is ready

    def _prepare_volumes(self):
        c = self.cluster
        self.mounts = {}
        for v in self.template.volumes.values():
            if v.kind == "claim":
                path = c.claim_dir(v.claim, self.template)
                self.mounts[v.name] = ("bind", str(path))
            elif v.kind == "emptyDir":
                opts = "mode=1777" + (f",size={v.size_limit}" if v.size_limit else "")
                vol = c.client.volumes.create(
                    name=f"{c.prefix}-{self.name}-{v.name}",
                    driver="local",
                    driver_opts={"type": "tmpfs", "device": "tmpfs", "o": opts},
                    labels=c.labels(pod=self.name),
                )
                self.volumes.append(vol)
                self.mounts[v.name] = ("volume", vol.name)
            elif v.kind in ("secret", "configMap"):
                # a read-only directory of the object's files (Kubernetes adds ..data symlinks: not needed here)
                path = self.dir / ("secrets" if v.kind == "secret" else "configmaps") / v.name
                path.mkdir(parents=True)
                objects = c.release.secrets if v.kind == "secret" else c.release.config_maps
                write_volume_files(path, v, objects.get(v.secret, {}), self.template.fs_group)
                self.mounts[v.name] = ("bind", str(path))

    def _create(self, spec):
        c = self.cluster
        status = self.statuses.get(spec.name) or ContainerStatus(spec.name)
        self.statuses[spec.name] = status
        env = c.resolve_env(self, spec)
        log = self.dir / f"{spec.name}.termination-log"
        log.write_bytes(b"")
        os.chmod(log, 0o666)
        mounts = [docker.types.Mount(spec.termination_message_path, str(log), type="bind")]
        for m in spec.mounts:
            kind, source = self.mounts[m.volume]
            if m.sub_path:
                if kind != "bind":
                    raise RuntimeError(f"{spec.name}: subPath on an emptyDir is not run")
                source = os.path.join(source, m.sub_path)
                os.makedirs(source, exist_ok=True)
            mounts.append(docker.types.Mount(m.path, source, type=kind, read_only=m.read_only))
        user = None
        if spec.user is not None or spec.group is not None:
            image_user = c.image_user(spec.image)
            user = f"{spec.user if spec.user is not None else image_user[0]}:{spec.group if spec.group is not None else image_user[1]}"
        if spec.run_as_non_root:
            uid = spec.user if spec.user is not None else c.image_user(spec.image)[0]
            if not str(uid).isdigit() or int(uid) == 0:
                raise RuntimeError(
                    f"{spec.name}: runAsNonRoot but the image's user is {uid!r} (CreateContainerConfigError)"
                )
        security = ["no-new-privileges:true"] if spec.no_new_privileges else []
        if spec.seccomp == "Unconfined":
            security.append("seccomp=unconfined")
        container = c.client.containers.create(
            spec.image,
            entrypoint=c.expand(spec.command, env) if spec.command is not None else None,
            command=c.expand(spec.args, env) if spec.args is not None else ([] if spec.command is not None else None),
            name=f"{c.prefix}-{self.name}-{spec.name}",
            environment=env,
            user=user,
            group_add=[str(g) for g in spec.supplementary_groups] or None,
            read_only=spec.read_only_root,
            privileged=spec.privileged,
            cap_drop=spec.cap_drop or None,
            cap_add=spec.cap_add or None,
            security_opt=security or None,
            nano_cpus=spec.nano_cpus,
            mem_limit=spec.memory_limit,
            memswap_limit=spec.memory_limit,
            cpu_shares=spec.cpu_shares,
            mem_reservation=spec.memory_reservation,
            mounts=mounts,
            network_mode=f"container:{self.pause.id}",
            working_dir=spec.working_dir,
            labels=c.labels(pod=self.name, container=spec.name),
            healthcheck={"test": ["NONE"]},  # Kubernetes ignores HEALTHCHECK
            runtime=self.template.runtime,
            stop_signal="SIGTERM",
        )
        self.containers[spec.name] = container
        self.created[spec.name] = container.attrs  # what Docker was asked to run (tests inspect it)
        return container

    def _finish(self, spec, container, result, restartable=False):
        """Record how a container ended: exit code, reason, termination message, logs
        (a container restarted in place keeps one log; an init container's retries are new containers)."""
        status = self.statuses[spec.name]
        container.reload()
        state = container.attrs["State"]
        status.exit_code = int(result["StatusCode"]) if result else int(state["ExitCode"])
        status.reason = "OOMKilled" if state.get("OOMKilled") else ("Completed" if status.exit_code == 0 else "Error")
        logs = container.logs(stdout=True, stderr=True).decode(errors="replace")
        status.logs = logs if restartable else status.logs + logs
        (self.dir / f"{spec.name}.log").write_text(status.logs)
        message = (self.dir / f"{spec.name}.termination-log").read_bytes()[:MESSAGE_LIMIT].decode(errors="replace")
        if not message.strip() and spec.termination_message_policy == "FallbackToLogsOnError" and status.exit_code != 0:
            message = "\n".join(logs.splitlines()[-FALLBACK_LINES:])[-FALLBACK_BYTES:]
        status.message = message.strip()
        self.cluster.event(
            f"pod {self.name}: container {spec.name} exited {status.exit_code} ({status.reason})"
            + (f": {status.message.splitlines()[-1][:200]}" if status.message and status.exit_code else "")
        )
        return status

    def _wait(self, container):
        while True:
            try:
                return container.wait(timeout=2)
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                if self.deleted.is_set():
                    try:
                        container.stop(timeout=int(self.template.grace_seconds))
                    except docker.errors.APIError:
                        pass

    def _run_to_completion(self, spec):
        container = self._create(spec)
        container.start()
        status = self._finish(spec, container, self._wait(container))
        container.remove(force=True)
        return status

    def _supervise(self, spec):
        """Wait for a container; restartPolicy Always restarts it (with the kubelet's backoff)."""
        container = self.containers[spec.name]
        while True:
            status = self._finish(spec, container, self._wait(container), restartable=True)
            if self.template.restart_policy == "Never" or self.deleted.is_set():
                return
            if self.template.restart_policy == "OnFailure" and status.exit_code == 0:
                return
            self._sleep_backoff(status.restarts)
            if self.deleted.is_set():
                return
            status.restarts += 1
            container.start()
            self.cluster.event(f"pod {self.name}: restarted {spec.name} (restart {status.restarts})")

    def _sleep_backoff(self, restarts):
        self.deleted.wait(min(300.0, self.cluster.backoff_base * 2**restarts))

    # -------------------------------------------------------------------- probes
    def _probe_loop(self):
        """startupProbe gates the others; readiness sets Ready (Service endpoints); liveness restarts.
        A container without a readiness probe is ready while it runs, as in Kubernetes."""
        specs = self.template.containers
        state = {
            spec.name: {"started": spec.startup is None, "ready": False, "fails": {}, "next": {}} for spec in specs
        }
        t0 = time.monotonic()
        while not self.deleted.is_set() and not self.done.is_set():
            if self.template.restart_policy == "Never" and all(
                self.statuses[s.name].exit_code is not None for s in specs
            ):
                break
            now = time.monotonic()
            ready_all = True
            for spec in specs:
                st = state[spec.name]
                if not self._running(spec.name):
                    ready_all, st["started"], st["ready"] = False, spec.startup is None, False
                    continue
                if not st["started"]:
                    if self._due(st, "startup", spec.startup, now, t0):
                        if self._check(spec, spec.startup):
                            st["started"] = True
                        elif self._failed(st, "startup", spec.startup):
                            self._restart(spec, "startup probe failed")
                    ready_all = False
                    continue
                if spec.liveness and self._due(st, "liveness", spec.liveness, now, t0):
                    if self._check(spec, spec.liveness):
                        st["fails"]["liveness"] = 0
                    elif self._failed(st, "liveness", spec.liveness):
                        self._restart(spec, "liveness probe failed")
                if spec.readiness is None:
                    st["ready"] = True
                elif self._due(st, "readiness", spec.readiness, now, t0):
                    if self._check(spec, spec.readiness):
                        st["ready"], st["fails"]["readiness"] = True, 0
                    elif self._failed(st, "readiness", spec.readiness):
                        st["ready"] = False
                ready_all = ready_all and st["ready"]
            if ready_all != self.ready:
                self.ready = ready_all
                self.cluster.event(f"pod {self.name}: {'Ready' if ready_all else 'not ready'}")
                self.cluster.pod_changed(self)
            self.deleted.wait(0.5)

    def _running(self, name):
        status = self.statuses.get(name)
        if status is None:
            return False
        try:
            self.containers[name].reload()
            return self.containers[name].attrs["State"]["Running"]
        except docker.errors.NotFound:
            return False

    @staticmethod
    def _due(st, kind, probe, now, t0):
        if now - t0 < probe.initial_delay:
            return False
        if now >= st["next"].get(kind, 0):
            st["next"][kind] = now + probe.period
            return True
        return False

    @staticmethod
    def _failed(st, kind, probe):
        st["fails"][kind] = st["fails"].get(kind, 0) + 1
        return st["fails"][kind] >= probe.failure_threshold

    def _check(self, spec, probe):
        port = probe.port
        if isinstance(port, str) and not port.isdigit():
            if port not in spec.ports:
                self.cluster.event(f"pod {self.name}: probe port {port!r} is not a port of {spec.name}")
                return False
            port = spec.ports[port]
        if probe.kind == "httpGet":
            try:
                with urllib.request.urlopen(f"http://{self.ip}:{port}{probe.path}", timeout=probe.timeout) as r:
                    return 200 <= r.status < 400
            except (urllib.error.URLError, OSError, ValueError):
                return False
        if probe.kind == "tcpSocket":
            try:
                socket.create_connection((self.ip, int(port)), timeout=probe.timeout).close()
                return True
            except OSError:
                return False
        result = self.containers[spec.name].exec_run(probe.command)
        return result.exit_code == 0

    def _restart(self, spec, why):
        self.cluster.event(f"pod {self.name}: {why}: killing {spec.name}")
        try:
            self.containers[spec.name].kill()
        except docker.errors.APIError:
            pass

    # -------------------------------------------------------------------- end
    def delete(self):
        """Stop the pod (SIGTERM, then SIGKILL after the grace period), as `kubectl delete pod` does."""
        self.deleted.set()
        for container in list(self.containers.values()):
            try:
                container.stop(timeout=int(self.template.grace_seconds))
            except docker.errors.APIError:
                pass

    def _teardown(self):
        for container in list(self.containers.values()) + ([self.pause] if self.pause else []):
            try:
                container.remove(force=True)
            except docker.errors.APIError:
                pass
        for vol in self.volumes:
            try:
                vol.remove(force=True)
            except docker.errors.APIError:
                pass
        self.cluster.pod_changed(self)

    def kill(self, container, signal="SIGKILL"):
        self.containers[container].kill(signal=signal)

    def logs(self, container):
        """The container's log so far (`kubectl logs`): live while it runs, kept once it ended."""
        status = self.statuses.get(container)
        if status is None:
            return ""
        if status.exit_code is None and container in self.containers:
            try:
                return self.containers[container].logs().decode(errors="replace")
            except docker.errors.APIError:
                pass
        return status.logs


@dataclasses.dataclass
class JobStatus:
    name: str
    state: str = "Running"  # Running | Complete | Failed
    reason: str = ""
    failures: dict = dataclasses.field(default_factory=dict)  # index -> failed pods counted
    ignored: int = 0
    pods: list = dataclasses.field(default_factory=list)  # every pod ever created, in order
    finished_at: float | None = None


class JobController:
    def __init__(self, cluster, job: Job):
        self.cluster, self.job = cluster, job
        self.status = JobStatus(job.name)
        self.active: dict[int, Pod] = {}
        self.thread = threading.Thread(target=self._run, name=f"job-{job.name}", daemon=True)
        self.stop = threading.Event()

    def _new_pod(self, index):
        job, t = self.job, self.job.template
        labels = {
            **t.labels,
            "batch.kubernetes.io/job-name": job.name,
            "job-name": job.name,
            "batch.kubernetes.io/controller-uid": self.cluster.uid,
            "controller-uid": self.cluster.uid,
        }
        annotations = dict(t.annotations)
        extra = {}
        if job.indexed:
            name = f"{job.name}-{index}-{suffix()}"
            hostname = t.hostname or f"{job.name}-{index}"
            labels["batch.kubernetes.io/job-completion-index"] = str(index)
            annotations["batch.kubernetes.io/job-completion-index"] = str(index)
            extra["JOB_COMPLETION_INDEX"] = str(index)
        else:
            name = f"{job.name}-{suffix()}"
            hostname = t.hostname or name
        pod = Pod(self.cluster, t, name, hostname[:63], labels, annotations, extra)
        self.status.pods.append(pod)
        return pod.start()

    def _run(self):
        job, status = self.job, self.status
        started = time.monotonic()
        todo = list(range(job.completions)) if job.indexed else [0]
        succeeded, failed_indexes, not_before = set(), set(), {}
        total_failures = 0
        try:
            while not self.stop.is_set():
                now = time.monotonic()
                if job.active_deadline is not None and now - started > job.active_deadline:
                    return self._fail("DeadlineExceeded", f"active for more than {job.active_deadline:g}s")
                for index, pod in list(self.active.items()):
                    if not pod.done.is_set():
                        continue
                    del self.active[index]
                    if pod.phase == "Succeeded":
                        succeeded.add(index)
                        continue
                    codes = {n: s.exit_code for n, s in pod.statuses.items() if s.exit_code not in (0, None)}
                    rule = next((r for r in job.failure_rules if r.matches(codes)), None)
                    action = rule.action if rule else "Count"
                    self.cluster.event(
                        f"job {job.name}: pod {pod.name} failed (exit codes {codes}); podFailurePolicy: "
                        + (f"{action} (rule {job.failure_rules.index(rule)})" if rule else "no rule matches: Count")
                    )
                    if action == "FailJob":
                        return self._fail(
                            "PodFailurePolicy", f"container exit codes {codes} of pod {pod.name} matched a FailJob rule"
                        )
                    if action == "Ignore":
                        status.ignored += 1
                        todo.append(index)
                        continue
                    status.failures[index] = status.failures.get(index, 0) + 1
                    total_failures += 1
                    if job.backoff_limit_per_index is not None:
                        if action == "FailIndex" or status.failures[index] > job.backoff_limit_per_index:
                            failed_indexes.add(index)
                            self.cluster.event(
                                f"job {job.name}: index {index} failed"
                                + (
                                    ""
                                    if action == "FailIndex"
                                    else f" ({status.failures[index]} failures > backoffLimitPerIndex {job.backoff_limit_per_index})"
                                )
                            )
                            if job.max_failed_indexes is not None and len(failed_indexes) > job.max_failed_indexes:
                                return self._fail(
                                    "MaxFailedIndexesExceeded", f"failed indexes {sorted(failed_indexes)}"
                                )
                            continue
                        delay = self._backoff(status.failures[index])
                    else:
                        if total_failures > job.backoff_limit:
                            return self._fail(
                                "BackoffLimitExceeded",
                                f"{total_failures} failed pods > backoffLimit {job.backoff_limit}",
                            )
                        delay = self._backoff(total_failures)
                    not_before[index] = time.monotonic() + delay
                    self.cluster.event(
                        f"job {job.name}: index {index} replaced in {delay:g}s "
                        f"(failure {status.failures[index]}"
                        + (
                            f" of backoffLimitPerIndex {job.backoff_limit_per_index})"
                            if job.backoff_limit_per_index is not None
                            else f", {total_failures} of backoffLimit {job.backoff_limit})"
                        )
                    )
                    todo.append(index)
                if len(succeeded) == (job.completions if job.indexed else 1):
                    status.state, status.finished_at = "Complete", time.monotonic()
                    self.cluster.event(f"job {job.name}: Complete")
                    return
                if failed_indexes and not self.active and not [i for i in todo if i not in failed_indexes]:
                    return self._fail("FailedIndexes", f"failed indexes {sorted(failed_indexes)}")
                for index in sorted(set(todo)):
                    if len(self.active) >= job.parallelism:
                        break
                    if index in self.active or index in succeeded or index in failed_indexes:
                        todo.remove(index)
                        continue
                    if time.monotonic() < not_before.get(index, 0):
                        continue
                    todo.remove(index)
                    self.active[index] = self._new_pod(index)
                self.stop.wait(0.2)
        except Exception as err:
            self._fail("HarnessError", repr(err))

    def _backoff(self, failures):
        return min(360.0, self.cluster.backoff_base * 2 ** (failures - 1))

    def _fail(self, reason, detail):
        self.status.state, self.status.reason, self.status.finished_at = (
            "Failed",
            f"{reason}: {detail}",
            time.monotonic(),
        )
        self.cluster.event(f"job {self.job.name}: Failed ({reason}: {detail})")
        for pod in self.active.values():
            pod.delete()


class Cluster:
    """A running release. Use as a context manager; everything it creates carries its prefix."""

    def __init__(self, release: Release, root, prefix, backoff_base=BACKOFF_BASE, log=print, outside=()):
        self.release, self.root, self.prefix = release, pathlib.Path(root), prefix
        self.outside = list(outside)
        self.outside_ports = {}  # name -> the host port its port is published on
        self.uid = prefix
        self.backoff_base = backoff_base
        self.log = log
        self.client = docker.from_env(timeout=300, max_pool_size=64)
        self.events: list[tuple[float, str]] = []
        self.lock = threading.RLock()
        self.jobs: dict[str, JobController] = {}
        self.deployments: dict[str, list[Pod]] = {}
        self.proxies = {}  # service name -> (container, {port: host port}, endpoints dir)
        self.test_pods: list[Pod] = []
        self.network = None
        self.iptables_rules = []
        self.started = time.monotonic()
        self._image_users = {}
        self._claims_prepared = set()

    # -------------------------------------------------------------------- bookkeeping
    def labels(self, **extra):
        return {"dtc.harness": self.prefix, **{f"dtc.{k}": v for k, v in extra.items()}}

    def event(self, text):
        with self.lock:
            self.events.append((time.monotonic() - self.started, text))
        self.log(f"[{time.monotonic() - self.started:6.1f}s] {text}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -------------------------------------------------------------------- start
    def start(self, only=None, before_pods=None):
        """Create the network, the outside servers, Services, then every Job and Deployment at once
        (helm install). only: names of the Jobs/Deployments to create (a test of one stage); default
        all. before_pods(cluster): called once the outside servers are ready, before any pod (e.g. to
        put a run's data into its store)."""
        for image in self.images() + [o.image for o in self.outside]:
            try:
                self.client.images.get(image)
            except docker.errors.ImageNotFound:
                raise RuntimeError(
                    f"image {image} is not in the local store and the harness never pulls (make images)"
                ) from None
        (self.root / "claims").mkdir(parents=True, exist_ok=True)
        (self.root / "pods").mkdir(parents=True, exist_ok=True)
        self.network = self.client.networks.create(f"{self.prefix}-net", driver="bridge", labels=self.labels())
        for server in self.outside:
            self._start_outside(server)
        if before_pods is not None:
            before_pods(self)
        for service in self.release.services:
            if not service.headless:
                self._start_proxy(service)
        self._apply_network_policies()
        for job in self.release.jobs:
            if only is None or job.name in only:
                controller = JobController(self, job)
                self.jobs[job.name] = controller
                controller.thread.start()
        for dep in self.release.deployments:
            if only is not None and dep.name not in only:
                continue
            pods = []
            for _ in range(dep.replicas):
                name = f"{dep.name}-{self.uid[-10:].lower().replace('_', '')}-{suffix()}"
                pods.append(
                    Pod(
                        self,
                        dep.template,
                        name,
                        name[:63],
                        {**dep.template.labels, "pod-template-hash": self.uid[-10:]},
                        dict(dep.template.annotations),
                    ).start()
                )
            self.deployments[dep.name] = pods
        self.event(
            f"release started: {len(self.jobs)} Job(s), {len(self.deployments)} Deployment(s), "
            f"{len(self.proxies)} published Service(s)"
        )
        return self

    def images(self):
        templates = (
            [j.template for j in self.release.jobs]
            + [d.template for d in self.release.deployments]
            + self.release.test_pods
        )
        return sorted({c.image for t in templates for c in t.init_containers + t.containers})

    def image_user(self, image):
        if image not in self._image_users:
            user = self.client.images.get(image).attrs["Config"].get("User") or "0"
            uid, _, gid = user.partition(":")
            self._image_users[image] = (uid or "0", gid or (uid if uid.isdigit() else "0"))
        return self._image_users[image]

    def claim_dir(self, claim, template):
        """The claim's host directory, prepared for the pod's fsGroup as the kubelet does."""
        path = self.root / "claims" / claim
        with self.lock:
            path.mkdir(exist_ok=True)
            gid = template.fs_group
            if gid is not None:
                st = path.stat()
                mismatch = st.st_gid != gid or (st.st_mode & 0o2070) != 0o2070
                if template.fs_group_change_policy == "Always" or mismatch:
                    for p in [path, *path.rglob("*")]:
                        os.lchown(p, -1, gid)
                        if not p.is_symlink():
                            mode = p.stat().st_mode
                            os.chmod(p, mode | 0o060 | (0o2010 if p.is_dir() else 0))
        return path

    def resolve_env(self, pod, spec):
        env = {}
        if pod.template.owner.startswith("Job/") and pod.extra_env.get("JOB_COMPLETION_INDEX") is not None:
            env["JOB_COMPLETION_INDEX"] = pod.extra_env["JOB_COMPLETION_INDEX"]
        for e in spec.env:
            if e.field_path:
                env[e.name] = self.field(pod, e.field_path)
            elif e.secret:
                name, key, optional = e.secret
                data = self.release.secrets.get(name, {})
                if key not in data:
                    if optional:
                        continue
                    raise RuntimeError(
                        f"{spec.name}: env {e.name}: Secret {name} has no key {key!r} (CreateContainerConfigError)"
                    )
                env[e.name] = data[key].decode()
            else:
                env[e.name] = self.expand([e.value], env)[0]
        return env

    def field(self, pod, path):
        simple = {
            "metadata.name": pod.name,
            "metadata.namespace": self.release.namespace,
            "metadata.uid": pod.name,
            "spec.nodeName": "harness-node",
            "spec.serviceAccountName": "",
            "status.podIP": pod.ip or "",
            "status.podIPs": pod.ip or "",
            "status.hostIP": self.gateway(),
            "status.hostIPs": self.gateway(),
        }
        if path in simple:
            return simple[path]
        match = re.match(r"^metadata\.(labels|annotations)\['([^']+)'\]$", path)
        source = pod.labels if match.group(1) == "labels" else pod.annotations
        return source.get(match.group(2), "")

    def gateway(self):
        self.network.reload()
        return self.network.attrs["IPAM"]["Config"][0].get("Gateway", "")

    @staticmethod
    def expand(values, env):
        """Kubernetes' $(VAR) expansion in command, args and env values ($$ escapes)."""

        def one(text):
            return re.sub(
                r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
                text,
            )

        return [one(str(v)) for v in values]

    # -------------------------------------------------------------------- servers outside the release
    def _start_outside(self, server, timeout=60):
        mounts = [docker.types.Mount(path, str(host), type="bind", read_only=True) for path, host in server.files]
        container = self.client.containers.run(
            server.image,
            command=list(server.args),
            name=f"{self.prefix}-outside-{server.name}",
            detach=True,
            network=self.network.name,
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges:true"],
            networking_config={self.network.name: self.client.api.create_endpoint_config(aliases=list(server.aliases))},
            ports={f"{server.port}/tcp": ("127.0.0.1", None)},
            mounts=mounts,
            tmpfs={path: "mode=1777" for path in server.scratch},
            labels=self.labels(outside=server.name),
            healthcheck={"test": ["NONE"]},
        )
        container.reload()
        host_port = int(container.attrs["NetworkSettings"]["Ports"][f"{server.port}/tcp"][0]["HostPort"])
        deadline = time.monotonic() + timeout
        while True:
            container.reload()
            if container.status != "running":
                raise RuntimeError(
                    f"outside server {server.name} exited: {container.logs()[-2000:].decode(errors='replace')}"
                )
            try:  # any HTTP answer (an S3 gateway's 403 too): Docker's port proxy accepts connections before the server does
                context = ssl._create_unverified_context() if server.tls else None
                urllib.request.urlopen(self.outside_url(server.name, host_port), timeout=2, context=context).close()
                break
            except urllib.error.HTTPError:
                break
            except (OSError, http.client.HTTPException):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"outside server {server.name} did not accept connections on port {server.port} "
                        f"within {timeout}s: {container.logs()[-2000:].decode(errors='replace')}"
                    ) from None
                time.sleep(0.3)
        self.outside_ports[server.name] = host_port
        self.event(
            f"outside server {server.name}: {', '.join(server.aliases)}:{server.port}, published on 127.0.0.1:{host_port}"
        )

    def outside_url(self, name, port=None):
        """The server's URL on 127.0.0.1 (http or https, as it speaks)."""
        server = next(o for o in self.outside if o.name == name)
        return f"{'https' if server.tls else 'http'}://127.0.0.1:{port or self.outside_ports[name]}"

    # -------------------------------------------------------------------- DNS and Services
    def dns_names(self, pod):
        ns, domain = self.release.namespace, self.release.cluster_domain
        names = []
        for service in self.release.services:
            if service.headless and selector_matches(service.selector, pod.labels):
                names.append(f"{service.name}.{ns}.svc.{domain}")
                if pod.template.subdomain == service.name:
                    names.append(f"{pod.hostname}.{service.name}.{ns}.svc.{domain}")
        return names

    def _start_proxy(self, service):
        ns, domain = self.release.namespace, self.release.cluster_domain
        endpoints = self.root / "endpoints" / service.name
        endpoints.mkdir(parents=True)
        for p in service.ports:
            (endpoints / f"{p.port}.json").write_text("[]")
        image = self._backend_image(service)
        container = self.client.containers.create(
            image,
            entrypoint=["python3", "/proxy/cluster_proxy.py", "/endpoints"] + [str(p.port) for p in service.ports],
            command=[],
            name=f"{self.prefix}-svc-{service.name}",
            user="0:0",
            read_only=True,
            cap_drop=["ALL"],
            cap_add=["NET_BIND_SERVICE"],
            labels=self.labels(service=service.name),
            healthcheck={"test": ["NONE"]},
            mounts=[
                docker.types.Mount("/proxy/cluster_proxy.py", str(PROXY), type="bind", read_only=True),
                docker.types.Mount("/endpoints", str(endpoints), type="bind", read_only=True),
            ],
            ports={f"{p.port}/tcp": ("127.0.0.1", None) for p in service.ports},
            network=self.network.name,
            networking_config={
                self.network.name: self.client.api.create_endpoint_config(aliases=[f"{service.name}.{ns}.svc.{domain}"])
            },
            mem_limit="64m",
        )
        container.start()
        container.reload()
        published = {
            p.port: int(container.attrs["NetworkSettings"]["Ports"][f"{p.port}/tcp"][0]["HostPort"])
            for p in service.ports
        }
        self.proxies[service.name] = (container, published, endpoints)
        self.event(
            f"service {service.name} ({service.type}): {service.name}.{ns}.svc.{domain}, published on "
            + ", ".join(f"127.0.0.1:{h} (port {p})" for p, h in published.items())
        )

    def _backend_image(self, service):
        for template in [d.template for d in self.release.deployments] + [j.template for j in self.release.jobs]:
            if selector_matches(service.selector, template.labels):
                return template.containers[0].image
        return self.images()[0]

    def service_url(self, service, port=None):
        _, published, _ = self.proxies[service]
        port = port or next(iter(published))
        return f"http://127.0.0.1:{published[port]}"

    def all_pods(self):
        pods = [p for c in self.jobs.values() for p in c.status.pods]
        return pods + [p for ps in self.deployments.values() for p in ps] + self.test_pods

    def pod_changed(self, _pod):
        """Rewrite the endpoints of every proxied Service (ready pods only) and the network policy rules."""
        with self.lock:
            live = [p for p in self.all_pods() if p.ip and not p.done.is_set()]
            for service in self.release.services:
                if service.headless or service.name not in self.proxies:
                    continue
                _, _, directory = self.proxies[service.name]
                for sp in service.ports:
                    targets = []
                    for pod in live:
                        if selector_matches(service.selector, pod.labels) and (pod.ready or service.publish_not_ready):
                            port = self._target_port(pod, sp.target)
                            if port:
                                targets.append(f"{pod.ip}:{port}")
                    tmp = directory / f".{sp.port}.json.tmp"
                    tmp.write_text(json.dumps(targets))
                    os.replace(tmp, directory / f"{sp.port}.json")
            self._apply_network_policies(live)

    @staticmethod
    def _target_port(pod, target):
        if isinstance(target, int) or str(target).isdigit():
            return int(target)
        for c in pod.template.containers:
            if target in c.ports:
                return c.ports[target]
        return None

    # -------------------------------------------------------------------- NetworkPolicy
    def _apply_network_policies(self, live=None):
        """Ingress isolation on the release bridge: a selected pod accepts only its peers on the listed ports."""
        if not self.release.network_policies:
            return
        if live is None:  # at start: can the rules work at all?
            try:
                bridged = pathlib.Path("/proc/sys/net/bridge/bridge-nf-call-iptables").read_text().strip() == "1"
            except OSError:
                bridged = False
            if not bridged:
                raise RuntimeError(
                    "a NetworkPolicy cannot be enforced: bridged traffic does not pass iptables "
                    "(modprobe br_netfilter; sysctl net.bridge.bridge-nf-call-iptables=1)"
                )
            live = []
        bridge = f"br-{self.network.id[:12]}"
        rules = network_policy_rules(self.release.network_policies, live, bridge)
        if rules == self.iptables_rules:
            return
        self._iptables_clear()
        for rule in reversed(rules):  # inserted at the top, in order
            iptables("-I", "DOCKER-USER", *rule, "-m", "comment", "--comment", self.prefix)
        self.iptables_rules = rules

    def _iptables_clear(self):
        for rule in self.iptables_rules:
            iptables("-D", "DOCKER-USER", *rule, "-m", "comment", "--comment", self.prefix, check=False)
        self.iptables_rules = []

    # -------------------------------------------------------------------- waiting and inspecting
    def wait_job(self, name, timeout):
        controller = self.jobs[name]
        deadline = time.monotonic() + timeout
        while controller.status.state == "Running" and time.monotonic() < deadline:
            time.sleep(0.5)
        if controller.status.state == "Running":
            raise TimeoutError(f"job {name} still running after {timeout:g}s\n{self.describe()}")
        return controller.status

    def wait_ready(self, deployment, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pods = self.deployments[deployment]
            if all(p.ready for p in pods):
                return pods
            failed = [j for j in self.jobs.values() if j.status.state == "Failed"]
            if failed:
                raise RuntimeError(
                    f"job {failed[0].job.name} failed ({failed[0].status.reason}) while waiting for {deployment}\n{self.describe()}"
                )
            time.sleep(0.5)
        raise TimeoutError(f"deployment {deployment} not ready after {timeout:g}s\n{self.describe()}")

    def job_pods(self, name, index=None):
        pods = self.jobs[name].status.pods
        return [
            p for p in pods if index is None or p.labels.get("batch.kubernetes.io/job-completion-index") == str(index)
        ]

    def helm_test(self, timeout=300):
        """`helm test`: run each test hook pod to completion; [(pod, succeeded, logs)]."""
        results = []
        for template in self.release.test_pods:
            name = template.owner.split("/", 1)[1]
            pod = Pod(self, template, name, name, dict(template.labels), dict(template.annotations)).start()
            self.test_pods.append(pod)
            if not pod.done.wait(timeout):
                pod.delete()
                pod.done.wait(60)
            logs = "".join(s.logs for s in pod.statuses.values())
            results.append((pod, pod.phase == "Succeeded", logs))
        return results

    def describe(self):
        """What `kubectl get pods` and `kubectl describe` would say, for failure messages."""
        lines = []
        for pod in self.all_pods():
            state = ", ".join(
                f"{n}: exit {s.exit_code} {s.reason}" + (f" message {s.message[-300:]!r}" if s.message else "")
                for n, s in pod.statuses.items()
            )
            lines.append(f"  {pod.name}: {pod.phase}{' Ready' if pod.ready else ''} [{state}]")
        lines += [f"  job {n}: {c.status.state} {c.status.reason}" for n, c in self.jobs.items()]
        lines += [f"  {t:6.1f}s {e}" for t, e in self.events[-40:]]
        return "\n".join(lines)

    # -------------------------------------------------------------------- clean up
    def close(self):
        for controller in self.jobs.values():
            controller.stop.set()
        for pod in self.all_pods():
            pod.deleted.set()
        for pod in self.all_pods():
            for container in list(pod.containers.values()):
                try:
                    container.kill()
                except docker.errors.APIError:
                    pass
        for pod in self.all_pods():
            pod.done.wait(60)
        self._iptables_clear()
        remove_everything(self.client, self.prefix)
        shutil.rmtree(self.root / "endpoints", ignore_errors=True)


def write_volume_files(path, volume, data, fs_group=None):
    """The files of a Secret or ConfigMap volume in the directory `path`, as the kubelet writes them:
    every key (or the volume's items: key -> relative path, mode), mode defaultMode, owner root and
    group fsGroup. data: {key: bytes}."""
    what = "Secret" if volume.kind == "secret" else "ConfigMap"
    items = volume.items or [(key, key, None) for key in data]
    for key, rel, mode in items:
        if key not in data:
            raise RuntimeError(f"{what} {volume.secret} has no key {key!r}")
        target = pathlib.Path(path) / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data[key])
        os.chmod(target, mode if mode is not None else volume.mode)
        if fs_group is not None:
            os.chown(target, 0, fs_group)


def remove_everything(client, prefix):
    """Every container, volume and network this harness instance (its prefix label) made."""
    flt = {"label": f"dtc.harness={prefix}"}
    for container in client.containers.list(all=True, filters=flt):
        try:
            container.remove(force=True)
        except docker.errors.APIError:
            pass
    for vol in client.volumes.list(filters=flt):
        try:
            vol.remove(force=True)
        except docker.errors.APIError:
            pass
    for net in client.networks.list(filters=flt):
        try:
            net.remove()
        except docker.errors.APIError:
            pass


def iptables(*args, check=True):
    result = subprocess.run(["iptables", "-w", *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"iptables {' '.join(args)}: {result.stderr.strip()}")
    return result
