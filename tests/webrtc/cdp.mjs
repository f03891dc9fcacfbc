// A minimal Chrome DevTools Protocol client over --remote-debugging-pipe (fd 3: to the browser, fd 4:
// from it; each message is JSON followed by a NUL byte). No npm packages, no network socket.
import { spawn } from 'node:child_process';

// Headless Chromium that reaches nothing beyond the pages it is sent to, with a fake microphone (micFile:
// an absolute WAV path without "..", or Chromium's beep when undefined) granted without a prompt and
// audio that plays without a user gesture. size: 'WIDTH,HEIGHT'.
export function headlessChromiumArgs(userDataDir, size, micFile) {
  const args = [
    '--headless=new', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--disable-default-apps', '--disable-extensions', '--disable-breakpad', '--no-default-browser-check',
    '--disable-domain-reliability', '--disable-client-side-phishing-detection', '--metrics-recording-only',
    `--user-data-dir=${userDataDir}`, `--window-size=${size}`,
    '--use-fake-device-for-media-stream', '--use-fake-ui-for-media-stream',
    '--autoplay-policy=no-user-gesture-required',
  ];
  if (micFile) args.push(`--use-file-for-fake-audio-capture=${micFile}`);
  return args;
}

export class Browser {
  constructor(executable, args, log) {
    this.nextId = 1;
    this.pending = new Map();
    this.listeners = [];
    this.log = log;
    this.proc = spawn(executable, [...args, '--remote-debugging-pipe'], {
      stdio: ['ignore', 'pipe', 'pipe', 'pipe', 'pipe'],
    });
    this.exited = new Promise((resolve) => this.proc.on('exit', (code, signal) => resolve({ code, signal })));
    this.proc.stdout.on('data', (d) => log(String(d)));
    this.proc.stderr.on('data', (d) => log(String(d)));
    this.toBrowser = this.proc.stdio[3];
    this.toBrowser.on('error', () => {});
    let buffered = Buffer.alloc(0);
    this.proc.stdio[4].on('data', (chunk) => {
      buffered = Buffer.concat([buffered, chunk]);
      let end;
      while ((end = buffered.indexOf(0)) >= 0) {
        const text = buffered.subarray(0, end).toString('utf8');
        buffered = buffered.subarray(end + 1);
        this.dispatch(JSON.parse(text));
      }
    });
    this.exited.then(() => {
      for (const { reject } of this.pending.values()) reject(new Error('the browser exited'));
      this.pending.clear();
    });
  }

  dispatch(message) {
    if (message.id !== undefined) {
      const waiter = this.pending.get(message.id);
      if (!waiter) return;
      this.pending.delete(message.id);
      if (message.error) waiter.reject(new Error(`${waiter.method}: ${message.error.message}`));
      else waiter.resolve(message.result);
      return;
    }
    for (const listener of this.listeners) listener(message);
  }

  send(method, params = {}, sessionId = undefined) {
    const id = this.nextId++;
    const message = { id, method, params };
    if (sessionId) message.sessionId = sessionId;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, method });
      this.toBrowser.write(JSON.stringify(message) + '\0');
    });
  }

  onEvent(listener) {
    this.listeners.push(listener);
  }

  // initScript: JavaScript run in the page before its own scripts (hooks that watch what the page does).
  async newPage(url, { initScript } = {}) {
    const { targetId } = await this.send('Target.createTarget', { url: 'about:blank' });
    const { sessionId } = await this.send('Target.attachToTarget', { targetId, flatten: true });
    const page = new Page(this, targetId, sessionId);
    await page.send('Page.enable');
    await page.send('Runtime.enable');
    if (initScript) await page.send('Page.addScriptToEvaluateOnNewDocument', { source: initScript });
    const loaded = page.nextEvent('Page.loadEventFired', 30000);
    await page.send('Page.navigate', { url });
    await loaded;
    return page;
  }

  async close() {
    try {
      await Promise.race([this.send('Browser.close'), new Promise((r) => setTimeout(r, 3000))]);
    } catch (e) {
      // already gone
    }
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), 5000);
    await this.exited;
    clearTimeout(timer);
  }
}

export class Page {
  constructor(browser, targetId, sessionId) {
    this.browser = browser;
    this.targetId = targetId;
    this.sessionId = sessionId;
    this.consoleLines = [];
    browser.onEvent((m) => {
      if (m.sessionId !== sessionId) return;
      if (m.method === 'Runtime.consoleAPICalled')
        this.consoleLines.push(m.params.args.map((a) => a.value ?? a.description).join(' '));
      else if (m.method === 'Runtime.exceptionThrown')
        this.consoleLines.push('exception: ' + JSON.stringify(m.params.exceptionDetails.exception?.description ??
          m.params.exceptionDetails.text));
    });
  }

  send(method, params = {}) {
    return this.browser.send(method, params, this.sessionId);
  }

  // Resolves with the params of this page's next `method` event.
  nextEvent(method, timeoutMs) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ${method} within ${timeoutMs} ms`)), timeoutMs);
      this.browser.onEvent((m) => {
        if (m.sessionId === this.sessionId && m.method === method) {
          clearTimeout(timer);
          resolve(m.params);
        }
      });
    });
  }

  async evaluate(expression) {
    const r = await this.send('Runtime.evaluate', { expression, returnByValue: true, awaitPromise: true });
    if (r.exceptionDetails) throw new Error(`evaluate ${expression}: ${r.exceptionDetails.text}`);
    return r.result.value;
  }

  // A user's click: the mouse moves to the middle of the element (a JavaScript expression giving it) and
  // presses and releases the left button there.
  async click(elementExpression, what) {
    const at = await this.evaluate(`(() => {
      const e = (${elementExpression});
      if (!e) return null;
      e.scrollIntoView({ block: 'center' });
      const r = e.getBoundingClientRect();
      return { x: r.x + r.width / 2, y: r.y + r.height / 2 };
    })()`);
    if (!at) throw new Error(`click: no ${what} on the page`);
    for (const type of ['mouseMoved', 'mousePressed', 'mouseReleased'])
      await this.send('Input.dispatchMouseEvent', { type, x: at.x, y: at.y, button: 'left', clickCount: 1 });
  }

  // Typing into the focused element (as an input method commits text: one input event).
  insertText(text) {
    return this.send('Input.insertText', { text });
  }

  async screenshot() {
    const { data } = await this.send('Page.captureScreenshot', { format: 'png' });
    return Buffer.from(data, 'base64');
  }

  close() {
    return this.browser.send('Target.closeTarget', { targetId: this.targetId });
  }
}
