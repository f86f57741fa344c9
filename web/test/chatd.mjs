// The JS tests' chatd: the real bin/chatd as a child process, on a database of its own in
// the PostgreSQL that DATABASE_URL names (make test and scripts/devdb.sh set it).
//
//   const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '5ms' } });
//   srv.httpURL, srv.wsURL          where it listens
//   await srv.query('SELECT ...')   rows of a query on its database, as objects (psql)
//   await srv.kill() / restart()    SIGKILL it / start it again on the same port and data
//   await srv.stop()                stop it and drop its database
import { spawn, execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const chatdBin = process.env.CHATD_BIN || join(root, 'bin', 'chatd');
let counter = 0;

function adminURL() {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error('DATABASE_URL is not set: run the JS tests with make test (or scripts/devdb.sh exec)');
  return url;
}

function withDatabase(url, name) {
  const u = new URL(url);
  u.pathname = '/' + name;
  return u.toString();
}

async function psql(url, sql) {
  const { stdout } = await run('psql', [url, '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-At', '-c', sql], {
    maxBuffer: 64 << 20,
  });
  return stdout;
}

/** Starts chatd on a fresh database. env adds to (or overrides) the defaults. */
export async function startChatd({ env = {} } = {}) {
  const name = `chatd_js_${process.pid}_${Date.now()}_${counter++}`;
  await psql(adminURL(), `CREATE DATABASE ${name}`);
  const dbURL = withDatabase(adminURL(), name);
  const sandboxDir = await mkdtemp(join(tmpdir(), 'chatd-js-sandboxes-'));
  const srv = new Server(name, dbURL, sandboxDir, env);
  try {
    await srv.start('127.0.0.1:0');
  } catch (err) {
    await srv.stop();
    throw err;
  }
  return srv;
}

class Server {
  constructor(name, dbURL, sandboxDir, env) {
    this.name = name;
    this.dbURL = dbURL;
    this.sandboxDir = sandboxDir;
    this.env = env;
    this.proc = null;
    this.addr = null;
    this.log = [];
  }

  get httpURL() {
    return `http://${this.addr}`;
  }

  get wsURL() {
    return `ws://${this.addr}/v1/ws`;
  }

  async start(addr) {
    const env = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      DATABASE_URL: this.dbURL,
      CHATD_ADDR: addr,
      // Metrics on a port of its own: tests run several chatds, and the default admin
      // port (127.0.0.1:9090) can be taken by only one of them.
      CHATD_ADMIN_ADDR: '127.0.0.1:0',
      CHATD_LOG_FORMAT: 'json',
      CHATD_LOG_LEVEL: 'info',
      CHATD_SANDBOX_DIR: this.sandboxDir,
      CHATD_DEMO_DELAY: '10ms',
      ...this.env,
    };
    const proc = spawn(chatdBin, [], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc = proc;
    const exited = new Promise((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })));
    this.exited = exited;
    const listening = new Promise((resolve, reject) => {
      let buf = '';
      const onData = (chunk) => {
        buf += chunk;
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          this.log.push(line);
          if (this.log.length > 2000) this.log.shift();
          const m = /ws:\/\/([^/\s"]+)\/v1\/ws/.exec(line);
          if (m && line.includes('listening')) resolve(m[1]);
        }
      };
      proc.stdout.setEncoding('utf8').on('data', onData);
      proc.stderr.setEncoding('utf8').on('data', onData);
      exited.then(({ code, signal }) =>
        reject(new Error(`chatd exited (${code ?? signal}) before listening:\n${this.log.slice(-20).join('\n')}`)),
      );
    });
    const timeout = new Promise((_, reject) => {
      const t = setTimeout(() => reject(new Error(`chatd did not listen within 30s:\n${this.log.slice(-20).join('\n')}`)), 30000);
      t.unref();
    });
    this.addr = await Promise.race([listening, timeout]);
  }

  /** Rows of sql (a SELECT) on chatd's database, as plain objects. */
  async query(sql) {
    const out = await psql(this.dbURL, `SELECT coalesce(json_agg(q), '[]') FROM (${sql}) q`);
    return JSON.parse(out);
  }

  /** Stops chatd with SIGTERM (a clean shutdown) and waits for it. */
  async terminate() {
    if (!this.proc) return;
    this.proc.kill('SIGTERM');
    await this.exited;
    this.proc = null;
  }

  /** Kills chatd with SIGKILL (a crash) and waits for it. */
  async kill() {
    if (!this.proc) return;
    this.proc.kill('SIGKILL');
    await this.exited;
    this.proc = null;
  }

  /** Starts chatd again on the same address and database. */
  async restart() {
    await this.terminate();
    await this.start(this.addr);
  }

  /** Stops chatd and drops its database. */
  async stop() {
    await this.terminate();
    await psql(adminURL(), `DROP DATABASE IF EXISTS ${this.name} WITH (FORCE)`).catch(() => {});
    await rm(this.sandboxDir, { recursive: true, force: true });
  }
}
