// A classifier's answer as probability bars, shared by the demo page's scripts (demo.js for text and
// images, tryit.js for tables and arrays): the most likely label first, as a headline, then one bar per
// label, widest first. Elements are built with textContent, never innerHTML (labels are data), and the
// bars' widths are set through the CSSOM, which the page's CSP allows (a style attribute it would not).
(function () {
  "use strict";

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function percent(p) {
    return (100 * p).toFixed(1) + "%";
  }

  // fill `result` with the bars of `probs` (one per entry of `labels`)
  function showProbabilities(result, labels, probs) {
    const order = probs.map((p, i) => i).sort((a, b) => probs[b] - probs[a]);
    const best = order[0];
    const rows = order.map((i) => {
      const row = element("div", i === best ? "row best" : "row");
      const fill = element("div", "fill");
      fill.style.width = percent(probs[i]);
      const track = element("div", "track");
      track.append(fill);
      row.append(element("span", "label", labels[i]), track, element("span", "value", percent(probs[i])));
      return row;
    });
    result.replaceChildren(element("p", "headline", labels[best] + ": " + percent(probs[best])), ...rows);
  }

  window.disttrainBars = { showProbabilities, percent };
})();
