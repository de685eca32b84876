// Feedback forms of an answer (templates/portal/_answer.html): post them in the background and
// show the server's reply next to the buttons. Works for answers the stream script inserts later
// (one listener on the document). Without this script the forms post normally.
"use strict";

document.addEventListener("submit", async (event) => {
  const form = event.target;
  if (!(form instanceof HTMLFormElement) || !form.classList.contains("feedback")) return;
  event.preventDefault();
  const data = new FormData(form);
  const button = event.submitter;
  if (button && button.name) data.set(button.name, button.value);
  const status = form.querySelector(".feedback-status");
  let message = "Your feedback could not be saved; please try again.";
  try {
    const response = await fetch(form.action, {
      method: "POST",
      body: data,
      headers: { Accept: "application/json" },
      credentials: "same-origin",
    });
    const body = await response.json();
    if (response.ok) {
      message = body.message;
      form.querySelectorAll("button[name=rating]").forEach((b) => b.setAttribute("aria-pressed", String(b === button)));
    } else if (body.error && body.error.message) {
      message = body.error.message;
    }
  } catch (error) {
    // network failure or a non-JSON reply: keep the generic message
  }
  if (status) status.textContent = message;
});
