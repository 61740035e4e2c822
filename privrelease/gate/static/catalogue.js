// The catalogue's page: published releases, their files, the registered datasets. It reads the gate's
// /privrelease/api/ routes with the credential Prefect's sign-in page keeps in this browser; every value
// is shown as text (never as HTML), every file downloaded as what the gate sent.
"use strict";

const API = "/privrelease/api";
const KEPT = "prefect-password"; // where Prefect's sign-in page keeps the credential: one sign-in for both
const credential = localStorage.getItem(KEPT);
const main = document.getElementById("main");

function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

function table(headers, rows) {
  const t = el("table");
  const head = el("tr");
  headers.forEach((h) => head.appendChild(el("th", h)));
  t.appendChild(head);
  rows.forEach((cells) => {
    const tr = el("tr");
    cells.forEach((c) => {
      const td = el("td");
      if (c instanceof Node) td.appendChild(c); else td.textContent = c === null || c === undefined ? "-" : String(c);
      tr.appendChild(td);
    });
    t.appendChild(tr);
  });
  return t;
}

class SignIn extends Error {}

async function get(path) {
  const response = await fetch(API + path, { headers: credential ? { Authorization: "Basic " + credential } : {} });
  if (response.status === 401) throw new SignIn();
  if (!response.ok) {
    const said = await response.json().catch(() => ({}));
    throw new Error(said.exception_message || response.status + " " + response.statusText);
  }
  return response;
}

function cost(r) {
  const p = r.privacy;
  if (p.kind === "dp") return `epsilon=${p.epsilon} delta=${p.delta}`;
  if (p.kind === "sdc") return `SDC: ${(p.sdc_methods || []).join(" → ")} (not DP)`;
  return p.kind;
}

function fileOf(releaseId, name) {
  return `/releases/${encodeURIComponent(releaseId)}/files/${encodeURIComponent(name)}`;
}

async function download(path, name) {
  const response = await get(path);
  const url = URL.createObjectURL(await response.blob());
  const link = el("a", null, { href: url, download: name });
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}

async function releases() {
  const index = await (await get("/index.json")).json();
  main.replaceChildren(el("h1", "Published releases"));
  if (!index.releases.length) {
    main.appendChild(el("p", "No release is published yet.", { class: "note" }));
    return;
  }
  main.appendChild(table(
    ["release", "dataset", "mechanism", "guarantee", "cost", "created (UTC)"],
    index.releases.map((r) => [
      el("a", r.id, { href: "/privrelease/releases/" + encodeURIComponent(r.id) }),
      r.dataset, r.mechanism, r.guarantee, cost(r) + (r.test_mode ? " [test release]" : ""), r.created,
    ]),
  ));
  main.appendChild(el("a", "Machine-readable index (JSON)", { href: "#", id: "index-json" }));
  document.getElementById("index-json").addEventListener("click", (e) => {
    e.preventDefault();
    download("/index.json", "index.json").catch(shown);
  });
}

async function release(id) {
  const r = await (await get("/releases/" + encodeURIComponent(id))).json();
  main.replaceChildren(el("h1", `Release ${r.id}`));
  if (r.test_mode) main.appendChild(el("p", "Test release: made with a fixed seed in test mode; not for publication.", { class: "error" }));
  main.appendChild(table(["", ""], [
    ["dataset", `${r.dataset} (registration ${r.dataset_version}, unit ${r.unit})`],
    ["mechanism", r.mechanism],
    ["request", el("code", JSON.stringify(r.request.params))],
    ["guarantee", r.guarantee],
    ["privacy cost", cost(r)],
    ["ledger entry", `#${r.ledger.seq} (${r.ledger.hash.slice(0, 16)}…)`],
    ["created", r.created],
  ]));
  main.appendChild(el("h2", "Files"));
  const all = el("button", "Download all (zip)", { id: "download-all" });
  all.addEventListener("click", () => download(`/releases/${encodeURIComponent(r.id)}/all.zip`, `${r.id}.zip`).catch(shown));
  main.appendChild(all);
  main.appendChild(table(["file", "bytes", "sha256", ""], r.files.map((f) => {
    const button = el("button", "Download", { "data-file": f.name });
    button.addEventListener("click", () => download(fileOf(r.id, f.name), f.name).catch(shown));
    return [f.name, f.bytes, el("span", f.sha256, { class: "digest" }), button];
  })));
  for (const chart of r.charts) {
    const blob = await (await get(fileOf(r.id, chart))).blob();
    main.appendChild(el("img", null, { src: URL.createObjectURL(blob), alt: chart }));
  }
  main.appendChild(el("h2", "Report"));
  main.appendChild(el("pre", r.report_markdown));
}

async function datasets() {
  const all = await (await get("/datasets")).json();
  main.replaceChildren(el("h1", "Datasets"));
  main.appendChild(el("p", "Public facts only: the schema, the privacy unit, the purpose and the budget left.", { class: "note" }));
  for (const d of all) {
    main.appendChild(el("h2", d.id));
    main.appendChild(table(["", ""], [
      ["purpose", d.purpose === "dp" ? "differential privacy" : "statistical disclosure control"],
      ["unit", d.unit + (d.adjacency ? ` (${d.adjacency})` : "")],
      ["rows", d.rows === null ? "not public" : d.rows],
      ["registration", `${d.version} (${d.registered})`],
      ["budget", d.budget ? d.budget.says : "none: SDC spends no epsilon"],
      ["published releases", d.published_releases],
    ]));
    main.appendChild(table(["column", "type", "nullable"],
      Object.entries(d.schema).map(([name, c]) => [name, c.type, c.nullable ? "yes" : "no"])));
  }
}

// The sign-in form: a name and a password, kept as Prefect's own sign-in page keeps them (the base64 of
// name:password, UTF-8), so that the UI's pages are signed in too. The credential is tried on the index before
// anything else; then this page is shown again, or the page "next" names (a path of this site only).
function base64(text) {
  return btoa(Array.from(new TextEncoder().encode(text), (b) => String.fromCharCode(b)).join(""));
}

function signInForm(said) {
  const name = el("input", null, { id: "name", name: "name", autocomplete: "username", required: "" });
  const password = el("input", null, { id: "password", name: "password", type: "password", autocomplete: "current-password", required: "" });
  const form = el("form", null, { id: "sign-in" });
  form.append(
    el("h1", "Sign in"),
    el("p", "Your privrelease account: the name and password the operator gave you.", { class: "note" }),
    el("label", "Name", { for: "name" }), el("br"), name, el("br"),
    el("label", "Password", { for: "password" }), el("br"), password, el("br"),
    el("button", "Sign in", { type: "submit" }),
  );
  if (said) form.appendChild(el("p", said, { class: "error" }));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    signIn(name.value, password.value).catch(shown);
  });
  main.replaceChildren(form);
  name.focus();
}

async function signIn(name, password) {
  const tried = base64(`${name}:${password}`);
  const response = await fetch(API + "/index.json", { headers: { Authorization: "Basic " + tried } });
  if (response.status === 401) return signInForm("That name and password were not accepted.");
  if (response.status === 429) {
    return signInForm(`Too many sign-ins from here: try again in ${response.headers.get("retry-after") || 60} seconds.`);
  }
  localStorage.setItem(KEPT, tried);
  // "next" only as a page of this site: resolved as the browser would (it drops tabs and line breaks, so a
  // pattern on the text let /%09/elsewhere through: the re-attack on #53), then its origin compared
  const asked = new URLSearchParams(location.search).get("next");
  let next = null;
  try {
    next = asked ? new URL(asked, location.origin) : null;
  } catch (e) {
    next = null;
  }
  if (next && next.origin === location.origin) location.assign(next.pathname + next.search + next.hash);
  else location.assign(location.pathname === "/privrelease/signin" ? "/privrelease/releases" : location.href);
}

function shown(error) {
  if (error instanceof SignIn) {
    localStorage.removeItem(KEPT);
    signInForm(credential ? "Your sign-in has ended or was not accepted: sign in again." : "");
    return;
  }
  main.appendChild(el("p", error.message, { class: "error" }));
}

const path = location.pathname.replace(/\/+$/, "");
const one = path.match(/^\/privrelease\/releases\/([^/]+)$/);
if (path === "/privrelease/signin") signInForm("");
else (one ? release(decodeURIComponent(one[1])) : path === "/privrelease/datasets" ? datasets() : releases()).catch(shown);
