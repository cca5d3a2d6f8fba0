"""The server's front: nginx in front of gunicorn (`disttrain-server --front nginx`).

gunicorn's gthread worker hands a connection to one of its threads as soon as the first bytes
arrive, and the thread then reads the request to its end: a client that sends its headers a byte
at a time holds a thread for as long as it likes, and a handful of such clients hold them all
(the probes, answered by the same threads, time out and the kubelet restarts the pod). nginx reads
every request whole, headers and body, on its event loop (thousands of waiting connections cost it
memory, not threads), with a deadline for the headers and one between reads of the body, and only
then passes it to gunicorn over a Unix socket in a private directory: gunicorn's threads only ever
see complete requests, and nothing but nginx can reach them. nginx also reads gunicorn's answer
whole before it trickles it out to a slow reader.

The nginx binary is Debian's (the server image installs it); its configuration is written here,
into the same private directory, with every path it writes to there, so a read-only root
filesystem with a writable /tmp is all it needs.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from disttrain_contract import ContractError

FRONTS = ("nginx", "none")
FRONT_ENV = "DISTTRAIN_SERVER_FRONT"  # the --front default: the server image sets it to nginx
SOCKET_NAME = "gunicorn.sock"
# How long nginx has to open its port before the server gives up on it.
START_TIMEOUT = 10
# Connections nginx keeps open to gunicorn between requests (at most that many of its threads'
# worth): a new connection per request would cost a handshake on the Unix socket each time.
UPSTREAM_KEEPALIVE = 16
# nginx waits this long for gunicorn's answer: a model call on a busy node may take a while, and
# gunicorn itself gives a worker 120 s (main.gunicorn_options) before it replaces it.
UPSTREAM_READ_TIMEOUT = 180


def nginx_config(
    directory, host, port, *, user=None, header_timeout, body_timeout, max_connections, keepalive, max_body_mb
):
    """The nginx configuration of the front: listens on host:port, sends complete requests to the
    gunicorn socket in `directory`, keeps its temporary files, pid file and socket there."""
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    # nginx refuses a body past its own limit before gunicorn sees it: a little above the server's
    # own (--max-upload-mb) so that the server's 413, which names the limit, is what clients get.
    limit_mb = int(max_body_mb) + 2
    too_large = f'{{"error": "request body too large: the limit is {max_body_mb:g} MB"}}'
    return f"""# written by disttrain-server (disttrain_server/front.py) at start; not read again
{f"user {user};" if user else "# user: not root, nginx runs as the server's own user"}
worker_processes 1;
daemon off;
pid {directory}/nginx.pid;
error_log stderr error;  # what nginx refuses or fails at; not each body it buffers to a file (warn)
events {{
    # every connection counts, the clients' and the ones to gunicorn: beyond it new ones wait in
    # the kernel's accept queue
    worker_connections {max_connections};
}}
http {{
    access_log off;  # gunicorn logs every request it answers; nginx logs what it refuses (error_log)
    server_tokens off;
    client_body_temp_path {directory}/client_body;
    proxy_temp_path {directory}/proxy;
    fastcgi_temp_path {directory}/fastcgi;
    uwsgi_temp_path {directory}/uwsgi;
    scgi_temp_path {directory}/scgi;
    # the whole header in this time, or the connection closed (nginx logs 408 and sends nothing)
    client_header_timeout {header_timeout}s;
    # at most this long between two reads of the body (nginx times the gaps, not the whole body), or closed likewise
    client_body_timeout {body_timeout}s;
    send_timeout 60s;
    keepalive_timeout {keepalive}s;
    client_max_body_size {limit_mb}m;
    client_body_buffer_size 1m;
    upstream gunicorn {{
        server unix:{directory}/{SOCKET_NAME};
        keepalive {UPSTREAM_KEEPALIVE};
    }}
    server {{
        listen {listen} backlog=1024;
        location / {{
            proxy_pass http://gunicorn;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_read_timeout {UPSTREAM_READ_TIMEOUT}s;
            proxy_next_upstream off;  # a POST gunicorn has started on is never sent twice
        }}
        error_page 413 @too_large;
        location @too_large {{
            default_type application/json;
            return 413 '{too_large}';
        }}
    }}
}}
"""


def find_nginx():
    """The nginx binary: on PATH, else where Debian puts it (/usr/sbin, often not on a user's PATH); None if neither."""
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )


class Front:
    """nginx running as a child of the gunicorn master, for as long as the server runs."""

    def __init__(self, host, port, **limits):
        self.nginx = find_nginx()
        if self.nginx is None:
            raise ContractError(
                "--front nginx: no nginx on this system (install Debian's nginx-light, or run with --front none)"
            )
        self.host, self.port = host, port
        self.directory = tempfile.mkdtemp(prefix="disttrain-front-")  # 0700: only this user reaches the socket
        self.socket = os.path.join(self.directory, SOCKET_NAME)
        self.config = os.path.join(self.directory, "nginx.conf")
        user = None
        if os.geteuid() == 0:
            # nginx started by root runs its worker as an unprivileged user (nobody): that user's group
            # alone may enter the directory besides root
            import grp
            import pwd

            nobody = pwd.getpwnam("nobody")
            user = f"nobody {grp.getgrgid(nobody.pw_gid).gr_name}"
            os.chown(self.directory, -1, nobody.pw_gid)
            os.chmod(self.directory, 0o750)
        with open(self.config, "w") as fh:
            fh.write(nginx_config(self.directory, host, port, user=user, **limits))
        self.proc = None
        self.closing = False
        self.exited = threading.Event()  # nginx has stopped
        self.died = threading.Event()  # ... while the server ran (not stopped by close)

    def start(self, on_exit):
        """Start nginx; return once it holds its port (it writes its pid file after it has bound it).
        ContractError if it exits first (its own message, e.g. the port in use, is on stderr above).
        `on_exit` is called (in a thread) if nginx stops while the server runs."""
        # in a process group of its own: its worker outlives a master that was killed, and close() ends both
        self.proc = subprocess.Popen(
            [self.nginx, "-p", self.directory, "-c", self.config, "-e", "stderr"],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        pid_file = os.path.join(self.directory, "nginx.pid")
        deadline = time.monotonic() + START_TIMEOUT
        while not os.path.exists(pid_file):
            if self.proc.poll() is not None:
                self.close()
                raise ContractError(
                    f"--front nginx: nginx could not start on {self.host}:{self.port} "
                    f"(exit {self.proc.returncode}; its message is above)"
                )
            if time.monotonic() > deadline:
                self.close()
                raise ContractError(f"--front nginx: nginx did not open {self.host}:{self.port} in {START_TIMEOUT} s")
            time.sleep(0.02)

        def watch():
            # (gunicorn's master reaps every child it sees exit, nginx too: then wait() returns at once)
            self.proc.wait()
            self.exited.set()
            if not self.closing:
                self.died.set()
                on_exit()

        threading.Thread(target=watch, name="front-watch", daemon=True).start()

    def close(self):
        """Stop nginx (SIGQUIT: it finishes the requests it holds, up to a few seconds), then whatever is
        left of its process group (a worker whose master was killed), and remove its directory."""
        self.closing = True
        if self.proc is not None:
            if self.proc.poll() is None and not self.exited.is_set():
                self.proc.send_signal(signal.SIGQUIT)
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.directory, ignore_errors=True)
