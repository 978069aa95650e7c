// Loads pages in Debian's Chromium, headless, as a reader would see them. Input (stdin):
// {"chromium": "/usr/bin/chromium", "pages": [{"url": "file:///...", "screenshot": "/tmp/x.png",
// "javascript": true, "width": 1280}, ...]}. Output (stdout), per page: {"url", "title",
// "console_errors": [...], "page_errors": [...], "requests": [every URL the page asked for],
// "svgs": <svg elements>, "drawn_svgs": <svgs with at least one path, polyline, rect, circle or
// line of non-zero size>, "empty_paths": <path elements with an empty d>, "text": <the body's
// text>, "height": <the document's height in pixels>, "screenshot": <path, full page>}.
// The browser reaches nothing but the page's own URL's origin: every other request is refused
// (and listed), so a page that needs the network shows it.
// A page with "watch": {"selector": "#id", "screenshot": "/tmp/y.png"} is watched after its first
// screenshot: the selector's text is read and written at once as a line of its own,
// {"event": "first", "text": ...}, so that the caller can let the page's subject move on; then the
// oracle waits (no time limit: the page's own refresh must change it) until that text changes,
// takes the second screenshot and adds "watch": {"first", "second", "screenshot"} to the page's
// answer. The answer is then the last line of the output.
import { readFileSync } from 'node:fs';
import { chromium } from 'playwright-core';

const input = JSON.parse(readFileSync(0, 'utf8'));
const browser = await chromium.launch({
  executablePath: input.chromium || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const results = [];
try {
  for (const p of input.pages) {
    const context = await browser.newContext({
      javaScriptEnabled: p.javascript !== false,
      viewport: { width: p.width || 1280, height: 900 },
    });
    const page = await context.newPage();
    const out = { url: p.url, console_errors: [], page_errors: [], requests: [] };
    const origin = new URL(p.url).origin;
    page.on('console', (m) => { if (m.type() === 'error') out.console_errors.push(m.text()); });
    page.on('pageerror', (e) => out.page_errors.push(String(e)));
    await page.route('**/*', (route) => {
      const u = route.request().url();
      out.requests.push(u);
      const same = p.url.startsWith('file:') ? u.startsWith('file:') || u.startsWith('data:')
        : new URL(u).origin === origin || u.startsWith('data:');
      return same ? route.continue() : route.abort();
    });
    await page.goto(p.url, { waitUntil: 'load' });
    Object.assign(out, await page.evaluate(() => {
      const drawn = (svg) => [...svg.querySelectorAll('path, polyline, polygon, rect, circle, line')]
        .some((e) => { const b = e.getBBox(); return b.width > 0 || b.height > 0; });
      const svgs = [...document.querySelectorAll('svg')];
      return {
        title: document.title,
        svgs: svgs.length,
        drawn_svgs: svgs.filter(drawn).length,
        empty_paths: [...document.querySelectorAll('path')].filter((e) => !(e.getAttribute('d') || '').trim()).length,
        text: document.body ? document.body.innerText : '',
        height: document.documentElement.scrollHeight,
      };
    }));
    if (p.screenshot) {
      await page.screenshot({ path: p.screenshot, fullPage: true });
      out.screenshot = p.screenshot;
    }
    if (p.watch) {
      const sel = p.watch.selector;
      const first = await page.textContent(sel);
      process.stdout.write(JSON.stringify({ event: 'first', text: first }) + '\n');
      await page.waitForFunction(([s, t]) => {
        const e = document.querySelector(s);
        return e !== null && e.textContent !== t;
      }, [sel, first], { timeout: 0, polling: 'raf' });
      const second = await page.textContent(sel);
      await page.screenshot({ path: p.watch.screenshot, fullPage: true });
      out.watch = { first, second, screenshot: p.watch.screenshot };
    }
    results.push(out);
    await context.close();
  }
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(results) + '\n');
