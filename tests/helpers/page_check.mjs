// Open HTML pages in headless Chromium as a person would, and say what they show.
//
//   node page_check.mjs JOBS.json
//
// JOBS.json: {"tool": "<tools/mermaid>", "chromium": "/usr/bin/chromium",
//             "profile": "<empty dir>", "pages": [{"html": "a.html", "screenshot": "a.png"}]}
// Prints one JSON object per page, in order: console errors, page errors,
// requests that left the file (anything but file: and data: URLs), each
// figure's count of drawn data marks, the timeline's snapshot bars, the
// statecharts drawn, and the page's size. Puppeteer is the one tools/mermaid
// pins (installed by `make mermaid`); it drives Debian's chromium, no download.
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";

const jobs = JSON.parse(await readFile(process.argv[2], "utf8"));
const require = createRequire(path.join(jobs.tool, "package.json"));
const puppeteer = require("puppeteer");

const browser = await puppeteer.launch({
  executablePath: jobs.chromium,
  headless: true,
  userDataDir: jobs.profile,
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
  ],
});
const results = [];
try {
  for (const job of jobs.pages) {
    const page = await browser.newPage();
    const seen = { console_errors: [], page_errors: [], requests: [] };
    page.on("console", (message) => {
      if (message.type() === "error") seen.console_errors.push(message.text());
    });
    page.on("pageerror", (error) => seen.page_errors.push(String(error.message ?? error)));
    page.on("request", (request) => {
      const url = request.url();
      if (!url.startsWith("file:") && !url.startsWith("data:")) seen.requests.push(url);
    });
    await page.setViewport({ width: 1240, height: 900 });
    await page.goto("file://" + path.resolve(job.html), { waitUntil: "load" });
    const shown = await page.evaluate(() => {
      const marks = {
        timeline: 'g[id^="timeline-snapshot-"], g[id^="timeline-failed-"]',
        latency: 'g[id^="latency-bar-"]',
        phases: 'g[id^="phases-bar-"]',
        bytes: 'g[id^="bytes-bar-"]',
      };
      const figures = {};
      for (const figure of document.querySelectorAll("figure[data-figure]")) {
        const name = figure.dataset.figure;
        // A mark counts when it draws something: a path with geometry, on screen.
        const drawn = [...figure.querySelectorAll(marks[name] ?? "g[id]")].filter((group) => {
          const box = group.getBoundingClientRect();
          return group.querySelector("path[d]") !== null && box.width > 0 && box.height > 0;
        });
        figures[name] = drawn.length;
      }
      const timeline = document.querySelector('figure[data-figure="timeline"]');
      return {
        figures,
        timeline_snapshots: timeline
          ? timeline.querySelectorAll('g[id^="timeline-snapshot-"]').length
          : -1,
        statecharts: [...document.querySelectorAll(".chart[data-machine]")].filter(
          (chart) => chart.querySelector("svg g") !== null
        ).length,
        notice: document.querySelector(".notice")?.textContent ?? "",
        title: document.title,
        height: document.documentElement.scrollHeight,
      };
    });
    if (job.screenshot) await page.screenshot({ path: job.screenshot, fullPage: true });
    await page.close();
    results.push({ ...seen, ...shown });
  }
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(results) + "\n");
