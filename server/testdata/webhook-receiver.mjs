// A webhook receiver for chatd's tests: it verifies each delivery with the Standard
// Webhooks reference library (npm standardwebhooks) and records it.
//
//   node webhook-receiver.mjs <port> <web/node_modules> <secret>
//
// POST /hook        a delivery: 400 when its signature does not verify, else the
//                   status set with /mode (200 at first)
// POST /mode?status=N  answer verified deliveries with N from now on
// GET  /deliveries  [{id, status, verified, type, runId, error}] in arrival order
//
// Its first line on stdout is "listening <port>".
import http from "node:http";
import path from "node:path";
import { createRequire } from "node:module";

const port = Number(process.argv[2] ?? 0);
const modules = process.argv[3] ?? "../../web/node_modules";
const secret = process.argv[4];
const require = createRequire(path.join(path.resolve(modules), "..", "package.json"));
const { Webhook } = require("standardwebhooks");
const wh = new Webhook(secret);

let status = 200;
const deliveries = [];

const server = http.createServer((req, res) => {
  const url = new URL(req.url, "http://x");
  if (req.method === "POST" && url.pathname === "/mode") {
    status = Number(url.searchParams.get("status"));
    res.end("ok");
    return;
  }
  if (req.method === "GET" && url.pathname === "/deliveries") {
    res.setHeader("Content-Type", "application/json");
    res.end(JSON.stringify(deliveries));
    return;
  }
  if (req.method !== "POST" || url.pathname !== "/hook") {
    res.statusCode = 404;
    res.end();
    return;
  }
  let body = "";
  req.setEncoding("utf8");
  req.on("data", (chunk) => (body += chunk));
  req.on("end", () => {
    const record = { id: req.headers["webhook-id"], status, verified: false };
    try {
      const event = wh.verify(body, {
        "webhook-id": req.headers["webhook-id"],
        "webhook-timestamp": req.headers["webhook-timestamp"],
        "webhook-signature": req.headers["webhook-signature"],
      });
      record.verified = true;
      record.type = event.type;
      record.runId = event.data?.runId;
      record.status = status;
    } catch (err) {
      record.error = String(err?.message ?? err);
      record.status = 400;
    }
    deliveries.push(record);
    res.statusCode = record.status;
    res.end();
  });
});

server.listen(port, "127.0.0.1", () => {
  console.log(`listening ${server.address().port}`);
});
