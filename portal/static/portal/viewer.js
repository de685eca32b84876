// The PDF viewer (templates/portal/viewer.html): pdf.js, loaded from the static files, renders the
// cited pages of the original PDF (a canvas and a text layer per page) and highlights the cited
// passage: a box over each of its lines when the server sent them (the version's layout), else
// the text-layer spans whose text the passage holds. "Previous page"/"Next page" move one page at
// a time. The data comes from a JSON block (json_script); nothing from the PDF becomes HTML
// (text goes in with textContent). The CSP allows no inline script: this module is a static file,
// pdf.js's worker a module of the static files too, and pictures in JBIG2 or JPEG 2000 (scans)
// are decoded by pdf.js's JavaScript decoders, modules of the static files (no WebAssembly, which
// the CSP does not allow).
const data = JSON.parse(document.getElementById("viewer-data").textContent);
const viewer = document.getElementById("viewer");
const status = document.getElementById("viewer-status");
const where = document.getElementById("viewer-where");
const previous = document.getElementById("viewer-prev");
const next = document.getElementById("viewer-next");

// The passage's words, for the text-layer fallback: lower case, whitespace collapsed.
function squeeze(text) {
  return text.toLowerCase().replace(/\s+/g, " ").trim();
}
const passage = squeeze(data.text || "");

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// The scale that fits a page's width into the viewer (at most 1.6 times its size in points).
function fitScale(page) {
  const width = page.getViewport({ scale: 1 }).width;
  const room = Math.max(viewer.clientWidth - 2, 200);
  return Math.min(room / width, 1.6);
}

// Boxes [x0, top, x1, bottom] in PDF points from the page's top-left corner, as pdfplumber gives
// them, to rectangles of the rendered page (CSS pixels), through the page's view box and rotation.
function markBoxes(box, page, viewport, boxes) {
  const [left, , , top] = page.view;
  let marked = 0;
  for (const [x0, y0, x1, y1] of boxes) {
    const [a, b] = viewport.convertToViewportPoint(left + x0, top - y1);
    const [c, d] = viewport.convertToViewportPoint(left + x1, top - y0);
    const mark = element("mark", "hit");
    mark.style.left = `${Math.min(a, c) - 1}px`;
    mark.style.top = `${Math.min(b, d) - 1}px`;
    mark.style.width = `${Math.abs(c - a) + 2}px`;
    mark.style.height = `${Math.abs(d - b) + 2}px`;
    box.append(mark);
    marked += 1;
  }
  return marked;
}

// Without boxes: the text-layer spans of at least four characters whose text the passage holds.
function markSpans(textLayer) {
  let marked = 0;
  if (passage.length < 4) return marked;
  for (const span of textLayer.querySelectorAll("span")) {
    const text = squeeze(span.textContent || "");
    if (text.length >= 4 && passage.includes(text)) {
      span.classList.add("hit");
      marked += 1;
    }
  }
  return marked;
}

async function renderPage(pdfjs, pdf, number, cited) {
  const page = await pdf.getPage(number);
  const scale = fitScale(page);
  const viewport = page.getViewport({ scale });
  const box = element("div", "pdf-page");
  box.dataset.page = String(number);
  box.style.width = `${Math.floor(viewport.width)}px`;
  box.style.height = `${Math.floor(viewport.height)}px`;
  box.style.setProperty("--scale-factor", String(scale));
  box.append(element("span", "page-number", `Page ${number}`));
  const canvas = element("canvas");
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.floor(viewport.width * ratio);
  canvas.height = Math.floor(viewport.height * ratio);
  canvas.style.width = `${Math.floor(viewport.width)}px`;
  canvas.style.height = `${Math.floor(viewport.height)}px`;
  const textLayer = element("div", "textLayer");
  box.append(canvas, textLayer);
  viewer.append(box);
  const transform = ratio === 1 ? null : [ratio, 0, 0, ratio, 0, 0];
  await page.render({ canvas, canvasContext: canvas.getContext("2d"), viewport, transform }).promise;
  await new pdfjs.TextLayer({ textContentSource: page.streamTextContent(), container: textLayer, viewport }).render();
  if (!cited) return 0;
  const boxes = data.boxes[String(number)];
  return boxes && boxes.length ? markBoxes(box, page, viewport, boxes) : markSpans(textLayer);
}

async function show(pdfjs, pdf, first, last) {
  viewer.dataset.state = "loading";
  viewer.replaceChildren();
  let marked = 0;
  for (let number = first; number <= last; number += 1) {
    const cited = number >= data.page && number <= data.pageEnd;
    marked += await renderPage(pdfjs, pdf, number, cited);
  }
  where.textContent = first === last ? `Page ${first} of ${pdf.numPages}` : `Pages ${first}-${last} of ${pdf.numPages}`;
  previous.disabled = first <= 1;
  next.disabled = last >= pdf.numPages;
  previous.onclick = () => show(pdfjs, pdf, first - 1, first - 1);
  next.onclick = () => show(pdfjs, pdf, last + 1, last + 1);
  status.textContent = marked ? "The cited passage is highlighted." : "";
  const hit = viewer.querySelector(".hit");
  if (hit) hit.scrollIntoView({ block: "center" });
  viewer.dataset.state = "ready";
}

async function open() {
  const pdfjs = await import(data.lib);
  pdfjs.GlobalWorkerOptions.workerSrc = data.worker;
  const options = { url: data.url, withCredentials: true, wasmUrl: data.decoders, useWasm: false };
  const pdf = await pdfjs.getDocument(options).promise;
  const first = Math.min(Math.max(data.page, 1), pdf.numPages);
  const last = Math.min(Math.max(data.pageEnd, first), pdf.numPages);
  await show(pdfjs, pdf, first, last);
}

open().catch((error) => {
  viewer.dataset.state = "failed";
  status.textContent = `The PDF could not be shown (${error && error.message ? error.message : error}).`;
});
