"""The report page's own CSS and JavaScript (inlined into report.html; plotly.js is inlined separately).

The JavaScript is the per-sample browser: it reads the rows from the JSON block `#samples-data`, fills one
<select> per filter column, and shows the matching rows a page at a time; a click on a row opens its caption,
captioning prompt, the judge's system prompt and prompt, its raw reply, its attempts and the parsed detail. Texts
most rows share are sent once (`data.lookups[column]`, the rows holding an index into it). `window.capevalReport` exposes `applyFilters()` and
`visibleCount()` so a browser test can drive it."""

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #222; background: #fafafa; }
header { background: #23395d; color: #fff; padding: 14px 24px; }
header h1 { margin: 0; font-size: 20px; } header p { margin: 4px 0 0; font-size: 13px; opacity: .85; }
nav { background: #fff; border-bottom: 1px solid #ddd; padding: 8px 24px; position: sticky; top: 0; z-index: 5; }
nav a { margin-right: 16px; color: #23395d; text-decoration: none; font-size: 14px; }
main { padding: 8px 24px 40px; }
section { background: #fff; border: 1px solid #e3e3e3; border-radius: 6px; padding: 12px 16px; margin: 16px 0; }
h2 { font-size: 18px; margin: 4px 0 10px; } h3 { font-size: 15px; margin: 14px 0 6px; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0; }
th, td { border-bottom: 1px solid #eee; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f3f5f8; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.ci { color: #777; font-size: 12px; }
.warn { color: #8a4b00; background: #fff6e5; border-left: 3px solid #f0a020; padding: 4px 8px; margin: 4px 0;
        font-size: 13px; }
.note { color: #555; font-size: 13px; }
dl.metric-definitions { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; font-size: 13px;
                        color: #444; margin: 6px 0; }
dl.metric-definitions dt { font-weight: 600; }
dl.metric-definitions dd { margin: 0; }
.sig { color: #b00020; font-weight: 600; }
.filters { display: flex; flex-wrap: wrap; gap: 8px; align-items: end; margin-bottom: 8px; }
.filters label { font-size: 12px; display: flex; flex-direction: column; }
.filters select, .filters input { font-size: 13px; padding: 2px 4px; min-width: 110px; }
#samples-table tr.row { cursor: pointer; } #samples-table tr.row:hover { background: #f0f6ff; }
#samples-table tr.detail td { background: #fbfbfb; }
pre { white-space: pre-wrap; word-break: break-word; margin: 2px 0 8px; font-size: 12px; background: #f6f6f6;
      padding: 6px; border-radius: 4px; max-height: 260px; overflow: auto; }
.pager { margin: 6px 0; font-size: 13px; } .pager button { margin: 0 4px; }
details > summary { cursor: pointer; color: #23395d; font-size: 14px; }
"""

JS = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("samples-data").textContent);
  var cols = data.columns, rows = data.rows, filterCols = data.filters, lookups = data.lookups || {};
  var idx = {}; cols.forEach(function (c, i) { idx[c] = i; });
  var pageSize = 50, page = 0, matched = [];
  var box = document.getElementById("sample-filters");
  var selects = {};
  filterCols.forEach(function (c) {
    var values = {};
    rows.forEach(function (r) { values[r[idx[c]]] = true; });
    var label = document.createElement("label");
    label.textContent = c;
    var sel = document.createElement("select");
    sel.id = "filter-" + c;
    var any = document.createElement("option"); any.value = ""; any.textContent = "(any)"; sel.appendChild(any);
    Object.keys(values).sort().forEach(function (v) {
      var o = document.createElement("option"); o.value = v; o.textContent = v; sel.appendChild(o);
    });
    sel.addEventListener("change", function () { page = 0; applyFilters(); });
    label.appendChild(sel); box.appendChild(label); selects[c] = sel;
  });
  var searchLabel = document.createElement("label"); searchLabel.textContent = "text contains";
  var search = document.createElement("input"); search.id = "filter-text"; search.type = "search";
  search.addEventListener("input", function () { page = 0; applyFilters(); });
  searchLabel.appendChild(search); box.appendChild(searchLabel);

  function text(v) { return v === null || v === undefined ? "" : String(v); }
  function cell(tr, v, cls) {
    var td = document.createElement("td"); td.textContent = text(v); if (cls) { td.className = cls; }
    tr.appendChild(td); return td;
  }
  function applyFilters() {
    var q = search.value.toLowerCase();
    matched = rows.filter(function (r) {
      for (var c in selects) {
        if (selects[c].value !== "" && text(r[idx[c]]) !== selects[c].value) { return false; }
      }
      if (q) {
        var hay = (text(r[idx.caption]) + " " + text(r[idx.raw_output]) + " " + text(r[idx.item_id])).toLowerCase();
        if (hay.indexOf(q) < 0) { return false; }
      }
      return true;
    });
    render();
  }
  function render() {
    var body = document.querySelector("#samples-table tbody");
    while (body.firstChild) { body.removeChild(body.firstChild); }
    var start = page * pageSize, shown = matched.slice(start, start + pageSize);
    shown.forEach(function (r) {
      var tr = document.createElement("tr"); tr.className = "row";
      data.shown.forEach(function (c) { cell(tr, r[idx[c]]); });
      tr.addEventListener("click", function () { toggle(tr, r); });
      body.appendChild(tr);
    });
    var pages = Math.max(1, Math.ceil(matched.length / pageSize));
    document.getElementById("samples-count").textContent =
      matched.length + " of " + rows.length + " rows match" + (data.left_out ? " (" + data.left_out +
      " more rows not embedded)" : "") + "; page " + (page + 1) + " of " + pages;
  }
  function toggle(tr, r) {
    var next = tr.nextSibling;
    if (next && next.className === "detail") { next.parentNode.removeChild(next); return; }
    var d = document.createElement("tr"); d.className = "detail";
    var td = document.createElement("td"); td.colSpan = data.shown.length;
    data.details.forEach(function (c) {
      var v = r[idx[c]];
      if (lookups[c] && v !== null && v !== undefined) { v = lookups[c][v]; }
      if (v === null || v === undefined || v === "") { return; }
      var h = document.createElement("strong"); h.textContent = c; td.appendChild(h);
      var pre = document.createElement("pre"); pre.className = "detail-" + c; pre.textContent = text(v);
      td.appendChild(pre);
    });
    d.appendChild(td); tr.parentNode.insertBefore(d, tr.nextSibling);
  }
  document.getElementById("samples-prev").addEventListener("click", function () {
    if (page > 0) { page -= 1; render(); }
  });
  document.getElementById("samples-next").addEventListener("click", function () {
    if ((page + 1) * pageSize < matched.length) { page += 1; render(); }
  });
  window.capevalReport = {
    applyFilters: applyFilters,
    visibleCount: function () { return document.querySelectorAll("#samples-table tr.row").length; },
    matchedCount: function () { return matched.length; }
  };
  applyFilters();
})();
"""
