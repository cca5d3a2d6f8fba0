"""Identical requests fired at a real server from many threads at once, every answer compared with the serial one.

A barrier starts each round's requests together (THREADS of them: as many as the server's default
2 gunicorn workers x 8 threads can take at once), so every round is concurrent by construction, not
by luck; a wrong answer is counted, never tolerated."""

import http.client
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

THREADS = 16  # the server's defaults: 2 workers x 8 threads


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    body: bytes = None

    def send(self, conn):
        """(status, body bytes)"""
        headers = {"Content-Type": "application/json"} if self.body is not None else {}
        conn.request(self.method, self.path, body=self.body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()


def connection(base):
    parts = urlsplit(base)
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)


def serial_answers(base, calls):
    conn = connection(base)
    try:
        return [call.send(conn) for call in calls]
    finally:
        conn.close()


def concurrent_answers(base, calls, total, threads=THREADS, follow_up=None):
    """[(call index, status, body)] for `total` requests: round r, thread t sends calls[(r + t) % len(calls)],
    so every call runs beside the others and in every thread. Each thread keeps its own keep-alive connection.
    follow_up(conn, status, body), if given, runs in the thread after each answer (before the next barrier)."""
    rounds = -(-total // threads)
    barrier = threading.Barrier(threads, timeout=300)

    def run(thread):
        conn, got = connection(base), []
        try:
            for r in range(rounds):
                barrier.wait()
                i = (r + thread) % len(calls)
                got.append((i, *calls[i].send(conn)))
                if follow_up is not None:
                    follow_up(conn, *got[-1][1:])
        except BaseException:
            barrier.abort()  # the other threads stop at once instead of waiting out the barrier's timeout
            raise
        finally:
            conn.close()
        return got

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(run, t) for t in range(threads)]
        failed = [future.exception() for future in futures if future.exception() is not None]
    if failed:  # the thread that failed says why; the others only saw the barrier broken
        raise next((e for e in failed if not isinstance(e, threading.BrokenBarrierError)), failed[0])
    return [answer for future in futures for answer in future.result()]


def differing(answers, expected, same=lambda got, want: got == want):
    """The answers unlike the serial one of their call: [(call index, status, first bytes)]."""
    return [(i, status, body[:200]) for i, status, body in answers if not same((status, body), expected[i])]
