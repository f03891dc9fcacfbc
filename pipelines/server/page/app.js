// PersonaPlex in the browser: standard WebRTC only (no libraries, nothing from the internet).
//
// The server offers one sendrecv Opus audio section and a data channel "transcript"; the page answers
// with the microphone. The call's role (text_prompt) and voice (voice_prompt, one of GET /api/voices) go in
// the /ws query, as /api/chat takes them. With --auth-token, the page is opened once as /?token=...: the server
// answers with a cookie and this page without the token, and the cookie goes with /ws and /api/voices
// (docs/server.md, "Authentication"). Everything the page knows is also in window.ppxStatus (read by the tests):
//   connection, ice, signalling, session, model, dataChannel, transcript, errors,
//   txRms / rxRms: the last 100 level samples (RMS, 0..1, every 100 ms) of the microphone and of the
//   audio received from the server, rxAudioLevel: the same from getStats() (inbound-rtp audioLevel),
//   rxSamples: how many rx samples were taken in total, txLoud / rxLoud: how many of all samples were
//   above -60 dBFS, route: the ICE pair in use ("a:p -> b:p").
'use strict';

const HISTORY = 100;
const SAMPLE_MS = 100;
const LOUD_RMS = 1e-3; // -60 dBFS

const status = {
  connection: 'new',
  ice: 'new',
  signalling: 'closed',
  session: null,
  model: null,
  dataChannel: 'none',
  transcript: '',
  stats: null,
  errors: [],
  txRms: [],
  rxRms: [],
  rxAudioLevel: [],
  rxSamples: 0,
  txLoud: 0,
  rxLoud: 0,
  route: null,
};
window.ppxStatus = status;

const $ = (id) => document.getElementById(id);
let call = null; // {ws, pc, mic, audioContext, timer}

function show(id, text) {
  $(id).textContent = text;
}

function setConnection(state) {
  status.connection = state;
  document.body.dataset.connection = state;
  show('connection-state', state);
}

function reportError(message) {
  status.errors.push(message);
  const li = document.createElement('li');
  li.textContent = message;
  $('errors').appendChild(li);
}

function pushSample(list, value) {
  list.push(value);
  if (list.length > HISTORY) list.shift();
}

function rmsOf(analyser, buffer) {
  analyser.getFloatTimeDomainData(buffer);
  let sum = 0;
  for (const x of buffer) sum += x * x;
  return Math.sqrt(sum / buffer.length);
}

function showLevel(which, rms) {
  const db = rms > 0 ? 20 * Math.log10(rms) : -Infinity;
  const percent = Math.max(0, Math.min(100, ((db + 60) / 60) * 100));
  $(which + '-bar').style.width = percent.toFixed(0) + '%';
  show(which + '-level', isFinite(db) ? db.toFixed(0) + ' dB' : '\u2212\u221e dB');
}

function makeAnalyser(audioContext, stream) {
  const analyser = audioContext.createAnalyser();
  analyser.fftSize = 2048;
  audioContext.createMediaStreamSource(stream).connect(analyser);
  return { analyser, buffer: new Float32Array(analyser.fftSize) };
}

async function sampleLevels() {
  if (!call) return;
  if (call.tx) {
    const rms = rmsOf(call.tx.analyser, call.tx.buffer);
    pushSample(status.txRms, rms);
    if (rms > LOUD_RMS) status.txLoud++;
    showLevel('tx', rms);
  }
  if (call.rx) {
    const rms = rmsOf(call.rx.analyser, call.rx.buffer);
    pushSample(status.rxRms, rms);
    status.rxSamples++;
    if (rms > LOUD_RMS) status.rxLoud++;
    showLevel('rx', rms);
  }
  if (call.pc && call.rx) {
    const report = await call.pc.getStats();
    report.forEach((s) => {
      if (s.type === 'inbound-rtp' && s.kind === 'audio' && s.audioLevel !== undefined)
        pushSample(status.rxAudioLevel, s.audioLevel);
      if (s.type === 'candidate-pair' && s.nominated && s.state === 'succeeded') {
        const local = report.get(s.localCandidateId);
        const remote = report.get(s.remoteCandidateId);
        if (local && remote) status.route = `${local.address}:${local.port} -> ${remote.address}:${remote.port}`;
      }
    });
  }
}

function send(message) {
  if (call && call.ws.readyState === WebSocket.OPEN) call.ws.send(JSON.stringify(message));
}

function onDataChannel(channel) {
  status.dataChannel = channel.readyState;
  channel.onopen = () => { status.dataChannel = 'open'; };
  channel.onclose = () => { status.dataChannel = 'closed'; };
  channel.onmessage = (event) => {
    let message;
    try {
      message = JSON.parse(event.data);
    } catch (e) {
      return;
    }
    if (message.type === 'text' && typeof message.text === 'string') {
      status.transcript += message.text;
      const box = $('transcript');
      box.textContent = status.transcript;
      box.scrollTop = box.scrollHeight;
    } else if (message.type === 'stats') {
      status.stats = message;
      show('step', `${message['mean-step-ms'].toFixed(1)} ms per 80 ms`);
      show('model', `${status.model} \u00b7 ${message.sessions} session(s) on it`);
    }
  };
}

function makePeerConnection() {
  const pc = new RTCPeerConnection({ iceServers: [] }); // host candidates only: no STUN/TURN
  pc.onicecandidate = (event) => {
    if (event.candidate && event.candidate.candidate)
      send({ type: 'ice', candidate: event.candidate.candidate, sdpMLineIndex: event.candidate.sdpMLineIndex });
  };
  pc.onconnectionstatechange = () => setConnection(pc.connectionState);
  pc.oniceconnectionstatechange = () => {
    status.ice = pc.iceConnectionState;
    show('ice-state', pc.iceConnectionState);
  };
  pc.ontrack = (event) => {
    const stream = event.streams[0] || new MediaStream([event.track]);
    // Chromium only feeds a remote stream to WebAudio while a media element plays it.
    $('remote-audio').srcObject = stream;
    $('remote-audio').play().catch(() => {});
    call.rx = makeAnalyser(call.audioContext, stream);
  };
  pc.ondatachannel = (event) => onDataChannel(event.channel);
  return pc;
}

async function onOffer(sdp) {
  await call.pc.setRemoteDescription({ type: 'offer', sdp });
  const sending = call.pc.getSenders().map((s) => s.track);
  for (const track of call.mic.getAudioTracks())
    if (!sending.includes(track)) call.pc.addTrack(track, call.mic);
  const answer = await call.pc.createAnswer();
  await call.pc.setLocalDescription(answer);
  send({ type: 'answer', sdp: answer.sdp });
}

async function onSignal(message) {
  switch (message.type) {
    case 'welcome':
      status.session = message.session;
      status.model = message.model;
      show('session', String(message.session));
      show('model', message.model);
      break;
    case 'offer':
      await onOffer(message.sdp);
      break;
    case 'ice':
      await call.pc.addIceCandidate({ candidate: message.candidate, sdpMLineIndex: message.sdpMLineIndex });
      break;
    case 'state':
      status.serverConnection = message.connection;
      break;
    case 'error':
      reportError('server: ' + message.message);
      break;
  }
}

const pageQuery = new URLSearchParams(location.search);

// The /ws address with the call's parameters: its role and voice (the token, if any, is the cookie's).
function signallingUrl() {
  const query = new URLSearchParams();
  const role = $('text-prompt').value.trim();
  if (role) query.set('text_prompt', role);
  if ($('voice').value) query.set('voice_prompt', $('voice').value);
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  const q = query.toString();
  return `${scheme}://${location.host}/ws${q ? '?' + q : ''}`;
}

// The model's voices, for the voice list (the server's default stays selected: the empty value).
async function loadVoices() {
  try {
    const response = await fetch('/api/voices');
    if (!response.ok) return;
    const { voices } = await response.json();
    for (const name of voices) {
      const option = document.createElement('option');
      option.value = name;
      option.textContent = name.replace(/\.(pt|wav|flac)$/, '');
      $('voice').appendChild(option);
    }
  } catch (e) {
    reportError('voices: ' + e.message);
  }
}

async function start() {
  $('start').disabled = true;
  try {
    const mic = await navigator.mediaDevices.getUserMedia({ audio: { echoCancellation: true } });
    const audioContext = new AudioContext();
    await audioContext.resume();
    call = { mic, audioContext, tx: makeAnalyser(audioContext, mic), rx: null };
    call.pc = makePeerConnection();
    call.ws = new WebSocket(signallingUrl());
    $('text-prompt').disabled = $('voice').disabled = true;
    status.signalling = 'connecting';
    show('signalling-state', 'connecting');
    setConnection('connecting');
    // Messages are handled one after the other: candidates must not overtake the offer.
    let queue = Promise.resolve();
    const ws = call.ws;
    ws.onopen = () => { status.signalling = 'open'; show('signalling-state', 'open'); };
    ws.onclose = (event) => {
      // closed before it opened: the server refused the upgrade (503: busy or draining) or could not be reached
      if (status.signalling === 'connecting') reportError('the server did not take the call: it is busy (or unreachable); try again in a few seconds');
      status.signalling = 'closed';
      show('signalling-state', `closed (${event.code})`);
      if (call && call.ws === ws) stop();
    };
    ws.onmessage = (event) => {
      let message;
      try {
        message = JSON.parse(event.data);
      } catch (e) {
        reportError('signalling: not JSON');
        return;
      }
      queue = queue.then(() => onSignal(message)).catch((e) => reportError('signalling: ' + e.message));
    };
    call.timer = setInterval(sampleLevels, SAMPLE_MS);
    $('start').textContent = 'Stop';
    $('start').classList.add('stop');
  } catch (e) {
    reportError('could not start: ' + e.message);
    stop();
  } finally {
    $('start').disabled = false;
  }
}

function stop() {
  if (!call) return;
  const ended = call;
  call = null;
  clearInterval(ended.timer);
  if (ended.ws) ended.ws.close();
  if (ended.pc) ended.pc.close();
  if (ended.mic) ended.mic.getTracks().forEach((t) => t.stop());
  if (ended.audioContext) ended.audioContext.close();
  $('remote-audio').srcObject = null;
  setConnection('closed');
  showLevel('tx', 0);
  showLevel('rx', 0);
  $('start').textContent = 'Start conversation';
  $('start').classList.remove('stop');
  $('text-prompt').disabled = $('voice').disabled = false;
}

$('start').addEventListener('click', () => (call ? stop() : start()));
for (const [param, id] of [['role', 'text-prompt']]) if (pageQuery.has(param)) $(id).value = pageQuery.get(param);
const voicesLoaded = loadVoices().then(() => {
  if (pageQuery.has('voice')) $('voice').value = pageQuery.get('voice');
});
if (pageQuery.has('autostart')) voicesLoaded.then(start);
