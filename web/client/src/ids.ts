// Ids the client makes: requestIds (random, v4). Session ids are the server's.

function randomBytes(n: number): Uint8Array {
  const b = new Uint8Array(n);
  const c = (globalThis as { crypto?: Crypto }).crypto;
  if (c && typeof c.getRandomValues === 'function') c.getRandomValues(b);
  else for (let i = 0; i < n; i++) b[i] = Math.floor(Math.random() * 256);
  return b;
}

function format(b: Uint8Array): string {
  let h = '';
  for (let i = 0; i < 16; i++) {
    h += b[i]!.toString(16).padStart(2, '0');
    if (i === 3 || i === 5 || i === 7 || i === 9) h += '-';
  }
  return h;
}

/** A random UUID: crypto.randomUUID when present (secure contexts), else the same from getRandomValues. */
export function uuid4(): string {
  const c = (globalThis as { crypto?: Crypto }).crypto;
  if (c && typeof c.randomUUID === 'function') return c.randomUUID();
  const b = randomBytes(16);
  b[6] = (b[6]! & 0x0f) | 0x40;
  b[8] = (b[8]! & 0x3f) | 0x80;
  return format(b);
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Whether s is a UUID in its usual text form (and not the nil UUID). */
export function isUuid(s: string): boolean {
  return UUID_RE.test(s) && s !== '00000000-0000-0000-0000-000000000000';
}

/**
 * splitToolName reads a tool's name as chatd offers it: an MCP server's tools are named
 * `<server>__<tool>` (docs/tools.md), chatd's own have no server.
 */
export function splitToolName(name: string): { server: string | null; tool: string } {
  const i = name.indexOf('__');
  if (i <= 0 || i + 2 >= name.length) return { server: null, tool: name };
  return { server: name.slice(0, i), tool: name.slice(i + 2) };
}
