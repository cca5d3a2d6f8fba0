"""A block of consecutive free ports on loopback: for trainer groups started on one host (the
sweep's localsgd trials; the tests and benchmarks), whose TF_CONFIG puts worker i on base + i."""

import socket

from disttrain_contract.errors import ContractError


def free_port_block(n, attempts=50):
    """A base port such that base..base+n-1 are free on 127.0.0.1 right now. Another process may
    take one before the trainers bind it: their start then fails like any other start failure."""
    for _ in range(attempts):
        with socket.socket() as probe:  # the kernel's choice of a free port as the candidate base
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + n > 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + n):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise ContractError(f"no {n} consecutive free ports on 127.0.0.1 in {attempts} attempts")
