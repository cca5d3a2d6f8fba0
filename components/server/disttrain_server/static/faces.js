// The face page calls the same JSON API as any other client:
// POST /v1/models/NAME:search, GET/POST /v1/gallery, DELETE /v1/gallery/ID.
// Photos go up as multipart forms (no base64: a third smaller). Every call goes through
// disttrainApi (api.js): the headers the server asks for, and the API token once the user gave it.
(function () {
  "use strict";

  const app = document.getElementById("app");
  const name = app.dataset.modelName;
  const photo = document.getElementById("photo");
  const searchButton = document.getElementById("search");
  const preview = document.getElementById("preview");
  const faceBox = document.getElementById("face-box");
  const matches = document.getElementById("matches");
  const enrolName = document.getElementById("enrol-name");
  const enrolPhoto = document.getElementById("enrol-photo");
  const enrolButton = document.getElementById("enrol");
  const enrolStatus = document.getElementById("enrol-status");
  const gallery = document.getElementById("gallery");
  const galleryCount = document.getElementById("gallery-count");
  // Gallery reads need the token (the default, or every /v1 call does): an <img src> cannot send it,
  // so thumbnails are fetched.
  const tokenForReads = app.dataset.tokenForFaceReads === "true";
  const readOnly = app.dataset.readOnlyGallery === "true";
  const PREVIEW_MAX = 320; // CSS pixels; the box is drawn in the photo's own pixels, scaled the same way

  let shown = null; // the decoded photo on the canvas, to redraw it with its face box

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text; // never innerHTML: names and errors are data
    return node;
  }

  const call = disttrainApi.call;

  function showThumbnail(img, url) {
    if (!tokenForReads) {
      img.src = url; // the browser may keep it (Cache-Control: private)
      return;
    }
    disttrainApi.imageUrl(url).then((objectUrl) => {
      img.addEventListener("load", () => URL.revokeObjectURL(objectUrl), { once: true });
      img.src = objectUrl;
    }).catch(() => {});
  }

  function form(fields) {
    const data = new FormData();
    for (const [key, value] of Object.entries(fields)) data.append(key, value);
    return data;
  }

  // -- search
  function draw(box) {
    const scale = Math.min(1, PREVIEW_MAX / Math.max(shown.width, shown.height));
    preview.width = Math.round(shown.width * scale);
    preview.height = Math.round(shown.height * scale);
    const context = preview.getContext("2d");
    context.drawImage(shown, 0, 0, preview.width, preview.height);
    if (box) {
      const [x, y, w, h] = box.map((v) => v * scale);
      context.lineWidth = 3;
      context.strokeStyle = "#ffd400"; // visible on dark and light photos, with a dark edge
      context.strokeRect(x, y, w, h);
      context.lineWidth = 1;
      context.strokeStyle = "rgba(0, 0, 0, 0.6)";
      context.strokeRect(x - 2, y - 2, w + 4, h + 4);
    }
    preview.hidden = false;
  }

  function showMatches(answer) {
    const [x, y, w, h] = answer.face.box;
    const face = answer.face;
    const sure = face.confidence === undefined ? "" : " · confidence " + face.confidence.toFixed(1) + ", " + face.eyes + (face.eyes === 1 ? " eye" : " eyes");
    faceBox.textContent = "Face at (" + x + ", " + y + "), " + w + "×" + h + " px" + sure + (answer.note ? " · " + answer.note : "");
    faceBox.hidden = false;
    draw(answer.face.box);
    if (!answer.matches.length) {
      matches.replaceChildren(element("p", "muted", answer.note || "No matches."));
      return;
    }
    const list = element("ol", "match-list");
    answer.matches.forEach((match, rank) => {
      const item = element("li", rank === 0 ? "match best" : "match");
      const thumb = element("img", "thumb");
      showThumbnail(thumb, "/v1/gallery/" + encodeURIComponent(match.id) + "/thumbnail.png");
      thumb.alt = match.name;
      const text = element("div", "match-text");
      text.append(element("span", "match-name", match.name), element("span", "match-distance", match.distance.toFixed(3)));
      item.append(element("span", "rank", String(rank + 1)), thumb, text);
      list.append(item);
    });
    matches.replaceChildren(element("p", "hint", "Nearest first: the smaller the distance, the more alike"), list);
  }

  async function search() {
    const file = photo.files[0];
    if (!file) {
      matches.replaceChildren(element("p", "error", "choose a photo first"));
      return;
    }
    searchButton.disabled = true;
    matches.replaceChildren(element("p", "muted", "Searching…"));
    try {
      showMatches(await call("POST", "/v1/models/" + encodeURIComponent(name) + ":search", form({ image: file })));
    } catch (err) {
      faceBox.hidden = true;
      matches.replaceChildren(element("p", "error", err.message));
    } finally {
      searchButton.disabled = false;
    }
  }

  photo.addEventListener("change", async () => {
    matches.replaceChildren();
    faceBox.hidden = true;
    preview.hidden = true;
    shown = null;
    const file = photo.files[0];
    if (!file) return;
    try {
      shown = await createImageBitmap(file);
      draw(null);
    } catch (err) {
      // The browser cannot show it; the server still says what is wrong with it on Search.
    }
  });
  searchButton.addEventListener("click", search);

  // -- gallery
  async function refreshGallery() {
    const answer = await call("GET", "/v1/gallery");
    galleryCount.textContent = answer.count === 1 ? "1 person" : answer.count + " people";
    if (!answer.count) {
      gallery.replaceChildren(element("li", "muted empty", "Nobody is enrolled yet."));
      return;
    }
    gallery.replaceChildren(
      ...answer.entries.map((entry) => {
        const item = element("li", "gallery-entry");
        item.dataset.id = entry.id;
        const thumb = element("img", "thumb");
        showThumbnail(thumb, entry.thumbnail);
        thumb.alt = entry.name;
        if (readOnly) {
          item.append(thumb, element("span", "entry-name", entry.name));
          return item;
        }
        const remove = element("button", "delete", "Delete");
        remove.type = "button";
        remove.title = "Remove " + entry.name + " from the gallery";
        remove.addEventListener("click", async () => {
          remove.disabled = true;
          try {
            await call("DELETE", "/v1/gallery/" + encodeURIComponent(entry.id));
          } catch (err) {
            enrolStatus.replaceChildren(element("span", "error", err.message));
          }
          await refreshGallery();
        });
        item.append(thumb, element("span", "entry-name", entry.name), remove);
        return item;
      })
    );
  }

  async function enrol() {
    const file = enrolPhoto.files[0];
    if (!file) {
      enrolStatus.replaceChildren(element("span", "error", "choose a photo of the person first"));
      return;
    }
    enrolButton.disabled = true;
    try {
      const entry = await call("POST", "/v1/gallery", form({ name: enrolName.value, image: file }));
      enrolStatus.replaceChildren(element("span", "ok", "Enrolled " + entry.name + (entry.note ? " (" + entry.note + ")" : "")));
      enrolName.value = "";
      enrolPhoto.value = "";
      await refreshGallery();
    } catch (err) {
      enrolStatus.replaceChildren(element("span", "error", err.message));
    } finally {
      enrolButton.disabled = false;
    }
  }

  if (enrolButton) enrolButton.addEventListener("click", enrol);
  refreshGallery().catch((err) => gallery.replaceChildren(element("li", "error", err.message)));
})();
