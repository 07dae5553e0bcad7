// edgecost web view: what the server-rendered page cannot do by itself.
// Tables sort in place, jobs follow WatchEvents (a Twirp long poll), and power
// follows /metrics. Everything works from the keyboard; without this script the
// page still shows every table. No library, no network beyond this agent.
"use strict";

(function () {
  const TWIRP = "/twirp/edgecost.v1.";

  async function twirp(method, body) {
    const response = await fetch(TWIRP + method, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      credentials: "same-origin",
      body: JSON.stringify(body),
    });
    if (!response.ok) {
      let message = response.status + " " + response.statusText;
      try { message = (await response.json()).msg || message; } catch (e) { /* not JSON */ }
      const error = new Error(message);
      error.status = response.status;
      throw error;
    }
    return response.json();
  }

  // ------------------------------------------------------------ sortable tables
  function sortTable(table, column, descending) {
    const body = table.tBodies[0];
    const rows = Array.from(body.rows);
    const value = (row) => {
      const cell = row.cells[column];
      const v = cell && cell.dataset.value;
      return v === undefined ? (cell ? cell.textContent : "") : parseFloat(v);
    };
    rows.sort((a, b) => {
      const x = value(a), y = value(b);
      const order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return descending ? -order : order;
    });
    for (const row of rows) body.appendChild(row);
    for (const th of table.tHead.rows[0].cells) th.removeAttribute("aria-sort");
    table.tHead.rows[0].cells[column].setAttribute("aria-sort", descending ? "descending" : "ascending");
  }

  function initSorting() {
    for (const table of document.querySelectorAll("table.sortable")) {
      const headers = table.tHead.rows[0].cells;
      for (let column = 0; column < headers.length; ++column) {
        const th = headers[column];
        const link = th.dataset.sort && th.querySelector("a");
        if (!link) continue;
        link.addEventListener("click", (event) => {
          event.preventDefault();  // sorted here, without a reload; the link works without script
          const current = th.getAttribute("aria-sort");
          const descending = current ? current === "ascending" : column !== 0;
          sortTable(table, column, descending);
          history.replaceState(null, "", link.href);
        });
      }
    }
  }

  // ------------------------------------------------------------ jobs, live
  const STATES = {
    STATE_QUEUED: "queued", STATE_RUNNING: "running", STATE_SUCCEEDED: "succeeded",
    STATE_FAILED: "failed", STATE_CANCELLED: "cancelled",
  };

  function jobRow(table, job) {
    let row = document.getElementById("job-" + job.id);
    if (row) return row;
    row = document.createElement("tr");
    row.id = "job-" + job.id;
    row.dataset.job = job.id;
    const cells = ["", "", "state", "", "message", ""];
    for (const cls of cells) {
      const td = document.createElement("td");
      if (cls) td.className = cls;
      row.appendChild(td);
    }
    row.cells[0].textContent = job.id;
    row.cells[1].textContent = job.kind || "";
    const progress = document.createElement("progress");
    progress.max = 100;
    progress.setAttribute("aria-label", "job " + job.id + " progress");
    const percent = document.createElement("span");
    percent.className = "percent";
    row.cells[3].append(progress, " ", percent);
    row.cells[5].textContent = job.createdAt || "";
    table.tBodies[0].prepend(row);
    const empty = document.querySelector("#jobs p.empty");
    if (empty) empty.remove();
    return row;
  }

  function showJob(table, job) {
    const row = jobRow(table, job);
    const percent = Math.round((job.progress || 0) * 100);
    row.querySelector(".state").textContent = STATES[job.state] || "unknown";
    row.querySelector("progress").value = percent;
    row.querySelector(".percent").textContent = percent + "%";
    row.querySelector(".message").textContent = job.message || "";
  }

  async function followJobs() {
    const table = document.getElementById("job-table");
    if (!table) return;
    const live = document.getElementById("jobs-live");
    let after = 0;
    for (;;) {
      try {
        const answer = await twirp("JobService/WatchEvents", { afterSequence: String(after), waitS: 25 });
        for (const event of answer.events || []) {
          after = Math.max(after, Number(event.sequence || 0));
          if (event.job) showJob(table, event.job);
        }
        live.textContent = "Live: following the agent's events.";
      } catch (error) {
        if (error.status === 401 || error.status === 403) {
          live.textContent = "Not following jobs: " + error.message;
          return;
        }
        live.textContent = "Lost the agent (" + error.message + "); trying again.";
        await new Promise((resolve) => setTimeout(resolve, 5000));
      }
    }
  }

  // ------------------------------------------------------------ power, live
  function parseMetrics(text) {
    const values = new Map();
    const line = /^edgecost_probe_(power_watts|energy_joules_total)\{source="([^"]*)",probe="([^"]*)",domain="([^"]*)"\} (\S+)$/;
    for (const l of text.split("\n")) {
      const m = line.exec(l);
      if (m) values.set(m[2] + "|" + m[3] + "|" + m[4], { power: m[1] === "power_watts", value: parseFloat(m[5]) });
    }
    return values;
  }

  function followPower() {
    const table = document.getElementById("power-table");
    if (!table) return;
    let previous = null, previousTime = 0;
    const tick = async () => {
      try {
        const response = await fetch("/metrics", { credentials: "same-origin" });
        if (!response.ok) return;
        const now = performance.now() / 1000;
        const values = parseMetrics(await response.text());
        for (const row of table.querySelectorAll("tr[data-metric]")) {
          const v = values.get(row.dataset.metric);
          if (!v) continue;
          row.querySelector(".reading").textContent = v.value.toFixed(3) + (v.power ? " W" : " J total");
          let watts = v.power ? v.value : null;
          if (!v.power && previous && previous.has(row.dataset.metric) && now > previousTime) {
            watts = (v.value - previous.get(row.dataset.metric).value) / (now - previousTime);
          }
          if (watts !== null && watts >= 0) row.querySelector(".watts").textContent = watts.toFixed(3) + " W";
        }
        previous = values;
        previousTime = now;
      } catch (e) { /* the next tick tries again */ }
    };
    tick();
    setInterval(tick, 2000);
  }

  document.addEventListener("DOMContentLoaded", () => {
    initSorting();
    followJobs();
    followPower();
  });
})();
