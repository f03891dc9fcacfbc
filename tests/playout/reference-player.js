// Runs the reference web client's player worklet (client/src/audio-processor.ts of NVIDIA/personaplex, given as
// a file) under node on a trace, by the replay rules of `personaplex-loadgen --playout-trace` (docs/tools.md):
// quanta of 128 samples at 48 kHz, the first at time 0; before the quantum that starts at t, every chunk that
// arrived at or before t goes to the worklet's port; the last quantum is the last that starts at or before the
// last arrival. Prints {"played_ms", "missed_ms", "dropped_ms", "rebuffers"} read off the worklet itself:
// actualAudioPlayed, totalAudioPlayed - actualAudioPlayed, the samples its overflow rule took out of its queue
// (currentSamples() before and after a chunk), and the quanta that took its "Missed some audio" branch.
//
//   node reference-player.js AUDIO_PROCESSOR_TS TRACE
'use strict';
const fs = require('fs');
const vm = require('vm');

const [tsPath, tracePath] = process.argv.slice(2);
if (!tsPath || !tracePath) {
  console.error('usage: node reference-player.js AUDIO_PROCESSOR_TS TRACE');
  process.exit(2);
}
const RATE = 48000;
const QUANTUM = 128;

// The worklet is TypeScript only in name (// @ts-nocheck, no annotations): it runs as it is. Should a later
// version add simple parameter annotations, strip those ("name: Type" before , or ) inside a parameter list).
let source = fs.readFileSync(tsPath, 'utf8');
try {
  new vm.Script(source);
} catch (e) {
  source = source.replace(/\(([^()]*)\)(\s*(?::\s*[\w<>\[\]]+\s*)?)\{/g, (m, params) =>
    '(' + params.replace(/(\w+)\??\s*:\s*[\w.<>\[\]|]+/g, '$1') + ') {');
}

let rebuffers = 0;
const context = {
  sampleRate: RATE,
  currentFrame: 0,
  currentTime: 0,
  console: {
    log: (...args) => { if (args.includes('Missed some audio')) rebuffers++; },
    warn: () => {},
    error: (...args) => console.error(...args),
  },
};
vm.createContext(context);
// the AudioWorkletGlobalScope's pieces the worklet uses: its base class with a port, and registerProcessor
vm.runInContext(`
  class AudioWorkletProcessor { constructor() { this.port = { onmessage: null, postMessage: () => {} }; } }
  var __processors = {};
  function registerProcessor(name, cls) { __processors[name] = cls; }
`, context);
vm.runInContext(source, context, { filename: tsPath });
const names = vm.runInContext('Object.keys(__processors)', context);
if (names.length !== 1) {
  console.error(`${tsPath}: expected one registered processor, got ${names.length}`);
  process.exit(1);
}
const Processor = vm.runInContext(`__processors[${JSON.stringify(names[0])}]`, context);
const worklet = new Processor();

const chunks = fs.readFileSync(tracePath, 'utf8').split('\n').map((l) => l.trim())
  .filter((l) => l && !l.startsWith('#')).map((l) => {
    const [arrival, samples] = l.split(/\s+/);
    return [parseFloat(arrival), parseInt(samples, 10)];
  });

let dropped = 0;
if (chunks.length) {
  const last = chunks[chunks.length - 1][0];
  let i = 0;
  for (let k = 0; ; k++) {
    const t = k * QUANTUM * 1000 / RATE; // as the loadgen computes it
    if (!(t <= last)) break;
    for (; i < chunks.length && chunks[i][0] <= t; i++) {
      const n = chunks[i][1];
      const before = worklet.currentSamples();
      worklet.port.onmessage({ data: { type: 'audio', frame: new Float32Array(n), micDuration: t / 1000 } });
      dropped += before + n - worklet.currentSamples();
    }
    worklet.process([], [[new Float32Array(QUANTUM)]], {});
  }
}
console.log(JSON.stringify({
  played_ms: worklet.actualAudioPlayed * 1000,
  missed_ms: (worklet.totalAudioPlayed - worklet.actualAudioPlayed) * 1000,
  dropped_ms: dropped * 1000 / RATE,
  rebuffers,
}));
