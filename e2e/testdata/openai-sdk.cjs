// The gateway driven by OpenAI's official Node SDK (the openai npm
// package): TestGatewayOpenAISDK runs it under Debian's node with
// OPENAI_SDK (the package's directory), BASE_URL (the Berth server's /v1),
// API_KEY (a Berth token) and MODEL. It prints "all checks passed" or
// exits 1 with what failed.
const OpenAI = require(process.env.OPENAI_SDK);
const assert = require("node:assert/strict");

const model = process.env.MODEL;
const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: process.env.API_KEY, maxRetries: 0 });

async function main() {
  const models = [];
  for await (const m of client.models.list()) models.push(m);
  const entry = models.find((m) => m.id === model);
  assert.ok(entry, `models.list() lacks ${model}: ${JSON.stringify(models)}`);
  assert.equal(entry.phase, "ready");
  console.log("models:", models.map((m) => `${m.id} (${m.phase})`).join(", "));

  const chat = await client.chat.completions.create({
    model,
    messages: [{ role: "user", content: "Say hello." }],
    response_format: { type: "json_object" },
  });
  assert.equal(chat.choices[0].message.content, "Hello from the fake model server.");
  assert.ok(chat.usage.completion_tokens > 0, "no usage");
  console.log("chat:", chat.choices[0].message.content, JSON.stringify(chat.usage));

  const stream = await client.chat.completions.create({
    model,
    messages: [{ role: "user", content: "Say hello, streaming." }],
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = "";
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.choices.length > 0) text += chunk.choices[0].delta.content ?? "";
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, "Hello from the fake model server.");
  assert.ok(usage && usage.completion_tokens === 6, `stream usage ${JSON.stringify(usage)}`);
  console.log(`stream: ${chunks} chunks: ${text}`);

  const emb = await client.embeddings.create({ model, input: ["one", "two"] });
  assert.equal(emb.data.length, 2);
  assert.equal(emb.data[1].embedding.length, 4);
  assert.ok(Math.abs(emb.data[1].embedding[0] - 0.1) < 1e-6, `embedding ${emb.data[1].embedding}`);
  console.log("embeddings:", emb.data.length, "vectors of", emb.data[0].embedding.length);

  const bad = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: "not-a-berth-token", maxRetries: 0 });
  try {
    await bad.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }] });
    assert.fail("a bad key was accepted");
  } catch (err) {
    assert.ok(err instanceof OpenAI.AuthenticationError, `a bad key: ${err}`);
    assert.equal(err.status, 401);
    assert.equal(err.code, "invalid_api_key");
    console.log("bad key:", err.status, err.code);
  }

  try {
    await client.chat.completions.create({ model: "org/none", messages: [{ role: "user", content: "hi" }] });
    assert.fail("an unknown model answered");
  } catch (err) {
    assert.ok(err instanceof OpenAI.NotFoundError, `an unknown model: ${err}`);
    console.log("unknown model:", err.status, err.code);
  }
  console.log("all checks passed");
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
