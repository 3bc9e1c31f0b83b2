"use strict";
// The report's items viewer: a sortable, filterable, searchable table of every item of every
// run, and an item's variants side by side.
//
// The data comes from the page's data block (a script element of type application/json, id
// report-data), as gzip-compressed JSON in base64: a large run's texts would not fit the page's
// size budget as they are. Every text from the data reaches the page through DOM APIs (textContent, append of
// strings, attribute values), never as markup: a summary holding a script tag shows as text.
// This file is the page's only script; the Content-Security-Policy allows it by its hash.
(() => {
  const PAGE_SIZE = 100;
  const STATUS = { s: "scored", b: "blank_summary", u: "unscorable", e: "error" };
  const QUESTION_VERDICT = { a: "answered", n: "not answered", m: "no verdict" };
  const FACT_VERDICT = { a: "stated", n: "not stated", m: "no verdict" };
  // An entry's fields, as _report_data.py writes them.
  const E = {
    status: 0, score: 1, alignment: 2, coverage: 3, summary: 4, reason: 5, error: 6,
    claims: 7, questions: 8, cost: 9, source: 10, flags: 11, facts: 12,
  };

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = value;
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child !== null && child !== undefined && child !== false) node.append(child);
    }
    return node;
  }

  function number(value, digits = 3) {
    return typeof value === "number" && Number.isFinite(value) ? value.toFixed(digits) : "n/a";
  }

  function signed(value) {
    if (typeof value !== "number" || !Number.isFinite(value)) return "";
    if (Math.abs(value) < 5e-4) return "0.000";
    return (value > 0 ? "+" : "\u2212") + Math.abs(value).toFixed(3);
  }

  function money(value, currency) {
    if (typeof value !== "number" || !Number.isFinite(value)) return "unknown";
    // As the runs table shows costs (_report.money): cents from a dime up, else four decimals.
    const digits = value >= 0.1 || value === 0 ? 2 : 4;
    const shown = value > 0 && value < 0.0001 ? "< 0.0001" : value.toFixed(digits);
    return currency === "USD" ? `$${shown}` : `${shown} ${currency}`;
  }

  function normalised(text) {
    return String(text).trim().replace(/\s+/g, " ").toLowerCase();
  }

  function base64Bytes(text) {
    if (typeof Uint8Array.fromBase64 === "function") return Uint8Array.fromBase64(text);
    const binary = atob(text);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
    return bytes;
  }

  async function readData() {
    const envelope = JSON.parse(document.getElementById("report-data").textContent);
    if (envelope.encoding !== "gzip+base64") {
      throw new Error(`unknown data encoding ${JSON.stringify(envelope.encoding)}`);
    }
    const compressed = new Blob([base64Bytes(envelope.data)]).stream();
    const text = await new Response(compressed.pipeThrough(new DecompressionStream("gzip"))).text();
    return JSON.parse(text);
  }

  class Viewer {
    constructor(data, mount) {
      this.data = data;
      this.mount = mount;
      this.hasBaseline = data.baseline;
      this.rows = this.buildRows();
      this.sort = { key: null, descending: false };
      this.query = "";
      this.statuses = new Set(Object.keys(STATUS));
      this.variants = new Set(data.variants.map((_, index) => index));
      this.scoreMin = null;
      this.scoreMax = null;
      this.flaggedOnly = false;
      this.page = 0;
      this.visible = this.rows;
    }

    buildRows() {
      const rows = [];
      this.data.items.forEach(([id, , entries], item) => {
        const base = this.hasBaseline ? entries[0] : null;
        entries.forEach((entry, variant) => {
          if (!entry) return;
          const error = entry[E.error];
          const score = entry[E.score];
          const baseScore = base && variant > 0 ? base[E.score] : null;
          const reason = entry[E.reason] ?? (error ? `${error[0]} in ${error[1]}: ${error[2]}` : "");
          rows.push({
            order: rows.length,
            item,
            id,
            variant,
            status: entry[E.status],
            score,
            alignment: entry[E.alignment],
            coverage: entry[E.coverage],
            change: typeof score === "number" && typeof baseScore === "number" ? score - baseScore : null,
            reason,
            flags: [...new Set((entry[E.flags] || []).map((flag) => flag[0]))],
            haystack: [id, entry[E.summary] ?? "", reason].join("\n").toLowerCase(),
          });
        });
      });
      return rows;
    }

    columns() {
      const columns = [
        { key: "id", label: "item", kind: "text" },
        { key: "variant", label: "variant", kind: "number" },
        { key: "status", label: "status", kind: "text" },
        { key: "score", label: "score", kind: "number" },
        { key: "alignment", label: "alignment", kind: "number" },
        { key: "coverage", label: "coverage", kind: "number" },
      ];
      if (this.hasBaseline) columns.push({ key: "change", label: "change", kind: "number" });
      columns.push({ key: "reason", label: "reason", kind: "text" });
      return columns;
    }

    render() {
      this.mount.replaceChildren(this.controls(), this.countLine(), this.table(), this.pager());
      this.dialog = el("dialog", { id: "item-view", "aria-labelledby": "item-title" });
      // A click on the backdrop closes the item (the dialog element is the target of clicks
      // on its own padding too, so the click's place decides).
      this.dialog.addEventListener("click", (event) => {
        const box = this.dialog.getBoundingClientRect();
        const outside = event.clientX < box.left || event.clientX > box.right
          || event.clientY < box.top || event.clientY > box.bottom;
        if (event.target === this.dialog && outside) this.dialog.close();
      });
      this.mount.append(this.dialog);
      this.refresh();
    }

    controls() {
      const search = el("input", {
        type: "search", id: "item-search", placeholder: "item ids, summaries, reasons",
        "aria-label": "Search item ids, summaries and reasons",
      });
      search.addEventListener("input", () => { this.query = search.value.trim().toLowerCase(); this.refresh(); });
      const counts = { s: 0, u: 0, e: 0 };
      for (const row of this.rows) counts[row.status] += 1;
      const statusBoxes = Object.entries(STATUS).map(([code, name]) =>
        this.checkbox(`status-${name}`, `${name} (${counts[code]})`, null, (on) => {
          if (on) this.statuses.add(code); else this.statuses.delete(code);
        }));
      const variantBoxes = this.data.variants.map((variant, index) =>
        this.checkbox(`variant-${index}`, variant.label + (variant.baseline ? " (baseline)" : ""),
          variant.colour, (on) => {
            if (on) this.variants.add(index); else this.variants.delete(index);
          }));
      const bound = (id, label, placeholder, set) => {
        const input = el("input", { type: "number", id, step: "0.05", min: 0, "aria-label": label, placeholder });
        input.addEventListener("input", () => {
          const value = input.value.trim() === "" ? null : Number(input.value);
          set(Number.isFinite(value) ? value : null);
          this.refresh();
        });
        return input;
      };
      const flagged = this.rows.filter((row) => row.flags.length).length;
      const flagBox = el("input", { type: "checkbox", id: "flagged-only" });
      flagBox.addEventListener("change", () => { this.flaggedOnly = flagBox.checked; this.refresh(); });
      return el("div", { class: "controls" },
        el("label", { class: "search" }, "Search ", search),
        el("fieldset", { id: "flag-filter" }, el("legend", { text: "Manipulation flags" }),
          el("label", { class: "check", for: "flagged-only" }, flagBox, `flagged only (${flagged})`)),
        el("fieldset", { id: "status-filter" }, el("legend", { text: "Status" }), ...statusBoxes),
        el("fieldset", { id: "variant-filter" }, el("legend", { text: "Variant" }), ...variantBoxes),
        el("fieldset", { id: "score-filter" }, el("legend", { text: "Score" }),
          bound("score-min", "lowest score", "from", (v) => { this.scoreMin = v; }), " to ",
          bound("score-max", "highest score", "to", (v) => { this.scoreMax = v; })));
    }

    checkbox(id, label, colour, set) {
      const box = el("input", { type: "checkbox", id, checked: true });
      box.addEventListener("change", () => { set(box.checked); this.refresh(); });
      const swatch = colour ? el("span", { class: "swatch" }) : null;
      if (swatch) swatch.style.background = colour;
      return el("label", { class: "check", for: id }, box, swatch, label);
    }

    countLine() {
      this.count = el("p", { id: "items-count", class: "muted", "aria-live": "polite" });
      return this.count;
    }

    table() {
      this.head = el("tr");
      for (const column of this.columns()) {
        const button = el("button", { type: "button", class: "sort", "data-key": column.key }, column.label, el("span", { class: "arrow" }));
        button.addEventListener("click", () => {
          this.sort = this.sort.key === column.key
            ? { key: column.key, descending: !this.sort.descending }
            : { key: column.key, descending: false };
          this.refresh();
        });
        this.head.append(el("th", { scope: "col", "data-key": column.key }, button));
      }
      this.body = el("tbody");
      return el("table", { id: "items-table", class: "items" }, el("thead", {}, this.head), this.body);
    }

    pager() {
      this.previous = el("button", { type: "button", id: "page-previous", text: "Previous" });
      this.next = el("button", { type: "button", id: "page-next", text: "Next" });
      this.pageLabel = el("span", { id: "page-label" });
      this.previous.addEventListener("click", () => { this.page -= 1; this.draw(); });
      this.next.addEventListener("click", () => { this.page += 1; this.draw(); });
      return el("nav", { class: "pager", "aria-label": "Pages of items" }, this.previous, this.pageLabel, this.next);
    }

    matches(row) {
      if (!this.statuses.has(row.status) || !this.variants.has(row.variant)) return false;
      if (this.flaggedOnly && !row.flags.length) return false;
      if (this.scoreMin !== null || this.scoreMax !== null) {
        if (typeof row.score !== "number") return false;
        if (this.scoreMin !== null && row.score < this.scoreMin) return false;
        if (this.scoreMax !== null && row.score > this.scoreMax) return false;
      }
      return this.query === "" || row.haystack.includes(this.query);
    }

    refresh() {
      const visible = this.rows.filter((row) => this.matches(row));
      const { key, descending } = this.sort;
      if (key !== null) {
        const textual = key === "id" || key === "reason" || key === "status";
        const collator = new Intl.Collator(undefined, { numeric: true });
        const value = key === "status" ? (row) => STATUS[row.status] : (row) => row[key];
        visible.sort((a, b) => {
          const x = value(a);
          const y = value(b);
          const xMissing = x === null || x === undefined;
          const yMissing = y === null || y === undefined;
          // Items without the value (an error has no score) go last in either direction.
          if (xMissing || yMissing) return xMissing === yMissing ? a.order - b.order : (xMissing ? 1 : -1);
          const order = textual ? collator.compare(x, y) : x - y;
          return (descending ? -order : order) || a.order - b.order;
        });
      }
      this.visible = visible;
      this.page = 0;
      for (const th of this.head.children) {
        const sorted = th.dataset.key === key;
        th.setAttribute("aria-sort", sorted ? (descending ? "descending" : "ascending") : "none");
        th.querySelector(".arrow").textContent = sorted ? (descending ? " \u25BC" : " \u25B2") : "";
      }
      this.draw();
    }

    draw() {
      const pages = Math.max(1, Math.ceil(this.visible.length / PAGE_SIZE));
      this.page = Math.min(Math.max(this.page, 0), pages - 1);
      const first = this.page * PAGE_SIZE;
      const shown = this.visible.slice(first, first + PAGE_SIZE);
      const rows = shown.map((row, offset) => this.tableRow(row, first + offset));
      if (rows.length === 0) {
        rows.push(el("tr", {}, el("td", { colspan: this.columns().length, class: "muted", text: "No item matches." })));
      }
      this.body.replaceChildren(...rows);
      const total = this.rows.length.toLocaleString("en");
      const found = this.visible.length.toLocaleString("en");
      this.count.textContent = this.visible.length === this.rows.length
        ? `${total} rows (items \u00D7 variants)`
        : `${found} of ${total} rows match`;
      this.pageLabel.textContent = this.visible.length
        ? `rows ${(first + 1).toLocaleString("en")}\u2013${(first + shown.length).toLocaleString("en")} of ${found} (page ${this.page + 1} of ${pages})`
        : "";
      this.previous.disabled = this.page === 0;
      this.next.disabled = this.page >= pages - 1;
    }

    tableRow(row, position) {
      const variant = this.data.variants[row.variant];
      const swatch = el("span", { class: "swatch" });
      swatch.style.background = variant.colour;
      const cells = [
        el("td", { class: "id" }, el("button", { type: "button", class: "open", text: row.id, title: "Open this item" })),
        el("td", { class: "variant" }, swatch, variant.label),
        el("td", {}, el("span", { class: `status ${STATUS[row.status]}`, text: STATUS[row.status] }),
          row.flags.length ? el("span", { class: "flag", text: "flagged", title: row.flags.join(", ") }) : null),
        el("td", { class: "num", text: number(row.score) }),
        el("td", { class: "num", text: number(row.alignment) }),
        el("td", { class: "num", text: number(row.coverage) }),
      ];
      if (this.hasBaseline) {
        const tone = row.change === null || Math.abs(row.change) < 5e-4 ? "" : (row.change > 0 ? "better" : "worse");
        cells.push(el("td", { class: `num ${tone}`, text: row.variant === 0 ? "base" : signed(row.change) }));
      }
      cells.push(el("td", { class: "reason", text: row.reason.length > 160 ? `${row.reason.slice(0, 157)}\u2026` : row.reason, title: row.reason }));
      const tr = el("tr", { "data-item": row.id, "data-variant": variant.label, "data-status": STATUS[row.status], "data-flags": row.flags.join(" ") }, ...cells);
      tr.addEventListener("click", () => this.open(position));
      return tr;
    }

    // Opens the item of the visible row at ``position``, all its variants side by side.
    open(position) {
      this.showItem(this.visible[position].item, position);
    }

    showItem(item, position) {
      const [id, source, entries] = this.data.items[item];
      const dialog = this.dialog;
      const close = el("button", { type: "button", id: "item-close", text: "Close", autofocus: true });
      close.addEventListener("click", () => dialog.close());
      const navigation = el("span", { class: "nav" });
      if (position !== null) {
        const previous = el("button", { type: "button", id: "item-previous", text: "\u2190 Previous row", disabled: position === 0 });
        const next = el("button", { type: "button", id: "item-next", text: "Next row \u2192", disabled: position >= this.visible.length - 1 });
        previous.addEventListener("click", () => this.open(position - 1));
        next.addEventListener("click", () => this.open(position + 1));
        navigation.append(previous, next);
      }
      const words = source ? source.split(/\s+/).filter(Boolean).length : 0;
      const sourceBlock = source
        ? el("details", { class: "source" }, el("summary", { text: `Source (${words.toLocaleString("en")} words)` }), el("p", { class: "text", text: source }))
        : el("p", { class: "muted", text: "No source recorded (nothing was judged)." });
      const columns = el("div", { class: "side-by-side" });
      columns.style.setProperty("--columns", String(entries.length));
      const questions = this.questionRows(entries);
      entries.forEach((entry, variant) => columns.append(this.variantColumn(entries, entry, variant, questions)));
      dialog.replaceChildren(
        el("header", {}, el("h3", { id: "item-title" }, "Item ", el("code", { text: id })), navigation, close),
        sourceBlock,
        columns,
        this.questionsTable(entries, questions),
      );
      if (!dialog.open) dialog.showModal();
      dialog.scrollTop = 0;
    }

    variantColumn(entries, entry, variant, questions) {
      const label = this.data.variants[variant];
      const swatch = el("span", { class: "swatch" });
      swatch.style.background = label.colour;
      const heading = el("h4", {}, swatch, label.label, label.baseline ? el("span", { class: "badge", text: "baseline" }) : null);
      const column = el("section", { class: "variant", "data-variant": label.label }, heading);
      if (!entry) {
        column.append(el("p", { class: "muted", text: "Not in this run." }));
        return column;
      }
      const base = this.hasBaseline && variant > 0 ? entries[0] : null;
      const status = STATUS[entry[E.status]];
      const figures = el("p", { class: "figures" }, el("span", { class: `status ${status}`, text: status }));
      for (const [name, field] of [["score", E.score], ["alignment", E.alignment], ["coverage", E.coverage]]) {
        figures.append(` ${name} `, el("b", { text: number(entry[field]) }));
        if (base && typeof entry[field] === "number" && typeof base[field] === "number") {
          const change = entry[field] - base[field];
          figures.append(" ", el("span", { class: Math.abs(change) < 5e-4 ? "muted" : (change > 0 ? "better" : "worse"), text: `(${signed(change)})` }));
        }
      }
      column.append(figures);
      const changes = el("p", { class: "changes" });
      column.append(changes);
      if (this.data.has_cost) {
        const cost = entry[E.cost] || [null, null];
        column.append(el("p", { class: "cost muted", text: `cost: judge ${money(cost[0], this.data.currency)}, target ${money(cost[1], this.data.currency)}` }));
      }
      const error = entry[E.error];
      if (error) {
        column.append(el("div", { class: "error-detail", role: "note" },
          el("b", { text: error[0] }), " in step ", el("b", { text: error[1] }), ": ", error[2]));
      }
      const flags = entry[E.flags] || [];
      if (flags.length) {
        // Data about the texts, decided by deterministic checks: not part of the score.
        const list = el("ul", {});
        for (const [check, text, match] of flags) list.append(el("li", {}, el("b", { text: check }), ` in the ${text}: `, el("q", { text: match })));
        column.append(el("div", { class: "flag-detail", role: "note" }, "Flagged (not part of the score):", list));
      }
      if (entry[E.source] !== null && entry[E.source] !== undefined) {
        column.append(el("details", { class: "source" }, el("summary", { text: "This run's source differs" }), el("p", { class: "text", text: entry[E.source] })));
      }
      column.append(
        el("h5", { text: "Summary" }),
        entry[E.summary] === null ? el("p", { class: "muted", text: "No summary (nothing was judged)." }) : el("p", { class: "text summary", text: entry[E.summary] }),
        el("h5", { text: "Reason" }),
        entry[E.reason] === null ? el("p", { class: "muted", text: "No reason." }) : el("p", { class: "text reason", text: entry[E.reason] }),
      );
      const claims = entry[E.claims] || [];
      const baseClaims = new Map((base ? base[E.claims] || [] : []).map(([text, supported]) => [normalised(text), supported]));
      let changed = 0;
      const list = el("ul", { class: "claims" });
      for (const [text, supported, reason] of claims) {
        const before = baseClaims.get(normalised(text));
        const differs = before !== undefined && before !== supported;
        if (differs) changed += 1;
        list.append(el("li", { class: `${supported ? "ok" : "no"}${differs ? " changed" : ""}` },
          el("span", { class: "verdict", text: supported ? "\u2713 supported" : "\u2717 unsupported" }), " ",
          el("span", { class: "claim", text }),
          differs ? el("span", { class: "badge changed", text: `changed: ${before ? "supported" : "unsupported"} in the baseline` }) : null,
          reason ? el("div", { class: "why", text: reason }) : null));
      }
      const unsupported = claims.filter((claim) => !claim[1]).length;
      const title = `Claims (${claims.length}, ${unsupported} unsupported${base ? `; ${changed} changed against the baseline` : ""})`;
      column.append(el("h5", { text: title }), claims.length ? list : el("p", { class: "muted", text: "No claims." }));
      if (base) {
        const asked = questions.order.map((key) => questions.rows.get(key).verdicts);
        const turned = asked.filter((v) => v.has(0) && v.has(variant) && v.get(0)[0] !== v.get(variant)[0]).length;
        changes.textContent = `Against the baseline: ${changed} claim verdict${changed === 1 ? "" : "s"} and ${turned} question verdict${turned === 1 ? "" : "s"} changed (marked below).`;
        if (changed + turned) changes.classList.add("some");
      } else {
        changes.remove();
      }
      return column;
    }

    // Each question of the item (matched by text across variants, the baseline's order first)
    // with each variant's verdict on it.
    questionRows(entries) {
      const order = [];
      const rows = new Map();
      entries.forEach((entry, variant) => {
        for (const [text, verdict, reason] of (entry && entry[E.questions]) || []) {
          const key = normalised(text);
          if (!rows.has(key)) { rows.set(key, { text, verdicts: new Map() }); order.push(key); }
          rows.get(key).verdicts.set(variant, [verdict, reason]);
        }
      });
      return { order, rows };
    }

    // One row per question, one column per variant; a verdict that differs from the
    // baseline's on the same question is marked.
    // An item measured on key facts (its own, or its reference summary's) shows them as key
    // facts, stated or not; else as the coverage questions, answered or not.
    questionsTable(entries, { order, rows }) {
      const facts = entries.some((entry) => entry && entry[E.facts] === 1);
      const title = facts ? `Key facts (${order.length})` : `Coverage questions (${order.length})`;
      const block = el("section", { class: "questions" }, el("h4", { text: title }));
      if (!order.length) {
        block.append(el("p", { class: "muted", text: facts ? "No key facts." : "No questions." }));
        return block;
      }
      const named = (verdict) => (facts ? FACT_VERDICT : QUESTION_VERDICT)[verdict];
      const head = el("tr", {}, el("th", { scope: "col", text: facts ? "key fact" : "question" }),
        ...entries.map((_, variant) => el("th", { scope: "col", text: this.data.variants[variant].label })));
      const body = el("tbody");
      for (const key of order) {
        const { text, verdicts } = rows.get(key);
        const base = this.hasBaseline ? verdicts.get(0) : undefined;
        const cells = entries.map((entry, variant) => {
          const found = verdicts.get(variant);
          if (!entry || !found) return el("td", { class: "muted", text: entry ? "not asked" : "" });
          const [verdict, reason] = found;
          const differs = variant > 0 && base !== undefined && base[0] !== verdict;
          return el("td", { class: `${verdict === "a" ? "ok" : "no"}${differs ? " changed" : ""}` },
            el("span", { class: "verdict", text: `${verdict === "a" ? "\u2713" : (verdict === "n" ? "\u2717" : "\u2013")} ${named(verdict)}` }),
            differs ? el("span", { class: "badge changed", text: `changed: ${named(base[0])} in the baseline` }) : null,
            reason ? el("div", { class: "why", text: reason }) : null);
        });
        body.append(el("tr", {}, el("td", { class: "question", text }), ...cells));
      }
      block.append(el("table", { class: "questions" }, el("thead", {}, head), body));
      return block;
    }

    // ``#item=<id>`` in the address opens that item (a link to one item of a report).
    openFromAddress() {
      const match = /^#item=(.*)$/.exec(window.location.hash);
      if (!match) return;
      let id;
      try {
        id = decodeURIComponent(match[1]);
      } catch {
        return; // a malformed address opens nothing
      }
      const item = this.data.items.findIndex((entry) => entry[0] === id);
      if (item >= 0) this.showItem(item, null);
    }
  }

  async function start() {
    const mount = document.getElementById("items-viewer");
    const root = document.documentElement;
    try {
      const viewer = new Viewer(await readData(), mount);
      viewer.render();
      window.addEventListener("hashchange", () => viewer.openFromAddress());
      viewer.openFromAddress();
      root.dataset.viewer = "ready";
    } catch (error) {
      mount.replaceChildren(el("p", { class: "worse", text: `The items could not be shown: ${error}` }));
      root.dataset.viewer = "failed";
      throw error;
    }
  }

  start();
})();
