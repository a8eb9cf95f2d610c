// fleet dashboard: the matrix's filters and its live updates. Plain JavaScript, no build step; every value put
// into the page goes in as text (textContent) or as HTML the server rendered and escaped.
"use strict";

function applyFilters(form) {
  const want = {};
  for (const el of form.elements) {
    if (el.name === "regressed") want.regressed = el.checked;
    else if (el.name) want[el.name] = el.value;
  }
  let shown = 0, total = 0;
  for (const chip of document.querySelectorAll("#matrix .chip")) {
    total += 1;
    const ok = (!want.host || chip.dataset.host === want.host) && (!want.item || chip.dataset.item === want.item)
      && (!want.agent || chip.dataset.agent === want.agent) && (!want.grade || chip.dataset.grade === want.grade)
      && (!want.regressed || chip.classList.contains("regressed"));
    chip.classList.toggle("hidden", !ok);
    if (ok) shown += 1;
  }
  for (const row of document.querySelectorAll("#matrix tbody tr")) {
    row.classList.toggle("hidden", !row.querySelector(".chip:not(.hidden)"));
  }
  for (const th of document.querySelectorAll("#matrix thead th[data-host], #matrix td[data-host]")) {
    th.classList.toggle("hidden", Boolean(want.host) && th.dataset.host !== want.host);
  }
  const out = document.getElementById("shown");
  if (out) out.textContent = shown + " of " + total + " cells shown";
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(want)) if (v) params.set(k, v === true ? "1" : v);
  const query = params.toString();
  history.replaceState(null, "", query ? "?" + query : location.pathname);
}

function startFilters() {
  const form = document.getElementById("filters");
  if (!form) return;
  const params = new URLSearchParams(location.search);
  for (const el of form.elements) {
    if (!el.name || !params.has(el.name)) continue;
    if (el.type === "checkbox") el.checked = params.get(el.name) === "1";
    else el.value = params.get(el.name);
  }
  form.addEventListener("change", () => applyFilters(form));
  form.addEventListener("submit", (e) => e.preventDefault());
  applyFilters(form);
  startLive(form);
}

function startLive(form) {
  const url = form.dataset.live;
  if (!url || !window.EventSource) return;
  const source = new EventSource(url + "?since=" + encodeURIComponent(form.dataset.since || ""));
  source.addEventListener("cell", (e) => {
    const data = JSON.parse(e.data);
    const old = document.getElementById("cell-" + data.cell);
    if (!old) return;
    const box = document.createElement("template");
    box.innerHTML = data.html.trim();  // rendered and escaped by the server's template, like the page itself
    const fresh = box.content.firstElementChild;
    if (fresh) old.replaceWith(fresh);
    applyFilters(form);
  });
  source.addEventListener("status", (e) => {
    const el = document.getElementById("sweep-status");
    if (el) { const s = JSON.parse(e.data).status; el.textContent = s; el.className = "status " + s; }
  });
  source.addEventListener("end", () => source.close());
}

document.addEventListener("DOMContentLoaded", startFilters);
