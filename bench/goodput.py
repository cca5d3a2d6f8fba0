"""What a shaped link carries: the TCP payload rate between two namespaces of bench/netns.py's bridge,
both ways at once (a 2-worker all-reduce sends both ways at once), as a probe on a real link would see it.

A link shaped to 10 Mbit/s does not carry 10 Mbit/s of payload: TCP, IP and Ethernet headers, the
acknowledgements sharing each direction with the other way's data, and tbf's drops when its queue is
full take their share (measured through the bridge, both ways: 80-87 % of 10 Mbit/s, 89 % of 50, 93 % of 100,
96 % of 1 Gbit/s; one way over a single veth pair, 96 % at every rate). The strategy advisor is told a link's rate; the time-to-accuracy benchmark
measures this rate for each shaped link of a sitting so that the advisor's check gives it what its probe
would have measured on that link (bench/advisor_accuracy.py).

    python bench/goodput.py 10mbit            measure one rate (root: it makes its own namespaces)
    python bench/goodput.py --endpoint server|client HOST PORT NBYTES     (what runs in a namespace)
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time

import netns

NAMESPACES = ("dtgp-0", "dtgp-1")
BRIDGE = "dtgp-br"
PORT = 5999
SECONDS = 3.0  # each way's transfer, at the nominal rate
REPEATS = 3  # 10 Mbit/s varied 8.0-8.7 between three transfers: the median of three


def endpoint(role, host, port, nbytes):
    """Send nbytes while receiving nbytes on one connection; print the payload rate (Mbit/s) of the whole."""
    if role == "server":
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(1)
        conn, _ = listener.accept()
    else:
        conn = socket.create_connection((host, port), timeout=60)
    conn.settimeout(120)

    def receive():
        got = 0
        while got < nbytes:
            data = conn.recv(1 << 20)
            if not data:
                break
            got += len(data)

    started = time.monotonic()
    receiver = threading.Thread(target=receive)
    receiver.start()
    chunk = b"\0" * 65536
    left = nbytes
    while left > 0:
        left -= conn.send(chunk[: min(left, len(chunk))])
    receiver.join()
    elapsed = time.monotonic() - started
    conn.close()
    print(json.dumps({"mbit": nbytes * 8 / elapsed / 1e6, "seconds": elapsed}), flush=True)


def measure(rate, repeats=REPEATS):
    """{"rate", "nominal_mbit", "goodput_mbit" (the median), "transfers_mbit"} of `rate` (tc's form, e.g. "10mbit"),
    both ways at once between two members of a shaped bridge (the benchmark's topology)."""
    transfers = [transfer(rate) for _ in range(repeats)]
    return {
        "rate": rate,
        "nominal_mbit": transfers[0]["nominal_mbit"],
        "both_ways": True,
        "goodput_mbit": sorted(t["goodput_mbit"] for t in transfers)[len(transfers) // 2],
        "transfers_mbit": [t["goodput_mbit"] for t in transfers],
        "seconds_each": SECONDS,
    }


def transfer(rate):
    """One transfer of SECONDS at the nominal rate each way, at once; the namespaces are removed after."""
    nominal = float(rate.removesuffix("mbit")) if rate.endswith("mbit") else float(rate.removesuffix("gbit")) * 1000
    nbytes = int(nominal * 1e6 / 8 * SECONDS)
    here = os.path.abspath(__file__)
    netns.bridged(NAMESPACES, rate, BRIDGE)
    server = None
    try:
        server = subprocess.Popen(
            netns.exec_in(
                NAMESPACES[1], [sys.executable, here, "--endpoint", "server", netns.address(1), str(PORT), str(nbytes)]
            ),
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(50):  # until the server listens
            if subprocess.run(
                netns.exec_in(NAMESPACES[1], ["ss", "-ltn", f"sport = :{PORT}"]), capture_output=True, text=True
            ).stdout.count("LISTEN"):
                break
            time.sleep(0.1)
        client = subprocess.run(
            netns.exec_in(
                NAMESPACES[0], [sys.executable, here, "--endpoint", "client", netns.address(1), str(PORT), str(nbytes)]
            ),
            capture_output=True,
            text=True,
            timeout=SECONDS * 10 + 60,
        )
        if client.returncode != 0:  # (the server may still wait in accept: stopped below)
            raise RuntimeError(f"the goodput client failed: {client.stderr.strip()[-300:]}")
        sent = json.loads(client.stdout)
        served = json.loads(server.communicate(timeout=60)[0])
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait()
        netns.teardown(NAMESPACES, BRIDGE)
    # the slower side's rate: an all-reduce waits for both ways
    return {"nominal_mbit": nominal, "goodput_mbit": round(min(sent["mbit"], served["mbit"]), 3)}


def main():
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rate", nargs="?", choices=list(netns.BURST), help="the link's rate, in tc's form")
    parser.add_argument(
        "--endpoint",
        nargs=4,
        metavar=("ROLE", "HOST", "PORT", "NBYTES"),
        help="one end of a transfer (what runs inside a namespace): server|client HOST PORT NBYTES",
    )
    args = parser.parse_args()
    if args.endpoint:
        role, host, port, nbytes = args.endpoint
        endpoint(role, host, int(port), int(nbytes))
    elif args.rate is None:
        parser.error("give a RATE (or --endpoint)")
    elif os.geteuid() != 0:
        parser.exit(2, "goodput.py: the shaped links need root (ip netns, tc)\n")
    else:
        print(json.dumps(measure(args.rate)))


if __name__ == "__main__":
    main()
