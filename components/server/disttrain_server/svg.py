"""The run page's training curves (one line per worker) as the plain data templates/run.html draws as
inline SVG: points in pixels, axis ticks, colours."""

from disttrain_server.runs_data import number

# Line colours of the per-worker curves (matplotlib's tab10, as report.png draws them).
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def svg_chart(series, key, title, width=420, height=220):
    """What the template needs to draw one line per worker as inline SVG (no script: the CSP allows none
    inline, and the page must work offline): polyline points in pixels, axis ticks, colours."""
    lines = []
    for index, history in series:
        points = [(number(e.get("epoch")), number(e.get(key))) for e in history]
        points = [(x, y) for x, y in points if x is not None and y is not None]
        if points:
            lines.append((index, points))
    if not lines:
        return None
    left, right, top, bottom = 48, 10, 10, 30
    xs = [x for _, points in lines for x, _ in points]
    ys = [y for _, points in lines for _, y in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = (0.0, 1.0) if "accuracy" in key and min(ys) >= 0 and max(ys) <= 1 else (min(ys), max(ys))
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5

    def px(x, y):
        return (
            left + (x - x0) / (x1 - x0) * (width - left - right),
            top + (y1 - y) / (y1 - y0) * (height - top - bottom),
        )

    y_ticks = [(px(x0, v)[1], f"{v:.3g}") for v in (y0 + (y1 - y0) * i / 4 for i in range(5))]
    x_ticks = [
        (px(v, y0)[0], f"{v:g}") for v in sorted({round(x0 + (x1 - x0) * i / 4) for i in range(5)}) if x0 <= v <= x1
    ]
    return {
        "title": title,
        "width": width,
        "height": height,
        "left": left,
        "bottom": height - bottom,
        "right": width - right,
        "top": top,
        "y_ticks": y_ticks,
        "x_ticks": x_ticks,
        "lines": [
            {
                "label": f"worker {index}",
                "color": COLORS[i % len(COLORS)],
                "points": " ".join(f"{a:.1f},{b:.1f}" for a, b in (px(x, y) for x, y in points)),
                "dots": [px(x, y) for x, y in points] if len(points) == 1 else [],
            }
            for i, (index, points) in enumerate(lines)
        ],
    }
