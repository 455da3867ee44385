#!/usr/bin/env node
// ditserve's OpenAI-style images HTTP API through the official `openai` npm client (pinned by
// package-lock.json), against a running ditserve-frontend (tests/e2e/http_api_e2e.sh starts it
// with --http-listen 127.0.0.1:0, a bearer token and 2 CPU workers on the flux1-tiny fixture):
//   - client.models.list() names the served model (the model name of gRPC's ModelInfo);
//   - client.images.generate({model, prompt, size: "64x64", response_format: "b64_json", n: 2,
//     seed}) returns two PNGs of 64 x 64 with the seeds seed and seed + 1;
//   - a bad request raises the client's BadRequestError (status 400, `param` naming the field),
//     "url" responses are refused the same way, and a wrong key raises AuthenticationError (401).
// Usage: node images_test.js BASE_URL TOKEN_FILE EXPECTED_MODEL
// Exit codes: 0 passed, 1 failed, 77 the npm packages are not installed (ctest SKIP_RETURN_CODE;
// `npm ci` in this folder, as scripts/setup.sh does, installs them).
"use strict";

const fs = require("fs");
const path = require("path");

let openai;
try {
  openai = require("openai");
} catch (e) {
  console.log(`SKIP: ${path.relative(process.cwd(), __dirname)}/node_modules has no openai ` +
              `package (run npm ci there; scripts/setup.sh does): ${e.message.split("\n")[0]}`);
  process.exit(77);
}
const { OpenAI, BadRequestError, AuthenticationError } = openai;

const [baseURL, tokenFile, expectedModel] = process.argv.slice(2);
if (!baseURL || !tokenFile || !expectedModel) {
  console.error("usage: node images_test.js BASE_URL TOKEN_FILE EXPECTED_MODEL");
  process.exit(2);
}
const token = fs.readFileSync(tokenFile, "utf8").trim();

let passed = 0;
let failed = 0;
function check(what, ok, detail = "") {
  if (ok) {
    passed++;
    console.log(`ok   ${what}`);
  } else {
    failed++;
    console.log(`FAIL ${what}${detail ? ": " + detail : ""}`);
  }
}

// Width and height from a PNG's IHDR chunk, or null when the bytes are not a PNG.
function pngSize(buf) {
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  if (buf.length < 24 || !buf.subarray(0, 8).equals(signature)) return null;
  if (buf.toString("ascii", 12, 16) !== "IHDR") return null;
  return { width: buf.readUInt32BE(16), height: buf.readUInt32BE(20) };
}

// The error a call throws, or null when it succeeds.
async function errorOf(call) {
  try {
    await call();
    return null;
  } catch (e) {
    return e;
  }
}

async function main() {
  // No retries: every status must reach the test as the server sent it.
  const client = new OpenAI({ apiKey: token, baseURL, maxRetries: 0, timeout: 600 * 1000 });

  const models = [];
  for await (const m of client.models.list()) models.push(m);
  check("models.list() names the served model", models.length === 1 && models[0].id === expectedModel,
        JSON.stringify(models));
  const model = models.length ? models[0].id : expectedModel;

  const t0 = Date.now();
  const res = await client.images.generate({
    model,
    prompt: "a cat holding a sign",
    size: "64x64",
    response_format: "b64_json",
    n: 2,
    // ditserve's extras ride along as extra body fields.
    seed: 11,
    num_inference_steps: 4,
  });
  console.log(`images.generate(n=2) took ${((Date.now() - t0) / 1000).toFixed(2)} s`);
  check("the response has `created`", Number.isInteger(res.created), JSON.stringify(res.created));
  check("two images came back", Array.isArray(res.data) && res.data.length === 2,
        `${res.data && res.data.length}`);
  const pngs = (res.data || []).map((d) => Buffer.from(d.b64_json || "", "base64"));
  pngs.forEach((png, i) => {
    const size = pngSize(png);
    check(`image ${i} decodes to a 64x64 PNG`, size && size.width === 64 && size.height === 64,
          JSON.stringify(size));
    check(`image ${i} has seed ${11 + i}`, res.data[i].seed === 11 + i, `${res.data[i].seed}`);
  });
  check("the two seeds give two different images", pngs.length === 2 && !pngs[0].equals(pngs[1]));

  const bad = await errorOf(() => client.images.generate({ model, prompt: "x", size: "63x64",
                                                           response_format: "b64_json" }));
  check("a bad size raises BadRequestError", bad instanceof BadRequestError && bad.status === 400,
        String(bad));
  check("  ... naming the field (param size)", bad && bad.param === "size",
        bad && JSON.stringify(bad.error));
  check("  ... and the limit", bad && /multiple of 16/.test(bad.message), bad && bad.message);

  const url = await errorOf(() => client.images.generate({ model, prompt: "x", size: "64x64",
                                                           response_format: "url" }));
  check("response_format url raises BadRequestError", url instanceof BadRequestError &&
        url.param === "response_format" && /keeps no files/.test(url.message), String(url));

  const tooMany = await errorOf(() => client.images.generate({ model, prompt: "x", size: "64x64",
                                                               n: 11 }));
  check("n out of range raises BadRequestError", tooMany instanceof BadRequestError &&
        tooMany.param === "n", String(tooMany));

  const wrongKey = new OpenAI({ apiKey: "not-the-token", baseURL, maxRetries: 0 });
  const denied = await errorOf(() => wrongKey.images.generate({ model, prompt: "x", size: "64x64" }));
  check("a wrong key raises AuthenticationError", denied instanceof AuthenticationError &&
        denied.status === 401, String(denied));
}

main()
  .catch((e) => {
    failed++;
    console.log(`FAIL unexpected error: ${e && e.stack ? e.stack : e}`);
  })
  .finally(() => {
    console.log(`${passed} passed, ${failed} failed`);
    process.exit(failed === 0 && passed > 0 ? 0 : 1);
  });
