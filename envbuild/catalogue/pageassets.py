"""The catalogue page's style and script, inlined into it: the page is one file that opens from a file
system or any web server with nothing else to fetch.

The script reads no data of its own: it only hides matrix rows, by the `data-name` (canonical package
name) and `differs` class the server-side HTML already carries, so nothing from an image ever reaches
JavaScript as code. The filter is in the URL (`?q=torch`, `#q=torch&differ=1`): a link to a filtered view
can be shared, and a headless browser can be asked for one (the test does: chromium --dump-dom URL?q=...).
"""

from __future__ import annotations

STYLE = """\
:root { --fg: #1d2433; --muted: #5d6678; --line: #d8dde6; --head: #eef1f6; --other: #ffe8a3;
  --absent: #f3f4f6; --bad: #fde2e1; --accent: #2457c5; }
* { box-sizing: border-box; }
body { font: 14px/1.45 "DejaVu Sans", "Liberation Sans", system-ui, sans-serif; color: var(--fg);
  margin: 0 24px 40px; }
h1 { font-size: 22px; margin: 18px 0 2px; }
h2 { font-size: 17px; margin: 22px 0 6px; }
.meta, .note { color: var(--muted); margin: 0 0 10px; }
table { border-collapse: collapse; background: #fff; }
th, td { border: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
thead th { background: var(--head); position: sticky; top: 0; z-index: 1; }
code, pre, .mono { font-family: "DejaVu Sans Mono", "Liberation Mono", ui-monospace, monospace; font-size: 12.5px; }
pre { margin: 4px 0; max-height: 24em; overflow: auto; }
.path { color: var(--muted); font-size: 12px; word-break: break-all; }
td.image { min-width: 12em; max-width: 20em; }
td.build { min-width: 14em; max-width: 22em; }
td.runtime { min-width: 10em; max-width: 16em; }
td.base { max-width: 16em; overflow-wrap: anywhere; }
.num { text-align: right; white-space: nowrap; }
.nowrap { white-space: nowrap; }
tr.error td { background: var(--bad); }
td.limited { background: var(--other); }
dl.kv { display: grid; grid-template-columns: auto 1fr; gap: 0 8px; margin: 0; }
dl.kv dt { color: var(--muted); }
dl.kv dd { margin: 0; word-break: break-all; }
ul.envs { margin: 0; padding-left: 16px; }
details[open] { white-space: normal; }
details summary { cursor: pointer; color: var(--accent); }
.warn { color: #9a3a00; }
.controls { display: flex; flex-wrap: wrap; gap: 16px; align-items: center; margin: 6px 0 10px; }
#q { font-size: 15px; padding: 5px 8px; width: 24em; border: 1px solid #aab3c2; border-radius: 4px; }
#count { color: var(--muted); }
.legend span { display: inline-block; padding: 0 6px; border: 1px solid var(--line); margin-left: 6px; }
.matrix-wrap { overflow: auto; max-height: 85vh; border: 1px solid var(--line); width: fit-content; max-width: 100%; }
#matrix tbody th { position: sticky; left: 0; background: #fff; font-weight: 600; white-space: nowrap; }
#matrix thead th:first-child { left: 0; z-index: 2; }
#matrix td { white-space: nowrap; }
#matrix tr.differs th { box-shadow: inset 4px 0 #e0a800; }
.other { background: var(--other); font-weight: 600; }
.absent { background: var(--absent); color: #9aa1ad; }
"""

SCRIPT = """\
(function () {
  "use strict";
  var input = document.getElementById("q");
  var differ = document.getElementById("differ");
  var count = document.getElementById("count");
  var none = document.getElementById("none");
  var rows = Array.prototype.slice.call(document.querySelectorAll("#matrix tbody tr"));
  if (!input) { return; }  // no image could be read: no matrix

  function wanted() {
    var params = new URLSearchParams(location.search);
    new URLSearchParams(location.hash.slice(1)).forEach(function (value, key) { params.set(key, value); });
    return params;
  }

  // Terms as the names are keyed: lower case, runs of - _ . as one - (PEP 503); a row is shown when
  // any term is part of its name ("torch numpy" shows both).
  function terms() {
    return input.value.toLowerCase().split(/[\\s,]+/).filter(Boolean).map(function (t) {
      return t.replace(/[-_.]+/g, "-");
    });
  }

  function apply(remember) {
    var want = terms(), shown = 0;
    rows.forEach(function (row) {
      var name = row.getAttribute("data-name");
      var match = want.length === 0 || want.some(function (t) { return name.indexOf(t) >= 0; });
      var show = match && (!differ.checked || row.classList.contains("differs"));
      row.hidden = !show;
      if (show) { shown += 1; }
    });
    count.textContent = shown + " of " + rows.length + " packages";
    none.hidden = shown > 0;
    if (remember) {
      var params = new URLSearchParams();
      if (input.value) { params.set("q", input.value); }
      if (differ.checked) { params.set("differ", "1"); }
      history.replaceState(null, "", location.pathname + location.search + "#" + params.toString());
    }
  }

  var params = wanted();
  input.value = params.get("q") || "";
  differ.checked = params.get("differ") === "1";
  input.addEventListener("input", function () { apply(true); });
  differ.addEventListener("change", function () { apply(true); });
  apply(false);
})();
"""
