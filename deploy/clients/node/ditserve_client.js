#!/usr/bin/env node
// Node.js client of the ditserve public API (ditserve.v1.ImageGeneration + grpc.health.v1), with
// @grpc/grpc-js and the repository's .proto files loaded at run time (@grpc/proto-loader).
//
//   node ditserve_client.js generate --server 127.0.0.1:50051 --prompt "a cat" -o cat.png
//   node ditserve_client.js info --server 127.0.0.1:50051
//   node ditserve_client.js health --server 127.0.0.1:50051 [--service NAME]
//
// Same flags and output contract as ditserve-cli: progress on stderr (a bar on a terminal, else
// one line per event), one JSON summary line on stdout, "error: CODE_NAME: message" on stderr,
// exit 0 ok / 1 the call failed or not SERVING / 2 bad command line. The .proto files come from
// --protos DIR, $DITSERVE_PROTO_DIR, or the repository's proto/ next to this file.
'use strict';

const fs = require('fs');
const path = require('path');
const { parseArgs } = require('util');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const EXIT_OK = 0;
const EXIT_FAILURE = 1;
const EXIT_USAGE = 2;
const MAX_RECEIVE_BYTES = 64 << 20; // raw float32 2048x2048 output is 48 MiB
const CHANNEL_OPTIONS = {
  'grpc.max_receive_message_length': MAX_RECEIVE_BYTES,
  // Servers accept client pings every >= 10 s.
  'grpc.keepalive_time_ms': 30000,
  'grpc.keepalive_timeout_ms': 10000,
};
const FORMATS = { png: 'OUTPUT_FORMAT_PNG', raw: 'OUTPUT_FORMAT_RAW_F32', latents: 'OUTPUT_FORMAT_LATENTS' };
const FORMAT_NAMES = {
  OUTPUT_FORMAT_UNSPECIFIED: 'png', OUTPUT_FORMAT_PNG: 'png',
  OUTPUT_FORMAT_RAW_F32: 'raw', OUTPUT_FORMAT_LATENTS: 'latents',
};
const STATUS_NAMES = Object.fromEntries(
  Object.entries(grpc.status).filter(([, v]) => typeof v === 'number').map(([k, v]) => [v, k]));

class UsageError extends Error {}
class ClientError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

const CONNECTION_FLAGS = {
  server: { type: 'string', default: '127.0.0.1:50051' },
  timeout: { type: 'string' },
  'wait-for-ready': { type: 'boolean', default: false },
  protos: { type: 'string', default: process.env.DITSERVE_PROTO_DIR || path.join(__dirname, '..', '..', '..', 'proto') },
  help: { type: 'boolean', short: 'h', default: false },
};
const COMMANDS = {
  generate: {
    timeout: 600,
    flags: {
      prompt: { type: 'string', default: '' },
      'prompt-2': { type: 'string', default: '' },
      'negative-prompt': { type: 'string', default: '' },
      'negative-prompt-2': { type: 'string', default: '' },
      steps: { type: 'string', default: '0' },
      seed: { type: 'string' },
      height: { type: 'string', default: '0' },
      width: { type: 'string', default: '0' },
      guidance: { type: 'string' },
      'true-cfg-scale': { type: 'string', default: '0' },
      'max-sequence-length': { type: 'string', default: '0' },
      format: { type: 'string', default: 'png' },
      'request-id': { type: 'string', default: '' },
      lora: { type: 'string', multiple: true, default: [] },
      output: { type: 'string', short: 'o' },
      quiet: { type: 'boolean', default: false },
    },
  },
  info: { timeout: 30, flags: {} },
  health: { timeout: 5, flags: { service: { type: 'string', default: '' } } },
};

function usage() {
  const lines = ['usage: ditserve_client.js <generate|info|health> [flags]', '',
    'connection flags: --server HOST:PORT --timeout SECONDS --wait-for-ready --protos DIR'];
  for (const [name, c] of Object.entries(COMMANDS)) {
    lines.push(`${name} (default --timeout ${c.timeout}): ` +
      Object.keys(c.flags).map((f) => (c.flags[f].short ? `-${c.flags[f].short}/--${f}` : `--${f}`)).join(' '));
  }
  return lines.join('\n') + '\n';
}

function uint(flag, text, max) {
  if (!/^[0-9]+$/.test(text)) throw new UsageError(`--${flag}: '${text}' is not a non-negative integer`);
  const value = BigInt(text);
  if (value > max) throw new UsageError(`--${flag} is too large: ${text}`);
  return value;
}

function number(flag, text) {
  const value = Number(text);
  if (text.trim() === '' || !Number.isFinite(value)) throw new UsageError(`--${flag}: '${text}' is not a number`);
  return value;
}

const FLOAT_MAX = 3.4028234663852886e38; // the largest float32 (LoraChoice.scale)

// --lora NAME or NAME:SCALE -> a LoraChoice; without SCALE the scale is not sent (the API's 1.0).
function loraChoice(text) {
  const colon = text.indexOf(':');
  const name = colon < 0 ? text : text.slice(0, colon);
  if (name === '') throw new UsageError(`--lora must be NAME or NAME:SCALE, got '${text}'`);
  if (colon < 0) return { name };
  const scaleText = text.slice(colon + 1);
  const scale = Number(scaleText);
  if (scaleText.trim() === '' || !Number.isFinite(scale) || Math.abs(scale) > FLOAT_MAX) {
    throw new UsageError(
      `--lora ${text}: the scale '${scaleText}' is not a finite number (NAME:SCALE, e.g. ${name}:0.8)`);
  }
  return { name, scale };
}

function parseCommandLine(argv) {
  const command = argv[0];
  if (command === undefined || command === '--help' || command === '-h') return { command: 'help' };
  if (!COMMANDS[command]) throw new UsageError(`unknown command '${command}'`);
  let parsed;
  try {
    parsed = parseArgs({ args: argv.slice(1), options: { ...CONNECTION_FLAGS, ...COMMANDS[command].flags }, strict: true });
  } catch (e) {
    throw new UsageError(e.message);
  }
  const v = parsed.values;
  if (v.help) return { command: 'help' };
  const timeout = v.timeout === undefined ? COMMANDS[command].timeout : number('timeout', v.timeout);
  if (!(timeout > 0)) throw new UsageError(`--timeout must be a positive number of seconds, got ${v.timeout}`);
  if (!v.server) throw new UsageError('--server must not be empty');
  return { command, values: v, timeout };
}

function loadProtos(dir) {
  const files = ['ditserve/v1/ditserve.proto', 'grpc/health/v1/health.proto'];
  for (const f of files) {
    if (!fs.existsSync(path.join(dir, f))) throw new UsageError(`no ${f} under ${dir} (use --protos DIR)`);
  }
  const definition = protoLoader.loadSync(files, {
    includeDirs: [dir], keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
  });
  return grpc.loadPackageDefinition(definition);
}

function callOptions(opts) {
  return { deadline: new Date(Date.now() + opts.timeout * 1000) };
}

function metadata(opts) {
  return new grpc.Metadata({ waitForReady: opts.values['wait-for-ready'] });
}

function rpcError(err) {
  return new ClientError(STATUS_NAMES[err.code] || 'UNKNOWN', err.details || err.message);
}

class Progress {
  constructor(quiet) {
    this.mode = quiet ? 'quiet' : (process.stderr.isTTY ? 'bar' : 'lines');
    this.open = false;
  }

  queued(q) {
    if (this.mode === 'lines') process.stderr.write(`queued position=${q.position}\n`);
    if (this.mode === 'bar') {
      process.stderr.write(`\rqueued, position ${q.position}\x1b[K`);
      this.open = true;
    }
  }

  step(p) {
    if (this.mode === 'lines') {
      process.stderr.write(`step ${p.step}/${p.total_steps} step_seconds=${p.step_seconds.toFixed(3)} ` +
        `elapsed_seconds=${p.elapsed_seconds.toFixed(3)}\n`);
    } else if (this.mode === 'bar') {
      const total = Math.max(p.total_steps, 1);
      const step = Math.min(p.step, total);
      const filled = Math.floor((step * 30) / total);
      const pct = String(Math.floor((step * 100) / total)).padStart(3);
      process.stderr.write(`\rstep ${step}/${total} [${'#'.repeat(filled)}${'.'.repeat(30 - filled)}] ${pct}% ` +
        `${p.step_seconds.toFixed(2)} s/step ETA ${(p.step_seconds * (total - step)).toFixed(1)} s\x1b[K`);
      this.open = true;
    }
  }

  finish() {
    if (this.open) process.stderr.write('\n');
    this.open = false;
  }
}

// One-tensor safetensors file: u64 LE header length, JSON header padded to 8, data.
function safetensors(name, dtype, shape, data, meta) {
  const header = { __metadata__: meta, [name]: { dtype, shape, data_offsets: [0, data.length] } };
  let text = Buffer.from(JSON.stringify(header), 'utf8');
  const pad = (8 - (text.length % 8)) % 8;
  text = Buffer.concat([text, Buffer.alloc(pad, ' ')]);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(text.length));
  return Buffer.concat([len, text, data]);
}

function encodeOutput(r, requested) {
  const got = FORMAT_NAMES[r.format] || 'png';
  const want = FORMAT_NAMES[requested];
  if (got !== want) throw new ClientError('FAILED_PRECONDITION', `asked for format ${want}, the server answered ${got}`);
  const meta = {
    request_id: r.request_id, seed: String(r.seed), num_inference_steps: String(r.num_inference_steps),
    height: String(r.height), width: String(r.width),
  };
  if (want === 'raw') {
    const expected = r.height * r.width * 3 * 4;
    if (expected === 0 || r.image.length !== expected) {
      throw new ClientError('DATA_LOSS', `raw image has ${r.image.length} bytes, ${r.height}x${r.width}x3 float32 needs ${expected}`);
    }
    return safetensors('image', 'F32', [r.height, r.width, 3], r.image, meta);
  }
  if (want === 'latents') {
    const t = r.latents || {};
    const dtype = { DTYPE_FLOAT32: ['F32', 4], DTYPE_BFLOAT16: ['BF16', 2], DTYPE_FLOAT16: ['F16', 2] }[t.dtype];
    const shape = (t.shape || []).map(Number);
    const numel = shape.reduce((a, b) => a * b, 1);
    if (!dtype || shape.length === 0 || numel * dtype[1] !== t.data.length) {
      throw new ClientError('DATA_LOSS', 'latents tensor does not match its shape/dtype');
    }
    return safetensors('latents', dtype[0], shape, t.data, meta);
  }
  if (!r.image || r.image.length === 0) throw new ClientError('DATA_LOSS', 'the server sent an empty image');
  return r.image;
}

function writeOutput(file, data) {
  if (file === '-') {
    fs.writeSync(1, data);
    return;
  }
  const tmp = `${file}.tmp.${process.pid}`;
  try {
    fs.writeFileSync(tmp, data);
    fs.renameSync(tmp, file); // never leave a truncated file under the real name
  } catch (e) {
    try { fs.unlinkSync(tmp); } catch (_) { /* not created */ }
    throw new ClientError('DATA_LOSS', `cannot write ${file}: ${e.message}`);
  }
}

function summaryJson(r, output, bytes) {
  const t = r.timings || {};
  return JSON.stringify({
    output, format: FORMAT_NAMES[r.format] || 'png', bytes, request_id: r.request_id,
    seed: String(r.seed), num_inference_steps: r.num_inference_steps, height: r.height, width: r.width,
    timings: {
      queue_seconds: t.queue_seconds || 0, encode_seconds: t.encode_seconds || 0,
      denoise_seconds: t.denoise_seconds || 0, decode_seconds: t.decode_seconds || 0,
      total_seconds: t.total_seconds || 0,
    },
  });
}

function buildRequest(v) {
  if (!v.output) throw new UsageError('-o/--output FILE is required (\'-\' for stdout)');
  if (!FORMATS[v.format]) throw new UsageError(`--format must be png, raw or latents, got '${v.format}'`);
  const U32 = 0xffffffffn;
  const req = {
    prompt: v.prompt, prompt_2: v['prompt-2'], negative_prompt: v['negative-prompt'],
    negative_prompt_2: v['negative-prompt-2'],
    num_inference_steps: Number(uint('steps', v.steps, U32)),
    height: Number(uint('height', v.height, U32)),
    width: Number(uint('width', v.width, U32)),
    max_sequence_length: Number(uint('max-sequence-length', v['max-sequence-length'], U32)),
    true_cfg_scale: number('true-cfg-scale', v['true-cfg-scale']),
    output_format: FORMATS[v.format],
    request_id: v['request-id'],
    loras: (v.lora || []).map(loraChoice),
  };
  // `optional` fields: sent only when given.
  if (v.seed !== undefined) req.seed = uint('seed', v.seed, 0xffffffffffffffffn).toString();
  if (v.guidance !== undefined) req.guidance_scale = number('guidance', v.guidance);
  return req;
}

function generate(pkg, opts) {
  const v = opts.values;
  const req = buildRequest(v);
  const client = new pkg.ditserve.v1.ImageGeneration(v.server, grpc.credentials.createInsecure(), CHANNEL_OPTIONS);
  const progress = new Progress(v.quiet);
  return new Promise((resolve, reject) => {
    let result = null;
    const call = client.GenerateStream(req, metadata(opts), callOptions(opts));
    call.on('data', (event) => {
      if (event.event === 'queued') progress.queued(event.queued);
      else if (event.event === 'progress') progress.step(event.progress);
      else if (event.event === 'result' && result === null) result = event.result;
    });
    call.on('error', (err) => {
      progress.finish();
      reject(rpcError(err));
    });
    call.on('end', () => {
      progress.finish();
      if (result === null) {
        reject(new ClientError('INTERNAL', 'the stream ended without a result'));
        return;
      }
      try {
        const data = encodeOutput(result, req.output_format);
        writeOutput(v.output, data);
        const out = v.output === '-' ? process.stderr : process.stdout;
        out.write(summaryJson(result, v.output, data.length) + '\n');
        resolve(EXIT_OK);
      } catch (e) {
        reject(e);
      }
    });
  }).finally(() => client.close());
}

function unary(client, method, request, opts) {
  return new Promise((resolve, reject) => {
    client[method](request, metadata(opts), callOptions(opts), (err, response) => {
      client.close();
      if (err) reject(rpcError(err));
      else resolve(response);
    });
  });
}

async function info(pkg, opts) {
  const client = new pkg.ditserve.v1.ImageGeneration(opts.values.server, grpc.credentials.createInsecure(), CHANNEL_OPTIONS);
  const response = await unary(client, 'GetModelInfo', {}, opts);
  // Like protobuf's JSON mapping: int64 as strings (longs: String), enums by name, defaults kept.
  process.stdout.write(JSON.stringify(response, null, 2) + '\n');
  return EXIT_OK;
}

async function health(pkg, opts) {
  const client = new pkg.grpc.health.v1.Health(opts.values.server, grpc.credentials.createInsecure(), CHANNEL_OPTIONS);
  const response = await unary(client, 'Check', { service: opts.values.service }, opts);
  const name = typeof response.status === 'string' ? response.status : 'UNKNOWN';
  process.stdout.write(`${name}\n`);
  return name === 'SERVING' ? EXIT_OK : EXIT_FAILURE;
}

async function main(argv) {
  let opts;
  let pkg;
  try {
    opts = parseCommandLine(argv);
    if (opts.command === 'help') {
      process.stdout.write(usage());
      return EXIT_OK;
    }
    if (opts.command === 'generate') buildRequest(opts.values); // reject a bad request before loading anything
    pkg = loadProtos(opts.values.protos);
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    process.stderr.write(`error: INVALID_ARGUMENT: ${e.message}\n`);
    return EXIT_USAGE;
  }
  try {
    return await { generate, info, health }[opts.command](pkg, opts);
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`error: INVALID_ARGUMENT: ${e.message}\n`);
      return EXIT_USAGE;
    }
    if (e instanceof ClientError) {
      process.stderr.write(`error: ${e.code}: ${e.message}\n`);
      return EXIT_FAILURE;
    }
    throw e;
  }
}

main(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
}, (e) => {
  process.stderr.write(`error: INTERNAL: ${e && e.stack ? e.stack : e}\n`);
  process.exitCode = EXIT_FAILURE;
});
