// seqlab serve page: asks GET /info which task the model has and shows its panel.
// Plain JS, no build step. Every request goes to this server's JSON API.
"use strict";

const $ = (id) => document.getElementById(id);

function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

async function call(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || `HTTP ${response.status}`);
  return data;
}

function intOf(id) { return parseInt($(id).value, 10); }

// ---------------------------------------------------------------- translation

let current = null; // the last translation record

// Attention arrives as nested lists: (rows, cols), (layers, rows, cols) or
// (layers, heads, rows, cols). Make every map (layers, heads, rows, cols).
function depth(x) { let d = 0; while (Array.isArray(x)) { d += 1; x = x[0]; } return d; }
function asLayersHeads(x) {
  const d = depth(x);
  if (d === 2) return [[x]];
  if (d === 3) return x.map((m) => [m]);
  return x;
}

function axes(name, record) {
  // encoder self-attention: source × source; decoder self: target × target; else target × source
  if (name.includes("encoder")) return [record.source_pieces, record.source_pieces];
  if (name.includes("self")) return [record.target_pieces, record.target_pieces];
  return [record.target_pieces, record.source_pieces];
}

function fillSelect(select, values, labels) {
  const keep = select.value;
  select.innerHTML = "";
  values.forEach((v, i) => {
    const option = document.createElement("option");
    option.value = String(v);
    option.textContent = labels ? labels[i] : String(v);
    select.appendChild(option);
  });
  if (values.map(String).includes(keep)) select.value = keep;
}

function setupSelectors() {
  const names = Object.keys(current.attention || {});
  const before = $("att-name").value; // kept across translations; cross attention first
  fillSelect($("att-name"), names);
  if (!names.includes(before) && names.includes("cross")) $("att-name").value = "cross";
  const maps = asLayersHeads(current.attention[$("att-name").value]);
  fillSelect($("att-layer"), maps.map((_, i) => i), maps.map((_, i) => `${i + 1} of ${maps.length}`));
  const heads = maps[0].length;
  const values = heads > 1 ? ["mean", ...maps[0].map((_, i) => i)] : [0];
  const labels = heads > 1 ? ["mean of heads", ...maps[0].map((_, i) => `${i + 1} of ${heads}`)] : ["1 of 1"];
  fillSelect($("att-head"), values, labels);
  $("att-head").disabled = heads === 1;
}

function selectedMatrix() {
  const maps = asLayersHeads(current.attention[$("att-name").value]);
  const layer = maps[parseInt($("att-layer").value, 10) || 0];
  const head = $("att-head").value;
  if (head !== "mean") return layer[parseInt(head, 10) || 0];
  return layer[0].map((row, r) => row.map((_, c) =>
    layer.reduce((sum, h) => sum + h[r][c], 0) / layer.length));
}

function drawHeatmap() {
  const table = $("heatmap");
  table.innerHTML = "";
  const name = $("att-name").value;
  const [rows, cols] = axes(name, current);
  const m = selectedMatrix();
  const head = table.createTHead().insertRow();
  head.appendChild(document.createElement("th"));
  cols.forEach((piece) => { const th = document.createElement("th"); th.textContent = piece; head.appendChild(th); });
  const body = table.createTBody();
  m.forEach((values, r) => {
    const tr = body.insertRow();
    const th = document.createElement("th");
    th.textContent = rows[r] ?? "";
    tr.appendChild(th);
    values.forEach((w, c) => {
      const td = tr.insertCell();
      const shade = Math.round(255 * (1 - Math.min(1, Math.max(0, w))));
      td.style.background = `rgb(${shade}, ${shade}, 255)`;
      td.dataset.row = r; td.dataset.col = c; td.dataset.weight = w.toFixed(4);
      td.title = `${rows[r]} ← ${cols[c]}: ${w.toFixed(4)}`;
    });
    if (current.p_gen && name === "cross") addSwitchCell(tr, r);
  });
  if (current.p_gen && name === "cross") {
    const th = document.createElement("th");
    th.textContent = "p_gen";
    th.className = "switch";
    head.appendChild(th);
  }
}

// A pointer-generator's row ends with its switch p_gen (1: generated from the vocabulary,
// 0: copied from the source); a word outside the target vocabulary is marked as copied.
function addSwitchCell(tr, r) {
  const p = current.p_gen[r];
  const cell = tr.insertCell();
  cell.className = "switch";
  cell.textContent = p.toFixed(2);
  const shade = Math.round(255 * (1 - (1 - p) * 0.6));
  cell.style.background = `rgb(255, ${shade}, ${Math.round(shade * 0.8)})`;
  cell.title = `p_gen ${p.toFixed(4)}${current.copied[r] ? " (outside the target vocabulary: copied)" : ""}`;
  if (current.copied[r]) tr.cells[0].classList.add("copied");
}

function onHover(event) {
  const td = event.target.closest("td");
  $("heatmap").querySelectorAll(".hot").forEach((el) => el.classList.remove("hot"));
  if (!td) return;
  if (td.classList.contains("switch")) { $("att-hover").textContent = td.title; return; }
  const [rows, cols] = axes($("att-name").value, current);
  const r = +td.dataset.row, c = +td.dataset.col;
  td.classList.add("hot");
  $("heatmap").tHead.rows[0].cells[c + 1].classList.add("hot");
  td.parentElement.cells[0].classList.add("hot");
  $("att-hover").textContent = `${rows[r]} ← ${cols[c]}: ${td.dataset.weight}`;
}

async function translate(event) {
  event.preventDefault();
  showError("");
  const beam = intOf("beam");
  const nbest = Math.min(intOf("nbest"), beam);
  try {
    const data = await call("/translate", { text: $("src").value, beam, nbest, attention: true });
    current = data.translations[0];
    const list = $("nbest-list");
    list.innerHTML = "";
    current.hypotheses.forEach((text, i) => {
      const li = document.createElement("li");
      li.innerHTML = '<span class="hyp"></span><span class="score"></span>';
      li.querySelector(".hyp").textContent = text;
      li.querySelector(".score").textContent = `score ${current.scores[i].toFixed(3)}  log P ${current.log_probs[i].toFixed(3)}`;
      list.appendChild(li);
    });
    $("attention").hidden = !current.attention;
    if (current.attention) { setupSelectors(); drawHeatmap(); }
  } catch (err) { showError(err.message); }
}

// ---------------------------------------------------------------- language model

async function generate(event) {
  event.preventDefault();
  showError("");
  const prompt = $("prompt").value;
  try {
    const data = await call("/generate", {
      prompt: prompt === "" ? null : prompt,
      temperature: parseFloat($("temperature").value),
      top_k: intOf("top-k"), max_tokens: intOf("max-tokens"), seed: intOf("seed"),
    });
    $("sample").textContent = data.text;
  } catch (err) { showError(err.message); }
}

// ---------------------------------------------------------------- classify / tag

function renderTagged(p) {
  const box = document.createElement("div");
  box.className = "tagged";
  let at = 0;
  for (const e of p.entities) {
    box.appendChild(document.createTextNode(p.text.slice(at, e.char_start)));
    const mark = document.createElement("mark");
    mark.className = `ent ent-${e.type}`;
    mark.textContent = p.text.slice(e.char_start, e.char_end);
    const sup = document.createElement("sup");
    sup.textContent = e.type;
    mark.appendChild(sup);
    box.appendChild(mark);
    at = e.char_end;
  }
  box.appendChild(document.createTextNode(p.text.slice(at)));
  return box;
}

function renderLabel(p) {
  const box = document.createElement("div");
  const head = document.createElement("p");
  head.innerHTML = "label: <strong></strong>";
  head.querySelector("strong").textContent = p.label;
  box.appendChild(head);
  for (const [label, prob] of Object.entries(p.probs)) {
    const bar = document.createElement("div");
    bar.className = "bar";
    bar.innerHTML = '<span class="name"></span><span class="fill"></span><span class="p"></span>';
    bar.querySelector(".name").textContent = label;
    bar.querySelector(".fill").style.width = `${Math.round(prob * 200)}px`;
    bar.querySelector(".p").textContent = prob.toFixed(3);
    box.appendChild(bar);
  }
  return box;
}

async function predict(event) {
  event.preventDefault();
  showError("");
  try {
    const data = await call("/predict", { text: $("text").value });
    const p = data.predictions[0];
    const out = $("prediction");
    out.innerHTML = "";
    out.appendChild(p.entities ? renderTagged(p) : renderLabel(p));
  } catch (err) { showError(err.message); }
}

// ---------------------------------------------------------------- start

async function start() {
  try {
    const info = await (await fetch("/info")).json();
    const pool = info.members ? `ensemble of ${info.members.length}: ` : "";
    $("model-name").textContent = `· ${pool}${info.model} (${info.task})`;
    const sizes = Object.entries(info.vocab_sizes).map(([k, v]) => `${k} ${v}`).join(", ");
    $("model-info").textContent =
      `${info.parameters.toLocaleString()} parameters, step ${info.step}, ${sizes}, ${info.precision.inference}`;
    const panel = { translate: "translate-panel", generate: "generate-panel", predict: "predict-panel" };
    const endpoint = info.endpoint.replace("POST /", "");
    $(panel[endpoint]).hidden = false;
    if (info.task === "copy_translation") { // one hypothesis: the search keeps the best only
      $("nbest").value = "1"; $("nbest").max = "1"; $("nbest").disabled = true;
    }
    if (info.task === "tag") $("predict-title").textContent = "Tag entities";
    if (info.task === "classify") $("predict-title").textContent = "Classify";
    $("beam").max = info.limits.max_beam;
    $("max-tokens").max = info.limits.max_new_tokens;
  } catch (err) { showError(`cannot read /info: ${err.message}`); }
  $("translate-form").addEventListener("submit", translate);
  $("generate-form").addEventListener("submit", generate);
  $("predict-form").addEventListener("submit", predict);
  for (const id of ["att-name", "att-layer", "att-head"]) {
    $(id).addEventListener("change", () => { if (id === "att-name") setupSelectors(); drawHeatmap(); });
  }
  $("heatmap").addEventListener("mouseover", onHover);
}

start();
