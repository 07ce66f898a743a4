// gym-compose view: the page. Plain JavaScript, no build step. Data comes from the local server
// (mode "live": /api/...) or from the JSON embedded in an exported file (mode "export"); both
// answer the same questions in the same shapes (gym_compose/view/service.py), so the two pages
// draw the same things. Every text from a run goes into the page through textContent or
// escapeHtml, never as markup.
(() => {
  "use strict";

  const config = JSON.parse(document.getElementById("gym-data").textContent);
  const LIVE = config.mode === "live";
  const REFRESH_MS = 5000;
  const FOLD_CHARS = 1500;
  const FOLD_LINES = 24;
  const TASK_ORDER = ["task", "agent", "mean", null, "failed", "note", "prompt"];

  const state = { runs: [], run: 0, view: "run", tasksTable: null, compareTable: null, DataTable: null, refreshTimer: null };

  // ---------------------------------------------------------------- small helpers
  const byId = (id) => document.getElementById(id);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function escapeHtml(value) {
    return String(value ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }

  function fmt(value, digits = 4) {
    if (value === null || value === undefined) return "–";
    if (typeof value === "number") {
      if (Number.isInteger(value)) return String(value);
      return String(Number(value.toPrecision(digits)));
    }
    return typeof value === "object" ? JSON.stringify(value) : String(value);
  }

  function showError(message) {
    const box = byId("load-error");
    box.textContent = message;
    box.hidden = false;
  }

  async function getJSON(path) {
    const response = await fetch(path, { cache: "no-store" });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(body.error || `${path}: HTTP ${response.status}`);
    return body;
  }

  function query(params) {
    return new URLSearchParams(Object.entries(params).filter(([, v]) => v !== undefined && v !== null)).toString();
  }

  // ---------------------------------------------------------------- data sources
  const liveSource = {
    runs: () => getJSON("api/runs").then((d) => d.runs),
    tasks: (run, q) => getJSON(`api/runs/${run}/tasks?${query(q)}`),
    rollout: (run, id) => getJSON(`api/runs/${run}/rollouts/${encodeURIComponent(id)}`),
    compare: (q) => getJSON(`api/compare?${query(q)}`),
  };

  function searchText(row) {
    return `${fmt(row.task)} ${row.agent || ""} ${row.prompt || ""} ${row.note || ""}`.toLowerCase();
  }

  function compareKeys(a, b) {
    // numbers before strings before anything else, like gym_compose.metrics.row_keys.sortable
    const rank = (v) => (typeof v === "number" ? 0 : typeof v === "string" ? 1 : 2);
    if (rank(a) !== rank(b)) return rank(a) - rank(b);
    if (typeof a === "number") return a - b;
    const x = typeof a === "string" ? a : JSON.stringify(a);
    const y = typeof b === "string" ? b : JSON.stringify(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }

  function localTaskPage(tasks, total, q) {
    let rows = tasks;
    const rewards = rows.flatMap((t) => t.rollouts.map((r) => r.reward).filter((r) => r !== null));
    const best = rewards.length ? Math.max(...rewards) : null;
    const perfect = (t) => !t.failed && t.rollouts.some((r) => r.reward !== null) && t.rollouts.every((r) => r.reward === best);
    if (q.status === "failed") rows = rows.filter((t) => t.failed > 0);
    if (q.status === "imperfect") rows = rows.filter((t) => !perfect(t));
    if (q.status === "perfect") rows = rows.filter(perfect);
    const needle = (q.search || "").trim().toLowerCase();
    if (needle) rows = rows.filter((t) => searchText(t).includes(needle));
    const key = q.order || "task";
    const cmp = {
      task: (a, b) => compareKeys(a.task, b.task) || compareKeys(a.agent, b.agent),
      agent: (a, b) => compareKeys(a.agent, b.agent) || compareKeys(a.task, b.task),
      mean: (a, b) => (a.mean !== null) - (b.mean !== null) || (a.mean || 0) - (b.mean || 0) || compareKeys(a.task, b.task),
      failed: (a, b) => a.failed - b.failed || compareKeys(a.task, b.task),
      prompt: (a, b) => compareKeys(a.prompt || "", b.prompt || "") || compareKeys(a.task, b.task),
      note: (a, b) => compareKeys(a.note || "", b.note || "") || compareKeys(a.task, b.task),
    }[key];
    rows = [...rows].sort(cmp);
    if (q.dir === "desc") rows.reverse();
    return { recordsTotal: total, recordsFiltered: rows.length, data: rows.slice(q.start, q.start + q.length) };
  }

  const exportSource = {
    runs: async () => config.runs,
    tasks: async (run, q) => localTaskPage(config.tasks[run] || [], config.runs[run].live.tasks, q),
    rollout: async (run, id) => {
      const view = (config.rollouts || {})[`${run}:${id}`];
      if (!view) throw new Error("This rollout's trajectory is not in the exported report (it keeps the failed and lowest-reward ones); open the run folder with `gym-compose view` to see every rollout.");
      return view;
    },
    compare: async (q) => {
      let rows = (config.comparison && config.comparison.data) || [];
      if (q.differing === "1") rows = rows.filter((r) => r.differs);
      const needle = (q.search || "").trim().toLowerCase();
      if (needle) rows = rows.filter((r) => searchText(r).includes(needle));
      if (q.order === "task") rows = [...rows].sort((a, b) => compareKeys(a.task, b.task));
      if (q.order === "prompt") rows = [...rows].sort((a, b) => compareKeys(a.prompt || "", b.prompt || ""));
      if (q.dir === "desc") rows = [...rows].reverse();
      return { runs: config.comparison.runs, recordsTotal: rows.length, recordsFiltered: rows.length, data: rows.slice(q.start, q.start + q.length) };
    },
  };

  const source = LIVE ? liveSource : exportSource;

  // ---------------------------------------------------------------- libraries
  function embeddedAsset(name) {
    const node = document.querySelector(`textarea.gym-asset[data-name="${name}"]`);
    return node ? URL.createObjectURL(new Blob([node.value], { type: "text/javascript" })) : null;
  }

  async function loadDataTables() {
    const url = embeddedAsset("datatables.js") || new URL("assets/datatables.js", document.baseURI).href;
    const module = await import(url);
    return module.default;
  }

  // plotly.js is large (megabytes to parse): it loads once the first screen is drawn, so the
  // metrics and the task table never wait for it
  let firstScreenDrawn;
  const firstScreen = new Promise((resolve) => { firstScreenDrawn = resolve; });
  let plotlyPromise = null;
  function loadPlotly() {
    if (!plotlyPromise) {
      plotlyPromise = firstScreen.then(() => new Promise((resolve, reject) => {
        const script = el("script", { src: embeddedAsset("plotly.js") || "assets/plotly.js" });
        script.onload = () => resolve(window.Plotly);
        script.onerror = () => reject(new Error("plotly.js did not load"));
        document.head.append(script);
      }));
    }
    return plotlyPromise;
  }

  // ---------------------------------------------------------------- overview
  function keyMetricValue(summary, name) {
    for (const entry of summary.metrics) if (name in entry.agent_metrics) return entry.agent_metrics[name];
    return undefined;
  }

  function card(label, value, bad) {
    return el("div", { class: bad ? "card bad" : "card", "data-metric": label }, el("div", { class: "value", text: value }), el("div", { class: "label", text: label }));
  }

  function bestPassAtK(summary) {
    let best = null;
    for (const entry of summary.metrics) {
      for (const [name, value] of Object.entries(entry.agent_metrics)) {
        const m = /^pass@(\d+)\/accuracy$/.exec(name);
        if (m && (!best || Number(m[1]) > best.k)) best = { k: Number(m[1]), value };
      }
    }
    if (!best) {
      for (const curves of Object.values(summary.pass_at_k)) {
        const values = curves["pass@k"] || [];
        if (values.length) best = { k: values.length, value: values[values.length - 1] };
      }
    }
    return best;
  }

  function runState(summary) {
    const progress = summary.progress;
    if (!progress) return { text: "no progress.json", cls: "" };
    if (!progress.finished) return { text: `running: ${progress.done}/${progress.total}`, cls: "running" };
    const code = summary.manifest.collector_exit_code;
    if (summary.live.failed_rollouts > 0 || (code !== null && code !== undefined && code !== 0)) return { text: `finished, ${summary.live.failed_rollouts} failed`, cls: "failed" };
    return { text: "finished", cls: "finished" };
  }

  function renderOverview(summary) {
    byId("run-title").textContent = summary.label;
    byId("run-title").title = summary.folder;
    const live = summary.live;
    const fileMean = keyMetricValue(summary, "mean/reward");
    const mean = fileMean !== undefined ? fileMean : live.mean_reward;
    const pass = bestPassAtK(summary);
    const cards = [
      card("mean reward", fmt(mean)),
      card("rollouts", live.total ? `${live.rollouts} / ${live.total}` : fmt(live.rollouts)),
      card("failed rollouts", fmt(live.failed_rollouts), live.failed_rollouts > 0),
      card("tasks", fmt(live.tasks)),
    ];
    if (pass) cards.push(card(`pass@${pass.k}`, `${fmt(pass.value, 3)}%`));
    const outTokens = keyMetricValue(summary, "mean/output_tokens");
    if (outTokens !== undefined) cards.push(card("mean output tokens", fmt(outTokens)));
    byId("metric-cards").replaceChildren(...cards);

    const note = byId("metrics-note");
    const notes = [];
    if (!summary.metrics.length) notes.push("rollouts_aggregate_metrics.json is not written yet: the figures are computed from the rollouts written so far.");
    if (live.unreadable_lines.length) notes.push(`Unreadable lines skipped: ${live.unreadable_lines.map((b) => `${b.file} line ${b.line} (${b.error})`).join("; ")}`);
    note.textContent = notes.join(" ");
    note.hidden = !notes.length;

    const blocks = summary.metrics.map((entry) => {
      const row = ([k, v]) => el("tr", {}, el("th", { text: k }), el("td", { text: fmt(v) }));
      const all = Object.entries(entry.agent_metrics);
      return el("div", { class: "agent-metrics" },
        el("h2", { text: `Key metrics: ${entry.agent || "agent"}` }),
        el("table", { class: "kv key-table" }, Object.entries(entry.key_metrics).map(row)),
        el("details", {}, el("summary", { text: `All ${all.length} metrics of this agent (mean/max/min/median/std, pass@k)` }), el("table", { class: "kv" }, all.map(row))));
    });
    byId("key-metrics").replaceChildren(...blocks);
    renderManifest(summary.manifest);

    const state_ = runState(summary);
    const badge = byId("run-state");
    badge.hidden = false;
    badge.textContent = state_.text;
    badge.className = `badge ${state_.cls}`;

    const groups = summary.failure_groups;
    byId("failures").hidden = !groups.length;
    byId("failure-groups").replaceChildren(...groups.map((g) => el("li", {},
      el("a", { class: "reason", text: g.message, title: "show these tasks", onclick: () => filterTasks("failed", g.message) }),
      ` — ${g.rollouts} rollout${g.rollouts === 1 ? "" : "s"}`)));
  }

  function kvTable(entries) {
    return el("table", { class: "kv" }, entries.filter(([, v]) => v !== null && v !== undefined && v !== "").map(([k, v]) =>
      el("tr", {}, el("th", { text: k }), el("td", {}, v instanceof Node ? v : String(v)))));
  }

  function renderManifest(manifest) {
    const models = manifest.models.map((m) => `${m.instance}: ${m.implementation}${m.model ? ` (${m.model})` : ""}${m.base_url ? ` at ${m.base_url}` : ""}`).join("; ");
    const parts = [kvTable([
      ["model", models || null],
      ["command", manifest.command],
      ["started", manifest.started_at],
      ["finished", manifest.finished_at],
      ["collector exit code", manifest.collector_exit_code],
      ["gym-compose version", manifest.gym_compose_version],
      ["servers", manifest.servers.map((s) => `${s.instance} (${s.implementation})`).join(", ") || null],
    ])];
    const cost = Object.entries(manifest.cost || {});
    if (cost.length) {
      parts.push(el("h2", { text: "What the run cost, all agents" }), kvTable(cost.map(([k, v]) => [k, fmt(v)])));
    }
    if (manifest.images.length) {
      parts.push(el("h2", { text: "Images" }), el("table", { class: "kv" },
        manifest.images.map((i) => el("tr", {}, el("th", { text: i.service }), el("td", { text: i.image || "" }), el("td", {}, el("code", { text: (i.id || "").slice(0, 19) }))))));
    }
    if (manifest.config_yaml) parts.push(el("details", {}, el("summary", { text: "Resolved config (secrets as ****)" }), el("pre", { text: manifest.config_yaml })));
    if (!manifest.command && !manifest.config_yaml) parts.push(el("p", { class: "note", text: "No manifest.json in this run folder (yet)." }));
    byId("manifest-body").replaceChildren(...parts);
  }

  // ---------------------------------------------------------------- charts
  const chartLayout = (title, xTitle, yTitle) => ({
    title: { text: title, font: { size: 13 } }, margin: { l: 50, r: 10, t: 36, b: 40 },
    xaxis: { title: { text: xTitle }, dtick: 1 }, yaxis: { title: { text: yTitle }, rangemode: "tozero" }, showlegend: true, legend: { orientation: "h" },
  });

  function histogramCaption(summary) {
    const bars = summary.histogram;
    const total = bars.reduce((n, b) => n + b.count, 0);
    if (!total) return "No rewards yet.";
    return `${total} rewarded rollouts: ` + bars.filter((b) => b.count).map((b) => `${b.label} × ${b.count}`).join(", ") +
      (summary.live.failed_rollouts ? `; ${summary.live.failed_rollouts} failed without a reward` : "");
  }

  function passCurves(summaries) {
    const traces = [];
    for (const summary of summaries) {
      for (const [agent, family] of Object.entries(summary.pass_at_k)) {
        for (const [name, values] of Object.entries(family)) {
          const label = [summaries.length > 1 ? summary.label : null, Object.keys(summary.pass_at_k).length > 1 ? agent : null, name].filter(Boolean).join(" · ");
          traces.push({ type: "scatter", mode: "lines+markers", name: label, x: values.map((_, i) => i + 1), y: values });
        }
      }
    }
    return traces;
  }

  function passCaption(summaries) {
    const parts = [];
    for (const s of summaries) for (const [agent, family] of Object.entries(s.pass_at_k)) {
      const values = family["pass@k"] || [];
      if (values.length) parts.push(`${summaries.length > 1 ? s.label + " " : ""}${agent}: pass@1 ${fmt(values[0], 3)}% → pass@${values.length} ${fmt(values[values.length - 1], 3)}%`);
    }
    return parts.length ? parts.join("; ") : "pass@k needs repeated rollouts (--num-repeats > 1).";
  }

  async function renderCharts(summary) {
    byId("histogram-caption").textContent = histogramCaption(summary);
    byId("passk-caption").textContent = passCaption([summary]);
    const traces = passCurves([summary]);
    byId("passk-figure").hidden = !traces.length;
    try {
      const Plotly = await loadPlotly();
      const config_ = { displaylogo: false, responsive: true };
      Plotly.react("histogram", [{ type: "bar", x: summary.histogram.map((b) => b.label), y: summary.histogram.map((b) => b.count), marker: { color: "#2f5fb3" }, name: "rollouts" }],
        { ...chartLayout("Reward distribution", "reward", "rollouts"), showlegend: false, xaxis: { type: "category", title: { text: "reward" } } }, config_);
      if (traces.length) Plotly.react("passk", traces, chartLayout("pass@k", "k", "accuracy (%)"), config_);
    } catch (error) {
      byId("histogram").textContent = `Charts unavailable: ${error.message}`;
    }
  }

  // ---------------------------------------------------------------- task table
  function chipsHtml(rollouts, run) {
    return rollouts.map((r) => {
      const cls = r.status === "failed" ? "failed" : r.reward !== null && r.reward <= 0 ? "zero" : "ok";
      const label = r.status === "failed" ? "✗" : fmt(r.reward, 3);
      const title = `rollout ${fmt(r.i)}: ${r.status === "failed" ? "failed" : "reward " + fmt(r.reward)}${r.note ? " — " + r.note : ""}`;
      return `<button type="button" class="chip ${cls}${r.status === "retried" ? " retried" : ""}" data-run="${run}" data-rollout="${escapeHtml(r.id)}" title="${escapeHtml(title)}">${escapeHtml(label)}</button>`;
    }).join("");
  }

  function taskColumns(summary) {
    return [
      { data: "task", title: "Task", render: (v) => escapeHtml(fmt(v)) },
      { data: "agent", title: "Agent", visible: summary.agents.length > 1, render: (v) => escapeHtml(v) },
      { data: "mean", title: "Mean reward", render: (v) => escapeHtml(fmt(v)) },
      { data: "rollouts", title: "Reward per rollout", orderable: false, render: (v) => chipsHtml(v, state.run) },
      { data: "failed", title: "Failed", render: (v) => (v ? `<span class="reason">${escapeHtml(v)}</span>` : "0") },
      { data: "note", title: "Failure reason", render: (v) => (v ? `<span class="reason">${escapeHtml(v)}</span>` : "") },
      { data: "prompt", title: "Prompt", className: "prompt-cell", render: (v) => escapeHtml(v || "") },
    ];
  }

  function buildTasksTable(summary) {
    if (state.tasksTable) {
      state.tasksTable.destroy();
      byId("tasks").replaceChildren();
    }
    state.tasksTable = new state.DataTable("#tasks", {
      serverSide: true, processing: true, searchDelay: 350, pageLength: 25, lengthMenu: [10, 25, 50, 100, 250],
      order: [[0, "asc"]], columns: taskColumns(summary), autoWidth: false,
      language: { search: "Search tasks:", emptyTable: "No tasks (yet)." },
      ajax: (data, callback) => {
        const order = data.order && data.order[0];
        source.tasks(state.run, {
          start: data.start, length: data.length, search: data.search.value,
          order: (order && TASK_ORDER[order.column]) || "task", dir: (order && order.dir) || "asc", status: byId("status-filter").value,
        }).then((page) => callback({ draw: data.draw, ...page }))
          .catch((error) => { showError(error.message); callback({ draw: data.draw, recordsTotal: 0, recordsFiltered: 0, data: [] }); });
      },
      initComplete: () => markReady("tasks"),
    });
  }

  function filterTasks(status, search) {
    byId("status-filter").value = status;
    state.tasksTable.search(search || "").draw();
    byId("tasks-section").scrollIntoView({ behavior: "smooth" });
  }

  // ---------------------------------------------------------------- one rollout
  function foldable(text, tag = "pre") {
    text = String(text ?? "");
    const lines = text.split("\n");
    if (text.length <= FOLD_CHARS && lines.length <= FOLD_LINES) return el(tag, { text });
    const short = lines.slice(0, FOLD_LINES).join("\n").slice(0, FOLD_CHARS);
    const body = el(tag, { text: short + " …" });
    const button = el("button", { type: "button", class: "fold-toggle", text: `show all (${lines.length} lines, ${text.length} characters)` });
    let open = false;
    button.addEventListener("click", () => {
      open = !open;
      body.textContent = open ? text : short + " …";
      button.textContent = open ? "fold" : `show all (${lines.length} lines, ${text.length} characters)`;
    });
    return el("div", { class: "fold" }, body, button);
  }

  function blockNode(block) {
    switch (block.kind) {
      case "message":
        return el("div", { class: `turn role-${block.role}` }, el("div", { class: "who", text: block.role }), foldable(block.text, "div"));
      case "tool_call":
        return el("div", { class: "turn tool-call" }, el("div", { class: "who", text: `tool call → ${block.name}` }), foldable(block.arguments));
      case "tool_output":
        return el("div", { class: "turn tool-output" }, el("div", { class: "who", text: `tool output ← ${block.name || block.call_id || "tool"}` }), foldable(block.text));
      case "reasoning":
        return el("details", { class: "turn reasoning" }, el("summary", { text: "reasoning" }), foldable(block.text, "div"));
      case "error":
        return el("div", { class: "turn error" }, el("div", { class: "who", text: "response error" }), foldable(block.text));
      default:
        return el("details", { class: "turn other" }, el("summary", { text: block.type || "item" }), foldable(block.text));
    }
  }

  function failureNode(failure) {
    return el("div", { class: "failure" },
      el("div", { class: "message", text: `attempt ${fmt(failure.attempt)} failed: ${failure.message || failure.type || "failure"}` }),
      el("div", { class: "meta", text: [failure.class, failure.type, failure.http_status ? `HTTP ${failure.http_status}` : null, failure.server].filter(Boolean).join(" · ") }),
      failure.body ? el("details", { open: true }, el("summary", { text: "response body" }), foldable(failure.body)) : null);
  }

  function renderRollout(run, id, view) {
    const identity = view.identity || {};
    const reward = view.reward;
    const failed = view.failures && view.reward === null;
    byId("rollout-title").textContent = `${state.runs[run].label} · task ${fmt(identity._ng_task_index)} · rollout ${fmt(identity._ng_rollout_index)} · ${failed ? "failed" : "reward " + fmt(reward)}`;
    const usage = view.usage || {};
    const parts = [el("div", { class: "meta", text: [view.agent && `agent ${view.agent}`, view.model && `model ${view.model}`, view.status && `status ${view.status}`,
      usage.total_tokens !== undefined && `tokens ${usage.input_tokens} in / ${usage.output_tokens} out`, `id ${id}`].filter(Boolean).join(" · ") })];
    if (view.failures && view.failures.length) {
      parts.push(el("h2", { text: failed ? "Failure" : "Earlier failed attempts" }), ...view.failures.map(failureNode));
    }
    if (view.tools && view.tools.length) {
      parts.push(el("details", {}, el("summary", { text: `Tools offered (${view.tools.length}): ${view.tools.map((t) => t.name).join(", ")}` }), ...view.tools.map((t) => foldable(t.spec))));
    }
    const conversation = el("div", { class: "conversation" });
    view.blocks.forEach((block, i) => {
      if (i === view.prompt_length && i > 0) conversation.append(el("div", { class: "divider", text: "the agent's turn" }));
      conversation.append(blockNode(block));
    });
    if (failed && !view.blocks.length) conversation.append(el("p", { class: "note", text: "The rollout as sent is not in rollouts_materialized_inputs.jsonl." }));
    parts.push(conversation);
    if (!failed) {
      const entries = Object.entries(view.verdict || {}).map(([k, v]) => [k, typeof v === "object" && v !== null ? JSON.stringify(v) : fmt(v)]);
      parts.push(el("div", { class: `verdict ${reward > 0 ? "pass" : "fail"}` }, el("div", { class: "who", text: `Verdict: reward ${fmt(reward)}` }), kvTable(entries)));
    }
    byId("rollout-body").replaceChildren(...parts);
    const section = byId("rollout-view");
    section.hidden = false;
    section.dataset.rollout = id;
    section.scrollIntoView({ behavior: "smooth", block: "start" });
  }

  async function openRollout(run, id) {
    try {
      const view = await source.rollout(run, id);
      renderRollout(run, id, view);
      history.replaceState(null, "", `#run=${run}&rollout=${encodeURIComponent(id)}`);
    } catch (error) {
      byId("rollout-title").textContent = `rollout ${id}`;
      byId("rollout-body").replaceChildren(el("p", { class: "note", text: error.message }));
      byId("rollout-view").hidden = false;
    }
  }

  // ---------------------------------------------------------------- several runs
  function renderCompareSummary() {
    const rows = state.runs.map((s) => {
      const pass = bestPassAtK(s);
      const mean = keyMetricValue(s, "mean/reward");
      return el("tr", {}, el("th", { text: s.label }), el("td", { text: `mean reward ${fmt(mean !== undefined ? mean : s.live.mean_reward)}` }),
        el("td", { text: `${s.live.rollouts} rollouts` }), el("td", { class: s.live.failed_rollouts ? "reason" : "", text: `${s.live.failed_rollouts} failed` }),
        el("td", { text: pass ? `pass@${pass.k} ${fmt(pass.value, 3)}%` : "" }));
    });
    byId("compare-summary").replaceChildren(el("table", { class: "kv" }, rows));
    const traces = passCurves(state.runs);
    byId("compare-passk-caption").textContent = passCaption(state.runs);
    if (traces.length) loadPlotly().then((Plotly) => Plotly.react("compare-passk", traces, chartLayout("pass@k by run", "k", "accuracy (%)"), { displaylogo: false, responsive: true })).catch(() => {});
    else byId("compare-passk").hidden = true;
  }

  function buildCompareTable() {
    if (state.compareTable) return state.compareTable.ajax.reload(null, false);
    const columns = [
      { data: "task", title: "Task", render: (v, _, row) => escapeHtml(fmt(v) + (row.agent ? ` (${row.agent})` : "")) },
      { data: "differs", title: "Differs", render: (v) => (v ? '<span class="diff-yes">yes</span>' : "") },
      ...state.runs.map((s, i) => ({
        data: (row) => row.cells[i], title: s.label, orderable: false,
        render: (cell) => (cell ? `${escapeHtml(fmt(cell.mean))} ${chipsHtml(cell.rollouts, i)}` : '<span class="chip absent">absent</span>'),
      })),
      { data: "prompt", title: "Prompt", className: "prompt-cell", render: (v) => escapeHtml(v || "") },
    ];
    const orderNames = ["task", "differs", ...state.runs.map(() => null), "prompt"];
    state.compareTable = new state.DataTable("#compare", {
      serverSide: true, processing: true, searchDelay: 350, pageLength: 25, order: [], columns, autoWidth: false,
      language: { search: "Search tasks:" },
      ajax: (data, callback) => {
        const order = data.order && data.order[0];
        source.compare({
          start: data.start, length: data.length, search: data.search.value,
          order: (order && orderNames[order.column]) || "differs", dir: order ? order.dir : "asc",
          differing: byId("differing-only").checked ? "1" : "0",
        }).then((page) => callback({ draw: data.draw, ...page }))
          .catch((error) => { showError(error.message); callback({ draw: data.draw, recordsTotal: 0, recordsFiltered: 0, data: [] }); });
      },
    });
  }

  // ---------------------------------------------------------------- navigation
  function renderTabs() {
    const tabs = state.runs.map((s, i) => el("button", { type: "button", "aria-current": state.view === "run" && state.run === i ? "true" : "false", text: s.label, onclick: () => selectRun(i) }));
    if (state.runs.length > 1) tabs.push(el("button", { type: "button", "aria-current": state.view === "compare" ? "true" : "false", text: "Compare runs", onclick: showCompare }));
    byId("run-tabs").replaceChildren(...tabs);
  }

  function selectRun(number) {
    state.run = number;
    state.view = "run";
    byId("run-view").hidden = false;
    byId("compare-view").hidden = true;
    byId("rollout-view").hidden = true;
    renderTabs();
    const summary = state.runs[number];
    renderOverview(summary);
    renderCharts(summary);
    buildTasksTable(summary);
  }

  function showCompare() {
    state.view = "compare";
    byId("run-state").hidden = true;
    byId("run-view").hidden = true;
    byId("compare-view").hidden = false;
    byId("rollout-view").hidden = true;
    renderTabs();
    renderCompareSummary();
    buildCompareTable();
  }

  const ready = new Set();
  function markReady(part) {
    ready.add(part);
    if (ready.has("overview") && ready.has("tasks")) {
      document.body.dataset.ready = "1";
      firstScreenDrawn();
    }
  }

  async function refresh() {
    try {
      state.runs = await source.runs();
    } catch (error) {
      showError(`Could not refresh: ${error.message}`);
      return;
    }
    if (state.view === "run") {
      renderOverview(state.runs[state.run]);
      renderCharts(state.runs[state.run]);
      state.tasksTable.ajax.reload(null, false);
    } else {
      renderCompareSummary();
      state.compareTable.ajax.reload(null, false);
    }
    scheduleRefresh();
  }

  function scheduleRefresh() {
    clearTimeout(state.refreshTimer);
    const running = state.runs.some((s) => s.progress && !s.progress.finished);
    if (LIVE && running) state.refreshTimer = setTimeout(refresh, REFRESH_MS);
  }

  async function start() {
    try {
      const [runs, DataTable] = await Promise.all([source.runs(), loadDataTables()]);
      state.runs = runs;
      state.DataTable = DataTable;
    } catch (error) {
      showError(`The page could not load its data: ${error.message}`);
      return;
    }
    if (!LIVE) {
      const note = byId("export-note");
      note.textContent = config.note;
      note.hidden = false;
    }
    byId("status-filter").addEventListener("change", () => state.tasksTable.ajax.reload());
    byId("differing-only").addEventListener("change", () => state.compareTable.ajax.reload());
    byId("rollout-close").addEventListener("click", () => { byId("rollout-view").hidden = true; history.replaceState(null, "", "#"); });
    document.addEventListener("click", (event) => {
      const chip = event.target.closest("button.chip[data-rollout]");
      if (chip) openRollout(Number(chip.dataset.run), chip.dataset.rollout);
    });
    const hash = new URLSearchParams(location.hash.slice(1));
    const run = Number(hash.get("run") || 0);
    selectRun(run >= 0 && run < state.runs.length ? run : 0);
    markReady("overview");
    if (hash.get("rollout")) openRollout(state.run, hash.get("rollout"));
    scheduleRefresh();
  }

  start();
})();
