// phaseflow web view: what every page shares. The API calls (with the tab's token, when
// the server wants one), building DOM without innerHTML (text from a session is never
// markup), and reading a session's event stream with fetch() so the token can go in a
// header (EventSource cannot send one), resuming from the last seq it saw.
"use strict";

const PF = (() => {
  const TOKEN_KEY = "phaseflow.token";
  let asking = null;

  function token() {
    return window.sessionStorage.getItem(TOKEN_KEY) || "";
  }

  // Ask for the token once (the form in the page); resolves when one is submitted.
  function askToken() {
    if (asking) return asking;
    const form = document.getElementById("token-form");
    const input = document.getElementById("token-input");
    asking = new Promise((resolve) => {
      form.hidden = false;
      input.focus();
      form.addEventListener("submit", function done(event) {
        event.preventDefault();
        window.sessionStorage.setItem(TOKEN_KEY, input.value.trim());
        input.value = "";
        form.hidden = true;
        form.removeEventListener("submit", done);
        asking = null;
        resolve();
      });
    });
    return asking;
  }

  function headers(extra) {
    const out = Object.assign({}, extra || {});
    const t = token();
    if (t) out["Authorization"] = "Bearer " + t;
    return out;
  }

  class ApiError extends Error {
    constructor(status, problem) {
      super((problem && problem.detail) || ("HTTP " + status));
      this.status = status;
      this.problem = problem || {};
    }
  }

  // One API call: JSON in, JSON out; a 401 asks for the token and tries again.
  async function api(path, options) {
    const opts = Object.assign({}, options || {});
    for (;;) {
      const init = {method: opts.method || "GET", headers: headers(opts.headers),
                    cache: "no-store", signal: opts.signal};
      if (opts.body !== undefined) {
        init.body = JSON.stringify(opts.body);
        init.headers["Content-Type"] = "application/json";
      }
      const response = await fetch(path, init);
      if (response.status === 401) {
        await askToken();
        continue;
      }
      let data = null;
      const text = await response.text();
      if (text) {
        try { data = JSON.parse(text); } catch (e) { data = null; }
      }
      if (!response.ok) throw new ApiError(response.status, data);
      return data;
    }
  }

  // el("p", {class: "x", dataset: {phase: "a"}}, "text", child...)
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "dataset") Object.assign(node.dataset, value);
      else if (key === "text") node.textContent = value;
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function json(value) {
    return JSON.stringify(value, null, 2);
  }

  function when(seconds) {
    if (!seconds) return "";
    const d = new Date(seconds * 1000);
    return d.toLocaleString();
  }

  function showError(message) {
    const box = document.getElementById("page-error");
    if (!box) return;
    box.textContent = message || "";
    box.hidden = !message;
  }

  // The SSE frames of a text stream: {id, data} per frame (comments skipped).
  function parseFrames(buffer) {
    const frames = [];
    let rest = buffer.replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = rest.indexOf("\n\n")) >= 0) {
      const block = rest.slice(0, cut);
      rest = rest.slice(cut + 2);
      let id = null;
      const data = [];
      for (const line of block.split("\n")) {
        if (!line || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const name = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (name === "id") id = value;
        else if (name === "data") data.push(value);
      }
      if (data.length) frames.push({id: id, data: data.join("\n")});
    }
    return {frames: frames, rest: rest};
  }

  // Follow a session's events for ever: each persisted event once, in seq order (a
  // reconnection resumes after the last seq seen, with Last-Event-ID); live-only events
  // (text deltas, seq 0) as they come. onState("live" | "reconnecting" | ...).
  function follow(sessionId, onEvent, onState) {
    let last = 0;
    let stopped = false;
    let controller = null;
    const path = "/v1/sessions/" + encodeURIComponent(sessionId) + "/events";
    // A browser gives one server six connections: a page left behind must give its
    // stream's back at once (a page kept in the back-forward cache would hold it).
    window.addEventListener("pagehide", () => {
      stopped = true;
      if (controller) controller.abort();
    });
    window.addEventListener("pageshow", (event) => {
      if (event.persisted) location.reload(); // back from the cache: start afresh
    });

    async function once() {
      const extra = {"Accept": "text/event-stream"};
      if (last > 0) extra["Last-Event-ID"] = String(last);
      controller = new AbortController();
      const response = await fetch(path, {headers: headers(extra), cache: "no-store",
                                          signal: controller.signal});
      if (response.status === 401) {
        await askToken();
        return;
      }
      if (response.status === 404) {
        stopped = true; // the session was deleted: nothing more will come
        onState("the session is gone");
        return;
      }
      if (!response.ok || !response.body) throw new Error("HTTP " + response.status);
      onState("live");
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, {stream: true});
        const parsed = parseFrames(buffer);
        buffer = parsed.rest;
        for (const frame of parsed.frames) {
          let event;
          try { event = JSON.parse(frame.data); } catch (e) { continue; }
          const seq = frame.id !== null ? Number(frame.id) : 0;
          if (seq) {
            if (seq <= last) continue; // seen already: never shown twice
            last = seq;
          }
          onEvent(event);
        }
      }
    }

    (async () => {
      while (!stopped) {
        try {
          await once();
        } catch (e) {
          // the network or the server went away: try again from the last seq
        }
        if (stopped) break;
        onState("reconnecting");
        await new Promise((r) => setTimeout(r, 1000));
      }
    })();
    return {stop() { stopped = true; if (controller) controller.abort(); },
            get last() { return last; }};
  }

  // The rest of the page's path after `prefix`, decoded (as typed when it is not valid
  // percent-encoding, so a mistyped address shows "no such session", not a script error).
  function pathPart(prefix) {
    const raw = location.pathname.replace(prefix, "");
    try { return decodeURIComponent(raw); } catch (e) { return raw; }
  }

  return {api, el, json, when, showError, follow, parseFrames, pathPart, token, ApiError};
})();
