"""A Service's proxy (what kube-proxy does for one ClusterIP/LoadBalancer Service), run by the
harness inside a container that carries the Service's DNS name on the release network.

    python cluster_proxy.py ENDPOINTS_DIR PORT [PORT ...]

For each Service port it listens on 0.0.0.0:PORT and forwards every connection to one of the
ready endpoints listed in ENDPOINTS_DIR/PORT.json (["10.0.0.5:8080", ...], rewritten by the
harness when a pod's readiness changes), round robin. No ready endpoint: the connection is
closed at once, as a Service without endpoints rejects it. Standard library only.
"""

import itertools
import json
import os
import socket
import sys
import threading

COUNTER = itertools.count()


def endpoints(directory, port):
    try:
        with open(os.path.join(directory, f"{port}.json")) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return []


def pipe(src, dst):
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass


def handle(client, directory, port):
    targets = endpoints(directory, port)
    upstream = None
    for attempt in range(len(targets)):
        host, _, target_port = targets[(next(COUNTER) + attempt) % len(targets)].rpartition(":")
        try:
            upstream = socket.create_connection((host, int(target_port)), timeout=5)
            upstream.settimeout(None)
            break
        except OSError:
            upstream = None
    if upstream is None:
        client.close()
        return
    threads = [
        threading.Thread(target=pipe, args=pair, daemon=True) for pair in ((client, upstream), (upstream, client))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client.close()
    upstream.close()


def serve(directory, port):
    listener = socket.create_server(("0.0.0.0", port), reuse_port=False, backlog=128)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=handle, args=(client, directory, port), daemon=True).start()


def main(argv):
    directory, ports = argv[0], [int(p) for p in argv[1:]]
    for port in ports[1:]:
        threading.Thread(target=serve, args=(directory, port), daemon=True).start()
    print(f"proxy: ports {ports} -> endpoints in {directory}", flush=True)
    serve(directory, ports[0])


if __name__ == "__main__":
    main(sys.argv[1:])
