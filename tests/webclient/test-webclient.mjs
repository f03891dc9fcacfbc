// The reference PersonaPlex web client (NVIDIA/personaplex client/, built by
// scripts/build-reference-client.sh) served by personaplex-server --static, driven by headless Chromium with
// a fake microphone as a user drives it (run by tests/test-webclient.sh):
//   1. a tiny random model with a small tokenizer and two of the voices the client lists; the server on
//      127.0.0.1, any free port, on the CPU, serving the client's dist/, with a token (--auth-token);
//   2. the server hands out the client's files with the types a browser insists on; a wrong token= is 401,
//      the right one sets the cookie (HttpOnly, SameSite=Strict) and redirects to the page without it;
//   3. the page opened as a user does once: http://HOST:PORT/?token=... (the client has no token field and its
//      WebSocket sends none): the address bar ends without the token, the page cannot read the cookie;
//      in the page: type a persona, pick a voice, press Connect (the page asks for the microphone);
//      the WebSocket goes to /api/chat with them, the handshake arrives and the page says so (its button
//      turns to Disconnect, its dot green), the microphone's Opus goes up, the agent's Opus comes down
//      and plays (the client's own "Audio played" figure grows, its player's output is not silent), and
//      the agent's text appears in the text display;
//   4. a screenshot; Disconnect ends the call; the server stops cleanly on SIGTERM;
//   5. the client as the judge of the answer's pacing (docs/reference-client.md, "Under load"): a second server on
//      a GPU-like tick (PPX_TICK_EMULATE=40,1) already carrying $PPX_WEBCLIENT_LOAD_CALLS personaplex-loadgen calls
//      (default 8: what this 2-core machine carries, docs/reference-client.md); the page's call of $PPX_WEBCLIENT_LOAD_SECONDS (default 60) beside them: the client's own
//      "Missed audio" must stay 0:00.00 (its player never ran dry once it started).
// Artifacts (screenshots, server, browser and page logs) go to $PPX_WEBCLIENT_ARTIFACTS.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Browser, headlessChromiumArgs } from '../webrtc/cdp.mjs';
import { spawn } from 'node:child_process';
import { env, sleep, check, failures, waitFor, makeTinyModel, ServerProcess } from '../webrtc/harness.mjs';

const artifacts = env('PPX_WEBCLIENT_ARTIFACTS');
const serverExe = env('PPX_SERVER');
const makeModel = env('PPX_MAKE_MODEL');
const makeTokenizer = env('PPX_MAKE_TOKENIZER');
const makeVoice = env('PPX_MAKE_VOICE');
const dist = env('PPX_WEBCLIENT_DIST');
const chromium = env('PPX_CHROMIUM');
const micFile = process.env.PPX_FAKE_MIC;
const loadgenExe = process.env.PPX_LOADGEN;
const loadCalls = Number(process.env.PPX_WEBCLIENT_LOAD_CALLS ?? 8);
const loadSeconds = Number(process.env.PPX_WEBCLIENT_LOAD_SECONDS ?? 60);
// more options of the loaded server, for comparisons (e.g. --no-pacing: the answer as before the pacer)
const loadServerArgs = (process.env.PPX_WEBCLIENT_LOAD_SERVER_ARGS ?? '').split(' ').filter((a) => a);
const here = path.dirname(fileURLToPath(import.meta.url));

const PERSONA = 'You work for a bakery called Crumbs and take orders for birthday cakes.';
const VOICE = 'NATM1.pt'; // not the client's default (NATF0.pt): the choice must travel
const SILENCE_RMS = 1e-3; // -60 dBFS
const TOKEN = 'webclient-test-token/+=';

// The tiny model, and two of the voice names the client lists (its default one and ours).
function makeModelDir() {
  const dir = makeTinyModel(path.join(artifacts, 'model'), makeModel, makeTokenizer);
  execFileSync(makeVoice, [dir, 'NATF0.pt', VOICE], { stdio: 'inherit' });
  return dir;
}

// ---- the client's files ----

async function testStaticFiles(url) {
  const index = await fetch(url);
  const html = await index.text();
  check(index.ok && /text\/html/.test(index.headers.get('content-type')) && /<title>PersonaPlex<\/title>/.test(html),
    `GET / is the client's index.html (${index.status} ${index.headers.get('content-type')})`);
  const expected = [
    [html.match(/src="(\/assets\/index-[^"]+\.js)"/)?.[1], /^(text|application)\/javascript/],
    [html.match(/href="(\/assets\/index-[^"]+\.css)"/)?.[1], /^text\/css/],
    ['/assets/decoderWorker.min.js', /^(text|application)\/javascript/],
    ['/assets/decoderWorker.min.wasm', /^application\/wasm/],
  ];
  for (const [file, type] of expected) {
    if (!check(file !== undefined, `index.html names its ${type.source.includes('css') ? 'style sheet' : 'script'}`))
      continue;
    const r = await fetch(new URL(file, url));
    const body = Buffer.from(await r.arrayBuffer());
    const want = fs.readFileSync(path.join(dist, file));
    check(r.ok && type.test(r.headers.get('content-type') ?? '') && body.equals(want),
      `GET ${file}: ${r.status}, ${r.headers.get('content-type')}, ${body.length} bytes as built`);
  }
  const missing = await fetch(new URL('/assets/no-such-file.js', url));
  check(missing.status === 404, `an unknown file is 404 (${missing.status})`);
}

// ---- signing in: a browser's way to the token (docs/server.md, "Authentication") ----

async function testSignIn(url) {
  const wrong = await fetch(`${url}?token=nope`, { redirect: 'manual' });
  check(wrong.status === 401 && !wrong.headers.get('set-cookie'), `a wrong token= is 401 without a cookie (${wrong.status})`);
  const right = await fetch(`${url}?token=${encodeURIComponent(TOKEN)}&worker_addr=x`, { redirect: 'manual' });
  const cookie = right.headers.get('set-cookie') ?? '';
  check(right.status === 303 && right.headers.get('location') === '/?worker_addr=x',
    `the right token= redirects to the same page without it (${right.status}, Location ${right.headers.get('location')})`);
  check(/^personaplex_auth=[0-9a-f]{64}; /.test(cookie) && /; HttpOnly/.test(cookie) && /; SameSite=Strict/.test(cookie) &&
    /; Path=\//.test(cookie) && !cookie.includes(encodeURIComponent(TOKEN)) && !cookie.includes(TOKEN),
    `and sets the cookie, HttpOnly, SameSite=Strict, not the token itself (${cookie})`);
  const pair = cookie.split(';')[0];
  const metrics = [await fetch(new URL('/metrics', url)), await fetch(new URL('/metrics', url), { headers: { cookie: pair } })];
  check(metrics[0].status === 401 && metrics[1].status === 200, `/metrics: 401 without it, 200 with the cookie (${metrics.map((r) => r.status)})`);
}

// ---- the page ----

const state = (page) => page.evaluate('JSON.parse(JSON.stringify(window.__ppx))');
const socketOf = async (page) => (await state(page)).sockets.at(-1) ?? null;
const buttonNamed = (label) => `[...document.querySelectorAll('button')].find((b) => b.textContent.trim() === ${JSON.stringify(label)})`;

// What the client itself shows: its connect button, its status dot, its "Audio played" figure and text.
const shown = (page) => page.evaluate(`(() => {
  const stat = (label) => [...document.querySelectorAll('td')].find((td) => td.textContent.trim() === label)
    ?.nextElementSibling?.textContent.trim() ?? '';
  const seconds = (label) => {
    const m = stat(label).match(/^(\\d+):(\\d+)\\.(\\d+)$/);
    return m ? Number(m[1]) * 60 + Number(m[2]) + Number(m[3]) / 100 : null;
  };
  const dot = document.querySelector('.controls .rounded-full');
  return {
    button: document.querySelector('.controls button')?.textContent.trim() ?? null,
    dot: dot ? [...dot.classList].find((c) => c.startsWith('bg-')) : null,
    played: seconds('Audio played:'),
    missed: seconds('Missed audio:'),
    latency: stat('Latency:'),
    text: document.querySelector('.player-text')?.innerText.trim() ?? null,
  };
})()`);

async function startConversation(page) {
  await waitFor('the home page', () => page.evaluate(`!!document.getElementById('text-prompt') && !!(${buttonNamed('Connect')})`), 20000);
  // Type the persona over the default text, choose the voice, press Connect.
  await page.click(`document.getElementById('text-prompt')`, 'text prompt box');
  await page.evaluate(`document.getElementById('text-prompt').select()`);
  await page.insertText(PERSONA);
  const typed = await page.evaluate(`document.getElementById('text-prompt').value`);
  check(typed === PERSONA, 'the persona is typed into the text prompt box');
  const voices = await page.evaluate(`[...document.querySelectorAll('#voice-prompt option')].map((o) => o.value)`);
  check(voices.includes(VOICE), `the voice list offers ${VOICE} (${voices.length} voices)`);
  // A <select> has no keyboard-free way to pick in headless Chromium: set it as the browser does, then
  // the change event the page listens to.
  await page.evaluate(`(() => {
    const select = document.getElementById('voice-prompt');
    Object.getOwnPropertyDescriptor(HTMLSelectElement.prototype, 'value').set.call(select, ${JSON.stringify(VOICE)});
    select.dispatchEvent(new Event('change', { bubbles: true }));
  })()`);
  fs.writeFileSync(path.join(artifacts, 'reference-client-home.png'), await page.screenshot());
  await page.click(buttonNamed('Connect'), 'Connect button');
}

// How evenly messages came: the gaps between consecutive times (ms).
function gapFigures(times) {
  const gaps = times.slice(1).map((t, i) => t - times[i]).sort((a, b) => a - b);
  const at = (q) => (gaps[Math.min(gaps.length - 1, Math.floor(q * gaps.length))] ?? NaN).toFixed(0);
  return `${times.length} messages, gaps p50 ${at(0.5)} ms, p90 ${at(0.9)} ms, p99 ${at(0.99)} ms, max ${at(1)} ms`;
}

async function testConversation(page, url) {
  await startConversation(page);
  const socket = await waitFor('the page to open a WebSocket', () => socketOf(page), 20000);
  const wsUrl = new URL(socket.url);
  check(wsUrl.origin === url.replace(/^http/, 'ws').replace(/\/$/, '') && wsUrl.pathname === '/api/chat',
    `the page opens a WebSocket to the server's /api/chat (${wsUrl.origin}${wsUrl.pathname})`);
  check(wsUrl.searchParams.get('text_prompt') === PERSONA && wsUrl.searchParams.get('voice_prompt') === VOICE,
    `with the typed persona and the chosen voice (voice_prompt=${wsUrl.searchParams.get('voice_prompt')})`);
  check(!wsUrl.searchParams.has('token'), 'and no token: the cookie carries it');

  const joined = await waitFor('the handshake', async () => {
    const s = await socketOf(page);
    if (s.closed !== null) throw new Error(`the WebSocket closed (${s.closeCode}) before the handshake: ${s.errors.join('; ')}`);
    return s.handshake !== null ? s : null;
  }, 60000);
  check(joined.received.handshake === 1, `the handshake arrives, ${(joined.handshake - joined.opened).toFixed(0)} ms after the socket opened`);
  const ui = await waitFor('the page to show the connection', async () => {
    const s = await shown(page);
    return s.button === 'Disconnect' ? s : null;
  }, 10000).catch(() => null);
  check(ui !== null && ui.dot === 'bg-[#76b900]', `the page shows the call: button "${ui?.button}", status dot ${ui?.dot}`);

  // Listen for 8 s: the client's own figure and our analyser on its player's output. The screenshot is the
  // last one taken (at most one a second) in the second half while the microphone is heard (the speech in
  // the file has pauses) and text is shown.
  const before = await state(page);
  const playedBefore = (await shown(page)).played ?? 0;
  let shot = null, shotAt = 0;
  for (const end = Date.now() + 8000; Date.now() < end;) {
    await sleep(100);
    if (end - Date.now() > 4000 || Date.now() - shotAt < 1000) continue;
    const now = await page.evaluate('({ mic: window.__ppx.micLevels.at(-1) ?? 0, text: document.querySelector(".player-text")?.innerText.trim() })');
    if (now.mic > 0.01 && now.text) {
      shot = await page.screenshot();
      shotAt = Date.now();
    }
  }
  // A loaded machine (this test shares 2 cores with other builds and the browser) can leave the model far
  // behind real time: then listen on, up to 30 s in all, for 2 s of the agent's audio played and 50 audio
  // messages. The figures below say how it went.
  const listened = Date.now();
  const enough = await waitFor('2 s of the agent\'s audio played', async () => {
    const [seen, page_] = [await socketOf(page), await shown(page)];
    return (page_.played ?? 0) - playedBefore >= 2 && (seen.received.audio ?? 0) >= 50 ? page_ : null;
  }, 22000).catch(() => null);
  const after = await state(page);
  const seconds = (8000 + Date.now() - listened) / 1000;
  const micLoud = after.micLevels.slice(before.micLevels.length).filter((x) => x > SILENCE_RMS).length;
  check(micLoud > 0, `the client takes in the fake microphone (${micLoud} level samples above -60 dBFS)`);
  const s = after.sockets.at(-1);
  const levels = after.levels.slice(before.levels.length);
  const loud = levels.filter((x) => x > SILENCE_RMS).length;
  const stats = enough ?? await shown(page);
  const playedAfter = stats.played ?? 0;
  check((s.received.audio ?? 0) >= 50, `audio messages arrive (${s.received.audio ?? 0} in ${seconds.toFixed(1)} s, ${s.audioBytes} bytes of Ogg Opus)`);
  check((s.sent.audio ?? 0) >= 50, `the page sends the microphone's Opus (${s.sent.audio ?? 0} messages)`);
  check(enough !== null, `the client plays the agent's audio: "Audio played" went from ${playedBefore.toFixed(2)} s to ${playedAfter.toFixed(2)} s in ${seconds.toFixed(1)} s (its "Missed audio" ${stats.missed} s, "Latency" ${stats.latency} s)`);
  console.log(`# audio sent: ${gapFigures(s.sentAudioTimes)}`);
  console.log(`# audio received: ${gapFigures(s.audioTimes)}`);
  // The player is silent while it waits for audio (the "Missed audio" above): while it plays (a sample every
  // 100 ms), it plays sound.
  const playing = Math.round((playedAfter - playedBefore) * 10);
  check(levels.length >= 40 && loud >= 10 && loud >= playing * 0.7,
    `what the player sends to the speakers is not silent (${loud}/${levels.length} level samples above -60 dBFS, for ${playing} samples' worth of audio played; AudioContext ${after.audioState} at ${after.sampleRate} Hz)`);

  const text = await waitFor('text in the text display', async () => {
    const [page_, seen] = [await shown(page), await socketOf(page)];
    return page_.text && seen.text.trim() ? { shown: page_.text, received: seen.text } : null;
  }, 20000).catch(() => null);
  check(text !== null && text.shown.replace(/\s+/g, ' ') === text.received.trim().replace(/\s+/g, ' '),
    `the agent's text appears in the text display (${JSON.stringify(text?.shown.slice(0, 80))})`);
  shot ??= await page.screenshot();
  fs.writeFileSync(path.join(artifacts, 'reference-client.png'), shot);
  check(shot.length > 10000, `screenshot: ${path.join(artifacts, 'reference-client.png')} (${shot.length} bytes)`);

  const health = await (await fetch(new URL('/health', url))).json();
  check(health.sessions === 1, `the server's /health counts the page's call (sessions ${health.sessions})`);
  console.log(`# server ticks: p50 ${health.tick_ms_p50} ms, p99 ${health.tick_ms_p99} ms, ${health.overruns} overrun(s)`);

  const final = await socketOf(page);

  check(final.errors.length === 0, `no 0x05 error from the server (${final.errors.join('; ')})`);
  check(final.closed === null, 'the call is still open');
  return final;
}

async function testDisconnect(page, url) {
  await page.click(buttonNamed('Disconnect'), 'Disconnect button');
  const closed = await waitFor('the WebSocket to close', async () => {
    const s = await socketOf(page);
    return s.closed !== null ? s : null;
  }, 10000).catch(() => null);
  const ui = await shown(page);
  check(closed !== null && ui.button === 'New Conversation',
    `Disconnect closes the WebSocket (code ${closed?.closeCode}) and the page offers a new conversation ("${ui.button}")`);
  const ended = await waitFor('the server to end the call', async () => {
    const h = await (await fetch(new URL('/health', url))).json();
    return h.sessions === 0 ? h : null;
  }, 10000).catch(() => null);
  check(ended !== null, 'the server ends the call (/health: 0 sessions)');
}

// The page's console, and the start of what the client sent (its Ogg Opus stream, without the 0x01 bytes:
// gst-launch-1.0 filesrc location=client-upstream.ogg ! oggdemux ! opusdec ! fakesink dump=true).
async function saveClientLogs(page) {
  fs.writeFileSync(path.join(artifacts, 'page-console.log'), page.consoleLines.join('\n') + '\n');
  const socket = await socketOf(page).catch(() => null);
  if (!socket) return;
  fs.writeFileSync(path.join(artifacts, 'client-upstream.ogg'), Buffer.concat(socket.firstSent
    .map((hex) => Buffer.from(hex, 'hex')).filter((m) => m[0] === 1).map((m) => m.subarray(1))));
}

// ---- under load: the client judges the answer's pacing ----

// The CPU pressure (/proc/pressure/cpu "some" total, microseconds); 0 where the kernel has none.
function cpuStallUs() {
  try {
    return Number(fs.readFileSync('/proc/pressure/cpu', 'utf8').match(/^some .*total=(\d+)/m)?.[1] ?? 0);
  } catch {
    return 0;
  }
}

// p-quantile of a Prometheus histogram's series (its cumulative buckets), by the bucket's upper bound.
function histogramQuantile(metrics, series, q) {
  const buckets = [...metrics.matchAll(new RegExp(`^${series}_bucket\\{protocol="chat",le="([^"]+)"\\} (\\d+)$`, 'gm'))]
    .map((m) => [m[1] === '+Inf' ? Infinity : Number(m[1]), Number(m[2])]);
  const total = buckets.at(-1)?.[1] ?? 0;
  return { n: total, at: buckets.find(([, n]) => n >= q * total)?.[0] ?? NaN };
}

// A second server on a GPU-like tick carries `loadCalls` personaplex-loadgen calls; the page's call runs beside
// them for `loadSeconds` and its player must not miss any audio.
async function testUnderLoad(browser, modelDir) {
  if (!loadgenExe) {
    console.log('# under load: skipped (PPX_LOADGEN not set)');
    return;
  }
  const server = new ServerProcess(serverExe,
    // --admission memory: this case judges the player under load, not the admission (server-admission does); on a
    // busy 2-core CI machine the live ticks of the emulated tick ran over the 70 ms budget and the page's call was
    // refused (503, the WebSocket closed 1006 before the handshake)
    ['--model-dir', modelDir, '--backend', 'cpu', '--port', '0', '--static', dist, '--max-sessions', String(loadCalls + 1),
      '--admission', 'memory', ...loadServerArgs],
    path.join(artifacts, 'server-load.log'),
    { ...process.env, PPX_TICK_EMULATE: '40,1', OMP_NUM_THREADS: '1', OMP_WAIT_POLICY: 'PASSIVE' });
  let loadgen = null, page = null;
  try {
    const url = await server.started(120000);
    const loadLog = fs.createWriteStream(path.join(artifacts, 'loadgen.log'));
    const loadArgs = ['--url', url.replace(/^http/, 'ws') + 'api/chat', '--calls', String(loadCalls), '--ramp', '2',
      '--seconds', String(loadSeconds + 30), '--tail', '2', '--json', path.join(artifacts, 'loadgen.json'), '-q'];
    if (micFile) loadArgs.push('--input', micFile);
    loadgen = spawn(loadgenExe, loadArgs, { stdio: ['ignore', 'pipe', 'pipe'] });
    loadgen.stdout.pipe(loadLog);
    loadgen.stderr.pipe(loadLog);
    const loadgenExited = new Promise((resolve) => loadgen.on('exit', (code) => resolve(code)));
    const loaded = await waitFor(`${loadCalls} loadgen calls on the server`, async () => {
      const h = await (await fetch(new URL('/health', url))).json();
      return h.sessions >= loadCalls ? h : null;
    }, 60000).catch(() => null);
    check(loaded !== null, `the server carries ${loadCalls} personaplex-loadgen calls on PPX_TICK_EMULATE=40,1`);
    if (!loaded) return;
    await sleep(3000); // the load settles (the last calls' prompts)

    page = await browser.newPage(url, { initScript: fs.readFileSync(path.join(here, 'page-hooks.js'), 'utf8') });
    await startConversation(page);
    const joined = await waitFor('the handshake under load', async () => {
      const s = await socketOf(page);
      if (s && s.closed !== null) throw new Error(`the WebSocket closed (${s.closeCode}) before the handshake`);
      return s?.handshake != null ? s : null;
    }, 60000);
    check(joined.received.handshake === 1, `under load: the page's call joins (${(joined.handshake - joined.opened).toFixed(0)} ms)`);
    const started = await waitFor('the client to start playing', async () => {
      const ui = await shown(page);
      return (ui.played ?? 0) > 0 ? ui : null;
    }, 30000).catch(() => null);
    check(started !== null, 'under load: the client starts playing the agent');
    // Listen, a figure a second (the client's own stats panel).
    const trace = [];
    const [stall0, t0] = [cpuStallUs(), Date.now()];
    for (const end = Date.now() + loadSeconds * 1000; Date.now() < end;) {
      await sleep(1000);
      const ui = await shown(page);
      trace.push(`${ui.played?.toFixed(2)}/${ui.missed?.toFixed(2)}`);
    }
    const pressure = Math.round((cpuStallUs() - stall0) / (Date.now() - t0) / 10);
    const ui = await shown(page);
    const stat = await page.evaluate(`[...document.querySelectorAll('td')].find((td) => td.textContent.trim() === 'Missed audio:')?.nextElementSibling?.textContent.trim()`);
    const s = await socketOf(page);
    const times = s.audioTimes.filter((t) => t >= joined.handshake);
    const h = await (await fetch(new URL('/health', url))).json();
    const metrics = await (await fetch(new URL('/metrics', url))).text();
    const interval = histogramQuantile(metrics, 'personaplex_answer_send_interval_seconds', 0.99);
    console.log(`# under load: played/missed (s) each second: ${trace.join(' ')}`);
    console.log(`# under load: audio received: ${gapFigures(times)}`);
    console.log(`# under load: server: ${h.sessions} calls, ticks p50 ${h.tick_ms_p50} ms, p99 ${h.tick_ms_p99} ms, ` +
      `${h.overruns} overrun(s); send interval p99 <= ${interval.at * 1000} ms over ${interval.n} pages (/metrics); ` +
      `CPU pressure ${pressure} %`);
    check(h.sessions === loadCalls + 1, `under load: the server still carries the ${loadCalls} loadgen calls and the page's (${h.sessions})`);
    // A machine whose CPU others hold (pressure over 40 %) stalls the browser's player and the server alike: there
    // the figures are a note, not a failure (as in the server-realtime and element-latency tests).
    const judged = `the client's "Missed audio" is 0:00.00 after ${loadSeconds} s beside ${loadCalls} calls (${stat}, "Latency" ${ui.latency}, played ${ui.played?.toFixed(2)} s)`;
    // The suite runs two tests at once on a 2-core CI machine: a one-off stall there costs the player a gap of a few
    // 40 ms pages (seen: 0.10 s in 60 s). Up to 0.3 s is a note; the bursts of unpaced answers miss more.
    const [mm, ss] = (stat ?? '9:99').split(':');
    const missedS = Number(mm) * 60 + Number(ss);
    if (stat !== '0:00.00' && (pressure > 40 || missedS <= 0.3))
      console.log(`# NOTE: under load: not judged (CPU pressure ${pressure} %, missed ${missedS} s <= 0.3 s or a loaded machine): ${judged}`);
    else
      check(stat === '0:00.00', `under load: ${judged}`);
    fs.writeFileSync(path.join(artifacts, 'reference-client-load.png'), await page.screenshot());
    await page.click(buttonNamed('Disconnect'), 'Disconnect button');
    const code = await Promise.race([loadgenExited, sleep(60000).then(() => 'timeout')]);
    check(code === 0, `the loadgen's calls all ended ok (exit ${code}; ${path.join(artifacts, 'loadgen.log')})`);
    loadgen = null;
  } finally {
    if (loadgen) loadgen.kill('SIGTERM');
    const result = await server.stop(40000);
    check(result.code === 0, `the loaded server stops cleanly (exit ${result.code}, signal ${result.signal})`);
  }
}

// ---- main ----

async function main() {
  fs.mkdirSync(artifacts, { recursive: true });
  const modelDir = makeModelDir();
  const server = new ServerProcess(serverExe,
    ['--model-dir', modelDir, '--backend', 'cpu', '--port', '0', '--static', dist, '--auth-token', TOKEN],
    path.join(artifacts, 'server.log'));
  const userDataDir = fs.mkdtempSync(path.join(artifacts, 'chromium-profile-'));
  const browserLog = fs.createWriteStream(path.join(artifacts, 'chromium.log'));
  let browser, page, result;
  try {
    const url = await server.started(120000);
    check(/^http:\/\/127\.0\.0\.1:\d+\/$/.test(url), `the server listens on 127.0.0.1 (${url})`);
    await testStaticFiles(url);
    await testSignIn(url);

    browser = new Browser(chromium, headlessChromiumArgs(userDataDir, '1100,850', micFile), (s) => browserLog.write(s));
    page = await browser.newPage(`${url}?token=${encodeURIComponent(TOKEN)}`,
      { initScript: fs.readFileSync(path.join(here, 'page-hooks.js'), 'utf8') });
    const where = await page.evaluate('({ href: location.href, cookie: document.cookie })');
    check(where.href === url && where.cookie === '',
      `opened with ?token=, the page ends at ${where.href} (the token out of the address bar; the page reads no cookie: "${where.cookie}")`);
    await testConversation(page, url);
    await testDisconnect(page, url);
    if (loadCalls > 0) await testUnderLoad(browser, modelDir);
    const sockets = (await state(page)).sockets;
    check(sockets.length === 1, `the page opened one WebSocket (${sockets.length})`);
    const exceptions = page.consoleLines.filter((l) => /^exception|Decoder worker error|Uncaught/.test(l));
    check(exceptions.length === 0, `no exceptions in the page (${exceptions.join(' | ')})`);
    check(server.running, 'the server is still running');
    check(/a browser at 127\.0\.0\.1 signed in/.test(server.stderr) && !/refused \/api\/chat/.test(server.stderr),
      'the server logged the sign-in, and refused no call of the page');
  } finally {
    if (page) await saveClientLogs(page);
    if (browser) await browser.close();
    browserLog.end();
    fs.rmSync(userDataDir, { recursive: true, force: true });
    result = await server.stop(40000);
  }
  check(result.code === 0, `the server stops cleanly on SIGTERM (exit ${result.code}, signal ${result.signal})`);
  check(!/CRITICAL|WARNING \*\*/.test(server.stderr), 'no GLib criticals or warnings in the server log');
  console.log(`artifacts: ${artifacts}`);
  if (failures()) {
    console.log(`${failures()} check(s) failed; server log:\n${server.stderr.slice(-6000)}`);
    process.exit(1);
  }
}

main().catch((e) => {
  console.error(`FAIL - ${e.stack || e}`);
  process.exit(1);
});
