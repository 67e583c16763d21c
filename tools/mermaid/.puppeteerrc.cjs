// Puppeteer never downloads a browser here: envckpt renders on Debian's chromium.
module.exports = { skipDownload: true };
