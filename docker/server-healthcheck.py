"""HEALTHCHECK of the disttrain-server image: GET /healthz on the port the server listens on.

The port is read from the server's own command line (`disttrain-server ... --port N`: PID 1,
or its child under `docker run --init`), so the check follows `docker run IMAGE --port 9000` or
`--network host` on any free port; without --port it is the server's default, 8080.
Exit 0 = healthy, 1 = unhealthy.
"""

import os
import sys
import urllib.request


def server_argv():
    """The command line of the disttrain-server process (the lowest PID that is one)."""
    pids = sorted(int(name) for name in os.listdir("/proc") if name.isdigit())
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(os.path.basename(arg) == "disttrain-server" for arg in argv[:2]):
            return argv
    return []


def server_port(argv, default=8080):
    for i, arg in enumerate(argv):
        if arg == "--port" and i + 1 < len(argv) and argv[i + 1].isdigit():
            return int(argv[i + 1])
        if arg.startswith("--port=") and arg[7:].isdigit():
            return int(arg[7:])
    return default


def main():
    url = f"http://127.0.0.1:{server_port(server_argv())}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=4) as response:
            ok = response.status == 200
    except Exception as err:  # any failure is "unhealthy", with the reason in `docker inspect`
        print(f"{url}: {err}", file=sys.stderr)
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
