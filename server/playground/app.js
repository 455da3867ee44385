// ditserve playground: one page on the public HTTP API (GET /v1/models, POST /v1/images/generations,
// POST /v1/images/edits), served by the frontend itself (server/playground.h). No dependencies, no
// network beyond this origin. The API token stays in this tab (sessionStorage).
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);
  const TOKEN_KEY = 'ditserve.playground.token';
  const HISTORY_MAX = 12;
  const PARTIAL_IMAGES = 2;

  const state = {
    model: null,        // GET /v1/models' model object
    // Whether POST .../generations takes `stream: true`: null until a request tells (a 400 naming
    // stream or partial_images means no; an event stream means yes).
    streaming: null,
    busy: false,
    history: [],        // {b64, mime, url, params, seed, seconds}
    shown: null,        // the history entry on display
  };

  // ---- helpers ----

  function setStatus(text, kind) {
    const s = $('status');
    s.textContent = text;
    s.className = kind || '';
  }

  function authHeaders() {
    const token = $('token').value.trim();
    return token ? {Authorization: `Bearer ${token}`} : {};
  }

  // An OpenAI error object's message (or the HTTP status), as an Error with .status and .param.
  async function apiError(response) {
    let message = `HTTP ${response.status}`;
    let param = null;
    try {
      const body = await response.json();
      if (body && body.error) {
        message = body.error.message || message;
        param = body.error.param || null;
      }
    } catch (e) { /* not JSON */ }
    const err = new Error(message);
    err.status = response.status;
    err.param = param;
    return err;
  }

  function mimeOf(b64) {
    if (b64.startsWith('/9j/')) return 'image/jpeg';
    if (b64.startsWith('UklGR')) return 'image/webp';
    return 'image/png';
  }

  function extensionOf(mime) {
    return {'image/jpeg': 'jpg', 'image/webp': 'webp'}[mime] || 'png';
  }

  function blobOf(b64, mime) {
    const bin = atob(b64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; ++i) bytes[i] = bin.charCodeAt(i);
    return new Blob([bytes], {type: mime});
  }

  function randomSeed() {
    const words = crypto.getRandomValues(new Uint32Array(2));
    return String((words[0] & 0x1fffff) * 2 ** 32 + words[1]);  // below 2^53
  }

  // JSON text of a request body whose seed (digits) goes out as a JSON number, exactly.
  function jsonBody(body) {
    const text = JSON.stringify(body, (k, v) => (k === 'seed' ? '@SEED@' : v));
    return text.replace('"@SEED@"', body.seed);
  }

  // The seed of the first image of an answer, as digits, read from the JSON text (exact).
  function seedIn(text) {
    const m = /"seed"\s*:\s*(\d+)/.exec(text);
    return m ? m[1] : undefined;
  }

  function numberField(id) {
    const v = $(id).value.trim();
    if (v === '') return undefined;
    const n = Number(v);
    return Number.isFinite(n) ? n : undefined;
  }

  // ---- the model card ----

  let modelTimer = null;
  async function loadModel() {
    clearTimeout(modelTimer);
    try {
      const r = await fetch('/v1/models', {headers: authHeaders()});
      if (r.status === 401) {
        $('model-line').textContent = 'This server needs an API token: type it above.';
        $('token').focus();
        return;
      }
      if (!r.ok) throw await apiError(r);
      const list = await r.json();
      showModel(list.data[0]);
    } catch (e) {
      $('model-line').textContent = `Cannot list the model: ${e.message} (retrying)`;
      modelTimer = setTimeout(loadModel, 3000);
    }
  }

  function showModel(model) {
    state.model = model;
    const d = model.defaults || {};
    const l = model.limits || {};
    const name = document.createElement('b');
    name.textContent = model.id;
    $('model-line').textContent = 'model ';
    $('model-line').append(name);
    if (model.family) {
      $('model-line').append(` (${model.family}${model.guidance_distilled ? ', guidance-distilled' : ''})`);
    }
    // Defaults as placeholders, limits as bounds.
    const placeholder = (id, v) => { if (v !== undefined && v !== null) $(id).placeholder = String(v); };
    placeholder('width', d.width);
    placeholder('height', d.height);
    placeholder('steps', d.num_inference_steps);
    placeholder('guidance', d.guidance_scale);
    placeholder('true-cfg', d.true_cfg_scale || undefined);
    const bound = (id, attr, v) => { if (v) $(id)[attr] = String(v); };
    bound('width', 'max', l.max_width);
    bound('height', 'max', l.max_height);
    bound('width', 'step', l.size_multiple);
    bound('height', 'step', l.size_multiple);
    bound('steps', 'min', l.min_steps);
    bound('steps', 'max', l.max_steps);
    bound('guidance', 'max', l.max_guidance_scale);

    // LoRA adapters: a checkbox and a scale each.
    const box = $('loras');
    box.textContent = '';
    const loras = model.loras || [];
    $('loras-box').hidden = loras.length === 0;
    for (const lora of loras) {
      const row = document.createElement('div');
      row.className = 'lora';
      const check = document.createElement('input');
      check.type = 'checkbox';
      check.value = lora.name;
      check.id = `lora-${lora.name}`;
      const label = document.createElement('label');
      label.htmlFor = check.id;
      label.textContent = `${lora.name} `;
      const info = document.createElement('span');
      info.className = 'muted';
      info.textContent = `${lora.format}, rank ${lora.rank}`;
      label.append(info);
      const scale = document.createElement('input');
      scale.type = 'number';
      scale.step = '0.05';
      scale.value = '1';
      scale.min = '0';
      if (l.max_lora_scale) scale.max = String(l.max_lora_scale);
      scale.className = 'lora-scale';
      scale.title = `${lora.name}'s scale`;
      row.append(check, label, scale);
      box.append(row);
    }

    // Input images.
    const inputs = model.image_inputs || {max_images: 0};
    $('images-box').hidden = !(inputs.max_images > 0);
    if (inputs.max_images > 0) {
      const uses = {
        reference: 'reference images: without a size, the output takes the first image\'s size',
        image_to_image: 'the image to start from (image to image); strength is how much changes',
        kontext: 'the image to edit (Kontext)',
        qwen_edit: 'the image(s) to edit; without a size, the output takes about 1024x1024 at ' +
            'the last image\'s aspect ratio',
      };
      $('images-box').querySelector('legend').textContent =
          inputs.max_images > 1 ? `Reference images (up to ${inputs.max_images})` : 'Input image';
      $('images').multiple = inputs.max_images > 1;
      const need = inputs.min_images > 0 ? `Required (at least ${inputs.min_images})` : 'Optional';
      $('images-hint').textContent = `${need}: ${uses[inputs.use] || inputs.use}.`;
      $('strength-label').hidden = inputs.use !== 'image_to_image';
      if (inputs.default_strength) $('strength').placeholder = String(inputs.default_strength);
    }
  }

  // ---- the request ----

  function chosenLoras() {
    const out = [];
    for (const row of $('loras').querySelectorAll('.lora')) {
      const check = row.querySelector('input[type=checkbox]');
      if (!check.checked) continue;
      const scale = Number(row.querySelector('.lora-scale').value);
      out.push({name: check.value, scale: Number.isFinite(scale) ? scale : 1});
    }
    return out;
  }

  // The request's fields: only what the user set (the server fills in the model's defaults).
  function requestFields() {
    const f = {prompt: $('prompt').value};
    if (state.model) f.model = state.model.id;
    const negative = $('negative-prompt').value;
    if (negative.trim() !== '') f.negative_prompt = negative;
    const width = numberField('width');
    const height = numberField('height');
    if (width !== undefined || height !== undefined) {
      const d = (state.model && state.model.defaults) || {};
      f.size = `${width !== undefined ? width : d.width}x${height !== undefined ? height : d.height}`;
    }
    const steps = numberField('steps');
    if (steps !== undefined) f.num_inference_steps = steps;
    // Seeds are 64-bit: kept as digits (a JS number is exact only below 2^53). Empty: a random
    // one picked here, so the page knows it exactly.
    f.seed = $('seed').value.trim() || randomSeed();
    const guidance = numberField('guidance');
    if (guidance !== undefined) f.guidance_scale = guidance;
    const trueCfg = numberField('true-cfg');
    if (trueCfg !== undefined) f.true_cfg_scale = trueCfg;
    const cache = numberField('cache');
    if (cache !== undefined) f.cache_threshold = cache;
    const loras = chosenLoras();
    if (loras.length) f.loras = loras;
    return f;
  }

  function imageFiles() {
    if ($('images-box').hidden) return [];
    return Array.from($('images').files || []);
  }

  // One call: POST .../generations (JSON) or, with input images, .../edits (a multipart form).
  function send(fields, files, stream) {
    const body = Object.assign({response_format: 'b64_json', n: 1}, fields);
    if (stream) {
      body.stream = true;
      body.partial_images = PARTIAL_IMAGES;
    }
    if (files.length === 0) {
      return fetch('/v1/images/generations', {
        method: 'POST',
        headers: Object.assign({'Content-Type': 'application/json'}, authHeaders()),
        body: jsonBody(body),
      });
    }
    const form = new FormData();
    for (const [k, v] of Object.entries(body)) {
      form.append(k, typeof v === 'object' ? JSON.stringify(v) : String(v));
    }
    for (const file of files) form.append('image', file, file.name);
    return fetch('/v1/images/edits', {method: 'POST', headers: authHeaders(), body: form});
  }

  // Server-Sent Events (OpenAI's streaming Images API): calls onEvent(type, json) for each.
  async function readEvents(response, onEvent) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    const dispatch = (block) => {
      let name = '';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) name = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length === 0) return;
      const text = data.join('\n');
      if (text === '[DONE]') return;
      const json = JSON.parse(text);
      if (json.seed !== undefined) json.seed = seedIn(text);
      onEvent(json.type || name, json);
    };
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      buffer = buffer.replace(/\r\n/g, '\n');
      let at;
      while ((at = buffer.indexOf('\n\n')) >= 0) {
        dispatch(buffer.slice(0, at));
        buffer = buffer.slice(at + 2);
      }
    }
    buffer += decoder.decode();
    if (buffer.trim() !== '') dispatch(buffer.replace(/\r\n/g, '\n'));
  }

  // Generates once; resolves to {b64, seed, mode} where mode is "stream" or "plain".
  async function generate(fields, files, onPartial) {
    if (state.streaming !== false) {
      const r = await send(fields, files, true);
      const type = r.headers.get('Content-Type') || '';
      if (r.ok && type.startsWith('text/event-stream')) {
        state.streaming = true;
        let final = null;
        await readEvents(r, (kind, ev) => {
          if (kind.endsWith('.partial_image')) onPartial(ev);
          else if (kind.endsWith('.completed')) final = ev;
          else if (kind === 'error' || ev.error) {
            throw new Error((ev.error && ev.error.message) || 'the stream reported an error');
          }
        });
        if (!final || !final.b64_json) throw new Error('the stream ended without an image');
        return {b64: final.b64_json, seed: final.seed, mode: 'stream'};
      }
      if (r.ok) return plainAnswer(r);  // a server that ignored `stream`
      const err = await apiError(r);
      const aboutStream = err.status === 400 &&
          (err.param === 'stream' || err.param === 'partial_images' ||
           /\b(stream|partial_images)\b/.test(err.message));
      if (!aboutStream) throw err;
      state.streaming = false;  // this server does not stream: plain requests from now on
    }
    const r = await send(fields, files, false);
    if (!r.ok) throw await apiError(r);
    return plainAnswer(r);
  }

  async function plainAnswer(response) {
    const text = await response.text();
    const json = JSON.parse(text);
    return {b64: json.data[0].b64_json, seed: seedIn(text), mode: 'plain'};
  }

  // ---- showing results ----

  function showImage(b64, final) {
    const mime = mimeOf(b64);
    const img = $('result-img');
    img.src = `data:${mime};base64,${b64}`;
    $('result').hidden = false;
    $('placeholder').hidden = true;
    $('result').dataset.state = final ? 'final' : 'partial';
    img.classList.toggle('partial', !final);
  }

  function describe(entry) {
    const p = entry.params;
    const rows = [
      ['prompt', p.prompt],
      ['negative prompt', p.negative_prompt],
      ['size', p.size || 'model default'],
      ['steps', p.num_inference_steps !== undefined ? p.num_inference_steps : 'model default'],
      ['seed', entry.seed !== undefined ? entry.seed : p.seed],
      ['guidance', p.guidance_scale],
      ['true CFG', p.true_cfg_scale],
      ['step cache', p.cache_threshold],
      ['LoRAs', p.loras && p.loras.map((l) => `${l.name} \u00d7 ${l.scale}`).join(', ')],
      ['input images', entry.images || undefined],
      ['strength', p.strength],
      ['time', `${entry.seconds.toFixed(1)} s (${entry.mode})`],
    ];
    const dl = $('result-params');
    dl.textContent = '';
    for (const [k, v] of rows) {
      if (v === undefined || v === null || v === '') continue;
      const dt = document.createElement('dt');
      dt.textContent = k;
      const dd = document.createElement('dd');
      dd.textContent = String(v);
      dl.append(dt, dd);
    }
  }

  function show(entry) {
    state.shown = entry;
    showImage(entry.b64, true);
    $('result').dataset.mode = entry.mode;
    $('result').dataset.seed = String(entry.seed);
    describe(entry);
    const a = $('download');
    a.href = entry.url;
    a.download = `ditserve-${entry.seed !== undefined ? entry.seed : 'image'}.${extensionOf(entry.mime)}`;
    for (const li of $('history').children) li.classList.toggle('current', li.entry === entry);
  }

  function addToHistory(entry) {
    state.history.unshift(entry);
    while (state.history.length > HISTORY_MAX) URL.revokeObjectURL(state.history.pop().url);
    const list = $('history');
    list.textContent = '';
    for (const e of state.history) {
      const li = document.createElement('li');
      li.entry = e;
      const button = document.createElement('button');
      button.type = 'button';
      button.title = `${e.params.prompt} (seed ${e.seed}): show, and put its parameters back`;
      const img = document.createElement('img');
      img.src = e.url;
      img.alt = e.params.prompt;
      button.append(img);
      button.addEventListener('click', () => { show(e); restore(e.params, e.seed); });
      li.append(button);
      list.append(li);
    }
  }

  // Puts an image's parameters back into the form (its seed included).
  function restore(p, seed) {
    $('prompt').value = p.prompt || '';
    $('negative-prompt').value = p.negative_prompt || '';
    const [w, h] = (p.size || 'x').split('x');
    $('width').value = p.size ? w : '';
    $('height').value = p.size ? h : '';
    $('steps').value = p.num_inference_steps !== undefined ? p.num_inference_steps : '';
    $('seed').value = seed !== undefined ? seed : '';
    $('guidance').value = p.guidance_scale !== undefined ? p.guidance_scale : '';
    $('true-cfg').value = p.true_cfg_scale !== undefined ? p.true_cfg_scale : '';
    $('cache').value = p.cache_threshold !== undefined ? p.cache_threshold : '';
    $('strength').value = p.strength !== undefined ? p.strength : '';
    const chosen = new Map((p.loras || []).map((l) => [l.name, l.scale]));
    for (const row of $('loras').querySelectorAll('.lora')) {
      const check = row.querySelector('input[type=checkbox]');
      check.checked = chosen.has(check.value);
      if (chosen.has(check.value)) row.querySelector('.lora-scale').value = chosen.get(check.value);
    }
  }

  // ---- Generate ----

  async function onGenerate(event) {
    event.preventDefault();
    if (state.busy) return;
    const fields = requestFields();
    if (fields.prompt.trim() === '') {
      setStatus('Type a prompt first.', 'error');
      $('prompt').focus();
      return;
    }
    if (!/^[0-9]{1,20}$/.test(fields.seed)) {
      setStatus('The seed is a whole number (0 to 2^64 - 1), or empty for a random one.', 'error');
      $('seed').focus();
      return;
    }
    const files = imageFiles();
    const strength = numberField('strength');
    if (files.length && strength !== undefined && !$('strength-label').hidden) fields.strength = strength;
    state.busy = true;
    $('generate').disabled = true;
    const progress = $('progress');
    progress.hidden = false;
    progress.removeAttribute('value');
    const started = performance.now();
    const tick = () => {
      const s = ((performance.now() - started) / 1000).toFixed(1);
      setStatus(`Generating\u2026 ${s} s`, 'busy');
    };
    tick();
    const timer = setInterval(tick, 100);
    try {
      const result = await generate(fields, files, (ev) => {
        progress.max = PARTIAL_IMAGES + 1;
        progress.value = (ev.partial_image_index || 0) + 1;
        showImage(ev.b64_json, false);
      });
      const seconds = (performance.now() - started) / 1000;
      const mime = mimeOf(result.b64);
      const entry = {
        b64: result.b64,
        mime,
        url: URL.createObjectURL(blobOf(result.b64, mime)),
        params: fields,
        seed: result.seed !== undefined ? result.seed : fields.seed,
        images: files.map((f) => f.name).join(', '),
        seconds,
        mode: result.mode,
      };
      addToHistory(entry);
      show(entry);
      await $('result-img').decode().catch(() => {});
      clearInterval(timer);
      setStatus(`Done in ${seconds.toFixed(1)} s.`, 'done');
    } catch (e) {
      clearInterval(timer);
      setStatus(e.message, 'error');
      if (e.status === 401) $('token').focus();
    } finally {
      progress.hidden = true;
      state.busy = false;
      $('generate').disabled = false;
    }
  }

  function showPreviews() {
    const box = $('image-previews');
    for (const img of box.querySelectorAll('img')) URL.revokeObjectURL(img.src);
    box.textContent = '';
    const max = (state.model && state.model.image_inputs && state.model.image_inputs.max_images) || 0;
    const files = imageFiles();
    const min = (state.model && state.model.image_inputs && state.model.image_inputs.min_images) || 0;
    if (max && files.length > max) {
      setStatus(`This model takes at most ${max} input image(s); ${files.length} are chosen.`, 'error');
    } else if (files.length < min) {
      setStatus(`This model needs at least ${min} input image(s).`, 'error');
    }
    for (const file of files) {
      const img = document.createElement('img');
      img.src = URL.createObjectURL(file);
      img.alt = file.name;
      img.title = file.name;
      box.append(img);
    }
  }

  function init() {
    $('token').value = sessionStorage.getItem(TOKEN_KEY) || '';
    let reload = null;
    $('token').addEventListener('input', () => {
      sessionStorage.setItem(TOKEN_KEY, $('token').value.trim());
      clearTimeout(reload);
      reload = setTimeout(loadModel, 300);
    });
    $('form').addEventListener('submit', onGenerate);
    $('prompt').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) $('form').requestSubmit();
    });
    $('random-seed').addEventListener('click', () => {
      $('seed').value = randomSeed();
    });
    $('images').addEventListener('change', showPreviews);
    loadModel();
  }

  init();
})();
