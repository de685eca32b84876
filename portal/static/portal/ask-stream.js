// The ask form, streamed: with JavaScript on, the question goes to the portal's streaming endpoint
// (data-stream-url, Server-Sent Events over a fetch POST) and the page shows each step of the
// pipeline, the short answer and the explanation's text as they arrive, then swaps in the
// server-rendered answer (the same portal/_answer.html fragment the plain page renders), handing
// its feedback forms to htmx.
// Anything unexpected (an error status, not an event stream, no fetch streaming) falls back to
// the plain form POST. Why not htmx here: htmx swaps whole responses, and its SSE extension
// listens with EventSource, which can only GET; a question is a POST with its CSRF token.
(function () {
  "use strict";
  var form = document.getElementById("ask-form");
  var area = document.getElementById("answer-area");
  if (!form || !area || !window.fetch || !window.TextDecoder || !window.ReadableStream) return;

  function element(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // A step's summary in one short line: scalars as they are, lists by their length, objects as
  // (cut) JSON. Text only: it goes into the page with textContent, never as HTML.
  function describe(summary) {
    var parts = [];
    Object.keys(summary || {}).forEach(function (key) {
      var value = summary[key];
      if (value === null || value === undefined || value === "") return;
      var text;
      if (Array.isArray(value)) text = value.length + (value.length === 1 ? " item" : " items");
      else if (typeof value === "object") text = JSON.stringify(value);
      else text = String(value);
      if (text.length > 90) text = text.slice(0, 89) + "…";
      parts.push(key + ": " + text);
    });
    var line = parts.join(" · ");
    return line.length > 300 ? line.slice(0, 299) + "…" : line;
  }

  function liveView() {
    var card = element("section", "card live");
    card.appendChild(element("h2", null, "Answer"));
    card.firstChild.style.marginTop = "0";
    var status = element("p", "muted", "Working…");
    status.setAttribute("role", "status");
    var steps = element("ol", "steps live-steps");
    var short = element("p", "short-answer live-short-answer");
    short.hidden = true;
    var text = element("div", "answer live-answer");
    var error = element("p", "errorlist");
    error.hidden = true;
    card.appendChild(status);
    card.appendChild(steps);
    card.appendChild(short);
    card.appendChild(text);
    card.appendChild(error);
    area.replaceChildren(card);
    return { status: status, steps: steps, short: short, text: text, error: error };
  }

  function onEvent(view, event, data) {
    if (event === "step") {
      var item = element("li");
      item.appendChild(element("code", null, data.stage));
      item.appendChild(element("span", "muted", " · " + Number(data.ms).toFixed(1) + " ms"));
      var line = describe(data.summary);
      if (line) item.appendChild(element("div", "muted step-summary", line));
      if (data.error) item.appendChild(element("div", "errorlist", data.error));
      view.steps.appendChild(item);
      view.status.textContent = "Working… " + data.stage + " done";
    } else if (event === "short_answer") {
      view.short.textContent = data.text;  // the direct answer, before its explanation streams
      view.short.hidden = false;
    } else if (event === "token") {
      view.text.textContent += data.text;
      view.status.textContent = "Writing the answer…";
    } else if (event === "answer") {
      area.innerHTML = data.html;  // server-rendered, escaped like the plain page
      if (window.htmx) window.htmx.process(area);  // its feedback forms post with htmx
      var conversation = form.querySelector("input[name=conversation]");
      if (conversation && data.conversation_id) conversation.value = data.conversation_id;  // follow-ups continue it
      var question = form.querySelector("textarea[name=question]");
      if (question) question.value = "";
      return true;
    } else if (event === "error") {
      var body = data.error || {};
      view.status.textContent = "The answer could not be made.";
      view.error.textContent = typeof body.message === "string" ? body.message : JSON.stringify(body.message);
      view.error.hidden = false;
      return true;
    }
    return false;
  }

  // One SSE frame ("event: x", "data: {...}" lines) -> [event, data]; null for a comment.
  function parseFrame(frame) {
    var event = "message";
    var data = [];
    frame.split("\n").forEach(function (line) {
      if (line.indexOf("event:") === 0) event = line.slice(6).trim();
      else if (line.indexOf("data:") === 0) data.push(line.slice(5).replace(/^ /, ""));
    });
    return data.length ? [event, JSON.parse(data.join("\n"))] : null;
  }

  async function stream(response, view) {
    var reader = response.body.getReader();
    var decoder = new TextDecoder();
    var buffer = "";
    for (;;) {
      var chunk = await reader.read();
      if (chunk.done) return false;
      buffer += decoder.decode(chunk.value, { stream: true }).replace(/\r\n?/g, "\n");
      var end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        var parsed = parseFrame(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        if (parsed && onEvent(view, parsed[0], parsed[1])) return true;
      }
    }
  }

  form.addEventListener("submit", async function (submit) {
    submit.preventDefault();
    var button = form.querySelector("button[type=submit]");
    var token = form.querySelector("input[name=csrfmiddlewaretoken]");
    var response;
    try {
      response = await fetch(form.dataset.streamUrl, {
        method: "POST",
        body: new FormData(form),
        credentials: "same-origin",
        headers: { Accept: "text/event-stream", "X-CSRFToken": token ? token.value : "" },
      });
    } catch (err) {
      form.submit();
      return;
    }
    var type = response.headers.get("Content-Type") || "";
    if (!response.ok || type.indexOf("text/event-stream") !== 0 || !response.body) {
      form.submit();  // form errors, signed out, no tenant: the plain page says why
      return;
    }
    if (button) button.disabled = true;
    var view = liveView();
    try {
      if (!(await stream(response, view))) throw new Error("cut");
    } catch (err) {
      view.status.textContent = "The connection was lost before the answer was complete; please ask again.";
    } finally {
      if (button) button.disabled = false;
    }
  });
})();
