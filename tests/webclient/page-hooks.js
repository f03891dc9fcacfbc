// Run in the reference client's page before its own scripts (tests/webclient/test-webclient.mjs): watches
// what the page does without changing it, in window.__ppx.
//   sockets: every WebSocket the page opens: its URL, when it opened, when the first 0x00 (handshake)
//            arrived, messages received and sent by kind (the first byte), when each audio message arrived
//            and left,
//            the 0x02 text and 0x05 errors,
//            when and how it closed, the first 25 messages sent (hex);
//   levels:  the RMS of what the client's player (its 'moshi-processor' audio worklet, which feeds the
//            speakers) puts out, every 100 ms, through an analyser of our own on that node's output;
//   micLevels: the RMS of the microphone as the client takes it in, every 100 ms.
(() => {
  const state = (window.__ppx = { sockets: [], levels: [], micLevels: [], sampleRate: null, audioState: null });
  const kindName = ['handshake', 'audio', 'text', 'control', 'metadata', 'error', 'ping'];
  const count = (table, kind) => {
    const name = kindName[kind] ?? `kind ${kind}`;
    table[name] = (table[name] ?? 0) + 1;
  };

  const NativeWebSocket = window.WebSocket;
  window.WebSocket = class extends NativeWebSocket {
    constructor(url, protocols) {
      super(url, protocols);
      const record = {
        url: String(url), created: performance.now(), opened: null, handshake: null, closed: null,
        closeCode: null, received: {}, sent: {}, audioBytes: 0, audioTimes: [], sentAudioTimes: [], text: '', errors: [], firstSent: [],
      };
      state.sockets.push(record);
      this.ppxRecord = record;
      const decoder = new TextDecoder();
      this.addEventListener('open', () => { record.opened = performance.now(); });
      this.addEventListener('message', (event) => {
        if (!(event.data instanceof ArrayBuffer)) {
          count(record.received, 'a text frame');
          return;
        }
        const bytes = new Uint8Array(event.data);
        count(record.received, bytes[0]);
        if (bytes[0] === 0 && record.handshake === null) record.handshake = performance.now();
        if (bytes[0] === 1) {
          record.audioBytes += bytes.length - 1;
          if (record.audioTimes.length < 20000) record.audioTimes.push(performance.now());
        }
        if (bytes[0] === 2) record.text += decoder.decode(bytes.subarray(1));
        if (bytes[0] === 5) record.errors.push(decoder.decode(bytes.subarray(1)));
      });
      this.addEventListener('close', (event) => {
        record.closed = performance.now();
        record.closeCode = event.code;
      });
    }

    send(data) {
      const bytes = ArrayBuffer.isView(data) ? new Uint8Array(data.buffer, data.byteOffset, 1)
        : data instanceof ArrayBuffer ? new Uint8Array(data, 0, 1) : null;
      count(this.ppxRecord.sent, bytes ? bytes[0] : 'a text frame');
      if (bytes && bytes[0] === 1 && this.ppxRecord.sentAudioTimes.length < 20000)
        this.ppxRecord.sentAudioTimes.push(performance.now());
      // The first messages whole (hex), for the artifacts: the start of the client's Ogg stream.
      if (bytes && this.ppxRecord.firstSent.length < 25) {
        const all = ArrayBuffer.isView(data) ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
          : new Uint8Array(data);
        this.ppxRecord.firstSent.push(Array.from(all, (b) => b.toString(16).padStart(2, '0')).join(''));
      }
      return super.send(data);
    }
  };

  // RMS of an analyser's input now.
  const levelOf = (analyser, samples) => {
    analyser.getFloatTimeDomainData(samples);
    let sum = 0;
    for (const x of samples) sum += x * x;
    return Math.sqrt(sum / samples.length);
  };

  // The microphone as the client takes it in (its meter's source).
  const nativeCreateSource = AudioContext.prototype.createMediaStreamSource;
  AudioContext.prototype.createMediaStreamSource = function (stream) {
    const source = nativeCreateSource.call(this, stream);
    const analyser = this.createAnalyser();
    source.connect(analyser);
    const samples = new Float32Array(analyser.fftSize);
    setInterval(() => state.micLevels.push(levelOf(analyser, samples)), 100);
    return source;
  };

  const NativeWorkletNode = window.AudioWorkletNode;
  window.AudioWorkletNode = class extends NativeWorkletNode {
    constructor(context, name, options) {
      super(context, name, options);
      if (name !== 'moshi-processor') return;
      const analyser = context.createAnalyser();
      analyser.fftSize = 2048;
      this.connect(analyser);
      const samples = new Float32Array(analyser.fftSize);
      state.sampleRate = context.sampleRate;
      setInterval(() => {
        state.levels.push(levelOf(analyser, samples));
        state.audioState = context.state;
      }, 100);
    }
  };
})();
