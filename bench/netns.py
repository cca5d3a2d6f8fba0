"""Shaped links between network namespaces, for the benchmarks that train over a slow network.

Each training process runs in a namespace of its own (`ip netns exec NAME ...`). Two namespaces are
joined by one veth pair; more (the parameter server's chief, ps and workers) by a bridge in a namespace
of its own, one veth pair from each to it. Every interface a process sends through is limited with
`tc qdisc ... tbf` to the link's rate (both ends of a pair; a member's end and the bridge's port to it),
so each process's link carries at most the rate each way, as a switch with ports of that speed.
Bandwidth only: `netem` (added delay) is not available on every kernel, so the links have
loopback-like latency at the given rate. Needs root. Nothing outside the namespaces is touched, and
`teardown` deletes them (the veth pairs and the bridge go with them).
"""

import subprocess

# tbf's burst: at least rate/HZ bytes (below that it cannot reach the rate); latency bounds the queue
BURST = {"10gbit": "4mb", "1gbit": "512kb", "100mbit": "64kb", "50mbit": "64kb", "10mbit": "16kb"}
SUBNET = "10.233.0"  # the namespaces' addresses: 10.233.0.10, .11, ... (never routed outside them)
# the trainer's --host-pattern for task i in namespace i (address(i)): up to 10 namespaces
HOST_PATTERN = SUBNET + ".1{index}:{port}"


def sh(*cmd):
    subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True)


def address(i):
    """The address of the i-th namespace (0-based)."""
    if not 0 <= i < 10:
        raise ValueError(f"namespace {i}: HOST_PATTERN names at most 10")
    return f"{SUBNET}.1{i}"


def exec_in(namespace, cmd):
    """cmd run inside `namespace`."""
    return ["ip", "netns", "exec", namespace, *cmd]


def teardown(namespaces, bridge=None):
    for ns in (*namespaces, *([bridge] if bridge else [])):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _namespace(ns):
    sh("ip", "netns", "add", ns)
    sh("ip", "-n", ns, "link", "set", "lo", "up")


def shape(ns, dev, rate):
    sh(
        "ip",
        "netns",
        "exec",
        ns,
        "tc",
        "qdisc",
        "add",
        "dev",
        dev,
        "root",
        "tbf",
        "rate",
        rate,
        "burst",
        BURST[rate],
        "latency",
        "100ms",
    )


def pair(namespaces, rate):
    """Two namespaces, one veth pair between them (dtb0, dtb1), both ends shaped to `rate`."""
    teardown(namespaces)
    for ns in namespaces:
        _namespace(ns)
    sh(
        "ip",
        "link",
        "add",
        "dtb0",
        "netns",
        namespaces[0],
        "type",
        "veth",
        "peer",
        "name",
        "dtb1",
        "netns",
        namespaces[1],
    )
    for i, (ns, dev) in enumerate(zip(namespaces, ("dtb0", "dtb1"))):
        sh("ip", "-n", ns, "addr", "add", f"{address(i)}/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")
        shape(ns, dev, rate)


def bridged(namespaces, rate, bridge):
    """Any number of namespaces on one bridge (in the namespace `bridge`): member i has address(i) on
    its interface dtb0, the bridge's port to it is p<i>; both shaped to `rate`."""
    teardown(namespaces, bridge)
    _namespace(bridge)
    sh("ip", "-n", bridge, "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", bridge, "link", "set", "br0", "up")
    for i, ns in enumerate(namespaces):
        _namespace(ns)
        port = f"p{i}"
        sh("ip", "link", "add", "dtb0", "netns", ns, "type", "veth", "peer", "name", port, "netns", bridge)
        sh("ip", "-n", ns, "addr", "add", f"{address(i)}/24", "dev", "dtb0")
        sh("ip", "-n", ns, "link", "set", "dtb0", "up")
        sh("ip", "-n", bridge, "link", "set", port, "master", "br0")
        sh("ip", "-n", bridge, "link", "set", port, "up")
        shape(ns, "dtb0", rate)
        shape(bridge, port, rate)
