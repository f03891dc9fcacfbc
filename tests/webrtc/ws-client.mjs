// A bare WebSocket client (RFC 6455) on node:net, so that the test can send what a browser never would:
// binary frames, any Origin header, oversized messages. Node 20's own WebSocket is behind a flag.
import net from 'node:net';
import crypto from 'node:crypto';

export class WsClient {
  static connect(url, { origin } = {}) {
    const { hostname, port, pathname } = new URL(url);
    return new Promise((resolve, reject) => {
      const socket = net.createConnection({ host: hostname, port: Number(port) });
      const key = crypto.randomBytes(16).toString('base64');
      let head = Buffer.alloc(0);
      const onData = (chunk) => {
        head = Buffer.concat([head, chunk]);
        const end = head.indexOf('\r\n\r\n');
        if (end < 0) return;
        socket.off('data', onData);
        const status = head.subarray(0, head.indexOf('\r\n')).toString();
        if (!/^HTTP\/1\.1 101/.test(status)) {
          socket.destroy();
          reject(new Error(`handshake refused: ${status}`));
          return;
        }
        resolve(new WsClient(socket, head.subarray(end + 4)));
      };
      socket.on('data', onData);
      socket.once('error', reject);
      socket.on('connect', () => {
        socket.write(`GET ${pathname} HTTP/1.1\r\nHost: ${hostname}:${port}\r\nUpgrade: websocket\r\n` +
          `Connection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n` +
          (origin ? `Origin: ${origin}\r\n` : '') + '\r\n');
      });
    });
  }

  constructor(socket, rest) {
    this.socket = socket;
    this.buffer = Buffer.alloc(0);
    this.events = []; // {type: 'text', data} | {type: 'close', code}
    this.texts = []; // every text message received, consumed or not
    this.waiters = [];
    this.closed = null;
    socket.on('data', (chunk) => this.receive(chunk));
    socket.on('close', () => this.push({ type: 'close', code: this.closed ?? 1006 }));
    socket.on('error', () => {});
    if (rest.length) this.receive(rest);
  }

  push(event) {
    if (event.type === 'close') {
      if (this.sawClose) return;
      this.sawClose = true;
    }
    const waiter = this.waiters.shift();
    if (waiter) waiter(event);
    else this.events.push(event);
  }

  receive(chunk) {
    this.buffer = Buffer.concat([this.buffer, chunk]);
    for (;;) {
      if (this.buffer.length < 2) return;
      const opcode = this.buffer[0] & 0x0f;
      let len = this.buffer[1] & 0x7f;
      let at = 2;
      if (len === 126) {
        if (this.buffer.length < 4) return;
        len = this.buffer.readUInt16BE(2);
        at = 4;
      } else if (len === 127) {
        if (this.buffer.length < 10) return;
        len = Number(this.buffer.readBigUInt64BE(2));
        at = 10;
      }
      if (this.buffer.length < at + len) return;
      const payload = this.buffer.subarray(at, at + len);
      this.buffer = this.buffer.subarray(at + len);
      if (opcode === 1) {
        this.texts.push(payload.toString('utf8'));
        this.push({ type: 'text', data: payload.toString('utf8') });
      }
      else if (opcode === 8) {
        this.closed = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
        this.push({ type: 'close', code: this.closed });
        this.socket.end();
      } else if (opcode === 9) this.sendFrame(10, payload);
    }
  }

  sendFrame(opcode, payload) {
    const mask = crypto.randomBytes(4);
    const len = payload.length;
    const header = len < 126 ? Buffer.from([0x80 | opcode, 0x80 | len])
      : len < 65536 ? Buffer.from([0x80 | opcode, 0x80 | 126, len >> 8, len & 0xff])
        : Buffer.concat([Buffer.from([0x80 | opcode, 0x80 | 127]), (() => {
          const b = Buffer.alloc(8);
          b.writeBigUInt64BE(BigInt(len));
          return b;
        })()]);
    const masked = Buffer.alloc(len);
    for (let i = 0; i < len; i++) masked[i] = payload[i] ^ mask[i & 3];
    if (!this.socket.destroyed) this.socket.write(Buffer.concat([header, mask, masked]));
  }

  sendText(text) {
    this.sendFrame(1, Buffer.from(text, 'utf8'));
  }

  // A text frame with these exact bytes (which need not be UTF-8).
  sendTextBytes(bytes) {
    this.sendFrame(1, Buffer.from(bytes));
  }

  sendBinary(bytes) {
    this.sendFrame(2, Buffer.from(bytes));
  }

  // The next message or the close; rejects after timeoutMs.
  next(timeoutMs = 5000) {
    if (this.events.length) return Promise.resolve(this.events.shift());
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        reject(new Error(`no WebSocket message within ${timeoutMs} ms`));
      }, timeoutMs);
      const waiter = (event) => {
        clearTimeout(timer);
        resolve(event);
      };
      this.waiters.push(waiter);
    });
  }

  // Skips messages until one matches `predicate` (or the close, which is returned).
  async until(predicate, timeoutMs = 5000) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const event = await this.next(Math.max(1, deadline - Date.now()));
      if (event.type === 'close' || predicate(event)) return event;
    }
  }

  close() {
    this.sendFrame(8, Buffer.from([0x03, 0xe8]));
    this.socket.end();
  }
}
