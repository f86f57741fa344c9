import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startChatd } from './chatd.mjs';

test('the harness starts chatd on a database of its own', async () => {
  const srv = await startChatd();
  try {
    const res = await fetch(srv.httpURL + '/readyz');
    assert.equal(res.status, 200);
    const rows = await srv.query('SELECT count(*)::int AS n FROM sessions');
    assert.deepEqual(rows, [{ n: 0 }]);
  } finally {
    await srv.stop();
  }
});
