"""Translate a rendered Helm release into a run plan for one node, the way a kubelet and the
Job/Deployment controllers would read it. Pure: parsed manifests in, dataclasses out; no Docker.

Every field of every manifest is either
  * honoured: the plan carries it and cluster_runtime.py acts on it, or
  * a documented no-op (NOOPS below: a scheduling or cluster-wide hint that changes nothing on a
    single node with no other workloads; each has its reason, listed in the chart README), or
  * refused: Unsupported names the object and the field path, e.g.
    ``Job/dt-disttrain-trainer-r1: spec.template.spec.containers[trainer].lifecycle``.
There is no fourth way: a field the harness does not know fails the translation by name.
"""

from __future__ import annotations

import dataclasses
import re

# ----------------------------------------------------------------------------- field catalogue

H = "honoured"


@dataclasses.dataclass(frozen=True)
class Noop:
    """A field accepted as a no-op on this single-node runtime, with the reason."""

    reason: str


class FreeMap:
    """A map with free keys (labels, annotations, resource names): the keys are data."""


FREE = FreeMap()

SINGLE_NODE = "one node and no other workloads"
NOOPS = {
    "serviceAccountName": Noop("no API server: the account only matters for API access, and no token is mounted"),
    "imagePullSecrets": Noop("images are never pulled: they must already be in the local image store"),
    "priorityClassName": Noop(f"priority only orders pending pods and preemption; {SINGLE_NODE}"),
    "schedulerName": Noop("the harness is the only scheduler: every pod is placed on its one node at once"),
    "tolerations": Noop("the node has no taints, so a toleration changes nothing"),
    "preferredAffinity": Noop(f"a preference, never a requirement; {SINGLE_NODE}, so it is not met"),
    "revisionHistoryLimit": Noop("one revision is run: there are no old ReplicaSets to keep"),
    "deploymentStrategy": Noop("one revision is run: nothing is rolled from an old to a new one"),
    "progressDeadlineSeconds": Noop("a status condition only; the test's own timeout bounds the rollout"),
    "storageClassName": Noop("the harness provisions every claim itself, as one host directory"),
    "storageRequest": Noop("a host directory has no size; the claim's size is not enforced"),
    "accessModes": Noop("all pods run on one node, where ReadWriteOnce and ReadWriteMany mean the same"),
    "loadBalancerSourceRanges": Noop("the Service is published on 127.0.0.1 only, narrower than any source range"),
    "automountSA": Noop("a ServiceAccount's token setting: no token is ever mounted"),
    "allocateLoadBalancerNodePorts": Noop("there are no node ports: the Service is published on 127.0.0.1 only"),
    "outsidePeer": Noop(
        "traffic from outside the release (a namespace or an address range) can only come through the "
        "Service port published on 127.0.0.1, which the bridge rules do not filter"
    ),
    "egress": Noop("egress is not filtered: the pods can reach only each other, the harness's DNS and the host"),
}

PROBE = {
    "httpGet": {"path": H, "port": H, "scheme": H},
    "tcpSocket": {"port": H},
    "exec": {"command": [H]},
    "initialDelaySeconds": H,
    "periodSeconds": H,
    "timeoutSeconds": H,
    "failureThreshold": H,
    "successThreshold": H,
}

SECURITY_CONTEXT = {
    "runAsNonRoot": H,
    "runAsUser": H,
    "runAsGroup": H,
    "privileged": H,
    "allowPrivilegeEscalation": H,
    "readOnlyRootFilesystem": H,
    "capabilities": {"drop": [H], "add": [H]},
    "seccompProfile": {"type": H},
}

CONTAINER = {
    "name": H,
    "image": H,
    "imagePullPolicy": H,
    "command": [H],
    "args": [H],
    "workingDir": H,
    "env": [
        {
            "name": H,
            "value": H,
            "valueFrom": {
                "fieldRef": {"fieldPath": H, "apiVersion": H},
                "secretKeyRef": {"name": H, "key": H, "optional": H},
            },
        }
    ],
    "ports": [{"name": H, "containerPort": H, "protocol": H}],
    "resources": {"limits": FREE, "requests": FREE},
    "securityContext": SECURITY_CONTEXT,
    "volumeMounts": [{"name": H, "mountPath": H, "readOnly": H, "subPath": H}],
    "readinessProbe": PROBE,
    "livenessProbe": PROBE,
    "startupProbe": PROBE,
    "terminationMessagePath": H,
    "terminationMessagePolicy": H,
}

NODE_SELECTOR_TERM = {"matchExpressions": [{"key": H, "operator": H, "values": [H]}]}
LABEL_SELECTOR = {"matchLabels": FREE, "matchExpressions": [{"key": H, "operator": H, "values": [H]}]}
POD_AFFINITY_TERM = {"labelSelector": LABEL_SELECTOR, "topologyKey": H, "namespaces": [H]}

POD_SPEC = {
    "restartPolicy": H,
    "hostname": H,
    "subdomain": H,
    "serviceAccountName": NOOPS["serviceAccountName"],
    "automountServiceAccountToken": H,
    "imagePullSecrets": NOOPS["imagePullSecrets"],
    "priorityClassName": NOOPS["priorityClassName"],
    "schedulerName": NOOPS["schedulerName"],
    "runtimeClassName": H,
    "terminationGracePeriodSeconds": H,
    "securityContext": {
        "runAsNonRoot": H,
        "runAsUser": H,
        "runAsGroup": H,
        "fsGroup": H,
        "fsGroupChangePolicy": H,
        "supplementalGroups": [H],
        "seccompProfile": {"type": H},
    },
    "nodeSelector": FREE,
    "tolerations": NOOPS["tolerations"],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [NODE_SELECTOR_TERM]},
            "preferredDuringSchedulingIgnoredDuringExecution": NOOPS["preferredAffinity"],
        },
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": NOOPS["preferredAffinity"]},
        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": NOOPS["preferredAffinity"]},
    },
    "initContainers": [CONTAINER],
    "containers": [CONTAINER],
    "volumes": [
        {
            "name": H,
            "persistentVolumeClaim": {"claimName": H, "readOnly": H},
            "emptyDir": {"sizeLimit": H, "medium": H},
            "secret": {"secretName": H, "defaultMode": H, "optional": H, "items": [{"key": H, "path": H, "mode": H}]},
            "configMap": {"name": H, "defaultMode": H, "optional": H, "items": [{"key": H, "path": H, "mode": H}]},
        }
    ],
}

OBJECT_META = {"name": H, "namespace": H, "labels": FREE, "annotations": FREE}
TEMPLATE = {"metadata": {"labels": FREE, "annotations": FREE}, "spec": POD_SPEC}

KINDS = {
    ("batch/v1", "Job"): {
        "completionMode": H,
        "completions": H,
        "parallelism": H,
        "backoffLimit": H,
        "backoffLimitPerIndex": H,
        "maxFailedIndexes": H,
        "podReplacementPolicy": H,
        "podFailurePolicy": {
            "rules": [
                {
                    "action": H,
                    "onExitCodes": {"containerName": H, "operator": H, "values": [H]},
                    "onPodConditions": [{"type": H, "status": H}],
                }
            ]
        },
        "activeDeadlineSeconds": H,
        "ttlSecondsAfterFinished": H,
        "suspend": H,
        "template": TEMPLATE,
    },
    ("apps/v1", "Deployment"): {
        "replicas": H,
        "revisionHistoryLimit": NOOPS["revisionHistoryLimit"],
        "progressDeadlineSeconds": NOOPS["progressDeadlineSeconds"],
        "strategy": NOOPS["deploymentStrategy"],
        "selector": {"matchLabels": FREE},
        "template": TEMPLATE,
    },
    ("v1", "Pod"): POD_SPEC,
    ("v1", "Service"): {
        "type": H,
        "clusterIP": H,
        "selector": FREE,
        "publishNotReadyAddresses": H,
        "ports": [{"name": H, "port": H, "targetPort": H, "protocol": H, "nodePort": H}],
        "loadBalancerSourceRanges": NOOPS["loadBalancerSourceRanges"],
        "allocateLoadBalancerNodePorts": NOOPS["allocateLoadBalancerNodePorts"],
    },
    ("v1", "PersistentVolumeClaim"): {
        "accessModes": NOOPS["accessModes"],
        "resources": {"requests": {"storage": NOOPS["storageRequest"]}},
        "storageClassName": NOOPS["storageClassName"],
    },
    ("v1", "Secret"): None,  # type, data, stringData: read below
    ("v1", "ConfigMap"): None,  # data, binaryData: read below
    ("v1", "ServiceAccount"): None,
    ("networking.k8s.io/v1", "NetworkPolicy"): {
        "podSelector": LABEL_SELECTOR,
        "policyTypes": [H],
        "ingress": [
            {
                "from": [
                    {
                        "podSelector": LABEL_SELECTOR,
                        "namespaceSelector": NOOPS["outsidePeer"],
                        "ipBlock": NOOPS["outsidePeer"],
                    }
                ],
                "ports": [{"protocol": H, "port": H}],
            }
        ],
        "egress": NOOPS["egress"],
    },
}

TOP_LEVEL = {
    ("v1", "Secret"): {"type": H, "data": FREE, "stringData": FREE},
    ("v1", "ConfigMap"): {"data": FREE, "binaryData": FREE, "immutable": H},
    ("v1", "ServiceAccount"): {"automountServiceAccountToken": NOOPS["automountSA"]},
}

# Labels of the one node: a nodeSelector or required node affinity must match them.
NODE_LABELS = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": "harness-node"}
# Resources the node has (anything else requested, e.g. nvidia.com/gpu, cannot be scheduled).
NODE_RESOURCES = ("cpu", "memory", "ephemeral-storage")


class Unsupported(Exception):
    """A manifest the harness cannot run faithfully; the message names the object and field."""


# ----------------------------------------------------------------------------- the plan


@dataclasses.dataclass
class Probe:
    kind: str  # httpGet | tcpSocket | exec
    port: object = None
    path: str = "/"
    command: list = dataclasses.field(default_factory=list)
    initial_delay: float = 0
    period: float = 10
    timeout: float = 1
    failure_threshold: int = 3
    success_threshold: int = 1


@dataclasses.dataclass
class EnvVar:
    name: str
    value: str | None = None
    field_path: str | None = None  # downward API, resolved per pod
    secret: tuple | None = None  # (secret name, key, optional)


@dataclasses.dataclass
class Mount:
    volume: str
    path: str
    read_only: bool = False
    sub_path: str = ""


@dataclasses.dataclass
class Volume:
    name: str
    kind: str  # claim | emptyDir | secret | configMap
    claim: str = ""
    size_limit: int | None = None  # bytes
    memory: bool = False
    secret: str = ""  # the Secret's or the ConfigMap's name
    items: list = dataclasses.field(default_factory=list)  # [(key, path, mode)]
    mode: int = 0o644
    optional: bool = False
    read_only: bool = False


@dataclasses.dataclass
class Container:
    name: str
    image: str
    command: list | None  # overrides the image ENTRYPOINT (and drops its CMD)
    args: list | None  # overrides the image CMD
    env: list  # [EnvVar]
    user: int | None
    group: int | None
    supplementary_groups: list
    run_as_non_root: bool
    read_only_root: bool
    privileged: bool
    no_new_privileges: bool
    cap_drop: list
    cap_add: list
    seccomp: str  # RuntimeDefault | Unconfined
    nano_cpus: int | None
    memory_limit: int | None
    cpu_shares: int | None
    memory_reservation: int | None
    mounts: list  # [Mount]
    ports: dict  # name -> containerPort
    working_dir: str | None = None
    readiness: Probe | None = None
    liveness: Probe | None = None
    startup: Probe | None = None
    termination_message_path: str = "/dev/termination-log"
    termination_message_policy: str = "File"


@dataclasses.dataclass
class PodTemplate:
    owner: str  # Kind/name, for messages
    labels: dict
    annotations: dict
    hostname: str
    subdomain: str
    restart_policy: str
    init_containers: list
    containers: list
    volumes: dict  # name -> Volume
    runtime: str | None  # Docker runtime for runtimeClassName
    grace_seconds: float = 30
    fs_group: int | None = None
    fs_group_change_policy: str = "Always"


@dataclasses.dataclass
class FailureRule:
    action: str  # FailJob | FailIndex | Ignore | Count
    container: str | None = None
    operator: str | None = None  # In | NotIn
    exit_codes: tuple = ()
    conditions: tuple = ()  # ((type, status), ...)

    def matches(self, exit_codes, conditions=()):
        """exit_codes: {container name: code} of the failed pod's containers that ended non-zero."""
        if self.exit_codes:
            codes = [c for name, c in exit_codes.items() if self.container in (None, name)]
            if self.operator == "In":
                return any(c in self.exit_codes for c in codes)
            return any(c not in self.exit_codes for c in codes)
        return any(pair in conditions for pair in self.conditions)


@dataclasses.dataclass
class Job:
    name: str
    template: PodTemplate
    indexed: bool
    completions: int
    parallelism: int
    backoff_limit: int | None
    backoff_limit_per_index: int | None
    max_failed_indexes: int | None
    failure_rules: list
    active_deadline: float | None
    ttl_after_finished: float | None
    replacement_policy: str
    labels: dict


@dataclasses.dataclass
class Deployment:
    name: str
    template: PodTemplate
    replicas: int
    labels: dict


@dataclasses.dataclass
class ServicePort:
    name: str
    port: int
    target: object  # int or a container port name
    protocol: str


@dataclasses.dataclass
class Service:
    name: str
    type: str
    headless: bool
    selector: dict
    ports: list
    publish_not_ready: bool


@dataclasses.dataclass
class IngressRule:
    peers: list | None  # [matchLabels] of release pods allowed in; None: any pod (a rule without `from`)
    ports: list | None  # [(protocol, port)]; None: every port


@dataclasses.dataclass
class NetworkPolicy:
    name: str
    selector: dict  # matchLabels of the pods it selects
    isolates_ingress: bool  # policyTypes has Ingress: the selected pods accept only what some policy's rules allow
    rules: list  # [IngressRule]; NetworkPolicies add up (a pod accepts what any policy selecting it allows)


@dataclasses.dataclass
class Release:
    namespace: str
    cluster_domain: str
    claims: list
    secrets: dict  # name -> {key: bytes}
    jobs: list
    deployments: list
    services: list
    test_pods: list  # PodTemplate of helm test hooks
    network_policies: list
    service_accounts: list
    noops: list  # (where, field path, reason): what README lists and the tests print
    config_maps: dict = dataclasses.field(default_factory=dict)  # name -> {key: bytes}


# ----------------------------------------------------------------------------- helpers

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "m": 10**-3}
QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$")


def quantity(value, where):
    """A Kubernetes resource quantity ("512Mi", "1.5", "100m", 2) as a float."""
    match = QUANTITY.match(str(value).strip())
    if not match:
        raise Unsupported(f"{where}: {value!r} is not a Kubernetes quantity")
    number, exponent, suffix = match.groups()
    result = float(number) * (10 ** int(exponent) if exponent else 1)
    suffix = suffix or ""
    return result * (_BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])


def selector_matches(selector, labels):
    return all(labels.get(k) == v for k, v in (selector or {}).items())


def expression_matches(expr, labels, where):
    key, op, values = expr["key"], expr["operator"], expr.get("values", [])
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise Unsupported(f"{where}.operator: {op!r} is not supported (In, NotIn, Exists, DoesNotExist)")


def walk(node, spec, path, where, unknown, noops):
    """Collect every field of `node` that `spec` does not know into `unknown`."""
    if isinstance(spec, Noop):
        noops.append((where, path, spec.reason))
        return
    if spec is H or isinstance(spec, FreeMap):
        if isinstance(spec, FreeMap) and not isinstance(node, dict):
            unknown.append(f"{path} (expected a map)")
        return
    if isinstance(spec, list):
        if not isinstance(node, list):
            unknown.append(f"{path} (expected a list)")
            return
        for i, item in enumerate(node):
            label = item.get("name", i) if isinstance(item, dict) else i
            walk(item, spec[0], f"{path}[{label}]", where, unknown, noops)
        return
    if not isinstance(node, dict):
        unknown.append(f"{path} (expected an object)")
        return
    for key, value in node.items():
        sub = f"{path}.{key}" if path else key
        if key not in spec:
            unknown.append(sub)
        elif value is not None:
            walk(value, spec[key], sub, where, unknown, noops)


# ----------------------------------------------------------------------------- translation


def translate(docs, namespace="default", cluster_domain="cluster.local", runtimes=("runc",)):
    """The plan of one rendered release (`helm template` output parsed into dicts).

    runtimes: the container runtimes the node offers (runtimeClassName must name one)."""
    noops = []
    release = Release(namespace, cluster_domain, [], {}, [], [], [], [], [], [], noops)
    for doc in docs:
        api, kind = doc.get("apiVersion"), doc.get("kind")
        name = (doc.get("metadata") or {}).get("name", "?")
        where = f"{kind}/{name}"
        if (api, kind) not in KINDS:
            known = ", ".join(sorted(f"{k} ({a})" for a, k in KINDS))
            raise Unsupported(f"{where}: kind {kind} ({api}) is not supported by the harness; it runs {known}")
        unknown = []
        top = {
            "apiVersion": H,
            "kind": H,
            "metadata": OBJECT_META,
            **({"spec": KINDS[(api, kind)]} if KINDS[(api, kind)] else {}),
            **TOP_LEVEL.get((api, kind), {}),
        }
        walk(doc, top, "", where, unknown, noops)
        if unknown:
            raise Unsupported(f"{where}: the harness does not understand: {', '.join(unknown)}")
        meta = doc["metadata"]
        if meta.get("namespace", namespace) != namespace:
            raise Unsupported(
                f"{where}: metadata.namespace {meta['namespace']!r} is not the release namespace {namespace!r}"
            )
        annotations = meta.get("annotations") or {}
        hook = annotations.get("helm.sh/hook")
        if hook is not None and (kind != "Pod" or hook != "test"):
            raise Unsupported(
                f"{where}: metadata.annotations.helm.sh/hook {hook!r}: only `test` Pods are run (as `helm test`)"
            )
        policy = annotations.get("helm.sh/hook-delete-policy")
        if policy not in (None, "before-hook-creation"):
            raise Unsupported(
                f"{where}: metadata.annotations.helm.sh/hook-delete-policy {policy!r}: only before-hook-creation"
            )
        spec = doc.get("spec") or {}
        if kind == "Job":
            release.jobs.append(job(doc, where, runtimes))
        elif kind == "Deployment":
            release.deployments.append(deployment(doc, where, runtimes))
        elif kind == "Pod":
            if hook != "test":
                raise Unsupported(f"{where}: a bare Pod is only run as a `helm test` hook")
            release.test_pods.append(pod_template(name, meta.get("labels") or {}, annotations, spec, where, runtimes))
        elif kind == "Service":
            release.services.append(service(name, spec, where))
        elif kind == "PersistentVolumeClaim":
            release.claims.append(name)
        elif kind == "Secret":
            release.secrets[name] = secret_data(doc, where)
        elif kind == "ConfigMap":
            release.config_maps[name] = config_map_data(doc, where)
        elif kind == "ServiceAccount":
            release.service_accounts.append(name)
        elif kind == "NetworkPolicy":
            release.network_policies.append(network_policy(name, spec, where))
    check_references(release)
    return release


def job(doc, where, runtimes):
    spec = doc["spec"]
    name = doc["metadata"]["name"]
    if spec.get("suspend"):
        raise Unsupported(f"{where}: spec.suspend true: nothing (no Kueue) would ever resume it")
    mode = spec.get("completionMode", "NonIndexed")
    if mode not in ("Indexed", "NonIndexed"):
        raise Unsupported(f"{where}: spec.completionMode {mode!r}")
    indexed = mode == "Indexed"
    completions = int(spec.get("completions", 1))
    parallelism = int(spec.get("parallelism", 1))
    if not indexed and completions != 1:
        raise Unsupported(f"{where}: spec.completions {completions}: a NonIndexed Job is run with one completion only")
    per_index = spec.get("backoffLimitPerIndex")
    if per_index is not None and not indexed:
        raise Unsupported(f"{where}: spec.backoffLimitPerIndex needs completionMode Indexed")
    replacement = spec.get("podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
    if replacement not in ("Failed", "TerminatingOrFailed"):
        raise Unsupported(f"{where}: spec.podReplacementPolicy {replacement!r}")
    rules = []
    for i, rule in enumerate((spec.get("podFailurePolicy") or {}).get("rules", [])):
        action = rule["action"]
        if action not in ("FailJob", "FailIndex", "Ignore", "Count"):
            raise Unsupported(f"{where}: spec.podFailurePolicy.rules[{i}].action {action!r}")
        if action == "FailIndex" and per_index is None:
            raise Unsupported(f"{where}: spec.podFailurePolicy.rules[{i}]: FailIndex needs backoffLimitPerIndex")
        codes = rule.get("onExitCodes")
        if codes and codes.get("operator") not in ("In", "NotIn"):
            raise Unsupported(
                f"{where}: spec.podFailurePolicy.rules[{i}].onExitCodes.operator {codes.get('operator')!r}"
            )
        conditions = tuple((c["type"], c.get("status", "True")) for c in rule.get("onPodConditions") or [])
        if not codes and not conditions:
            raise Unsupported(f"{where}: spec.podFailurePolicy.rules[{i}] has neither onExitCodes nor onPodConditions")
        rules.append(
            FailureRule(
                action,
                (codes or {}).get("containerName"),
                (codes or {}).get("operator"),
                tuple(int(v) for v in (codes or {}).get("values", [])),
                conditions,
            )
        )
    template = doc["spec"]["template"]
    pod = pod_template(
        name,
        (template.get("metadata") or {}).get("labels") or {},
        (template.get("metadata") or {}).get("annotations") or {},
        template["spec"],
        f"{where}: spec.template",
        runtimes,
    )
    if pod.restart_policy not in ("Never", "OnFailure"):
        raise Unsupported(f"{where}: spec.template.spec.restartPolicy must be Never or OnFailure for a Job")
    if pod.restart_policy == "OnFailure":
        raise Unsupported(
            f"{where}: spec.template.spec.restartPolicy OnFailure (in-place restarts) is not run; use Never"
        )
    for rule in rules:
        if rule.container and rule.container not in [c.name for c in pod.containers]:
            raise Unsupported(
                f"{where}: spec.podFailurePolicy names container {rule.container!r}, which the pod does not have"
            )
    return Job(
        name=name,
        template=pod,
        indexed=indexed,
        completions=completions,
        parallelism=parallelism,
        backoff_limit=None if per_index is not None else int(spec.get("backoffLimit", 6)),
        backoff_limit_per_index=None if per_index is None else int(per_index),
        max_failed_indexes=None if spec.get("maxFailedIndexes") is None else int(spec["maxFailedIndexes"]),
        failure_rules=rules,
        active_deadline=None if spec.get("activeDeadlineSeconds") is None else float(spec["activeDeadlineSeconds"]),
        ttl_after_finished=None
        if spec.get("ttlSecondsAfterFinished") is None
        else float(spec["ttlSecondsAfterFinished"]),
        replacement_policy=replacement,
        labels=doc["metadata"].get("labels") or {},
    )


def deployment(doc, where, runtimes):
    spec = doc["spec"]
    name = doc["metadata"]["name"]
    template = spec["template"]
    labels = (template.get("metadata") or {}).get("labels") or {}
    selector = (spec.get("selector") or {}).get("matchLabels") or {}
    if not selector or not selector_matches(selector, labels):
        raise Unsupported(f"{where}: spec.selector.matchLabels {selector} does not select the template's labels")
    pod = pod_template(
        name,
        labels,
        (template.get("metadata") or {}).get("annotations") or {},
        template["spec"],
        f"{where}: spec.template",
        runtimes,
    )
    if pod.restart_policy != "Always":
        raise Unsupported(
            f"{where}: spec.template.spec.restartPolicy {pod.restart_policy!r}: a Deployment's pods restart Always"
        )
    return Deployment(name, pod, int(spec.get("replicas", 1)), doc["metadata"].get("labels") or {})


def pod_template(name, labels, annotations, spec, where, runtimes):
    where = f"{where}.spec" if where.endswith("spec.template") else f"{where}: spec"
    if spec.get("automountServiceAccountToken") is not False:
        raise Unsupported(
            f"{where}.automountServiceAccountToken must be false: there is no API server whose token could be mounted"
        )
    node_labels = dict(NODE_LABELS)
    for key, value in (spec.get("nodeSelector") or {}).items():
        if node_labels.get(key) != str(value):
            raise Unsupported(
                f"{where}.nodeSelector {key}={value}: the node ({node_labels}) does not match; the pod would stay Pending"
            )
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required:
        terms = required["nodeSelectorTerms"]
        ok = any(
            all(
                expression_matches(e, node_labels, f"{where}.affinity.nodeAffinity")
                for e in t.get("matchExpressions", [])
            )
            for t in terms
        )
        if not ok:
            raise Unsupported(
                f"{where}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution: the node ({node_labels}) matches no term; the pod would stay Pending"
            )
    runtime = spec.get("runtimeClassName")
    if runtime is not None and runtime not in runtimes:
        raise Unsupported(f"{where}.runtimeClassName {runtime!r}: the node's container runtimes are {list(runtimes)}")
    pod_security = spec.get("securityContext") or {}
    if (pod_security.get("seccompProfile") or {}).get("type") not in (None, "RuntimeDefault", "Unconfined"):
        raise Unsupported(f"{where}.securityContext.seccompProfile.type {pod_security['seccompProfile']['type']!r}")
    volumes = {}
    for v in spec.get("volumes", []):
        volumes[v["name"]] = volume(v, f"{where}.volumes[{v['name']}]")
    init = [
        container(c, pod_security, volumes, f"{where}.initContainers[{c['name']}]")
        for c in spec.get("initContainers", [])
    ]
    for c, raw in zip(init, spec.get("initContainers", [])):
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            if probe in raw:
                raise Unsupported(f"{where}.initContainers[{c.name}].{probe}: init containers have no probes")
    main = [container(c, pod_security, volumes, f"{where}.containers[{c['name']}]") for c in spec["containers"]]
    names = [c.name for c in init + main]
    if len(names) != len(set(names)):
        raise Unsupported(f"{where}: container names repeat: {names}")
    grace = spec.get("terminationGracePeriodSeconds", 30)
    policy = pod_security.get("fsGroupChangePolicy", "Always")
    if policy not in ("Always", "OnRootMismatch"):
        raise Unsupported(f"{where}.securityContext.fsGroupChangePolicy {policy!r}")
    return PodTemplate(
        owner=where.split(":")[0],
        labels=dict(labels),
        annotations=dict(annotations),
        hostname=spec.get("hostname", ""),
        subdomain=spec.get("subdomain", ""),
        restart_policy=spec.get("restartPolicy", "Always"),
        init_containers=init,
        containers=main,
        volumes=volumes,
        runtime=runtime,
        grace_seconds=float(grace),
        fs_group=None if pod_security.get("fsGroup") is None else int(pod_security["fsGroup"]),
        fs_group_change_policy=policy,
    )


def volume(v, where):
    kinds = [k for k in ("persistentVolumeClaim", "emptyDir", "secret", "configMap") if k in v]
    if len(kinds) != 1:
        raise Unsupported(
            f"{where}: exactly one of persistentVolumeClaim, emptyDir, secret, configMap is run, got {sorted(set(v) - {'name'})}"
        )
    kind = kinds[0]
    if kind == "persistentVolumeClaim":
        return Volume(v["name"], "claim", claim=v[kind]["claimName"], read_only=bool(v[kind].get("readOnly")))
    if kind == "emptyDir":
        empty = v[kind] or {}
        medium = empty.get("medium", "")
        if medium not in ("", "Memory"):
            raise Unsupported(f"{where}.emptyDir.medium {medium!r}")
        size = empty.get("sizeLimit")
        return Volume(
            v["name"],
            "emptyDir",
            size_limit=None if size is None else int(quantity(size, f"{where}.emptyDir.sizeLimit")),
            memory=medium == "Memory",
        )
    s = v[kind]
    items = []
    for i in s.get("items", []):
        if i["path"].startswith("/") or ".." in i["path"].split("/"):
            raise Unsupported(f"{where}.{kind}.items[{i['key']}].path {i['path']!r}: a relative path without '..'")
        items.append((i["key"], i["path"], i.get("mode")))
    # Kubernetes mounts Secret and ConfigMap volumes read-only, whatever the mount says
    return Volume(
        v["name"],
        "secret" if kind == "secret" else "configMap",
        secret=s["secretName" if kind == "secret" else "name"],
        items=items,
        mode=int(s.get("defaultMode", 0o644)),
        optional=bool(s.get("optional")),
        read_only=True,
    )


def container(c, pod_security, volumes, where):
    sc = {
        **{k: v for k, v in pod_security.items() if k in ("runAsNonRoot", "runAsUser", "runAsGroup", "seccompProfile")},
        **(c.get("securityContext") or {}),
    }
    seccomp = (sc.get("seccompProfile") or {}).get("type", "RuntimeDefault")
    if seccomp not in ("RuntimeDefault", "Unconfined"):
        raise Unsupported(f"{where}.securityContext.seccompProfile.type {seccomp!r}: RuntimeDefault or Unconfined")
    user = sc.get("runAsUser")
    if sc.get("runAsNonRoot") and user == 0:
        raise Unsupported(f"{where}.securityContext: runAsNonRoot with runAsUser 0 can never start")
    if c.get("imagePullPolicy") == "Always":
        raise Unsupported(f"{where}.imagePullPolicy Always: the harness never pulls (IfNotPresent or Never)")
    groups = list(pod_security.get("supplementalGroups", []))
    if pod_security.get("fsGroup") is not None:
        groups.append(int(pod_security["fsGroup"]))
    resources = c.get("resources") or {}
    for kind in ("limits", "requests"):
        for key in resources.get(kind) or {}:
            if key not in NODE_RESOURCES:
                raise Unsupported(
                    f"{where}.resources.{kind}.{key}: the node has no {key} (it offers {', '.join(NODE_RESOURCES)})"
                )
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    cpu_limit = limits.get("cpu")
    mem_limit = limits.get("memory")
    cpu_request = requests.get("cpu", cpu_limit)
    mem_request = requests.get("memory", mem_limit)
    env = []
    for e in c.get("env", []):
        source = e.get("valueFrom")
        if source is None:
            env.append(EnvVar(e["name"], value=str(e.get("value", ""))))
        elif "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            if not DOWNWARD.match(path):
                raise Unsupported(f"{where}.env[{e['name']}].valueFrom.fieldRef.fieldPath {path!r} is not supported")
            env.append(EnvVar(e["name"], field_path=path))
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            env.append(EnvVar(e["name"], secret=(ref["name"], ref["key"], bool(ref.get("optional")))))
        else:
            raise Unsupported(f"{where}.env[{e['name']}].valueFrom: only fieldRef and secretKeyRef are run")
    mounts = []
    for m in c.get("volumeMounts", []):
        if m["name"] not in volumes:
            raise Unsupported(f"{where}.volumeMounts[{m['name']}]: no such volume in the pod")
        mounts.append(
            Mount(
                m["name"], m["mountPath"], bool(m.get("readOnly")) or volumes[m["name"]].read_only, m.get("subPath", "")
            )
        )
    policy = c.get("terminationMessagePolicy", "File")
    if policy not in ("File", "FallbackToLogsOnError"):
        raise Unsupported(f"{where}.terminationMessagePolicy {policy!r}")
    caps = sc.get("capabilities") or {}
    return Container(
        name=c["name"],
        image=c["image"],
        command=c.get("command"),
        args=c.get("args"),
        env=env,
        user=None if user is None else int(user),
        group=None if sc.get("runAsGroup") is None else int(sc["runAsGroup"]),
        supplementary_groups=groups,
        run_as_non_root=bool(sc.get("runAsNonRoot")),
        read_only_root=bool(sc.get("readOnlyRootFilesystem")),
        privileged=bool(sc.get("privileged")),
        # Kubernetes: no_new_privs is set unless allowPrivilegeEscalation is true (or the container is privileged)
        no_new_privileges=sc.get("allowPrivilegeEscalation") is False,
        cap_drop=list(caps.get("drop", [])),
        cap_add=list(caps.get("add", [])),
        seccomp=seccomp,
        nano_cpus=None if cpu_limit is None else int(quantity(cpu_limit, f"{where}.resources.limits.cpu") * 1e9),
        memory_limit=None if mem_limit is None else int(quantity(mem_limit, f"{where}.resources.limits.memory")),
        cpu_shares=None
        if cpu_request is None
        else max(2, int(quantity(cpu_request, f"{where}.resources.requests.cpu") * 1024)),
        memory_reservation=None
        if mem_request is None
        else int(quantity(mem_request, f"{where}.resources.requests.memory")),
        mounts=mounts,
        ports={p.get("name", str(p["containerPort"])): int(p["containerPort"]) for p in c.get("ports", [])},
        working_dir=c.get("workingDir"),
        readiness=probe(c.get("readinessProbe"), f"{where}.readinessProbe"),
        liveness=probe(c.get("livenessProbe"), f"{where}.livenessProbe"),
        startup=probe(c.get("startupProbe"), f"{where}.startupProbe"),
        termination_message_path=c.get("terminationMessagePath", "/dev/termination-log"),
        termination_message_policy=policy,
    )


DOWNWARD = re.compile(
    r"^(metadata\.(name|namespace|uid)|metadata\.(labels|annotations)\['[^']+'\]|spec\.(nodeName|serviceAccountName)|status\.(podIP|podIPs|hostIP|hostIPs))$"
)


def probe(p, where):
    if not p:
        return None
    kinds = [k for k in ("httpGet", "tcpSocket", "exec") if k in p]
    if len(kinds) != 1:
        raise Unsupported(f"{where}: exactly one of httpGet, tcpSocket, exec")
    kind = kinds[0]
    if kind == "httpGet" and p[kind].get("scheme", "HTTP") != "HTTP":
        raise Unsupported(f"{where}.httpGet.scheme {p[kind]['scheme']!r}: only HTTP")
    return Probe(
        kind,
        port=p[kind].get("port"),
        path=p[kind].get("path", "/"),
        command=list(p[kind].get("command", [])),
        initial_delay=float(p.get("initialDelaySeconds", 0)),
        period=float(p.get("periodSeconds", 10)),
        timeout=float(p.get("timeoutSeconds", 1)),
        failure_threshold=int(p.get("failureThreshold", 3)),
        success_threshold=int(p.get("successThreshold", 1)),
    )


def service(name, spec, where):
    kind = spec.get("type", "ClusterIP")
    if kind not in ("ClusterIP", "LoadBalancer", "NodePort"):
        raise Unsupported(
            f"{where}: spec.type {kind!r} (ClusterIP, NodePort and LoadBalancer are published on 127.0.0.1)"
        )
    cluster_ip = spec.get("clusterIP")
    if cluster_ip not in (None, "", "None"):
        raise Unsupported(
            f"{where}: spec.clusterIP {cluster_ip}: there is no service IP range; only None (headless) or allocated"
        )
    headless = cluster_ip == "None"
    if headless and kind != "ClusterIP":
        raise Unsupported(f"{where}: a headless Service must be of type ClusterIP")
    if not spec.get("selector"):
        raise Unsupported(
            f"{where}: spec.selector is empty: Services without a selector (manual Endpoints) are not run"
        )
    if headless and not spec.get("publishNotReadyAddresses"):
        raise Unsupported(
            f"{where}: spec.publishNotReadyAddresses false on a headless Service: names are published when a pod starts"
        )
    ports = []
    for p in spec.get("ports", []):
        if p.get("protocol", "TCP") != "TCP":
            raise Unsupported(f"{where}: spec.ports[{p.get('name')}].protocol {p['protocol']}: only TCP")
        ports.append(ServicePort(p.get("name", ""), int(p["port"]), p.get("targetPort", p["port"]), "TCP"))
    return Service(name, kind, headless, dict(spec["selector"]), ports, bool(spec.get("publishNotReadyAddresses")))


def network_policy(name, spec, where):
    types = spec.get("policyTypes") or ["Ingress"]
    if not set(types) <= {"Ingress", "Egress"}:
        raise Unsupported(f"{where}: spec.policyTypes {types}: Ingress and Egress only")
    selector = spec["podSelector"]
    if selector.get("matchExpressions"):
        raise Unsupported(f"{where}: spec.podSelector.matchExpressions: only matchLabels")
    rules = []
    for rule in spec.get("ingress", []):
        peers = None
        if "from" in rule:
            peers = []
            for peer in rule["from"]:
                if "podSelector" not in peer:
                    continue  # namespaceSelector/ipBlock alone: outside the release (a documented no-op)
                if "namespaceSelector" in peer:
                    raise Unsupported(
                        f"{where}: spec.ingress[].from[]: podSelector with namespaceSelector (pods of other namespaces) is not run"
                    )
                if peer["podSelector"].get("matchExpressions"):
                    raise Unsupported(f"{where}: spec.ingress[].from[].podSelector.matchExpressions: only matchLabels")
                peers.append(dict(peer["podSelector"].get("matchLabels") or {}))
        ports = None
        if rule.get("ports"):
            ports = []
            for p in rule["ports"]:
                if p.get("protocol", "TCP") not in ("TCP", "UDP") or not isinstance(p.get("port"), int):
                    raise Unsupported(f"{where}: spec.ingress[].ports[]: only numeric TCP and UDP ports")
                ports.append((p.get("protocol", "TCP"), p["port"]))
        rules.append(IngressRule(peers, ports))
    return NetworkPolicy(name, dict(selector.get("matchLabels") or {}), "Ingress" in types, rules)


def network_policy_rules(policies, live, bridge):
    """iptables rules (DOCKER-USER, in order) enforcing the policies' ingress on the release bridge.

    live: pods with .ip and .labels. NetworkPolicies add up: first every ACCEPT of every policy,
    then, for each pod some policy isolates (policyTypes Ingress), ESTABLISHED/RELATED and a
    DROP, so one policy's deny (the chart's default-deny) never hides another's allow."""
    accepts, isolated = [], []
    for policy in policies:
        selected = [p.ip for p in live if selector_matches(policy.selector, p.labels)]
        if policy.isolates_ingress:
            isolated += [ip for ip in selected if ip not in isolated]
        for rule in policy.rules:
            if rule.peers is None:
                peers = [None]  # a rule without `from`: any source
            else:
                peers = [p.ip for p in live if any(selector_matches(s, p.labels) for s in rule.peers)]
            for ip in selected:
                for peer in peers:
                    source = [] if peer is None else ["-s", peer]
                    for proto, port in rule.ports or [(None, None)]:
                        match = ["-p", proto.lower(), "--dport", str(port)] if port is not None else []
                        accepts.append(["-i", bridge, "-o", bridge, *source, "-d", ip, *match, "-j", "ACCEPT"])
    rules = list(accepts)
    for ip in isolated:
        rules.append(
            [
                "-i",
                bridge,
                "-o",
                bridge,
                "-d",
                ip,
                "-m",
                "conntrack",
                "--ctstate",
                "ESTABLISHED,RELATED",
                "-j",
                "ACCEPT",
            ]
        )
        rules.append(["-i", bridge, "-o", bridge, "-d", ip, "-j", "DROP"])
    return rules


def secret_data(doc, where):
    import base64

    data = {}
    for key, value in (doc.get("data") or {}).items():
        data[key] = base64.b64decode(value)
    for key, value in (doc.get("stringData") or {}).items():
        data[key] = str(value).encode()
    return data


def config_map_data(doc, where):
    """A ConfigMap's files: data (UTF-8 text) and binaryData (base64); a key in both is refused, as the API server does."""
    import base64

    data = {key: str(value).encode() for key, value in (doc.get("data") or {}).items()}
    for key, value in (doc.get("binaryData") or {}).items():
        if key in data:
            raise Unsupported(f"{where}: key {key!r} is in both data and binaryData")
        data[key] = base64.b64decode(value)
    for key in data:
        if not CONFIG_KEY.match(key) or key in (".", ".."):
            raise Unsupported(f"{where}: key {key!r} is not a valid ConfigMap key ([-._a-zA-Z0-9]+)")
    return data


CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def check_references(release):
    """Claims, Secrets, ConfigMaps and ServiceAccounts a pod uses must be in the release (there is no API server to hold others)."""
    pods = [j.template for j in release.jobs] + [d.template for d in release.deployments] + release.test_pods
    for pod in pods:
        where = pod.owner
        for v in pod.volumes.values():
            if v.kind == "claim" and v.claim not in release.claims:
                raise Unsupported(
                    f"{where}: volume {v.name} uses claim {v.claim!r}, which is not in the release (the harness has no existing claims)"
                )
            if v.kind == "secret" and v.secret not in release.secrets and not v.optional:
                raise Unsupported(f"{where}: volume {v.name} uses Secret {v.secret!r}, which is not in the release")
            if v.kind == "configMap" and v.secret not in release.config_maps and not v.optional:
                raise Unsupported(
                    f"{where}: volume {v.name} uses ConfigMap {v.secret!r}, which is not in the release "
                    "(the harness has no API server holding others: pass it with the release's manifests)"
                )
            if v.kind == "configMap" and v.secret in release.config_maps:
                missing = [key for key, _, _ in v.items if key not in release.config_maps[v.secret]]
                if missing:
                    raise Unsupported(f"{where}: volume {v.name}: ConfigMap {v.secret!r} has no key {missing[0]!r}")
        for c in pod.init_containers + pod.containers:
            for e in c.env:
                if e.secret and e.secret[0] not in release.secrets and not e.secret[2]:
                    raise Unsupported(f"{where}: env {e.name} uses Secret {e.secret[0]!r}, which is not in the release")
