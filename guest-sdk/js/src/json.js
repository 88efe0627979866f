// Objects cross the component boundary as UTF-8 JSON bytes (`list<u8>`),
// which is far cheaper than strings for JavaScript guests. TextEncoder and
// TextDecoder are used where the engine has them (SpiderMonkey does); the
// QuickJS engine does not, so a small UTF-8 codec stands in. Its loops run
// in the interpreter, a few hundred nanoseconds a byte, so it leaves the
// per-byte work to the engine's native functions where it can: a JSON text
// is mostly ASCII (checked with one regular expression), and UTF-8 beyond
// it is what `encodeURIComponent` and `decodeURIComponent` speak. A string
// of bytes and its bytes are turned into each other through base64 (btoa,
// atob and Uint8Array's base64 methods) where the engine has those.

const NOT_ASCII = /[^\x00-\x7f]/;
const CHUNK = 8192;
const uriCodec = typeof escape === "function" && typeof unescape === "function";
// QuickJS has btoa, atob and Uint8Array's base64 methods: a string of
// bytes goes through base64 in two native calls each way, where a loop over
// it runs in the interpreter (measured on the greeter: its Deployment took
// 244 µs to encode with the loop, 74 µs this way, JSON.stringify included).
const base64Codec =
  typeof btoa === "function" &&
  typeof atob === "function" &&
  typeof Uint8Array.fromBase64 === "function" &&
  typeof Uint8Array.prototype.toBase64 === "function";

/**
 * The bytes of a string whose code units are all below 256 (what btoa
 * accepts).
 * @param {string} s
 * @returns {Uint8Array}
 */
function bytesOf(s) {
  if (base64Codec) return Uint8Array.fromBase64(btoa(s));
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

/**
 * The string whose code units are the bytes `b`.
 * @param {Uint8Array} b
 * @returns {string}
 */
function binaryOf(b) {
  let binary = "";
  for (let i = 0; i < b.length; i += CHUNK) {
    binary += String.fromCharCode.apply(null, b.subarray(i, i + CHUNK));
  }
  return binary;
}

/**
 * UTF-8 encoding of a string, for engines without TextEncoder. Lone
 * surrogates become U+FFFD.
 * @param {string} s
 * @returns {Uint8Array}
 */
export function utf8Encode(s) {
  if (!NOT_ASCII.test(s)) return bytesOf(s);
  if (uriCodec) {
    try {
      return bytesOf(unescape(encodeURIComponent(s)));
    } catch {
      // A lone surrogate: the code unit by code unit encoder replaces it.
    }
  }
  return utf8EncodeEach(s);
}

/**
 * {@link utf8Encode}, a code unit at a time.
 * @param {string} s
 * @returns {Uint8Array}
 */
function utf8EncodeEach(s) {
  const out = [];
  for (let i = 0; i < s.length; i++) {
    let c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
        i++;
      }
    }
    if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd; // lone surrogate
    if (c < 0x80) out.push(c);
    else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
    else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
  }
  return Uint8Array.from(out);
}

/**
 * UTF-8 decoding of bytes, for engines without TextDecoder. Invalid
 * sequences become U+FFFD.
 * @param {Uint8Array} b
 * @returns {string}
 */
export function utf8Decode(b) {
  const binary = base64Codec ? atob(b.toBase64()) : binaryOf(b);
  if (!NOT_ASCII.test(binary)) return binary;
  if (uriCodec) {
    try {
      return decodeURIComponent(escape(binary));
    } catch {
      // Not valid UTF-8: the byte by byte decoder replaces what is not.
    }
  }
  return utf8DecodeEach(b);
}

/**
 * {@link utf8Decode}, a byte at a time.
 * @param {Uint8Array} b
 * @returns {string}
 */
function utf8DecodeEach(b) {
  let s = "";
  let chunk = [];
  const flush = () => {
    s += String.fromCharCode.apply(null, chunk);
    chunk = [];
  };
  for (let i = 0; i < b.length; ) {
    const x = b[i];
    let c = 0xfffd;
    let n = 1;
    if (x < 0x80) c = x;
    else if (x >= 0xc2 && x < 0xe0 && i + 1 < b.length) {
      c = ((x & 31) << 6) | (b[i + 1] & 63);
      n = 2;
    } else if (x >= 0xe0 && x < 0xf0 && i + 2 < b.length) {
      c = ((x & 15) << 12) | ((b[i + 1] & 63) << 6) | (b[i + 2] & 63);
      n = 3;
    } else if (x >= 0xf0 && x < 0xf5 && i + 3 < b.length) {
      c = ((x & 7) << 18) | ((b[i + 1] & 63) << 12) | ((b[i + 2] & 63) << 6) | (b[i + 3] & 63);
      n = 4;
    }
    i += n;
    if (c >= 0x10000) {
      c -= 0x10000;
      chunk.push(0xd800 + (c >> 10), 0xdc00 + (c & 0x3ff));
    } else {
      chunk.push(c);
    }
    if (chunk.length > 4096) flush();
  }
  flush();
  return s;
}

const encoder = typeof TextEncoder === "function" ? new TextEncoder() : undefined;
const decoder = typeof TextDecoder === "function" ? new TextDecoder() : undefined;

/**
 * A value as UTF-8 JSON bytes.
 * @param {unknown} value
 * @returns {Uint8Array}
 */
export function toBytes(value) {
  const text = JSON.stringify(value);
  return encoder ? encoder.encode(text) : utf8Encode(text);
}

/**
 * UTF-8 JSON bytes parsed.
 * @param {Uint8Array} bytes
 * @returns {any}
 */
export function fromBytes(bytes) {
  return JSON.parse(decoder ? decoder.decode(bytes) : utf8Decode(bytes));
}
