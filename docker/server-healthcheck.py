"""HEALTHCHECK of the disttrain-server image: GET /healthz on the port the server listens on.

The port is read from the server's own command line (PID 1 is `disttrain-server ... --port N`),
so the check follows `docker run IMAGE --port 9000` or `--network host` on any free port;
without --port it is the server's default, 8080. Exit 0 = healthy, 1 = unhealthy.
"""

import sys
import urllib.request


def server_port(default=8080):
    try:
        with open("/proc/1/cmdline", "rb") as fh:
            argv = fh.read().decode(errors="replace").split("\0")
    except OSError:
        return default
    for i, arg in enumerate(argv):
        if arg == "--port" and i + 1 < len(argv) and argv[i + 1].isdigit():
            return int(argv[i + 1])
        if arg.startswith("--port=") and arg[7:].isdigit():
            return int(arg[7:])
    return default


def main():
    url = f"http://127.0.0.1:{server_port()}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=4) as response:
            ok = response.status == 200
    except Exception as err:  # any failure is "unhealthy", with the reason in `docker inspect`
        print(f"{url}: {err}", file=sys.stderr)
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
