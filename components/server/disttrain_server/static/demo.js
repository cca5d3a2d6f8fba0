// The demo page calls the same JSON API as any other client: POST /v1/models/NAME:predict.
(function () {
  "use strict";

  const app = document.getElementById("app");
  const button = document.getElementById("predict");
  const result = document.getElementById("result");
  if (!button) return; // no model yet: the page only shows why

  const name = app.dataset.modelName;
  const labels = JSON.parse(app.dataset.labels);
  const review = document.getElementById("review");
  const exampleButton = document.getElementById("example");
  const imageInput = document.getElementById("image");
  const preview = document.getElementById("preview");
  // "Try an example" fills the box with these in turn, praise then a pan, so both outcomes show.
  const EXAMPLES = [
    "A wonderful, moving, brilliant film; one of the best of the year.",
    "A dull, boring mess. The plot goes nowhere and the acting is awful; a total waste of time.",
    "The cast is superb and the story kept me gripped to the very last scene. I loved every minute.",
    "I wanted to like it, but the script is lazy and the jokes fall flat. Not worth watching.",
  ];
  let nextExample = 0;

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text; // never innerHTML: labels and errors are data
    return node;
  }

  function showError(message) {
    result.replaceChildren(element("p", "error", message));
  }

  function showProbabilities(probs) {
    window.disttrainBars.showProbabilities(result, labels, probs); // bars.js
  }

  function readAsBase64(file) {
    return new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve(String(reader.result).replace(/^data:[^,]*,/, ""));
      reader.onerror = () => reject(new Error("could not read " + file.name));
      reader.readAsDataURL(file);
    });
  }

  async function instance() {
    if (review) return review.value; // the server says if it is empty or too long
    const file = imageInput.files[0];
    if (!file) throw new Error("choose an image file first");
    return { b64: await readAsBase64(file) };
  }

  async function refreshVersion() {
    // A newly published model may have been picked up since the page was rendered.
    const status = (await disttrainApi.call("GET", "/v1/models/" + encodeURIComponent(name))).model_version_status[0];
    const version = document.getElementById("version");
    if (!version || status.state !== "AVAILABLE" || version.dataset.version === status.version) return;
    const published = new Date(Number(status.version) * 1000).toISOString(); // 2026-01-31T12:34:56.000Z
    version.dataset.version = status.version;
    version.title = "version " + status.version;
    version.dateTime = published.slice(0, 19) + "Z";
    version.textContent = published.slice(0, 16).replace("T", " ") + " UTC"; // as web.utc_time writes it
  }

  async function predict() {
    button.disabled = true;
    result.replaceChildren(element("p", "muted", "Predicting…"));
    try {
      // disttrainApi (api.js) adds the headers the server asks for and the token once given.
      const body = await disttrainApi.call("POST", "/v1/models/" + encodeURIComponent(name) + ":predict",
        JSON.stringify({ instances: [await instance()] }));
      showProbabilities(body.predictions[0]);
      refreshVersion().catch(() => {});
    } catch (err) {
      showError(err.message);
    } finally {
      button.disabled = false;
    }
  }

  button.addEventListener("click", predict);
  if (review) {
    review.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) predict();
    });
  }
  if (exampleButton) {
    exampleButton.addEventListener("click", () => {
      review.value = EXAMPLES[nextExample];
      nextExample = (nextExample + 1) % EXAMPLES.length;
      result.replaceChildren(); // the last result was for other text
      review.focus();
    });
  }
  if (imageInput) {
    imageInput.addEventListener("change", () => {
      const file = imageInput.files[0];
      if (preview.src) URL.revokeObjectURL(preview.src);
      preview.hidden = !file;
      if (file) preview.src = URL.createObjectURL(file);
      result.replaceChildren();
    });
  }
})();
