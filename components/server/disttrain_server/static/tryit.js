// The try-it form of a table or array model: the fields (or JSON boxes) become one instance of
// POST /v1/models/NAME:predict, and the answer is shown as class probabilities or the predicted value.
// A typed table's form (data-typed) has one field per column, and its instance is an object of the
// columns: a choice's value, a text, a number, or null for an empty field where the column allows it.
(function () {
  "use strict";

  const app = document.getElementById("app");
  const card = document.getElementById("tryit-card");
  if (!card) return; // no model yet: the page only shows why

  const name = app.dataset.modelName;
  const labels = JSON.parse(app.dataset.labels);
  const inputs = JSON.parse(card.dataset.inputs);
  const examples = JSON.parse(card.dataset.examples);
  const regression = card.dataset.problem === "regression";
  const typed = card.dataset.typed === "true";
  const target = card.dataset.target || "value";
  const button = document.getElementById("predict");
  const exampleButton = document.getElementById("example");
  const note = document.getElementById("example-note");
  const result = document.getElementById("result");
  let current = 0;

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text; // never innerHTML: labels, names and errors are data
    return node;
  }

  // flat values -> nested lists of `shape` (row-major); shape [] is one number
  function nest(flat, shape) {
    if (shape.length === 0) return flat[0];
    if (shape.length === 1) return flat.slice();
    const inner = shape.slice(1).reduce((a, b) => a * b, 1);
    const out = [];
    for (let i = 0; i < shape[0]; i++) out.push(nest(flat.slice(i * inner, (i + 1) * inner), shape.slice(1)));
    return out;
  }

  function fieldsOf(input) {
    return Array.from(card.querySelectorAll("input[data-input], select[data-input]")).filter(
      (f) => f.dataset.input === input.name
    );
  }

  function boxOf(input) {
    return document.getElementById(input.id);
  }

  function fill(index) {
    const example = examples[index];
    if (!example) return;
    for (const input of inputs) {
      const values = example.values[input.name];
      if (input.box) {
        if (values) boxOf(input).value = JSON.stringify(nest(values, input.shape.map((s) => (s === null ? values.length : s))));
      } else {
        for (const field of fieldsOf(input)) field.value = values ? String(values[Number(field.dataset.index)]) : "";
      }
    }
    const source = examples.length > 1 || example.truth ? "held-out example " + (index + 1) + " of " + examples.length : "";
    if (source) note.textContent = "Prefilled with " + source + (example.truth ? " (its true " + example.truth + ")" : "") + ".";
  }

  // One column's field as its JSON value (typed tables): null for an empty field where a value may be missing.
  function columnValue(input) {
    const spec = input.fields[0];
    const field = fieldsOf(input)[0];
    if (spec.control === "choice") {
      if (field.value === "") return null;
      return spec.boolean ? field.value === "true" : field.value; // (a text column may hold "true")
    }
    if (spec.control === "text") return field.value === "" ? null : field.value;
    const text = field.value.trim();
    // (a number field holding what is not a number reads "", but says so: never sent as missing)
    if (field.validity.badInput || (text !== "" && !Number.isFinite(Number(text))))
      throw new Error("enter a number for " + spec.label);
    if (text === "") {
      if (spec.optional) return null;
      throw new Error("enter a number for " + spec.label + " (this column has no missing values)");
    }
    return Number(text);
  }

  // The form as one instance: the value of the model's one input, or an object of its named inputs.
  function instance() {
    const values = {};
    if (typed) {
      for (const input of inputs) values[input.name] = columnValue(input);
      return values;
    }
    for (const input of inputs) {
      if (input.box) {
        try {
          values[input.name] = JSON.parse(boxOf(input).value);
        } catch (err) {
          throw new Error(input.name + ": not valid JSON (" + err.message + ")");
        }
        continue;
      }
      const flat = fieldsOf(input).map((field) => {
        const text = field.value.trim();
        const label = card.querySelector('label[for="' + field.id + '"]').textContent;
        if (text === "" || !Number.isFinite(Number(text))) throw new Error("enter a number for " + label);
        return Number(text);
      });
      values[input.name] = nest(flat, input.shape);
    }
    return inputs.length === 1 ? values[inputs[0].name] : values;
  }

  function showProbabilities(probs) {
    window.disttrainBars.showProbabilities(result, labels, probs); // bars.js
  }

  function showValue(value) {
    const headline = element("p", "headline", target + ": " + Number(value.toPrecision(6)));
    headline.dataset.value = String(value); // the API's number, unrounded
    result.replaceChildren(headline, element("p", "hint", "the model's prediction of " + target + " (regression)"));
  }

  async function predict() {
    button.disabled = true;
    result.replaceChildren(element("p", "muted", "Predicting…"));
    try {
      const body = await disttrainApi.call("POST", "/v1/models/" + encodeURIComponent(name) + ":predict",
        JSON.stringify({ instances: [instance()] }));
      if (regression) showValue(body.predictions[0]);
      else showProbabilities(body.predictions[0]);
    } catch (err) {
      result.replaceChildren(element("p", "error", err.message));
    } finally {
      button.disabled = false;
    }
  }

  button.addEventListener("click", predict);
  card.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && event.target.tagName === "INPUT") predict();
  });
  if (exampleButton) {
    exampleButton.addEventListener("click", () => {
      current = (current + 1) % examples.length;
      fill(current);
      result.replaceChildren(); // the last result was for other values
    });
  }
  fill(0);
})();
