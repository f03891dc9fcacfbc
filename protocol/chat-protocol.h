/* chat-protocol: the constants of the PersonaPlex WebSocket protocol (/api/chat, as the reference server and
 * web client speak it; docs/server.md) that both ends use: the server (pipelines/server/server-chat.c) and
 * the client library (chat-client.h) of the tests and the load generator. Audio is Ogg Opus at 24 kHz mono;
 * the model answers one 80 ms frame at a time. */
#ifndef PPX_CHAT_PROTOCOL_H
#define PPX_CHAT_PROTOCOL_H

#define PPX_CHAT_RATE 24000
#define PPX_CHAT_FRAME 1920 /* samples of one 80 ms model frame */

/* Message kinds (the first byte of every binary message). */
enum {
  PPX_CHAT_HANDSHAKE = 0x00, /* server -> client: the prompts ran, audio may flow (no payload) */
  PPX_CHAT_AUDIO = 0x01,     /* both ways: bytes of an Ogg Opus stream */
  PPX_CHAT_TEXT = 0x02,      /* server -> client: a UTF-8 text piece of the answer */
  PPX_CHAT_ERROR = 0x05,     /* server -> client: why the call ends (UTF-8) */
};

#endif
