// A scripted AG-UI agent for agent/agui's tests, built on the official packages
// (@ag-ui/core's EventType and schemas, @ag-ui/encoder's SSE encoding), so what it
// sends is real AG-UI, and what it is sent is checked against core's RunAgentInput
// schema (an invalid input is answered 422 with the schema's complaint).
//
//   node server.mjs [port] [web/node_modules]   (or PORT and AGUI_NODE_MODULES)
//
// It prints "listening PORT" once it listens. POST / runs the agent, scripted by the
// last user message:
//   hello      text
//   tool       a tool call it runs itself (TOOL_CALL_RESULT), then text
//   approve    a tool call without result, then RUN_FINISHED; once the messages hold the
//              call's tool message, text saying whether it was approved
//   interrupt  as approve, with an AG-UI 1.0 interrupt outcome naming the call
//   slow       text at a slow pace until the client goes away (counted: GET /stats)
//   silent     the headers, then nothing until the client goes away
//   fail-once  500 on the session's first request, text on the next
//   garbage    200 with text/plain nonsense
//   steps      STEP_STARTED/STEP_FINISHED twice, then text
//   state      STATE_SNAPSHOT then STATE_DELTA, then text
//   reasoning  a reasoning message, then text
//   error      RUN_ERROR
//   truncated  text, then the end of the body without RUN_FINISHED
//   long       "w1 w2 ... w200", a word each 15 ms; when the messages end with an
//              assistant message that is the start of that answer (a partial answer a
//              client sends back after a crash), only the rest: what a model does with a
//              partial answer to continue
// GET /requests returns each POST's headers and body; GET /stats {aborts}.
import http from "node:http";
import path from "node:path";
import { createRequire } from "node:module";

const port = Number(process.argv[2] ?? process.env.PORT ?? 0);
const modules = process.argv[3] ?? process.env.AGUI_NODE_MODULES ?? "../../../web/node_modules";
const require = createRequire(path.join(path.resolve(modules), "..", "package.json"));
const { EventType } = require("@ag-ui/core");
const { EventSchema, RunAgentInputSchema } = require("@ag-ui/core/schemas");
const { EventEncoder } = require("@ag-ui/encoder");

const requests = [];
const stats = { aborts: 0 };
const failed = new Set(); // threads that had their fail-once failure

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function lastUser(messages) {
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i].role === "user") return String(messages[i].content);
  }
  return "";
}

async function run(input, req, res) {
  const encoder = new EventEncoder({ accept: req.headers.accept });
  const script = lastUser(input.messages);
  const ids = { threadId: input.threadId, runId: input.runId };
  let closed = false;
  res.on("close", () => {
    closed = true;
    if (!res.writableEnded) stats.aborts++;
  });
  const open = () => {
    res.writeHead(200, { "Content-Type": encoder.getContentType(), "Cache-Control": "no-cache" });
    res.flushHeaders();
  };
  const send = (type, fields = {}) => {
    const event = EventSchema.parse({ type, ...fields }); // real AG-UI, or the test fails
    res.write(encoder.encode(event));
  };
  const text = (id, ...deltas) => {
    send(EventType.TEXT_MESSAGE_START, { messageId: id, role: "assistant" });
    for (const delta of deltas.filter(Boolean)) send(EventType.TEXT_MESSAGE_CONTENT, { messageId: id, delta });
    send(EventType.TEXT_MESSAGE_END, { messageId: id });
  };
  const toolCall = (id, name, parent, ...args) => {
    send(EventType.TOOL_CALL_START, { toolCallId: id, toolCallName: name, parentMessageId: parent });
    for (const delta of args) send(EventType.TOOL_CALL_ARGS, { toolCallId: id, delta });
    send(EventType.TOOL_CALL_END, { toolCallId: id });
  };
  const finish = (fields = {}) => {
    send(EventType.RUN_FINISHED, { ...ids, ...fields });
    res.end();
  };

  switch (script) {
    case "fail-once":
      if (!failed.has(input.threadId)) {
        failed.add(input.threadId);
        res.writeHead(500, { "Content-Type": "application/json" });
        res.end(JSON.stringify({ error: "try again" }));
        return;
      }
      open();
      send(EventType.RUN_STARTED, ids);
      text("m1", "Second time lucky.");
      return finish();
    case "garbage":
      res.writeHead(200, { "Content-Type": "text/plain" });
      res.end("this is not an event stream\n");
      return;
    case "silent":
      open();
      return; // until the client goes away
    case "long": {
      const full = Array.from({ length: 200 }, (_, i) => `w${i + 1}`).join(" ");
      const last = input.messages.at(-1);
      let done = "";
      if (last?.role === "assistant" && typeof last.content === "string" && full.startsWith(last.content)) done = last.content;
      open();
      send(EventType.RUN_STARTED, ids);
      send(EventType.TEXT_MESSAGE_START, { messageId: "m1", role: "assistant" });
      const rest = full.slice(done.length);
      for (let i = 0; !closed && i < rest.length; ) {
        const next = rest.indexOf(" ", i + 1);
        const end = next === -1 ? rest.length : next;
        send(EventType.TEXT_MESSAGE_CONTENT, { messageId: "m1", delta: rest.slice(i, end) });
        i = end;
        await sleep(15);
      }
      if (closed) return;
      send(EventType.TEXT_MESSAGE_END, { messageId: "m1" });
      return finish();
    }
    case "slow":
      open();
      send(EventType.RUN_STARTED, ids);
      send(EventType.TEXT_MESSAGE_START, { messageId: "m1", role: "assistant" });
      for (let i = 0; !closed && i < 6000; i++) {
        send(EventType.TEXT_MESSAGE_CONTENT, { messageId: "m1", delta: `tick ${i} ` });
        await sleep(20);
      }
      return;
  }

  open();
  send(EventType.RUN_STARTED, ids);
  switch (script) {
    case "hello":
      text("m1", "Hello", ", world");
      break;
    case "tool":
      send(EventType.TEXT_MESSAGE_START, { messageId: "m1", role: "assistant" });
      send(EventType.TEXT_MESSAGE_CONTENT, { messageId: "m1", delta: "Let me look." });
      send(EventType.TEXT_MESSAGE_END, { messageId: "m1" });
      toolCall("call-weather", "get_weather", "m1", '{"city":', '"Paris"}');
      send(EventType.TOOL_CALL_RESULT, { messageId: "r1", toolCallId: "call-weather", content: "sunny, 21°C", role: "tool" });
      text("m2", "It is sunny in Paris.");
      break;
    case "approve":
    case "interrupt": {
      // An interrupt is resumed as Pydantic AI resumes one (AG-UI 1.0 interrupts): the
      // call comes back without a tool message, the resume entry carries the decision,
      // and the agent runs (or declines) the call, streaming its TOOL_CALL_RESULT. A
      // tool message for an interrupted call is refused, as Pydantic AI refuses it
      // ("already executed and its result cannot be overridden").
      const resumed = (input.resume ?? []).find((r) => r.interruptId === "int-1");
      const answer = input.messages.find((m) => m.role === "tool" && m.toolCallId === "call-delete");
      if (script === "interrupt" && resumed && answer) {
        send(EventType.RUN_ERROR, { message: "Tool call 'call-delete' was already executed and its result cannot be overridden." });
        return res.end();
      }
      if (script === "interrupt" && resumed) {
        const decision = resumed.payload ?? {};
        send(EventType.TOOL_CALL_RESULT, { messageId: "r-delete", toolCallId: "call-delete", role: "tool",
          content: decision.approved ? "deleted /tmp/x" : `declined: ${decision.reason}` });
        text("m2", (decision.approved ? "Deleted, as you approved." : `Not deleted: ${decision.reason}`) + ` [int-1:${resumed.status}]`);
        break;
      }
      if (answer) {
        const decision = JSON.parse(answer.content);
        const resume = (input.resume ?? []).map((r) => `${r.interruptId}:${r.status}`).join(",");
        text("m2", (decision.approved ? "Deleted, as you approved." : `Not deleted: ${decision.reason}`) + (resume ? ` [${resume}]` : ""));
        break;
      }
      text("m1", "I need your approval.");
      toolCall("call-delete", "delete_file", "m1", '{"path":"/tmp/x"}');
      if (script === "interrupt") {
        return finish({ outcome: { type: "interrupt", interrupts: [{ id: "int-1", reason: "tool_call", toolCallId: "call-delete" }] } });
      }
      break;
    }
    case "steps":
      for (const step of ["plan", "act"]) {
        send(EventType.STEP_STARTED, { stepName: step });
        send(EventType.STEP_FINISHED, { stepName: step });
      }
      text("m1", "Done in two steps.");
      break;
    case "state":
      send(EventType.STATE_SNAPSHOT, { snapshot: { counter: 1, items: ["a"], seen: input.state ?? null } });
      send(EventType.STATE_DELTA, {
        delta: [
          { op: "replace", path: "/counter", value: 2 },
          { op: "add", path: "/items/-", value: "b" },
          { op: "remove", path: "/seen" },
        ],
      });
      text("m1", "State set.");
      break;
    case "reasoning":
      send(EventType.REASONING_START, { messageId: "t1" });
      send(EventType.REASONING_MESSAGE_START, { messageId: "t1", role: "reasoning" });
      send(EventType.REASONING_MESSAGE_CONTENT, { messageId: "t1", delta: "Thinking it over." });
      send(EventType.REASONING_MESSAGE_END, { messageId: "t1" });
      send(EventType.REASONING_END, { messageId: "t1" });
      text("m1", "Thought about it.");
      break;
    case "error":
      send(EventType.RUN_ERROR, { message: "the model is overloaded", code: "overloaded" });
      res.end();
      return;
    case "truncated":
      send(EventType.TEXT_MESSAGE_START, { messageId: "m1", role: "assistant" });
      send(EventType.TEXT_MESSAGE_CONTENT, { messageId: "m1", delta: "Half an ans" });
      res.end();
      return;
    default:
      text("m1", `You said: ${script}`);
  }
  finish({ usage: [{ provider: "test", model: "scripted", inputTokens: 10, outputTokens: 5 }] });
}

const server = http.createServer((req, res) => {
  if (req.method === "GET" && req.url === "/requests") {
    res.writeHead(200, { "Content-Type": "application/json" });
    return res.end(JSON.stringify(requests));
  }
  if (req.method === "GET" && req.url === "/stats") {
    res.writeHead(200, { "Content-Type": "application/json" });
    return res.end(JSON.stringify(stats));
  }
  if (req.method !== "POST") {
    res.writeHead(404);
    return res.end();
  }
  let body = "";
  req.setEncoding("utf8");
  req.on("data", (chunk) => (body += chunk));
  req.on("end", () => {
    let input;
    try {
      input = JSON.parse(body);
    } catch {
      res.writeHead(400);
      return res.end("not JSON");
    }
    requests.push({ headers: req.headers, body: input });
    const check = RunAgentInputSchema.safeParse(input);
    if (!check.success) {
      res.writeHead(422, { "Content-Type": "application/json" });
      return res.end(JSON.stringify(check.error.issues));
    }
    run(input, req, res).catch((err) => {
      console.error(err);
      res.destroy(err);
    });
  });
});

server.listen(port, "127.0.0.1", () => {
  console.log(`listening ${server.address().port}`);
});
