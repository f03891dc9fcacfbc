// A minimal Chrome DevTools Protocol client over --remote-debugging-pipe (fd 3: to the browser, fd 4:
// from it; each message is JSON followed by a NUL byte). No npm packages, no network socket.
import { spawn } from 'node:child_process';

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

  async newPage(url) {
    const { targetId } = await this.send('Target.createTarget', { url: 'about:blank' });
    const { sessionId } = await this.send('Target.attachToTarget', { targetId, flatten: true });
    const page = new Page(this, targetId, sessionId);
    await page.send('Page.enable');
    await page.send('Runtime.enable');
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

  async screenshot() {
    const { data } = await this.send('Page.captureScreenshot', { format: 'png' });
    return Buffer.from(data, 'base64');
  }

  close() {
    return this.browser.send('Target.closeTarget', { targetId: this.targetId });
  }
}
