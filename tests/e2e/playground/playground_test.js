// The playground (GET / on --http-listen) in a real browser: Debian's headless Chromium driven by
// puppeteer-core (pinned by package-lock.json), against a running frontend with workers.
//   node playground_test.js BASE_URL TOKEN_FILE MODEL SCREENSHOT.png
// Opens the page, types the token, waits for the model card (MODEL, its LoRA adapter listed),
// types a prompt, sets 64x64, 2 steps and a seed, clicks Generate and waits for the image; then
// checks that it decodes in the page to 64x64, that its bytes equal (and its pixels, decoded by
// the browser, equal) those POST /v1/images/generations returns for the same request, that the
// download link and this session's history hold it, that no script error or Content-Security-Policy
// violation happened. When the model takes input images (flux1-tiny: image to image), uploads one
// and checks the page's POST /v1/images/edits answer against the API's for the same form. Then, in
// a fresh tab, answers the page's stream request with a synthetic OpenAI event stream (request
// interception) to check the page's SSE reader before the server streams. Saves a screenshot.
// CHROMIUM (env) names the browser (default: chromium on the PATH). Prints [measured] lines with
// the time of each phase.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const zlib = require('zlib');
const puppeteer = require('puppeteer-core');

const [base, tokenFile, model, screenshot] = process.argv.slice(2);
if (!base || !tokenFile || !model || !screenshot) {
  console.error('usage: node playground_test.js BASE_URL TOKEN_FILE MODEL SCREENSHOT.png');
  process.exit(2);
}
const token = fs.readFileSync(tokenFile, 'utf8').trim();
const browserPath = process.env.CHROMIUM || 'chromium';

const PROMPT = 'a lighthouse on a cliff at dawn, oil painting';
const SEED = '20240607';
const STEPS = '2';

let failures = 0;
function check(what, ok, detail) {
  if (ok) {
    console.log(`ok   ${what}`);
  } else {
    failures += 1;
    console.log(`FAIL ${what}${detail !== undefined ? `: ${detail}` : ''}`);
  }
}

const t0 = Date.now();
let tPhase = t0;
function measured(phase) {
  const now = Date.now();
  console.log(`[measured] ${phase}: ${((now - tPhase) / 1000).toFixed(2)} s`);
  tPhase = now;
}

// A PNG's width and height from its IHDR chunk.
function pngSize(bytes) {
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  if (bytes.length < 24 || !bytes.subarray(0, 8).equals(signature) ||
      bytes.toString('latin1', 12, 16) !== 'IHDR') {
    return null;
  }
  return `${bytes.readUInt32BE(16)}x${bytes.readUInt32BE(20)}`;
}

// A WIDTH x HEIGHT RGB PNG with a colour gradient (an input image for the edit).
function gradientPng(width, height) {
  const chunk = (kind, data) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const body = Buffer.concat([Buffer.from(kind, 'latin1'), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(zlib.crc32 ? zlib.crc32(body) : crc32(body));
    return Buffer.concat([len, body, crc]);
  };
  const rows = [];
  for (let y = 0; y < height; ++y) {
    const row = Buffer.alloc(1 + 3 * width);
    for (let x = 0; x < width; ++x) {
      row[1 + 3 * x] = (x * 255 / (width - 1)) | 0;
      row[2 + 3 * x] = (y * 255 / (height - 1)) | 0;
      row[3 + 3 * x] = 128;
    }
    rows.push(row);
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
                        chunk('IHDR', ihdr), chunk('IDAT', zlib.deflateSync(Buffer.concat(rows))),
                        chunk('IEND', Buffer.alloc(0))]);
}

// CRC-32 (PNG's), for a Node.js without zlib.crc32 (before 20.15).
function crc32(bytes) {
  let c = 0xffffffff;
  for (const b of bytes) {
    c ^= b;
    for (let k = 0; k < 8; ++k) c = (c >>> 1) ^ (0xedb88320 & -(c & 1));
  }
  return (c ^ 0xffffffff) >>> 0;
}

async function main() {
  const browser = await puppeteer.launch({
    executablePath: browserPath,
    headless: true,
    // --no-sandbox: CI runs as root, where Chromium's sandbox cannot start.
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
           '--disable-extensions', '--disable-background-networking'],
  });
  try {
    console.log(`browser: ${await browser.version()}`);
    measured('browser start');
    const page = await browser.newPage();
    await page.setViewport({width: 1200, height: 820});
    const problems = [];
    let refused = 0;
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    page.on('console', (m) => {
      // 401 on GET /v1/models before the token is typed is expected; a 400 is counted below
      // (the page's first request asks for a stream, which a server without streaming refuses).
      const text = m.text();
      if (m.type() !== 'error' || /status of 401/.test(text)) return;
      if (/status of 400/.test(text)) refused += 1;
      else problems.push(`console: ${text}`);
    });
    page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()} ${r.failure().errorText}`));
    const requests = [];
    page.on('request', (r) => requests.push({method: r.method(), url: r.url()}));

    const response = await page.goto(`${base}/`, {waitUntil: 'load'});
    check('GET / loads the page without a token', response.status() === 200, response.status());
    check('  ... with a Content-Security-Policy',
          /default-src 'none'/.test(response.headers()['content-security-policy'] || ''));

    await page.type('#token', token);
    await page.waitForFunction(
        (m) => document.querySelector('#model-line b') &&
               document.querySelector('#model-line b').textContent === m,
        {timeout: 30000}, model);
    check(`the model card names ${model}`, true);
    const card = await page.evaluate(() => ({
      loras: Array.from(document.querySelectorAll('#loras input[type=checkbox]')).map((c) => c.value),
      stepsPlaceholder: document.querySelector('#steps').placeholder,
      widthPlaceholder: document.querySelector('#width').placeholder,
      imagesShown: !document.querySelector('#images-box').hidden,
    }));
    check('  ... its LoRA adapter is offered', card.loras.includes('style'), JSON.stringify(card.loras));
    check('  ... its defaults are the placeholders',
          Number(card.stepsPlaceholder) > 0 && Number(card.widthPlaceholder) > 0, JSON.stringify(card));
    measured('page and model card');

    await page.type('#prompt', PROMPT);
    await page.type('#width', '64');
    await page.type('#height', '64');
    await page.type('#steps', STEPS);
    await page.type('#seed', SEED);
    const clicked = Date.now();
    await page.click('#generate');
    await page.waitForFunction(
        () => document.querySelector('#result').dataset.state === 'final' &&
              document.querySelector('#status').className === 'done' ||
              document.querySelector('#status').className === 'error',
        {timeout: 300000, polling: 100});
    const status = await page.$eval('#status', (s) => ({text: s.textContent, kind: s.className}));
    check('Generate makes an image', status.kind === 'done', status.text);
    const generateSeconds = (Date.now() - clicked) / 1000;
    measured('Generate in the page (click to image)');

    const shown = await page.evaluate(async () => {
      const img = document.querySelector('#result-img');
      await img.decode();
      const params = {};
      const dl = document.querySelectorAll('#result-params dt');
      for (const dt of dl) params[dt.textContent] = dt.nextElementSibling.textContent;
      return {
        src: img.src,
        width: img.naturalWidth,
        height: img.naturalHeight,
        mode: document.querySelector('#result').dataset.mode,
        params,
        download: document.querySelector('#download').download,
        downloadHref: document.querySelector('#download').href,
        history: document.querySelectorAll('#history li').length,
      };
    });
    console.log(`     the page took the ${shown.mode} path (stream: the server's SSE; plain: one JSON answer)`);
    check('the image decodes in the browser to 64x64', `${shown.width}x${shown.height}` === '64x64',
          `${shown.width}x${shown.height}`);
    check('the parameters shown are the request\'s',
          shown.params.prompt === PROMPT && shown.params.seed === SEED && shown.params.size === '64x64' &&
          shown.params.steps === STEPS, JSON.stringify(shown.params));
    check('the download is a blob named after the seed',
          shown.downloadHref.startsWith('blob:') && shown.download === `ditserve-${SEED}.png`,
          `${shown.download} ${shown.downloadHref}`);
    check('the history holds the image', shown.history === 1, shown.history);

    const m = /^data:image\/png;base64,(.*)$/.exec(shown.src);
    check('the result is a base64 PNG', m !== null, shown.src.slice(0, 40));
    const pageBytes = Buffer.from(m ? m[1] : '', 'base64');
    check('  ... a 64x64 PNG', pngSize(pageBytes) === '64x64', pngSize(pageBytes));

    // The same request through the API itself (what the page sent: only the fields set).
    const apiStart = Date.now();
    const r = await fetch(`${base}/v1/images/generations`, {
      method: 'POST',
      headers: {'Content-Type': 'application/json', Authorization: `Bearer ${token}`},
      body: `{"model": "${model}", "prompt": ${JSON.stringify(PROMPT)}, "size": "64x64", ` +
            `"num_inference_steps": ${STEPS}, "seed": ${SEED}, "response_format": "b64_json", "n": 1}`,
    });
    check('POST /v1/images/generations with the same request is 200', r.status === 200, r.status);
    const body = await r.json();
    const apiB64 = body.data[0].b64_json;
    const apiBytes = Buffer.from(apiB64, 'base64');
    measured(`the same request through the API (${((Date.now() - apiStart) / 1000).toFixed(2)} s)`);
    check('the page\'s image equals the API\'s byte for byte', pageBytes.equals(apiBytes),
          `${pageBytes.length} vs ${apiBytes.length} bytes`);
    // And pixel for pixel, both decoded by the browser (a check of the PNG, not only its bytes).
    const pixels = await page.evaluate(async (a, b) => {
      const decode = async (src) => {
        const img = new Image();
        img.src = src;
        await img.decode();
        const canvas = document.createElement('canvas');
        canvas.width = img.naturalWidth;
        canvas.height = img.naturalHeight;
        const ctx = canvas.getContext('2d');
        ctx.drawImage(img, 0, 0);
        return ctx.getImageData(0, 0, canvas.width, canvas.height).data;
      };
      const pa = await decode(a);
      const pb = await decode(`data:image/png;base64,${b}`);
      let differ = 0;
      let distinct = new Set();
      for (let i = 0; i < pa.length; ++i) {
        if (pa[i] !== pb[i]) differ += 1;
        if (i % 4 === 0) distinct.add(`${pa[i]},${pa[i + 1]},${pa[i + 2]}`);
      }
      return {length: pa.length, differ, distinct: distinct.size};
    }, shown.src, apiB64);
    check('  ... and pixel for pixel (decoded by the browser)',
          pixels.length === 64 * 64 * 4 && pixels.differ === 0, JSON.stringify(pixels));
    check('  ... and the image is not blank', pixels.distinct > 1, JSON.stringify(pixels));

    measured('checks');

    // An input image (flux1-tiny: image to image): a file input -> POST /v1/images/edits, equal to
    // the same form sent to the API.
    if (card.imagesShown) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'playground-'));
      const input = path.join(dir, 'input.png');
      fs.writeFileSync(input, gradientPng(64, 64));
      try {
        await (await page.$('#images')).uploadFile(input);
        await page.evaluate(() => document.querySelector('#images').dispatchEvent(new Event('change')));
        const strengthShown = await page.$eval('#strength-label', (l) => !l.hidden);
        if (strengthShown) await page.type('#strength', '0.7');
        const before = await page.$eval('#result-img', (img) => img.src);
        await page.click('#generate');
        await page.waitForFunction(
            (old) => document.querySelector('#status').className === 'error' ||
                     (document.querySelector('#status').className === 'done' &&
                      document.querySelector('#result-img').src !== old),
            {timeout: 300000, polling: 100}, before);
        const edit = await page.evaluate(() => ({
          status: document.querySelector('#status').textContent,
          kind: document.querySelector('#status').className,
          src: document.querySelector('#result-img').src,
          history: document.querySelectorAll('#history li').length,
        }));
        check('an input image makes an image through POST /v1/images/edits',
              edit.kind === 'done' && requests.some((x) => x.method === 'POST' && x.url.endsWith('/v1/images/edits')),
              edit.status);
        const form = new FormData();
        form.append('model', model);
        form.append('prompt', PROMPT);
        form.append('size', '64x64');
        form.append('num_inference_steps', STEPS);
        form.append('seed', SEED);
        form.append('response_format', 'b64_json');
        if (strengthShown) form.append('strength', '0.7');
        form.append('image', new Blob([fs.readFileSync(input)], {type: 'image/png'}), 'input.png');
        const er = await fetch(`${base}/v1/images/edits`, {
          method: 'POST', headers: {Authorization: `Bearer ${token}`}, body: form});
        const ej = await er.json();
        check('  ... equal byte for byte to the API\'s edit of the same image',
              er.status === 200 && edit.src === `data:image/png;base64,${ej.data[0].b64_json}`,
              `${er.status} ${JSON.stringify(ej).slice(0, 200)}`);
        check('  ... and unlike the image without it', edit.src !== shown.src);
        check('  ... and the history holds both', edit.history === 2, edit.history);
      } finally {
        fs.rmSync(dir, {recursive: true, force: true});
      }
      measured('an input image through the page and the API');
    }

    await page.screenshot({path: screenshot, fullPage: true});
    console.log(`     screenshot: ${screenshot}`);

    // The page's stream path, before the server streams: a fresh tab whose generation request is
    // answered with OpenAI's event stream (two partial images, then the completed one: the API's
    // image) by request interception. This tests the page's SSE reader only; once the server
    // streams, the first Generate above takes that path for real (mode "stream").
    const streamPage = await browser.newPage();
    await streamPage.setRequestInterception(true);
    let streamRequest = null;
    streamPage.on('request', (req) => {
      if (req.method() === 'POST' && req.url().endsWith('/v1/images/generations')) {
        streamRequest = JSON.parse(req.postData());
        const event = (type, extra) => `event: ${type}\ndata: ${JSON.stringify(Object.assign(
            {type, created_at: 1, size: '64x64', output_format: 'png'}, extra))}\n\n`;
        const partial = gradientPng(64, 64).toString('base64');
        req.respond({
          status: 200,
          contentType: 'text/event-stream',
          body: event('image_generation.partial_image', {b64_json: partial, partial_image_index: 0}) +
                event('image_generation.partial_image', {b64_json: partial, partial_image_index: 1}) +
                event('image_generation.completed', {b64_json: apiB64}),
        });
      } else {
        req.continue();
      }
    });
    const streamProblems = [];
    streamPage.on('pageerror', (e) => streamProblems.push(e.message));
    await streamPage.goto(`${base}/`, {waitUntil: 'load'});
    await streamPage.type('#token', token);
    await streamPage.waitForFunction(() => document.querySelector('#model-line b'), {timeout: 30000});
    await streamPage.type('#prompt', PROMPT);
    await streamPage.type('#seed', SEED);
    await streamPage.type('#cache', '0.3');
    await streamPage.click('#generate');
    await streamPage.waitForFunction(
        () => ['done', 'error'].includes(document.querySelector('#status').className),
        {timeout: 30000, polling: 50});
    const streamed = await streamPage.evaluate(() => ({
      kind: document.querySelector('#status').className,
      status: document.querySelector('#status').textContent,
      mode: document.querySelector('#result').dataset.mode,
      src: document.querySelector('#result-img').src,
    }));
    check('the page reads an event stream (synthetic): partial images, then the completed image',
          streamed.kind === 'done' && streamed.mode === 'stream' &&
          streamed.src === `data:image/png;base64,${apiB64}` && streamProblems.length === 0,
          `${streamed.status} ${streamed.mode} ${streamProblems.join('; ')}`);
    check('  ... having asked for stream: true and partial_images 2',
          streamRequest && streamRequest.stream === true && streamRequest.partial_images === 2 &&
          String(streamRequest.seed) === SEED, JSON.stringify(streamRequest));
    check('  ... and the step cache\'s threshold typed into the page (cache_threshold 0.3)',
          streamRequest && streamRequest.cache_threshold === 0.3, JSON.stringify(streamRequest));
    await streamPage.close();
    measured('the stream path against a synthetic event stream');

    const apiCalls = requests.filter((x) => x.url.includes('/v1/'))
                         .map((x) => `${x.method} ${new URL(x.url).pathname}`);
    console.log(`     the page's API calls: ${apiCalls.join(', ')}`);
    const outside = requests.filter((x) => !x.url.startsWith(`${base}/`) && !/^(data|blob):/.test(x.url));
    check('the page made no request outside this origin', outside.length === 0,
          outside.map((x) => x.url).join(' '));
    check(shown.mode === 'plain' ? 'one 400 (the stream request of a server without streaming), then the plain request'
                                 : 'no 400 (the server streams)',
          refused === (shown.mode === 'plain' ? 1 : 0), `${refused} answer(s) 400`);
    check('no script error, failed request or CSP violation', problems.length === 0, problems.join('; '));
    console.log(`[measured] Generate in the page: ${generateSeconds.toFixed(2)} s; whole browser test: ${((Date.now() - t0) / 1000).toFixed(2)} s`);
  } finally {
    await browser.close();
  }
}

main().then(() => {
  if (failures > 0) {
    console.log(`${failures} check(s) failed`);
    process.exit(1);
  }
  console.log('PASSED (playground in the browser)');
}, (e) => {
  console.log(`FAIL: ${e.stack || e}`);
  process.exit(1);
});
