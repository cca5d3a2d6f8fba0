# tests/cluster: the chart run the way a cluster runs it (see cluster_runtime.py). chartlib (helm,
# rendering) lives in tests/chart; the translation unit tests run in `make test`, the Docker runs
# only under `make test-cluster` (DISTTRAIN_TEST_CLUSTER=1).
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "chart"))

import cluster_runs  # noqa: E402


def pytest_terminal_summary(terminalreporter):
    RESULTS = cluster_runs.RESULTS
    if not RESULTS:
        return
    terminalreporter.section("make test-cluster: releases run from helm template")
    terminalreporter.write_line(
        f"{'run':28} {'strategy':12} {'accuracy':>9} {'pipeline':>9} {'jobs done':>10} {'served':>8} {'total':>7}"
    )
    for name, r in RESULTS.items():
        pipeline = "-" if r.get("pipeline_accuracy") is None else f"{r['pipeline_accuracy']:.4f}"
        terminalreporter.write_line(
            f"{name:28} {r.get('strategy', ''):12} {r.get('accuracy', float('nan')):9.4f} {pipeline:>9} "
            f"{r.get('jobs_done_s', float('nan')):9.1f}s {r.get('served_s', float('nan')):7.1f}s {r.get('total_s', float('nan')):6.1f}s"
            + (f"  ({r['note']})" if r.get("note") else "")
        )
    noops = sorted({n for r in RESULTS.values() for n in r.get("noops", [])})
    if noops:
        terminalreporter.write_line(
            "fields taken as no-ops on one node (reasons: charts/disttrain/README.md): " + ", ".join(noops)
        )
