// The run in training: polls /progress.json (the workers' progress.json files, which they rewrite at
// most once a second) and draws a bar per worker and the per-epoch curves as inline SVG; once the
// aggregator has published, the run's report.png instead. Nothing is fetched from another origin.
(function () {
  "use strict";

  const card = document.getElementById("progress-card");
  if (!card) return;
  const app = document.getElementById("app");
  const runLabel = document.getElementById("progress-run");
  const stateLine = document.getElementById("progress-state");
  const workersBox = document.getElementById("progress-workers");
  const curvesBox = document.getElementById("progress-curves");
  const reportBox = document.getElementById("progress-report");
  const reportImg = document.getElementById("report-plot");
  const analysisImg = document.getElementById("analysis-plot");
  const analysisWithheld = document.getElementById("analysis-withheld");
  const dashboardLink = document.getElementById("progress-dashboard");
  const heading = card.querySelector("h2");

  // The trainers write at most once a second; polling twice as often keeps the page within 2 s of them
  // (at most ~1 s for the file plus 0.5 s for the poll, and the request).
  const TRAINING_POLL_MS = 500;
  const IDLE_POLL_MS = 5000; // no run, or a finished one: a new run is noticed within 5 s
  const SVG = "http://www.w3.org/2000/svg";
  const COLOURS = ["#2f6fde", "#d9480f", "#2b8a3e", "#862e9c", "#e67700", "#0b7285", "#c2255c", "#5c940d"];

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text; // never innerHTML: the files are data
    return node;
  }

  function svg(tag, attributes, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function number(value, digits) {
    return typeof value === "number" && isFinite(value) ? value.toFixed(digits) : "–";
  }

  function duration(seconds) {
    if (typeof seconds !== "number" || !isFinite(seconds)) return "–";
    const s = Math.round(seconds);
    const h = Math.floor(s / 3600);
    const m = Math.floor((s % 3600) / 60);
    const rest = String(s % 60).padStart(2, "0");
    return h ? `${h}:${String(m).padStart(2, "0")}:${rest}` : `${m}:${rest}`;
  }

  function colour(worker) {
    return COLOURS[worker % COLOURS.length];
  }

  // One worker: its name and state, a bar of the whole run's steps, then the running numbers.
  // data-time and data-global-step are the file's own (the browser test compares them with the file).
  function workerRow(w) {
    const row = element("div", "worker");
    row.dataset.worker = w.worker;
    row.dataset.time = w.time;
    row.dataset.globalStep = w.global_step;
    const head = element("div", "worker-head");
    const name = element("span", "worker-name", w.tag || `worker ${w.worker}`);
    name.style.color = colour(w.worker);
    head.append(name);
    if (w.error) {
      head.append(element("span", "worker-state failed", w.state === "failed" ? "failed" : "unreadable"));
      row.append(head, element("p", "error", w.error));
      return row;
    }
    head.append(
      element("span", "worker-epoch", `epoch ${w.epoch}/${w.epochs} · step ${w.step}/${w.steps_per_epoch}`),
      element("span", `worker-state ${w.state}`, w.state)
    );
    const track = element("div", "track");
    const fill = element("div", "fill");
    const total = w.total_steps || 1;
    const done = w.state === "done" ? total : Math.min(w.global_step || 0, total);
    fill.style.width = `${(100 * done) / total}%`; // (CSSOM: allowed by the page's CSP, unlike a style attribute)
    track.append(fill);
    track.setAttribute("role", "progressbar");
    track.setAttribute("aria-valuemin", "0");
    track.setAttribute("aria-valuemax", String(total));
    track.setAttribute("aria-valuenow", String(done));
    const stats = element("div", "worker-stats");
    stats.append(
      element("span", "", `loss ${number(w.loss, 4)}`),
      // the step's running score: "accuracy", or a regression's "mae" (progress.json's "score" names it)
      element("span", "", `${w.score || "accuracy"} ${number(w[w.score || "accuracy"], 4)}`),
      element("span", "", `${typeof w.examples_per_sec === "number" ? Math.round(w.examples_per_sec).toLocaleString("en") : "–"} examples/s`),
      element("span", "", `ETA ${w.state === "done" ? "done" : duration(w.eta_sec)}`),
      element("span", "worker-age", `updated ${number(w.age_sec, 1)} s ago`)
    );
    // a differentially private run: the privacy budget spent by the epochs finished so far
    const spent = (w.history || []).filter((e) => typeof e.epsilon === "number").pop();
    if (spent) stats.append(element("span", "worker-epsilon", `ε ${number(spent.epsilon, 2)} after epoch ${spent.epoch}`));
    row.append(head, track, stats);
    return row;
  }

  // A line chart of one metric per worker: its finished epochs, then where it is in the epoch now.
  function chart(title, key, workers, fixedMax) {
    const W = 320, H = 180, left = 40, right = 10, top = 22, bottom = 26;
    const lines = workers.map((w) => {
      const points = (w.history || []).filter((e) => typeof e[key] === "number").map((e) => [e.epoch, e[key]]);
      if (w.state === "training" && typeof w[key] === "number" && w.steps_per_epoch) {
        points.push([w.epoch - 1 + w.step / w.steps_per_epoch, w[key]]); // the epoch under way
      }
      return { worker: w.worker, points };
    });
    const epochs = Math.max(1, ...workers.map((w) => w.epochs || 1));
    const values = lines.flatMap((l) => l.points.map((p) => p[1]));
    const yMax = fixedMax || Math.max(1e-6, ...values) * 1.1;
    const x = (epoch) => left + ((W - left - right) * epoch) / epochs;
    const y = (value) => top + (H - top - bottom) * (1 - Math.min(value, yMax) / yMax);
    const box = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "curve", role: "img", "aria-label": title });
    box.dataset.metric = key;
    box.append(svg("text", { x: left, y: 14, class: "curve-title" }, title));
    for (let i = 0; i <= 4; i++) {
      const value = (yMax * i) / 4;
      box.append(svg("line", { x1: left, x2: W - right, y1: y(value), y2: y(value), class: "grid" }));
      box.append(svg("text", { x: left - 4, y: y(value) + 3, class: "tick", "text-anchor": "end" }, value.toFixed(2)));
    }
    const every = Math.max(1, Math.ceil(epochs / 8));
    for (let e = 0; e <= epochs; e += every) {
      box.append(svg("text", { x: x(e), y: H - bottom + 14, class: "tick", "text-anchor": "middle" }, String(e)));
    }
    box.append(svg("text", { x: W - right, y: H - 2, class: "tick", "text-anchor": "end" }, "epoch"));
    for (const line of lines) {
      if (!line.points.length) continue;
      const path = line.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
      box.append(svg("polyline", { points: path, class: "series", stroke: colour(line.worker) }));
      for (const p of line.points) {
        box.append(svg("circle", { cx: x(p[0]).toFixed(1), cy: y(p[1]).toFixed(1), r: 2.2, fill: colour(line.worker) }));
      }
    }
    return box;
  }

  // training accuracy (a fraction: 0..1 axis), or a regression's training MAE (the target's unit)
  function scoreChart(workers) {
    const score = workers[0].score || "accuracy";
    return score === "accuracy" ? chart("training accuracy", "accuracy", workers, 1) : chart(`training ${score.toUpperCase()}`, score, workers);
  }

  function showTraining(data) {
    heading.firstChild.textContent = "Training ";
    const workers = data.workers;
    stateLine.textContent = data.state === "starting"
      ? "The run has started: the data is being copied or the trainers are starting."
      : `${workers.length} worker(s) reporting; refreshed twice a second.`;
    workersBox.replaceChildren(...workers.map(workerRow));
    const drawn = workers.filter((w) => !w.error);
    curvesBox.replaceChildren(
      ...(drawn.length ? [chart("training loss", "loss", drawn), scoreChart(drawn)] : [])
    );
    reportBox.hidden = true;
  }

  function showFinished(data) {
    heading.firstChild.textContent = "Finished run ";
    stateLine.textContent = "The aggregator has published this run's model.";
    workersBox.replaceChildren();
    curvesBox.replaceChildren();
    if (data.report) {
      if (reportImg.getAttribute("src") !== data.report) reportImg.src = data.report;
      reportBox.hidden = false;
    }
    analysisImg.hidden = !data.analysis;
    if (data.analysis && analysisImg.getAttribute("src") !== data.analysis) analysisImg.src = data.analysis;
    // the server leaves out a plot of single held-out examples or of people by name, and says why
    analysisWithheld.hidden = !data.analysis_withheld;
    analysisWithheld.textContent = data.analysis_withheld ? "analysis.png is not shown: " + data.analysis_withheld + "." : "";
  }

  // The page was rendered before any model existed: once the run's model is served, load the page again.
  async function reloadWhenServed() {
    if (app.dataset.task) return;
    const response = await fetch("/readyz", { cache: "no-store" }).catch(() => null);
    if (response && response.ok) window.location.reload();
  }

  async function poll() {
    let delay = IDLE_POLL_MS;
    try {
      const response = await fetch(card.dataset.url, { cache: "no-store", credentials: "same-origin" });
      const data = await response.json();
      if (!response.ok) throw new Error(data.error || "HTTP " + response.status);
      card.hidden = data.state === "none";
      card.dataset.state = data.state;
      runLabel.textContent = data.run || "";
      dashboardLink.hidden = !data.dashboard;
      if (data.dashboard) dashboardLink.href = data.dashboard;
      if (data.state === "finished") {
        showFinished(data);
        await reloadWhenServed();
      } else if (data.state !== "none") {
        showTraining(data);
        delay = TRAINING_POLL_MS;
      }
    } catch (err) {
      stateLine.textContent = "Progress unavailable: " + err.message; // (shown if the card is; tried again)
    }
    window.setTimeout(poll, delay);
  }

  poll();
})();
