// What the browser tests share (tests/webrtc/test-webrtc.mjs, tests/webclient/test-webclient.mjs): settings
// from the environment, TAP-like checks, polling, the tiny model, and the server process.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

export const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let failed = 0;
export const failures = () => failed;

export function check(ok, what) {
  console.log(`${ok ? 'ok' : 'FAIL'} - ${what}`);
  if (!ok) failed++;
  return ok;
}

// Resolves with probe()'s first truthy value, polling every intervalMs; throws after timeoutMs.
export async function waitFor(what, probe, timeoutMs, intervalMs = 250) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const value = await probe();
    if (value) return value;
    await sleep(intervalMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

// DIR (emptied first) with a tiny random model and a small SentencePiece tokenizer, so that text shows.
export function makeTinyModel(dir, makeModel, makeTokenizer) {
  fs.rmSync(dir, { recursive: true, force: true });
  execFileSync(makeModel, ['--preset', 'tiny', '--output-dir', dir], { stdio: 'inherit' });
  execFileSync(makeTokenizer, [dir], { stdio: 'inherit' });
  return dir;
}

// The server, its output logged to logFile: `url` resolves with the address of its "serving URL" line (on
// stdout), `stderr` gathers what it says there, stop() sends SIGTERM (SIGKILL after killAfterMs).
export class ServerProcess {
  constructor(exe, args, logFile, env = process.env) {
    this.log = fs.createWriteStream(logFile);
    this.stderr = '';
    this.proc = spawn(exe, args, { stdio: ['ignore', 'pipe', 'pipe'], env });
    this.exited = new Promise((resolve) => this.proc.on('exit', (code, signal) => resolve({ code, signal })));
    this.running = true;
    this.exited.then(() => { this.running = false; });
    this.proc.stderr.on('data', (d) => {
      this.stderr += d;
      this.log.write(d);
    });
    this.url = new Promise((resolve, reject) => {
      let out = '';
      this.proc.stdout.on('data', (d) => {
        out += d;
        this.log.write(d);
        const m = out.match(/serving (http:\/\/\S+)/);
        if (m) resolve(m[1]);
      });
      this.exited.then(({ code }) => reject(new Error(`the server exited (${code}) before serving:\n${this.stderr}`)));
    });
  }

  // The URL, or an error when the server has not said it within timeoutMs.
  started(timeoutMs) {
    let timer;
    return Promise.race([this.url, new Promise((resolve, reject) => {
      timer = setTimeout(() => reject(new Error(`the server did not start within ${timeoutMs / 1000} s`)), timeoutMs);
    })]).finally(() => clearTimeout(timer));
  }

  async stop(killAfterMs = 20000) {
    if (this.running) this.proc.kill('SIGTERM');
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), killAfterMs);
    const result = await this.exited;
    clearTimeout(timer);
    this.log.end();
    return result;
  }
}
