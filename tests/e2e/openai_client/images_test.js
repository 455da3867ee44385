#!/usr/bin/env node
// ditserve's OpenAI-style images HTTP API through the official `openai` npm client (pinned by
// package-lock.json), against a running ditserve-frontend (tests/e2e/http_api_e2e.sh starts it
// with --http-listen 127.0.0.1:0, a bearer token and 2 CPU workers on the flux1-tiny fixture):
//   - client.models.list() names the served model (the model name of gRPC's ModelInfo);
//   - client.images.generate({model, prompt, size: "64x64", response_format: "b64_json", n: 2,
//     seed}) returns two PNGs of 64 x 64 with the seeds seed and seed + 1;
//   - a bad request raises the client's BadRequestError (status 400, `param` naming the field),
//     and a wrong key raises AuthenticationError (401);
//   - OpenAI's fields (http_api_e2e.sh starts the frontend with --quality-steps low=2 and an image
//     store): quality "low" answers quality "low" (the script checks the ranks ran 2 steps);
//     output_format "jpeg" with output_compression gives a JPEG (signature, SOF size) of the size
//     asked for, "webp" a WebP; response_format "url" gives absolute URLs that fetch the PNG with
//     the token (401 without); background "transparent" raises BadRequestError (param background);
//     style, moderation and user are accepted;
//   - client.images.edit({image: [file1, file2], prompt, ...}) with files made by the package's
//     toFile (POST /v1/images/edits, multipart/form-data): a mask raises BadRequestError (param
//     mask); more images than the model takes (GET /v1/models' image_inputs.max_images; at least
//     two) raise BadRequestError (param image, naming images); when it takes some, one edit
//     succeeds (flux1-tiny: image-to-image with strength).
// With MODE "edits" (http_api_e2e.sh edits, flux2-tiny) only the edit success path runs: two
// reference images give one PNG of the first image's size, and n = 2 with a size two PNGs.
// With MODE "qwen_edits" (http_api_e2e.sh qwen_edits: the tiny Qwen-Image-Edit-2509 folder of
// tests/support/qwen_edit_tiny_folder.h) only the Qwen edit path runs: models.list() says
// image_inputs use "qwen_edit", min_images 1, max_images 3; two images with negative_prompt " " and
// true_cfg_scale 4 and size "128x96" give one 128x96 PNG with the seed asked for; without a size
// the PNG is calculate_dimensions(1024 * 1024, w / h) of the LAST image (computed here with
// Python's round, half to even: [blue 64x64, red 96x64] -> 1248x832, [red, blue] -> 1024x1024);
// n = 2 gives two PNGs with seeds s and s + 1; four images, or images.generate without any,
// raise BadRequestError (param image).
// With MODE "parity" (http_api_e2e.sh edits_parity: the folder of one call of
// tests/fixtures/image-inputs, made by the real diffusers) client.images.edit sends that call's
// committed input files with its seed, steps, guidance and max_sequence_length, and the PNG it gets
// back is diffusers' image as diffusers' own PIL output would be ((x * 255).round()): every byte
// within 1 of it (the float images agree to ~5e-7, so a byte differs only where diffusers' value
// sits at a rounding boundary).
// With MODE "qwen_parity" (http_api_e2e.sh qwen_edits_parity: the folder of one call of
// tests/fixtures/qwen-edit, made by the real diffusers, make_qwen_edit_fixtures.py) the call of
// DIR/qwen_edit_calls.json's "calls" array named CALL goes through client.images.edit as
// qwen_edit_parity_e2e_test's CLI flags carry it: DIR/inputs/<images> in order, args.prompt,
// args.negative_prompt (when a string), args.true_cfg_scale, seed, args.num_inference_steps,
// size "<args.width>x<args.height>" (the frontend floors it, as diffusers does), and
// args.max_sequence_length when given; models.list() must say image_inputs use "qwen_edit" with
// max_images 3 (QwenImageEditPlusPipeline) or 1 (QwenImageEditPipeline), and the PNG must be
// DIR/qwen_edit_reference.safetensors' <CALL>.image as (x * 255).round(), every byte within 1. A
// call whose results[CALL].position_ids_kind is not "mrope3d" is skipped (said), as in the CLI test.
// Usage: node images_test.js BASE_URL TOKEN_FILE EXPECTED_MODEL [all|edits|qwen_edits]
//        node images_test.js BASE_URL TOKEN_FILE EXPECTED_MODEL parity|qwen_parity DIR CALL
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
const { OpenAI, BadRequestError, AuthenticationError, toFile } = openai;
const zlib = require("zlib");

const [baseURL, tokenFile, expectedModel, mode = "all", fixturesDir, callName] =
  process.argv.slice(2);
if (!baseURL || !tokenFile || !expectedModel || !["all", "edits", "qwen_edits", "parity", "qwen_parity"].includes(mode) ||
    ((mode === "parity" || mode === "qwen_parity") && (!fixturesDir || !callName))) {
  console.error("usage: node images_test.js BASE_URL TOKEN_FILE EXPECTED_MODEL [all|edits|qwen_edits]\n" +
                "       node images_test.js BASE_URL TOKEN_FILE EXPECTED_MODEL parity|qwen_parity DIR CALL");
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

// Width and height from a JPEG's SOF segment (baseline or progressive), or null when the bytes are
// not a JPEG.
function jpegSize(buf) {
  if (buf.length < 4 || buf[0] !== 0xff || buf[1] !== 0xd8 || buf[2] !== 0xff) return null;
  let at = 2;
  while (at + 4 <= buf.length) {
    if (buf[at] !== 0xff) return null;
    const marker = buf[at + 1];
    const length = buf.readUInt16BE(at + 2);
    if (marker >= 0xc0 && marker <= 0xc3) {
      return { width: buf.readUInt16BE(at + 7), height: buf.readUInt16BE(at + 5) };
    }
    at += 2 + length;
  }
  return null;
}

// A solid RGB PNG of width x height (zlib and a CRC-32 table: no imaging package).
const crcTable = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
function solidPng(width, height, [r, g, b]) {
  const chunk = (kind, data) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const body = Buffer.concat([Buffer.from(kind, "ascii"), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(body));
    return Buffer.concat([len, body, crc]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);  // 8-bit RGB
  const row = Buffer.concat([Buffer.from([0]), Buffer.from(Array(width).fill([r, g, b]).flat())]);
  const pixels = Buffer.concat(Array(height).fill(row));
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
                        chunk("IHDR", ihdr), chunk("IDAT", zlib.deflateSync(pixels)),
                        chunk("IEND", Buffer.alloc(0))]);
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

// POST /v1/images/edits through client.images.edit. `inputs`: the served model's image_inputs
// (GET /v1/models); in "all" mode the errors, and one success when the model takes images; in
// "edits" mode (a model that takes two or more) the reference-image success path.
async function edits(client, model, inputs) {
  const maxImages = (inputs && inputs.max_images) || 0;
  const red = await toFile(solidPng(96, 64, [200, 30, 30]), "red.png", { type: "image/png" });
  const blue = await toFile(solidPng(64, 64, [30, 30, 200]), "blue.png", { type: "image/png" });
  if (mode === "edits") {
    const t0 = Date.now();
    const res = await client.images.edit({
      model, image: [red, blue], prompt: "make the red square blue", response_format: "b64_json",
      seed: 9, num_inference_steps: 3,
    });
    console.log(`images.edit(2 images) took ${((Date.now() - t0) / 1000).toFixed(2)} s`);
    const png = Buffer.from((res.data && res.data[0] && res.data[0].b64_json) || "", "base64");
    check("images.edit({image: [file1, file2]}) returns one PNG of the first image's size (96x64)",
          res.data.length === 1 && JSON.stringify(pngSize(png)) === '{"width":96,"height":64}',
          JSON.stringify(pngSize(png)));
    check("  ... with the seed asked for", res.data[0].seed === 9, `${res.data[0].seed}`);
    const two = await client.images.edit({
      model, image: [blue, red], prompt: "make the red square blue", size: "64x64", n: 2,
      response_format: "b64_json", seed: 9, num_inference_steps: 3,
    });
    const sizes = (two.data || []).map((d) => JSON.stringify(pngSize(Buffer.from(d.b64_json, "base64"))));
    check("images.edit(n: 2, size: 64x64) returns two 64x64 PNGs with seeds 9 and 10",
          sizes.length === 2 && sizes.every((z) => z === '{"width":64,"height":64}') &&
          two.data[0].seed === 9 && two.data[1].seed === 10, JSON.stringify(sizes));
    return;
  }
  const mask = await errorOf(() => client.images.edit({ model, image: red, mask: blue, prompt: "x" }));
  check("images.edit with a mask raises BadRequestError (param mask)",
        mask instanceof BadRequestError && mask.param === "mask" &&
        /inpainting is not supported/.test(mask.message), String(mask));
  // One more image than the model takes (none: any image) is refused naming images.
  const tooMany = Array(Math.max(2, maxImages + 1)).fill(blue);
  const refused = await errorOf(() => client.images.edit({
    model, image: tooMany, prompt: "make it red", size: "64x64", response_format: "b64_json" }));
  check(`images.edit with ${tooMany.length} image(s) to a model that takes ${maxImages} raises ` +
        "BadRequestError (param image)", refused instanceof BadRequestError &&
        refused.param === "image" && /images/.test(refused.message), String(refused));
  if (maxImages > 0) {
    // The model takes images (FLUX.1 image-to-image once its pipeline lands): one edit succeeds.
    const extra = inputs.use === "image_to_image" ? { strength: 0.7 } : {};
    const res = await client.images.edit({
      model, image: [blue], prompt: "make it red", size: "64x64", response_format: "b64_json",
      seed: 3, num_inference_steps: 3, ...extra,
    });
    const png = Buffer.from((res.data && res.data[0] && res.data[0].b64_json) || "", "base64");
    check("images.edit with one image returns a 64x64 PNG",
          JSON.stringify(pngSize(png)) === '{"width":64,"height":64}', JSON.stringify(pngSize(png)));
  }
}

// Python's round(): to the nearest integer, ties to the even one.
function pyRound(x) {
  const f = Math.floor(x);
  const d = x - f;
  if (d !== 0.5) return d < 0.5 ? f : f + 1;
  return f % 2 === 0 ? f : f + 1;
}

// QwenImageEditPlusPipeline's calculate_dimensions(target_area, width / height) (doubles, as
// Python's floats): {width, height}.
function calculateDimensions(targetArea, width, height) {
  const ratio = width / height;
  const w = Math.sqrt(targetArea * ratio);
  const h = w / ratio;
  return { width: pyRound(w / 32) * 32, height: pyRound(h / 32) * 32 };
}

// "qwen_edits" mode: Qwen-Image-Edit-2509 (QwenImageEditPlusPipeline) through client.images.edit.
// Each input image goes to the vision-language text encoder and to the VAE; without a size the
// output follows the LAST image.
async function qwenEdits(client, model, inputs) {
  check("models.list() says image_inputs use qwen_edit, min_images 1, max_images 3",
        inputs && inputs.use === "qwen_edit" && inputs.min_images === 1 && inputs.max_images === 3,
        JSON.stringify(inputs));
  const red = await toFile(solidPng(96, 64, [200, 30, 30]), "red.png", { type: "image/png" });
  const blue = await toFile(solidPng(64, 64, [30, 30, 200]), "blue.png", { type: "image/png" });
  const common = {
    model, prompt: "make the red square blue", response_format: "b64_json",
    // ditserve's extras (true CFG with an empty-ish negative prompt, as diffusers' examples).
    negative_prompt: " ", true_cfg_scale: 4, num_inference_steps: 2,
  };
  const sizesOf = (res) => (res.data || []).map((d) => pngSize(Buffer.from(d.b64_json || "", "base64")));
  const same = (size, want) => size && size.width === want.width && size.height === want.height;

  let t0 = Date.now();
  const sized = await client.images.edit({ ...common, image: [red, blue], size: "128x96", seed: 21 });
  console.log(`images.edit(2 images, 128x96) took ${((Date.now() - t0) / 1000).toFixed(2)} s`);
  const sizedSizes = sizesOf(sized);
  check("images.edit([red 96x64, blue 64x64], size 128x96) returns one 128x96 PNG",
        sizedSizes.length === 1 && same(sizedSizes[0], { width: 128, height: 96 }),
        JSON.stringify(sizedSizes));
  check("  ... with the seed asked for", sized.data && sized.data[0].seed === 21,
        `${sized.data && sized.data[0].seed}`);

  // No size: calculate_dimensions(1024 * 1024, w / h) of the last image.
  for (const [images, last, what] of [[[blue, red], [96, 64], "[blue 64x64, red 96x64]"],
                                      [[red, blue], [64, 64], "[red 96x64, blue 64x64]"]]) {
    const want = calculateDimensions(1024 * 1024, last[0], last[1]);
    t0 = Date.now();
    const res = await client.images.edit({ ...common, image: images, seed: 22 });
    console.log(`images.edit(${what}, no size) took ${((Date.now() - t0) / 1000).toFixed(2)} s`);
    const sizes = sizesOf(res);
    check(`images.edit(${what}) without a size returns one ${want.width}x${want.height} PNG ` +
          `(the last image's calculate_dimensions)`, sizes.length === 1 && same(sizes[0], want),
          JSON.stringify(sizes));
  }

  const two = await client.images.edit({ ...common, image: [blue, red], size: "128x96", n: 2, seed: 23 });
  const twoSizes = sizesOf(two);
  check("images.edit(n: 2, size 128x96) returns two 128x96 PNGs with seeds 23 and 24",
        twoSizes.length === 2 && twoSizes.every((z) => same(z, { width: 128, height: 96 })) &&
        two.data[0].seed === 23 && two.data[1].seed === 24,
        JSON.stringify({ sizes: twoSizes, seeds: (two.data || []).map((d) => d.seed) }));
  check("  ... two different images",
        twoSizes.length === 2 && two.data[0].b64_json !== two.data[1].b64_json);

  const four = await errorOf(() => client.images.edit({
    ...common, image: [red, blue, red, blue], size: "128x96", seed: 24 }));
  check("images.edit with 4 images raises BadRequestError (param image, at most 3)",
        four instanceof BadRequestError && four.param === "image" && /at most 3/.test(four.message),
        String(four));
  const none = await errorOf(() => client.images.generate({
    model, prompt: "a cat", size: "128x96", num_inference_steps: 2, response_format: "b64_json" }));
  check("images.generate (no image) raises BadRequestError (param image, needs at least 1)",
        none instanceof BadRequestError && none.param === "image" &&
        /needs at least 1 input image/.test(none.message), String(none));
}

// OpenAI's fields beyond ditserve's first set: quality, output_format, response_format "url",
// background, and those accepted without effect.
async function openaiFields(client, model) {
  const low = await client.images.generate({
    model, prompt: "a cat holding a sign", size: "48x48", quality: "low", response_format: "b64_json",
    seed: 5,
  });
  const lowPng = Buffer.from((low.data && low.data[0] && low.data[0].b64_json) || "", "base64");
  check("quality: low is answered with quality low and a 48x48 PNG",
        low.quality === "low" && low.output_format === "png" &&
        JSON.stringify(pngSize(lowPng)) === '{"width":48,"height":48}',
        JSON.stringify({ quality: low.quality, format: low.output_format, size: pngSize(lowPng) }));

  const jpeg = await client.images.generate({
    model, prompt: "a cat holding a sign", size: "64x32", output_format: "jpeg",
    output_compression: 80, response_format: "b64_json", seed: 5, num_inference_steps: 3,
  });
  const jpegBytes = Buffer.from((jpeg.data && jpeg.data[0] && jpeg.data[0].b64_json) || "", "base64");
  check("output_format: jpeg returns a JPEG (FF D8 FF ... FF D9) of 64x32 by its SOF",
        jpeg.output_format === "jpeg" && jpegBytes.length > 4 &&
        jpegBytes[jpegBytes.length - 2] === 0xff && jpegBytes[jpegBytes.length - 1] === 0xd9 &&
        JSON.stringify(jpegSize(jpegBytes)) === '{"width":64,"height":32}',
        JSON.stringify({ format: jpeg.output_format, size: jpegSize(jpegBytes), bytes: jpegBytes.length }));
  check("  ... and the response says size 64x32", jpeg.size === "64x32", String(jpeg.size));
  const webp = await client.images.generate({
    model, prompt: "a cat holding a sign", size: "32x32", output_format: "webp",
    response_format: "b64_json", seed: 5, num_inference_steps: 3,
  });
  const webpBytes = Buffer.from((webp.data && webp.data[0] && webp.data[0].b64_json) || "", "base64");
  check("output_format: webp returns a WebP (RIFF....WEBP)",
        webp.output_format === "webp" && webpBytes.toString("ascii", 0, 4) === "RIFF" &&
        webpBytes.toString("ascii", 8, 12) === "WEBP", webpBytes.subarray(0, 12).toString("hex"));

  const byUrl = await client.images.generate({
    model, prompt: "a cat holding a sign", size: "64x64", response_format: "url", n: 2, seed: 11,
    num_inference_steps: 4, style: "vivid", moderation: "low", user: "e2e-user",
    background: "opaque",
  });
  const urls = (byUrl.data || []).map((d) => d.url);
  check("response_format: url returns two absolute URLs and no b64_json",
        urls.length === 2 && urls.every((u) => /^http:\/\/.+\/v1\/images\/files\/img_[0-9a-f]{32}\.png$/.test(u)) &&
        byUrl.data.every((d) => d.b64_json === undefined), JSON.stringify(byUrl.data));
  for (const [i, u] of urls.entries()) {
    const got = await fetch(u, { headers: { Authorization: `Bearer ${token}` } });
    const png = Buffer.from(await got.arrayBuffer());
    check(`  ... URL ${i} fetches a 64x64 PNG with the token`,
          got.status === 200 && got.headers.get("content-type") === "image/png" &&
          JSON.stringify(pngSize(png)) === '{"width":64,"height":64}',
          `${got.status} ${got.headers.get("content-type")} ${JSON.stringify(pngSize(png))}`);
  }
  if (urls.length) {
    const anonymous = await fetch(urls[0]);
    check("  ... and is 401 without it", anonymous.status === 401, `${anonymous.status}`);
    const gone = await fetch(urls[0].replace(/img_[0-9a-f]{32}/, "img_" + "0".repeat(32)),
                             { headers: { Authorization: `Bearer ${token}` } });
    check("  ... an unknown image id is 404", gone.status === 404, `${gone.status}`);
  }

  const transparent = await errorOf(() => client.images.generate({
    model, prompt: "x", size: "64x64", background: "transparent" }));
  check("background: transparent raises BadRequestError (param background)",
        transparent instanceof BadRequestError && transparent.param === "background" &&
        /no alpha/.test(transparent.message), String(transparent));
  const quality = await errorOf(() => client.images.generate({ model, prompt: "x", quality: "ultra" }));
  check("an unknown quality raises BadRequestError (param quality)",
        quality instanceof BadRequestError && quality.param === "quality", String(quality));
}

// stream: true with partial_images through the SDK's stream iterator: the partial_image events
// (the previews) in order, then one completed event with the image.
async function streaming(client, model) {
  const stream = await client.images.generate({
    model, prompt: "a cat holding a sign", size: "64x64", stream: true, partial_images: 2,
    seed: 5, num_inference_steps: 6,
  });
  const types = [];
  let completed = null;
  const partials = [];
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === "image_generation.partial_image") partials.push(event);
    if (event.type === "image_generation.completed") completed = event;
  }
  check("stream: true, partial_images: 2 yields two partial_image events then completed",
        JSON.stringify(types) === JSON.stringify(["image_generation.partial_image",
          "image_generation.partial_image", "image_generation.completed"]), JSON.stringify(types));
  check("  ... the partial images are indexed 0 and 1 and decode to 64x64 PNGs",
        partials.length === 2 && partials.every((p, i) => p.partial_image_index === i &&
          JSON.stringify(pngSize(Buffer.from(p.b64_json, "base64"))) ===
          JSON.stringify({ width: 64, height: 64 })),
        JSON.stringify(partials.map((p) => p.partial_image_index)));
  const image = completed ? Buffer.from(completed.b64_json, "base64") : Buffer.alloc(0);
  const size = pngSize(image);
  check("  ... the completed event carries the 64x64 PNG, its size and format",
        size && size.width === 64 && completed.size === "64x64" &&
          completed.output_format === "png", JSON.stringify(size));
  const same = await client.images.generate({
    model, prompt: "a cat holding a sign", size: "64x64", seed: 5, num_inference_steps: 6,
  });
  check("  ... and equals the image of the same request without stream",
        image.equals(Buffer.from(same.data[0].b64_json, "base64")));
  const refused = await errorOf(() => client.images.generate({
    model, prompt: "x", size: "64x64", stream: true, n: 2 }));
  check("stream with n: 2 raises BadRequestError (param n)",
        refused instanceof BadRequestError && refused.param === "n", String(refused));
}

// The RGB pixels of an 8-bit RGB, non-interlaced PNG (the workers' encoding): {width, height,
// data} with data row-major RGB bytes; IDAT inflated and each row's filter undone.
function decodePng(buf) {
  const size = pngSize(buf);
  if (!size) throw new Error("not a PNG");
  const idat = [];
  let at = 8;
  let colorType = -1, depth = -1, interlace = -1;
  while (at + 8 <= buf.length) {
    const len = buf.readUInt32BE(at);
    const kind = buf.toString("ascii", at + 4, at + 8);
    const body = buf.subarray(at + 8, at + 8 + len);
    if (kind === "IHDR") [depth, colorType, interlace] = [body[8], body[9], body[12]];
    if (kind === "IDAT") idat.push(body);
    at += 12 + len;
  }
  if (depth !== 8 || colorType !== 2 || interlace !== 0) {
    throw new Error(`PNG is not 8-bit RGB non-interlaced (depth ${depth}, color ${colorType})`);
  }
  const raw = zlib.inflateSync(Buffer.concat(idat));
  const stride = size.width * 3;
  const out = Buffer.alloc(stride * size.height);
  for (let y = 0; y < size.height; y++) {
    const filter = raw[y * (stride + 1)];
    const src = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let x = 0; x < stride; x++) {
      const a = x >= 3 ? out[y * stride + x - 3] : 0;
      const b = y > 0 ? out[(y - 1) * stride + x] : 0;
      const c = x >= 3 && y > 0 ? out[(y - 1) * stride + x - 3] : 0;
      let p;
      switch (filter) {
        case 0: p = 0; break;
        case 1: p = a; break;
        case 2: p = b; break;
        case 3: p = (a + b) >> 1; break;
        case 4: {
          const pa = Math.abs(b - c), pb = Math.abs(a - c), pc = Math.abs(a + b - 2 * c);
          p = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default: throw new Error(`PNG row ${y}: unknown filter ${filter}`);
      }
      out[y * stride + x] = (src[x] + p) & 0xff;
    }
  }
  return { width: size.width, height: size.height, data: out };
}

// One float32 tensor of a safetensors file: {shape, values (Float32Array)}.
function readSafetensor(file, name) {
  const buf = fs.readFileSync(file);
  const headerLen = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.toString("utf8", 8, 8 + headerLen));
  const t = header[name];
  if (!t || t.dtype !== "F32") throw new Error(`${file} has no float32 tensor ${name}`);
  const [begin, end] = t.data_offsets;
  const bytes = buf.subarray(8 + headerLen + begin, 8 + headerLen + end);
  const values = new Float32Array(bytes.length / 4);
  for (let i = 0; i < values.length; i++) values[i] = bytes.readFloatLE(i * 4);
  return { shape: t.shape, values };
}

// "qwen_parity" mode: one qwen-edit fixture call through client.images.edit against diffusers'.
async function qwenParity(client, model, inputs) {
  const doc = JSON.parse(fs.readFileSync(path.join(fixturesDir, "qwen_edit_calls.json"), "utf8"));
  const call = (doc.calls || []).find((c) => c.name === callName);
  if (!call) throw new Error(`qwen_edit_calls.json has no call ${callName}`);
  const kind = ((doc.results || {})[callName] || {}).position_ids_kind;
  if (kind !== "mrope3d") {
    console.log(`skip ${callName}: diffusers' text model did not run with the 3-D M-RoPE positions ` +
                `(position_ids_kind ${kind}), which ours always uses`);
    return;
  }
  const v1 = call.pipeline === "QwenImageEditPipeline";
  check(`models.list() says ${model} takes qwen_edit images, at most ${v1 ? 1 : 3}`,
        inputs && inputs.use === "qwen_edit" && inputs.max_images === (v1 ? 1 : 3),
        JSON.stringify(inputs));
  const args = call.args;
  const request = {
    model, image: await callImages(call), prompt: args.prompt,
    response_format: "b64_json", seed: call.seed, num_inference_steps: args.num_inference_steps,
  };
  if (typeof args.negative_prompt === "string") {
    request.negative_prompt = args.negative_prompt;
    request.true_cfg_scale = args.true_cfg_scale !== undefined ? args.true_cfg_scale : 4.0;
  } else if (args.true_cfg_scale !== undefined) {
    request.true_cfg_scale = args.true_cfg_scale;
  }
  if (args.height) request.size = `${args.width}x${args.height}`;
  if (args.max_sequence_length !== undefined) request.max_sequence_length = args.max_sequence_length;
  await editMatchesReference(client, request, "qwen_edit_reference.safetensors");
}

// "parity" mode: one fixture call through client.images.edit against diffusers' image.
async function parity(client, model) {
  const calls = JSON.parse(fs.readFileSync(path.join(fixturesDir, "image_calls.json"), "utf8"));
  const call = calls.calls[callName];
  if (!call) throw new Error(`image_calls.json has no call ${callName}`);
  const args = call.args;
  const request = {
    model, image: await callImages(call), prompt: args.prompt,
    response_format: "b64_json", seed: call.seed, num_inference_steps: args.num_inference_steps,
    guidance_scale: args.guidance_scale, max_sequence_length: args.max_sequence_length,
  };
  if (args.height) request.size = `${args.width}x${args.height}`;
  if (args.strength !== undefined) request.strength = args.strength;
  await editMatchesReference(client, request, "image_reference.safetensors");
}

// A fixture call's input images (fixturesDir/inputs/), as the request's `image` field: one file,
// or an array for several.
async function callImages(call) {
  const images = [];
  for (const name of call.images) {
    images.push(await toFile(fs.readFileSync(path.join(fixturesDir, "inputs", name)), name));
  }
  return images.length === 1 ? images[0] : images;
}

// client.images.edit(request): its PNG against diffusers' `${callName}.image` in the fixtures'
// `referenceFile`.
async function editMatchesReference(client, request, referenceFile) {
  const res = await client.images.edit(request);
  const png = decodePng(Buffer.from(res.data[0].b64_json, "base64"));
  const ref = readSafetensor(path.join(fixturesDir, referenceFile), `${callName}.image`);
  compareToReference(png, ref);
}

// The PNG against a reference (H, W, 3) float32 image in [0, 1]: diffusers' (x * 255).round(),
// every byte within 1, almost all equal.
function compareToReference(png, ref) {
  const [h, w] = ref.shape;
  check(`images.edit(${callName}) returns diffusers' size (${w}x${h})`,
        png.width === w && png.height === h, `${png.width}x${png.height}`);
  if (png.width !== w || png.height !== h) return;
  let worst = 0, differing = 0;
  for (let i = 0; i < ref.values.length; i++) {
    const expected = Math.min(255, Math.max(0, Math.round(ref.values[i] * 255)));
    const d = Math.abs(png.data[i] - expected);
    worst = Math.max(worst, d);
    if (d) differing++;
  }
  console.log(`${callName} through images.edit: ${differing} of ${ref.values.length} bytes ` +
              `differ from diffusers' (x * 255).round(), at most by ${worst}`);
  check(`  ... every byte within 1 of diffusers' image`, worst <= 1,
        `${differing} bytes differ, at most by ${worst}`);
  check(`  ... and almost all equal`, differing <= ref.values.length / 100,
        `${differing} of ${ref.values.length}`);
}

async function main() {
  // No retries: every status must reach the test as the server sent it.
  const client = new OpenAI({ apiKey: token, baseURL, maxRetries: 0, timeout: 600 * 1000 });

  const models = [];
  for await (const m of client.models.list()) models.push(m);
  check("models.list() names the served model", models.length === 1 && models[0].id === expectedModel,
        JSON.stringify(models));
  const model = models.length ? models[0].id : expectedModel;
  const inputs = models.length ? models[0].image_inputs : null;
  console.log(`${model} takes ${inputs ? inputs.max_images : "?"} input image(s)`);
  if (mode === "parity") {
    await parity(client, model);
    return;
  }
  if (mode === "qwen_parity") {
    await qwenParity(client, model, inputs);
    return;
  }
  if (mode === "edits") {
    await edits(client, model, inputs);
    return;
  }
  if (mode === "qwen_edits") {
    await qwenEdits(client, model, inputs);
    return;
  }

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

  // The step cache (ditserve's cache_threshold extra): a cached request returns its image; a
  // threshold over the model's bound is a 400 naming the field.
  const cached = await client.images.generate({ model, prompt: "a cat holding a sign",
                                                size: "64x64", response_format: "b64_json",
                                                seed: 11, num_inference_steps: 4,
                                                cache_threshold: 1 });
  const cachedSize = pngSize(Buffer.from(cached.data[0].b64_json || "", "base64"));
  check("cache_threshold 1 returns a 64x64 PNG", cachedSize && cachedSize.width === 64,
        JSON.stringify(cachedSize));
  const overBound = await errorOf(() => client.images.generate({ model, prompt: "x",
                                                                 size: "64x64",
                                                                 cache_threshold: 1.5 }));
  check("cache_threshold 1.5 raises BadRequestError naming cache_threshold",
        overBound instanceof BadRequestError && overBound.param === "cache_threshold",
        overBound && JSON.stringify(overBound.error));

  await openaiFields(client, model);
  await streaming(client, model);

  const tooMany = await errorOf(() => client.images.generate({ model, prompt: "x", size: "64x64",
                                                               n: 11 }));
  check("n out of range raises BadRequestError", tooMany instanceof BadRequestError &&
        tooMany.param === "n", String(tooMany));

  const wrongKey = new OpenAI({ apiKey: "not-the-token", baseURL, maxRetries: 0 });
  const denied = await errorOf(() => wrongKey.images.generate({ model, prompt: "x", size: "64x64" }));
  check("a wrong key raises AuthenticationError", denied instanceof AuthenticationError &&
        denied.status === 401, String(denied));

  await edits(client, model, inputs);
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
