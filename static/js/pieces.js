// Byte-fallback pieces as people read them. A model with byte fallback spells a character it has
// no piece for in its UTF-8 bytes: 🍕 is <0xF0> <0x9F> <0x8D> <0x95>. As axis labels those say
// nothing, so each byte of a whole character is labelled with the character and its place in it
// ("🍕 1/4" … "🍕 4/4"), a one-byte character with itself ("7", or "U+0009" for an invisible
// one), and a byte that is not part of a valid character (only a model's own output has those)
// as "byte F0". The raw pieces stay available (the heatmap's hover shows them).

const BYTE_PIECE = /^<0x([0-9A-F]{2})>$/;

/** The byte a piece stands for, or null for an ordinary piece. */
export function pieceByte(piece) {
  const match = BYTE_PIECE.exec(piece);
  return match ? parseInt(match[1], 16) : null;
}

/** How many bytes a UTF-8 character starting with `lead` has (0: not a lead byte). */
function charWidth(lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xc2 && lead < 0xe0) return 2;
  if (lead >= 0xe0 && lead < 0xf0) return 3;
  if (lead >= 0xf0 && lead < 0xf5) return 4;
  return 0;
}

const strict = new TextDecoder("utf-8", { fatal: true });

function decodeChar(bytes) {
  try {
    return strict.decode(new Uint8Array(bytes));
  } catch {
    return null;
  }
}

function shown(char) {
  const code = char.codePointAt(0);
  const invisible = code < 0x20 || (code >= 0x7f && code < 0xa0) || /^\s$/u.test(char);
  return invisible ? `U+${code.toString(16).toUpperCase().padStart(4, "0")}` : char;
}

/** Labels for `tokens` (piece strings), byte pieces made readable; other pieces unchanged. */
export function readablePieces(tokens) {
  const bytes = tokens.map(pieceByte);
  const labels = tokens.slice();
  let i = 0;
  while (i < tokens.length) {
    if (bytes[i] === null) {
      i += 1;
      continue;
    }
    const width = charWidth(bytes[i]);
    const run = bytes.slice(i, i + width);
    const char = width && run.length === width && !run.includes(null) ? decodeChar(run) : null;
    if (char === null) {
      labels[i] = `byte ${bytes[i].toString(16).toUpperCase().padStart(2, "0")}`;
      i += 1;
      continue;
    }
    for (let k = 0; k < width; k++) labels[i + k] = width === 1 ? shown(char) : `${shown(char)} ${k + 1}/${width}`;
    i += width;
  }
  return labels;
}

/** `pieces` as text pieces: each run of byte pieces that spells whole UTF-8 characters becomes
 *  those characters (the run's first piece holds them, the others ""), so that joined they are
 *  the text the model wrote; a byte that is no part of a whole character stays as it is. */
export function bytesAsText(pieces) {
  const bytes = pieces.map(pieceByte);
  const out = pieces.slice();
  let i = 0;
  while (i < pieces.length) {
    const width = bytes[i] === null ? 0 : charWidth(bytes[i]);
    const run = bytes.slice(i, i + width);
    const char = width && run.length === width && !run.includes(null) ? decodeChar(run) : null;
    if (char === null) {
      i += 1;
      continue;
    }
    out.splice(i, width, char, ...Array(width - 1).fill(""));
    i += width;
  }
  return out;
}
