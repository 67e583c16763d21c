// Render Mermaid charts to SVG with the real renderer (mermaid-cli) in ONE
// browser session: starting Chromium costs seconds, rendering a chart does not.
//
//   node render.mjs JOBS.json
//
// JOBS.json is [{"input": "a.mmd", "output": "a.svg"}, ...] (an output ending
// in .png is a screenshot instead, for looking at a chart). The browser is
// Debian's chromium, set in puppeteer-config.json (ENVCKPT_CHROMIUM overrides
// its executablePath). Exit 1 with the chart's name on the first failure.
import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import puppeteer from "puppeteer";
import { renderMermaid } from "@mermaid-js/mermaid-cli";

const here = path.dirname(fileURLToPath(import.meta.url));
const config = JSON.parse(await readFile(path.join(here, "puppeteer-config.json"), "utf8"));
if (process.env.ENVCKPT_CHROMIUM) config.executablePath = process.env.ENVCKPT_CHROMIUM;
const jobs = JSON.parse(await readFile(process.argv[2], "utf8"));

const browser = await puppeteer.launch(config);
try {
  for (const job of jobs) {
    const definition = await readFile(job.input, "utf8");
    try {
      const format = job.output.endsWith(".png") ? "png" : "svg";
      const { data } = await renderMermaid(browser, definition, format, {
        viewport: { width: 1000, height: 800, deviceScaleFactor: 1 },
        svgId: path.basename(job.output, ".svg").replace(/[^A-Za-z0-9_-]/g, "_"),
      });
      await writeFile(job.output, data);
    } catch (error) {
      console.error(`${job.input}: ${error.message ?? error}`);
      process.exitCode = 1;
      break;
    }
  }
} finally {
  await browser.close();
}
