// Every call the page makes to the JSON API goes through disttrainApi.call, which
//  - sends X-Requested-With: the server refuses multipart bodies without it, so that a form on
//    another site cannot send one (a custom header forces the browser to ask first);
//  - sends the API token as "Authorization: Bearer ..." once the user has given it;
//  - asks for the token once, when the server answers 401 (it needs one for this call), keeps it
//    in sessionStorage (gone when the tab closes) and tries the call again.
// With no token configured on the server nothing is ever asked.
(function () {
  "use strict";

  const KEY = "disttrain-api-token";

  function token() {
    try {
      return sessionStorage.getItem(KEY);
    } catch (err) {
      return null; // storage disabled: ask again next time
    }
  }

  function remember(value) {
    try {
      if (value) sessionStorage.setItem(KEY, value);
      else sessionStorage.removeItem(KEY);
    } catch (err) {
      // storage disabled: the token lives only as long as this call
    }
  }

  function send(method, url, body, value) {
    const headers = { "X-Requested-With": "fetch" };
    if (value) headers.Authorization = "Bearer " + value;
    if (typeof body === "string") headers["Content-Type"] = "application/json";
    return fetch(url, { method, body, headers, credentials: "same-origin" });
  }

  // fetch() with the headers above; on a 401 asks for the token (once) and tries again.
  async function request(method, url, body) {
    let value = token();
    let response = await send(method, url, body, value);
    if (response.status !== 401) return response;
    if (token() && token() !== value) {
      // Another call asked for the token while this one was on its way: use that one.
      value = token();
      response = await send(method, url, body, value);
      if (response.status !== 401) return response;
    }
    const asked = window.prompt(
      value ? "The API token was not accepted. Enter the API token:" : "This server needs an API token for this. Enter the API token:"
    );
    remember(null);
    if (!asked || !asked.trim()) return response; // cancelled: the caller shows the server's 401 message
    value = asked.trim();
    response = await send(method, url, body, value);
    if (response.status !== 401) remember(value); // a wrong token is not kept: the next call asks again
    return response;
  }

  // The JSON answer, or an Error carrying the server's message.
  async function call(method, url, body) {
    const response = await request(method, url, body);
    const answer = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(answer.error || "HTTP " + response.status);
    return answer;
  }

  // An object URL of an image the API serves (thumbnails): fetched with the token, since an
  // <img src> cannot send one when every /v1 call needs it.
  async function imageUrl(url) {
    const response = await request("GET", url);
    if (!response.ok) throw new Error("HTTP " + response.status);
    return URL.createObjectURL(await response.blob());
  }

  window.disttrainApi = { call, request, imageUrl };
})();
