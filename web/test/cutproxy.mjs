// A TCP proxy in front of chatd that a test can cut: the network between a client and the
// server, failing on demand.
//
//   const p = await cutProxy('127.0.0.1:8080');
//   p.url            http://127.0.0.1:<port>, to give the client instead of chatd's
//   p.cut()          resets every open connection (the client's reader throws)
//   p.down() / up()  refuse new connections (reset at once) until up()
//   p.freeze()       open connections stay open but carry nothing more, either way (a
//                    network that changed under them: no reset, no FIN); new ones work
//   p.connections    how many connections it has accepted
//   await p.close()
import net from 'node:net';

export async function cutProxy(target) {
  const [host, port] = target.split(':');
  const open = new Set();
  const frozen = new Set();
  let refusing = false;
  const p = { connections: 0 };
  const server = net.createServer((client) => {
    p.connections++;
    if (refusing) {
      client.resetAndDestroy();
      return;
    }
    const upstream = net.connect(Number(port), host);
    const pair = { client, upstream };
    open.add(pair);
    const end = () => {
      open.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  p.url = `http://127.0.0.1:${server.address().port}`;
  p.cut = () => {
    for (const { client, upstream } of open) {
      client.resetAndDestroy();
      upstream.destroy();
    }
    open.clear();
  };
  p.freeze = () => {
    for (const { client, upstream } of open) {
      client.unpipe(upstream);
      upstream.unpipe(client);
      client.pause();
      upstream.pause();
      frozen.add({ client, upstream });
    }
    open.clear(); // cut() leaves them be; close() destroys them
  };
  p.down = () => {
    refusing = true;
    p.cut();
  };
  p.up = () => {
    refusing = false;
  };
  p.close = () =>
    new Promise((resolve) => {
      p.cut();
      for (const { client, upstream } of frozen) {
        client.destroy();
        upstream.destroy();
      }
      server.close(() => resolve());
    });
  return p;
}
