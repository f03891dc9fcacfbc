// End-to-end test of personaplex-server (its WebRTC calls) (run by tests/test-webrtc.sh, which finds Chromium and node):
//   1. a tiny random model with a small tokenizer; bad settings fail at startup; the server on
//      127.0.0.1, any free port;
//   2. malformed signalling from a raw WebSocket client: every message refused, the server lives on;
//   3. two headless Chromium pages with a fake microphone (a speech WAV) talk to the server at once:
//      both connect (server end 127.0.0.1), receive non-silent audio for several seconds, get text pieces;
//   4. one page is closed: the server tears that session down, the other keeps receiving audio;
//   5. the server stops cleanly on SIGTERM.
// Artifacts (screenshots, server and browser logs) go to $PPX_WEBRTC_ARTIFACTS.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Browser, headlessChromiumArgs } from './cdp.mjs';
import { WsClient } from './ws-client.mjs';
import { env, sleep, check, failures, waitFor, makeTinyModel, ServerProcess } from './harness.mjs';

const artifacts = env('PPX_WEBRTC_ARTIFACTS');
const serverExe = env('PPX_WEBRTC_SERVER');
const makeModel = env('PPX_MAKE_MODEL');
const makeTokenizer = env('PPX_WEBRTC_MAKE_TOKENIZER');
const chromium = env('PPX_CHROMIUM');
const micFile = process.env.PPX_FAKE_MIC;

const SILENCE_RMS = 1e-3; // -60 dBFS

// ---- the model and the server ----

function makeModelDir() {
  const dir = makeTinyModel(path.join(artifacts, 'model'), makeModel, makeTokenizer);
  // a voice for the page's voice list (a call picks it with its role)
  if (micFile) {
    fs.mkdirSync(path.join(dir, 'voices'));
    fs.copyFileSync(micFile, path.join(dir, 'voices', 'ASSISTANT.wav'));
  }
  return dir;
}

class Server extends ServerProcess {
  // --admission memory: the capacity is --max-sessions whatever this shared machine's load does to the ticks
  constructor(modelDir, args = ['--max-sessions', '3', '--admission', 'memory', '--text-prompt', 'You are a friendly assistant.'],
    logName = 'webrtc-server.log') {
    super(serverExe, ['--model-dir', modelDir, '--port', '0', ...args], path.join(artifacts, logName));
  }
}

// Bad settings fail at startup, before listening, with a message naming the problem.
function testStartupErrors(modelDir) {
  const cases = [
    [['--model-dir', path.join(artifacts, 'no-such-dir')], 2, /not a directory/],
    [['--model-dir', modelDir, '--text-prompt-tokens', '1,x'], 2, /--text-prompt-tokens: item 2/],
    [['--model-dir', modelDir, '--text-prompt-tokens', '1,99999'], 1, /token 99999 is outside/],
    [['--model-dir', modelDir, '--voice-prompt', 'no-such-voice'], 1, /no-such-voice/],
    [['--model-dir', modelDir, '--address', 'localhost.example'], 2, /--address/],
    [['--model-dir', modelDir, '--kv-cache-format', 'f16'], 2, /--kv-cache-format 'f16'/],
    [['--model-dir', modelDir, '--max-sessions', '-1'], 2, /--max-sessions -1/],
  ];
  for (const [args, code, message] of cases) {
    const r = spawnSync(serverExe, [...args, '--port', '0'], { encoding: 'utf8', timeout: 60000 });
    check(r.status === code && message.test(r.stderr) && !/serving/.test(r.stdout),
      `${args.slice(2).join(' ') || args.join(' ')}: exits ${r.status} (${r.stderr.trim().split('\n').pop()})`);
  }
}

// Without --max-sessions the server takes as many calls as its engine holds (what fits in memory, less
// the keeper's session) and says so at start-up, with the bytes of one session.
async function testDefaultSessions(modelDir) {
  const server = new Server(modelDir, ['--kv-cache-format', 'bf16'], 'webrtc-server-default.log');
  try {
    await server.url;
    const m = server.stderr.match(/(\d+) call\(s\) at once on one engine \(as many as fit in memory; (\d+) sessions with the keeper's, bf16 KV cache, ([\d.]+) MB a session/);
    check(m && Number(m[1]) >= 1 && Number(m[2]) === Number(m[1]) + 1 && Number(m[3]) > 0,
      `without --max-sessions the start-up line says how many calls fit and their memory (${m ? m[0] : server.stderr.trim().split('\n').pop()})`);
  } finally {
    await server.stop();
  }
}

// ---- signalling robustness ----

async function expectRefused(client, send, what) {
  send();
  const event = await client.until((e) => JSON.parse(e.data).type === 'error');
  check(event.type === 'text', `${what}: refused with an error message (${event.type === 'text' ? JSON.parse(event.data).message : 'closed ' + event.code})`);
}

async function testSignalling(url, server) {
  const wsUrl = url.replace(/^http/, 'ws') + 'ws';
  const client = await WsClient.connect(wsUrl);
  const welcome = JSON.parse((await client.next()).data);
  check(welcome.type === 'welcome', 'a session starts with a welcome message');
  const offer = await client.until((e) => JSON.parse(e.data).type === 'offer', 20000);
  check(offer.type === 'text' && /m=audio/.test(JSON.parse(offer.data).sdp), 'the server offers an audio section');

  const bad = [
    ['not JSON', 'hello there'],
    ['truncated JSON', '{"type": "answer", "sdp": "v=0'],
    ['a JSON array', '[1, 2, 3]'],
    ['a JSON string', '"answer"'],
    ['type not a string', '{"type": 5}'],
    ['no type', '{"sdp": "v=0"}'],
    ['unknown kind', '{"type": "hello"}'],
    ['unknown kind "offer" from the page', '{"type": "offer", "sdp": "v=0\\r\\nm=audio 9 UDP 0\\r\\n"}'],
    ['sdp not a string', '{"type": "answer", "sdp": 12}'],
    ['sdp not a session description', '{"type": "answer", "sdp": "this is not sdp"}'],
    ['unknown member', '{"type": "ice", "candidate": "", "sdpMLineIndex": 0, "extra": true}'],
    ['sdpMLineIndex a string', '{"type": "ice", "candidate": "candidate:1 1 udp 1 127.0.0.1 9 typ host", "sdpMLineIndex": "0"}'],
    ['sdpMLineIndex out of range', '{"type": "ice", "candidate": "candidate:1 1 udp 1 127.0.0.1 9 typ host", "sdpMLineIndex": 99}'],
    ['candidate not a candidate line', '{"type": "ice", "candidate": "a=rtpmap:0 PCMU", "sdpMLineIndex": 0}'],
    ['mDNS candidate', '{"type": "ice", "candidate": "candidate:1 1 udp 1 abc.local 9 typ host", "sdpMLineIndex": 0}'],
    ['duplicate key', '{"type": "ice", "type": "answer"}'],
    ['nested 1000 deep', '['.repeat(1000) + ']'.repeat(1000)],
    ['a NUL character', '{"type": "ice", "candidate": "candidate:1\u0000", "sdpMLineIndex": 0}'],
  ];
  for (const [what, text] of bad) await expectRefused(client, () => client.sendText(text), what);
  await expectRefused(client, () => client.sendBinary(Buffer.from('{"type":"answer"}')), 'a binary message');
  // A well-formed answer that does not fit the offer: webrtcbin refuses it, the session survives.
  await expectRefused(client, () => client.sendText(JSON.stringify({ type: 'answer',
    sdp: 'v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\n' })),
  'an answer that does not match the offer');
  // By now ICE gathering is over: the server offers 127.0.0.1 only ("candidate:F C udp P ADDRESS ...").
  const addresses = client.texts.map((t) => JSON.parse(t)).filter((m) => m.type === 'ice')
    .map((m) => m.candidate.split(' ')[4]);
  check(addresses.length > 0 && addresses.every((a) => a === '127.0.0.1'),
    `the server's ICE candidates are on 127.0.0.1 only (${[...new Set(addresses)].join(', ')})`);
  client.close();

  // Text that is not UTF-8 breaks the WebSocket protocol: libsoup closes that connection (1007).
  const binaryText = await WsClient.connect(wsUrl);
  binaryText.sendTextBytes([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d]);
  const utf8 = await binaryText.until((e) => JSON.parse(e.data).type === 'error', 10000);
  check(utf8.type === 'close' ? utf8.code === 1007 : true,
    `invalid UTF-8 is refused (${utf8.type === 'close' ? 'closed ' + utf8.code : 'error message'})`);
  binaryText.close();

  // A message larger than the limit closes that connection (1009), nothing else.
  const big = await WsClient.connect(wsUrl);
  big.sendText(JSON.stringify({ type: 'answer', sdp: 'v=0\r\n' + 'a=x\r\n'.repeat(40000) }));
  const bigClose = await big.until(() => false, 10000);
  // 1009 when the close frame makes it back; 1006 when the server's close resets the socket first
  // (the rest of the message is still unread on its side).
  check(bigClose.type === 'close' && [1006, 1009].includes(bigClose.code),
    `a 200 kB message closes the connection (code ${bigClose.code})`);

  // A page that keeps sending garbage is cut off. The three calls above each hold a slot of --max-sessions 3
  // until their teardown (on a worker) is over: on a loaded machine the flood's call was refused 503 while they
  // were still going (a fresh-clone CI run), so wait until they are gone.
  await waitFor('the calls above to be torn down', async () =>
    (await (await fetch(url + 'health')).json()).sessions === 0, 15000);
  const flood = await WsClient.connect(wsUrl);
  for (let i = 0; i < 30; i++) flood.sendText('garbage ' + i);
  const floodClose = await flood.until(() => false, 10000);
  check(floodClose.type === 'close' && floodClose.code === 1008, `30 refused messages close the connection (code ${floodClose.code})`);

  // Another site's page must not open sessions: refused before the upgrade (403).
  const foreign = await WsClient.connect(wsUrl, { origin: 'http://evil.example' }).then(() => 'upgraded', (e) => e.message);
  check(/ 403 /.test(foreign), `a foreign Origin is refused (${foreign})`);

  // --max-sessions 3: a fourth session is refused before the upgrade with 503 (a balancer retries it elsewhere).
  // A call holds its engine slot until its teardown (on a worker) is over: wait until the calls above are all gone.
  await waitFor('the calls above to be torn down', async () =>
    (await (await fetch(url + 'health')).json()).sessions === 0, 15000);
  const three = await Promise.all([1, 2, 3].map(() => WsClient.connect(wsUrl)));
  const ids = [];
  for (const c of three) ids.push(JSON.parse((await c.until((e) => JSON.parse(e.data).type === 'welcome')).data).session);
  const fourth = await WsClient.connect(wsUrl).then(() => 'upgraded', (e) => e.message);
  check(/ 503 /.test(fourth), `a fourth session is refused with 503 before the upgrade while three run (${fourth})`);
  for (const c of three) c.close();
  await waitFor('the three sessions to end', async () =>
    ids.every((id) => server.stderr.includes(`session ${id}: closed by the page`)), 10000);

  const page = await fetch(url);
  check(page.ok && (await page.text()).includes('PersonaPlex'), 'the server still serves the page');
  const missing = await fetch(url + 'no-such-file');
  check(missing.status === 404, 'an unknown path is 404');
}

// ---- browsers ----

function chromiumArgs(userDataDir) {
  return [...headlessChromiumArgs(userDataDir, '900,700', micFile),
    // Host candidates as IP addresses (not mDNS names), loopback included: the call stays on 127.0.0.1.
    '--disable-features=WebRtcHideLocalIpsWithMdns', '--allow-loopback-in-peer-connection'];
}

const pageStatus = (page) => page.evaluate('window.ppxStatus ? JSON.parse(JSON.stringify(window.ppxStatus)) : null');

// Audio heard by the page during `ms`: the new rx RMS samples and how many were not silent.
async function listen(page, ms) {
  const before = await pageStatus(page);
  await sleep(ms);
  const after = await pageStatus(page);
  const fresh = Math.min(after.rxSamples - before.rxSamples, after.rxRms.length);
  const samples = after.rxRms.slice(after.rxRms.length - fresh);
  return { samples: samples.length, loud: samples.filter((x) => x > SILENCE_RMS).length, status: after };
}

// The server end must be 127.0.0.1 (it gathers nothing else); Chromium may use any of its host
// candidates for its end, and all of them are addresses of this machine, so nothing leaves it.
function isLocalRoute(route) {
  const m = typeof route === 'string' && route.match(/^(.+):\d+ -> (.+):\d+$/);
  if (!m) return false;
  const own = Object.values(os.networkInterfaces()).flat().map((i) => i.address);
  return m[2] === '127.0.0.1' && (m[1] === '127.0.0.1' || own.includes(m[1]));
}

async function testBrowsers(url, server) {
  const userDataDir = fs.mkdtempSync(path.join(artifacts, 'chromium-profile-'));
  const browserLog = fs.createWriteStream(path.join(artifacts, 'webrtc-chromium.log'));
  const browser = new Browser(chromium, chromiumArgs(userDataDir), (s) => browserLog.write(s));
  try {
    // the second page picks its own role and voice (from the page's voice list), as a user would
    const persona = micFile ? '&role=' + encodeURIComponent('You are a patient piano teacher.') + '&voice=ASSISTANT.wav'
      : '';
    const pages = [await browser.newPage(url + '?autostart'), await browser.newPage(url + '?autostart' + persona)];
    for (const [i, page] of pages.entries()) {
      let last = null;
      const s = await waitFor(`page ${i + 1} to connect`, async () => {
        const st = last = await pageStatus(page);
        if (!st) return null;
        if (st.errors.length) throw new Error(`page ${i + 1}: ${st.errors.join('; ')}`);
        return st.connection === 'connected' && st.dataChannel === 'open' ? st : null;
      }, 60000).catch((e) => {
        throw new Error(`${e.message}; page state: connection ${last?.connection}, ice ${last?.ice}, ` +
          `signalling ${last?.signalling}, data channel ${last?.dataChannel}`);
      });
      check(s.connection === 'connected', `page ${i + 1}: connection established (session ${s.session})`);
      const shown = await page.evaluate('document.getElementById("connection-state").textContent');
      check(shown === 'connected', `page ${i + 1}: the page shows "connected"`);
    }
    if (micFile) {
      const options = await pages[1].evaluate('[...document.querySelectorAll("#voice option")].map((o) => o.value).join(",")');
      check(options === ',ASSISTANT.wav', `the page lists the model's voices (${options})`);
      check(/session \d+: started \(127\.0\.0\.1\), voice \S+ASSISTANT\.wav, text prompt of the call/.test(server.stderr),
        'the second page\'s call has its own voice and role');
    }
    const [one, two] = await Promise.all(pages.map((p) => listen(p, 6000)));
    for (const [i, heard] of [one, two].entries()) {
      check(heard.samples >= 40 && heard.loud >= heard.samples * 0.6,
        `page ${i + 1}: received non-silent audio for 6 s (${heard.loud}/${heard.samples} level samples above -60 dBFS)`);
      check(isLocalRoute(heard.status.route),
        `page ${i + 1}: the call stays on this machine, server end 127.0.0.1 (${heard.status.route})`);
    }
    // The speech in the fake microphone's file starts a few seconds in.
    for (const [i, page] of pages.entries()) {
      const st = await waitFor('the microphone level', async () => {
        const s = await pageStatus(page);
        return s.txLoud > 0 ? s : null;
      }, 20000).catch(() => null);
      check(st !== null, `page ${i + 1}: the microphone meter moves (${st ? st.txLoud : 0} samples above -60 dBFS)`);
    }
    const texts = await Promise.all(pages.map((p) => waitFor('text pieces', async () => {
      const st = await pageStatus(p);
      return st.transcript.length > 0 ? st : null;
    }, 20000).catch(() => null)));
    for (const [i, st] of texts.entries()) {
      const shown = await pages[i].evaluate('document.getElementById("transcript").textContent');
      check(st && shown.length > 0 && shown === st.transcript,
        `page ${i + 1}: text pieces arrive over the data channel and are shown (${JSON.stringify(shown.slice(0, 60))})`);
    }
    const stats = await waitFor('model statistics', async () => (await pageStatus(pages[1])).stats, 10000);
    check(stats['model-users'] === 3, `two sessions and the keeper share one model (model-users ${stats['model-users']})`);
    check(Number.isInteger(stats['batch-size']) && stats['batch-size'] >= 1 && stats['batch-size'] <= 2,
      `the calls are stepped by the shared engine's ticks (batch-size ${stats['batch-size']})`);
    for (const [i, page] of pages.entries())
      fs.writeFileSync(path.join(artifacts, `webrtc-page-${i + 1}.png`), await page.screenshot());

    // Closing a tab ends its session only.
    const closedSession = (await pageStatus(pages[0])).session;
    await pages[0].close();
    await waitFor('the server to tear the closed session down', async () =>
      new RegExp(`session ${closedSession}: closed by the page`).test(server.stderr), 15000);
    check(true, `closing page 1 tears down session ${closedSession} on the server`);
    const after = await listen(pages[1], 4000);
    check(after.status.connection === 'connected' && after.samples >= 25 && after.loud >= after.samples * 0.6,
      `page 2 keeps receiving audio after page 1 closed (${after.loud}/${after.samples} above -60 dBFS)`);
    const later = await waitFor('fresh model statistics', async () => {
      const st = await pageStatus(pages[1]);
      return st.stats && st.stats['model-users'] === 2 ? st.stats : null;
    }, 10000).catch(() => null);
    check(later !== null, 'after the teardown the model has two users (the keeper and page 2)');
    fs.writeFileSync(path.join(artifacts, 'webrtc-page-2-alone.png'), await pages[1].screenshot());
    const console2 = pages[1].consoleLines.filter((l) => /exception|error/i.test(l));
    check(console2.length === 0, `no page errors (${console2.join(' | ')})`);
  } finally {
    await browser.close();
    browserLog.end();
    fs.rmSync(userDataDir, { recursive: true, force: true });
  }
}

// ---- main ----

async function main() {
  fs.mkdirSync(artifacts, { recursive: true });
  const modelDir = makeModelDir();
  testStartupErrors(modelDir);
  await testDefaultSessions(modelDir);
  const server = new Server(modelDir);
  let result;
  try {
    const url = await server.started(120000);
    check(/^http:\/\/127\.0\.0\.1:\d+\/$/.test(url), `the server listens on 127.0.0.1 by default (${url})`);
    check(/3 call\(s\) at once on one engine \(--max-sessions; 4 sessions with the keeper's/.test(server.stderr),
      'with --max-sessions 3 the engine holds 3 calls and the keeper');
    await testSignalling(url, server);
    check(server.running, 'the server survived the malformed signalling');
    await testBrowsers(url, server);
    check(server.running, 'the server is still running');
  } finally {
    result = await server.stop();
  }
  check(result.code === 0, `the server stops cleanly on SIGTERM (exit ${result.code}, signal ${result.signal})`);
  check(!/CRITICAL|WARNING \*\*/.test(server.stderr), 'no GLib criticals or warnings in the server log');
  console.log(`artifacts: ${artifacts}`);
  if (failures()) {
    console.log(`${failures()} check(s) failed; server log:\n${server.stderr}`);
    process.exit(1);
  }
}

main().catch((e) => {
  console.error(`FAIL - ${e.stack || e}`);
  process.exit(1);
});
