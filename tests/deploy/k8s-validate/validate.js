#!/usr/bin/env node
// Offline checks of deploy/k8s (registered with ctest through tests/deploy/k8s_checks.sh):
//
//   node validate.js [DIR]     every YAML document under DIR (default deploy/k8s) parsed as
//                              Kubernetes parses it (YAML 1.1), validated against the official
//                              OpenAPI schema of its apiVersion/kind (npm kubernetes-models, the
//                              Kubernetes 1.27 API; @kubernetes-models/prometheus-operator for the
//                              ServiceMonitor), unknown fields rejected as `kubectl --validate=strict`
//                              does, then the objects checked against each other, against the
//                              frontend's flags, deploy/docker-compose.yml, the metrics sources and
//                              deploy/README.md (see checkApp below for the list)
//   node validate.js --selftest
//                              a pristine copy of deploy/k8s passes, and each broken copy in
//                              MUTATIONS below fails with the expected complaint
//
// Exit codes: 0 passed, 1 failed, 77 the npm packages are not installed (ctest SKIP_RETURN_CODE;
// `npm ci` in this folder installs them, scripts/setup.sh does it).
"use strict";

const fs = require("fs");
const os = require("os");
const path = require("path");
const childProcess = require("child_process");

const HERE = __dirname;
const REPO = path.resolve(HERE, "..", "..", "..");
const DEFAULT_DIR = path.join(REPO, "deploy", "k8s");

function requireDeps() {
  try {
    return {
      YAML: require("yaml"),
      k8s: (apiVersion) => require(`kubernetes-models/${apiVersion}`),
      promOp: require("@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1"),
    };
  } catch (e) {
    if (e.code !== "MODULE_NOT_FOUND") throw e;
    console.log(`SKIP: ${path.relative(REPO, HERE)}/node_modules is absent or incomplete ` +
                `(run \`npm ci\` there; scripts/setup.sh does): ${e.message.split("\n")[0]}`);
    process.exit(77);
  }
}
const deps = requireDeps();
const { YAML } = deps;

// ---------------------------------------------------------------------------------------------
// Loading

// Every *.yaml / *.yml under dir, sorted, relative paths.
function yamlFiles(dir) {
  const out = [];
  (function walk(d) {
    for (const e of fs.readdirSync(d, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (/\.ya?ml$/.test(e.name)) out.push(path.relative(dir, p));
    }
  })(dir);
  return out;
}

// Kubernetes reads manifests with a YAML 1.1 parser (sigs.k8s.io/yaml on go-yaml v2): `on`, `yes`
// are booleans and 0755 is octal there, so parse the same way. Duplicate keys are errors.
function parseYaml(text, file, errors) {
  const docs = YAML.parseAllDocuments(text, { version: "1.1", merge: true, uniqueKeys: true, prettyErrors: true });
  const out = [];
  for (const d of Array.isArray(docs) ? docs : [docs]) {
    for (const e of d.errors) errors.push(`${file}: YAML: ${e.message}`);
    for (const w of d.warnings) errors.push(`${file}: YAML: ${w.message}`);
    if (d.errors.length) continue;
    const js = d.toJS({ maxAliasCount: 100 });
    if (js !== null && js !== undefined) out.push(js);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Schema validation

function modelFor(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string") return null;
  if (apiVersion === "monitoring.coreos.com/v1") return deps.promOp[kind] || null;
  let mod;
  try {
    mod = deps.k8s(apiVersion);
  } catch (e) {
    return null;
  }
  const m = mod[kind];
  return m && m.apiVersion === apiVersion && m.kind === kind ? m : null;
}

// Runs the compiled schema validator on a Proxy of the object that records which keys the
// validator reads. The validator reads every property its schema declares and enumerates the
// keys of maps (labels, data, resources.limits...), so a key it never touched is a field the
// schema does not have: kubectl --validate=strict (the API server's fieldValidation=Strict)
// rejects those. The plain schemas do not (Kubernetes' OpenAPI has no additionalProperties:
// false), so without this a typo such as `readinesProbe:` would pass silently.
function validateObject(obj, where, errors) {
  const Model = modelFor(obj.apiVersion, obj.kind);
  if (!Model) {
    errors.push(`${where}: no schema for apiVersion ${obj.apiVersion} kind ${obj.kind} (misspelled, or not in the Kubernetes 1.27 / prometheus-operator APIs)`);
    return;
  }
  if (/(alpha|beta)\d*$/.test(obj.apiVersion)) {
    errors.push(`${where}: ${obj.apiVersion} is a pre-release API version; use the GA one`);
  }
  const records = [];
  const tracked = track(obj, "", records);
  try {
    Model.prototype.validate.call(tracked);
  } catch (e) {
    errors.push(`${where}: schema: ${e.message}`);
    return;  // unread keys mean little once the validator stopped early
  }
  for (const r of records) {
    if (r.enumerated || Array.isArray(r.value)) continue;
    for (const k of Object.keys(r.value)) {
      if (!r.read.has(k)) errors.push(`${where}: unknown field ${r.path}/${k}`);
    }
  }
}

function track(value, p, records) {
  if (value === null || typeof value !== "object") return value;
  const rec = { path: p, read: new Set(), enumerated: false, value };
  records.push(rec);
  const children = new Map();
  return new Proxy(value, {
    get(t, k, receiver) {
      const v = Reflect.get(t, k, receiver);
      if (typeof k !== "string") return v;
      rec.read.add(k);
      if (v !== null && typeof v === "object" && Object.prototype.hasOwnProperty.call(t, k)) {
        if (!children.has(k)) children.set(k, track(v, `${p}/${k}`, records));
        return children.get(k);
      }
      return v;
    },
    has(t, k) {
      if (typeof k === "string") rec.read.add(k);
      return Reflect.has(t, k);
    },
    ownKeys(t) {
      rec.enumerated = true;
      return Reflect.ownKeys(t);
    },
  });
}

// ---------------------------------------------------------------------------------------------
// Helpers for the cross-object checks

const name = (o) => `${o.kind}/${(o.metadata || {}).name}`;
const isHeadless = (svc) => (svc.spec || {}).clusterIP === "None";

// --flag=value or --flag value in a command line; undefined when absent.
function flag(argv, f) {
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === `--${f}` && i + 1 < argv.length) return String(argv[i + 1]);
    if (String(argv[i]).startsWith(`--${f}=`)) return String(argv[i]).slice(f.length + 3);
  }
  return undefined;
}

function hostPort(s) {
  const m = /^(.*):(\d+)$/.exec(s || "");
  return m ? { host: m[1], port: Number(m[2]) } : null;
}

// Kubernetes quantities (resources, sizeLimit) in bytes / units.
function quantity(q) {
  if (q === undefined || q === null) return undefined;
  const m = /^([0-9.]+)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P|m)?$/.exec(String(q));
  if (!m) return NaN;
  const mult = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, m: 1e-3 };
  return Number(m[1]) * (m[2] ? mult[m[2]] : 1);
}

const selects = (selector, labels) =>
  !!selector && Object.keys(selector).length > 0 &&
  Object.entries(selector).every(([k, v]) => (labels || {})[k] === v);

function deepEqual(a, b) {
  return JSON.stringify(sortKeys(a)) === JSON.stringify(sortKeys(b));
}
function sortKeys(v) {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === "object") return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sortKeys(v[k])]));
  return v;
}

// The environment compose gives every worker (x-worker), with ${VAR:-default} resolved to default.
function composeWorkerEnv(errors) {
  const file = path.join(REPO, "deploy", "docker-compose.yml");
  const docs = parseYaml(fs.readFileSync(file, "utf8"), "deploy/docker-compose.yml", errors);
  const services = (docs[0] || {}).services || {};
  const env = (services.worker0 || {}).environment;
  if (!env || typeof env !== "object") {
    errors.push("deploy/docker-compose.yml: no worker0 environment to compare the NCCL settings with");
    return {};
  }
  const out = {};
  for (const [k, v] of Object.entries(env)) {
    const m = /^\$\{[A-Z_]+:-(.*)\}$/.exec(String(v));
    out[k] = m ? m[1] : String(v);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The checks

function validateDir(dir, opts = {}) {
  const errors = [];
  const files = yamlFiles(dir);
  const objects = [];  // {file, obj}
  const other = {};    // non-object YAML files by relative path
  for (const f of files) {
    let text;
    try {
      text = fs.readFileSync(path.join(dir, f), "utf8");
    } catch (e) {
      errors.push(`${f}: ${e.message}`);
      continue;
    }
    const docs = parseYaml(text, f, errors);
    if (f === "kustomization.yaml" || f === path.join("prometheus-adapter", "values.yaml")) {
      other[f] = docs[0];
      continue;
    }
    docs.forEach((obj, i) => {
      const where = `${f}[${i}]`;
      if (!obj || typeof obj !== "object" || !obj.apiVersion || !obj.kind) {
        errors.push(`${where}: not a Kubernetes object (no apiVersion/kind)`);
        return;
      }
      validateObject(obj, `${where} ${name(obj)}`, errors);
      objects.push({ file: f, obj });
    });
  }
  // The cross-object checks rely on the structure the schemas guarantee: only on valid objects.
  let summary = "";
  if (!errors.length) {
    try {
      summary = checkApp(dir, objects, other, errors, opts);
    } catch (e) {
      errors.push(`cross-object checks stopped: ${e.stack}`);
    }
  }
  return { errors, summary, files: files.length, objects: objects.length };
}

function checkApp(dir, objects, other, errors, opts) {
  const err = (m) => errors.push(m);

  // --- kustomization.yaml: what `kubectl apply -k` applies
  const kust = other["kustomization.yaml"];
  if (!kust) {
    err("kustomization.yaml: missing (kubectl apply -k needs it)");
    return "";
  }
  if (kust.apiVersion !== "kustomize.config.k8s.io/v1beta1" || kust.kind !== "Kustomization") {
    err("kustomization.yaml: apiVersion kustomize.config.k8s.io/v1beta1, kind Kustomization");
  }
  const knownKust = ["apiVersion", "kind", "namespace", "resources", "images", "labels", "commonAnnotations", "patches"];
  for (const k of Object.keys(kust)) if (!knownKust.includes(k)) err(`kustomization.yaml: unexpected field ${k}`);
  const ns = kust.namespace;
  if (!ns) err("kustomization.yaml: set namespace:");
  const resources = kust.resources || [];
  const topLevel = fs.readdirSync(dir).filter((f) => /\.ya?ml$/.test(f) && f !== "kustomization.yaml");
  for (const r of resources) if (!fs.existsSync(path.join(dir, r))) err(`kustomization.yaml: resource ${r} does not exist`);
  for (const f of topLevel) if (!resources.includes(f)) err(`kustomization.yaml: ${f} is not listed in resources`);
  const app = objects.filter((o) => resources.includes(o.file)).map((o) => o.obj);
  const of = (kind) => app.filter((o) => o.kind === kind);
  for (const o of app) {
    if (o.metadata && o.metadata.namespace && o.metadata.namespace !== ns) {
      err(`${name(o)}: namespace ${o.metadata.namespace} differs from kustomization's ${ns}`);
    }
  }
  const nsObjs = of("Namespace");
  if (nsObjs.length !== 1 || nsObjs[0].metadata.name !== ns) err(`a Namespace object named ${ns} (kustomization's namespace)`);

  // --- the workload: one Deployment (or StatefulSet) running the frontend with spawned workers
  const workloads = app.filter((o) => o.kind === "Deployment" || o.kind === "StatefulSet");
  if (workloads.length !== 1) {
    err(`exactly one Deployment/StatefulSet, found ${workloads.length}`);
    return "";
  }
  const wl = workloads[0];
  const podSpec = wl.spec.template.spec;
  const podLabels = (wl.spec.template.metadata || {}).labels || {};
  if (!selects(wl.spec.selector.matchLabels, podLabels)) err(`${name(wl)}: selector.matchLabels must match the pod template's labels`);
  const containers = podSpec.containers;
  const fe = containers.find((c) => [...(c.command || []), ...(c.args || [])][0] === "ditserve-frontend");
  if (!fe) {
    err(`${name(wl)}: a container whose command starts with ditserve-frontend`);
    return "";
  }
  const where = `${name(wl)} container ${fe.name}`;
  const argv = [...(fe.command || []), ...(fe.args || [])];
  const ports = fe.ports || [];
  const portNamed = (n) => ports.find((p) => p.name === n);
  const containerPort = (target) =>
    ports.find((p) => (typeof target === "string" ? p.name === target : p.containerPort === target));

  // image and user, as the Dockerfile builds it
  const image = String(fe.image || "");
  const m = /^(?:.*\/)?([^/:@]+)(?::([^@]+))?(?:@.*)?$/.exec(image);
  if (!m || m[1] !== "ditserve" || m[2] !== "cuda") err(`${where}: image ditserve:cuda (the Dockerfile's VARIANT=cuda), got ${image}`);
  const sc = Object.assign({}, podSpec.securityContext || {}, fe.securityContext || {});
  if (sc.runAsUser !== 10001) err(`${where}: runAsUser 10001 (the image's user ditserve), got ${sc.runAsUser}`);
  if (sc.runAsNonRoot !== true) err(`${where}: runAsNonRoot: true`);
  if ((fe.securityContext || {}).allowPrivilegeEscalation !== false) err(`${where}: allowPrivilegeEscalation: false`);

  // flags <-> ports
  const listen = {};
  for (const [f, portName, dflt] of [["listen", "grpc", "127.0.0.1:50051"], ["metrics-listen", "metrics", "127.0.0.1:9464"], ["http-listen", "http", undefined]]) {
    const v = flag(argv, f) === undefined ? dflt : flag(argv, f);
    const hp = hostPort(v);
    if (!hp) {
      err(`${where}: --${f}=HOST:PORT is required (the Services below need it)`);
      continue;
    }
    if (/^(127\.|localhost$|\[::1\]$)/.test(hp.host)) err(`${where}: --${f} listens on ${hp.host}: the kubelet and Services reach the pod IP, use 0.0.0.0`);
    const p = portNamed(portName);
    if (!p || p.containerPort !== hp.port) err(`${where}: containerPort named ${portName} must be --${f}'s port ${hp.port}`);
    listen[portName] = hp.port;
  }
  const grpcPort = listen.grpc;
  const metricsPort = listen.metrics;

  // tensor parallel degree <-> GPUs
  const spawn = Number(flag(argv, "spawn-workers") || 1);
  if (flag(argv, "workers") !== undefined) err(`${where}: --workers (remote workers) is not this layout; the pod spawns its ranks (--spawn-workers)`);
  const limits = (fe.resources || {}).limits || {};
  const requests = (fe.resources || {}).requests || {};
  const gpus = Number(limits["nvidia.com/gpu"]);
  if (gpus !== spawn) err(`${where}: limits nvidia.com/gpu (${limits["nvidia.com/gpu"]}) must equal --spawn-workers (${spawn}): every rank sees every GPU and takes its own`);
  if (requests["nvidia.com/gpu"] !== undefined && Number(requests["nvidia.com/gpu"]) !== gpus) err(`${where}: requests nvidia.com/gpu must equal the limit`);
  if (spawn !== 4) err(`${where}: --spawn-workers=4 (one pod per 4-GPU node)`);
  if (flag(argv, "device") !== "cuda") err(`${where}: --device=cuda`);

  // NCCL environment as in deploy/docker-compose.yml
  const env = Object.fromEntries((fe.env || []).map((e) => [e.name, e.value]));
  for (const [k, v] of Object.entries(composeWorkerEnv(errors))) {
    if (env[k] !== v) err(`${where}: env ${k}=${v} as deploy/docker-compose.yml's workers (got ${env[k]})`);
  }
  if ("CUDA_VISIBLE_DEVICES" in env) err(`${where}: no CUDA_VISIBLE_DEVICES (every rank must see all GPUs for P2P/NVLink)`);

  // volumes: model read-only, /dev/shm in memory, writable /tmp under a read-only root
  const mounts = fe.volumeMounts || [];
  const volume = (n) => (podSpec.volumes || []).find((v) => v.name === n);
  const model = flag(argv, "model");
  const modelMount = mounts.find((vm) => vm.mountPath === model);
  if (!modelMount) err(`${where}: a volumeMount at --model's path ${model}`);
  else {
    if (modelMount.readOnly !== true) err(`${where}: the model volume is mounted readOnly: true`);
    const v = volume(modelMount.name) || {};
    if (v.persistentVolumeClaim) {
      if (v.persistentVolumeClaim.readOnly !== true) err(`${where}: the model claim is readOnly: true`);
    } else if (!v.hostPath) err(`${where}: the model volume is a persistentVolumeClaim or a hostPath`);
    // deploy/README.md's hostPath overlay replaces /spec/template/spec/volumes/0.
    if (((podSpec.volumes || [])[0] || {}).name !== modelMount.name) err(`${name(wl)}: the model volume must stay the first volume (deploy/README.md's hostPath patch replaces volumes/0)`);
  }
  const shmMount = mounts.find((vm) => vm.mountPath === "/dev/shm");
  const shm = shmMount && (volume(shmMount.name) || {}).emptyDir;
  if (!shm || shm.medium !== "Memory") err(`${where}: /dev/shm must be an emptyDir with medium: Memory (NCCL's SHM transport; a pod's default is 64 MiB)`);
  else {
    const size = quantity(shm.sizeLimit);
    if (!(size >= 2 ** 30)) err(`${where}: the /dev/shm emptyDir needs a sizeLimit of at least 1Gi`);
    const mem = quantity(limits.memory);
    if (!(mem > size)) err(`${where}: the memory limit (${limits.memory}) must exceed /dev/shm's sizeLimit (${shm.sizeLimit}), which it includes`);
  }
  if ((fe.securityContext || {}).readOnlyRootFilesystem === true) {
    const tmp = mounts.find((vm) => vm.mountPath === "/tmp");
    if (!tmp || !(volume(tmp.name) || {}).emptyDir) err(`${where}: a read-only root needs a writable /tmp (emptyDir) for the workers' port files`);
  }

  // probes: native gRPC on the --listen port, long enough for loading and re-forming
  const initTimeout = Number(flag(argv, "init-timeout") || 1800);
  const okService = (s) => s === undefined || s === "" || s === "ditserve.v1.ImageGeneration";
  for (const kind of ["startupProbe", "readinessProbe", "livenessProbe"]) {
    const pr = fe[kind];
    if (!pr) {
      err(`${where}: a ${kind}`);
      continue;
    }
    const handlers = ["exec", "httpGet", "tcpSocket", "grpc"].filter((h) => pr[h] !== undefined);
    if (handlers.length !== 1) err(`${where}: ${kind} must have exactly one handler, has ${handlers.join(", ") || "none"} (the API server refuses more)`);
    if (!pr.grpc) err(`${where}: ${kind} must be the native grpc probe (grpc.health.v1)`);
    else {
      if (pr.grpc.port !== grpcPort) err(`${where}: ${kind} grpc.port ${pr.grpc.port} must be --listen's port ${grpcPort}`);
      if (!okService(pr.grpc.service)) err(`${where}: ${kind} grpc.service must be "" or ditserve.v1.ImageGeneration (the frontend serves no other)`);
    }
  }
  const window = (pr) => (pr ? (pr.periodSeconds || 10) * (pr.failureThreshold || 3) : 0);
  if (fe.startupProbe && window(fe.startupProbe) < initTimeout) {
    err(`${where}: startupProbe allows ${window(fe.startupProbe)} s, less than --init-timeout ${initTimeout} s of weight loading`);
  }
  if (fe.livenessProbe) {
    if (window(fe.livenessProbe) < initTimeout) {
      err(`${where}: livenessProbe gives up after ${window(fe.livenessProbe)} s of NOT_SERVING, less than a re-formation may take (--init-timeout ${initTimeout} s)`);
    }
    if ((fe.livenessProbe.timeoutSeconds || 1) < 5) err(`${where}: livenessProbe timeoutSeconds >= 5 (a busy node must not look dead)`);
  }
  if (fe.readinessProbe && window(fe.readinessProbe) > 60) err(`${where}: readinessProbe should take a NOT_SERVING pod out within a minute`);
  if (wl.kind === "Deployment" && (wl.spec.progressDeadlineSeconds || 600) < window(fe.startupProbe)) {
    err(`${name(wl)}: progressDeadlineSeconds (${wl.spec.progressDeadlineSeconds || 600}) must cover the startup window (${window(fe.startupProbe)} s)`);
  }

  // shutdown: grace period > preStop pause + drain + a step
  const drain = Number(flag(argv, "drain-seconds") || 30);
  const pre = ((fe.lifecycle || {}).preStop || {});
  let preStop = 0;
  if (pre.exec) {
    const c = pre.exec.command || [];
    preStop = c[0] === "sleep" ? Number(c[1]) : NaN;
    if (Number.isNaN(preStop)) err(`${where}: preStop exec must be ["sleep", SECONDS]`);
  } else if (pre.sleep) preStop = Number(pre.sleep.seconds);
  const grace = podSpec.terminationGracePeriodSeconds === undefined ? 30 : podSpec.terminationGracePeriodSeconds;
  const STEP_MARGIN = 10;  // the step in flight when the drain ends, and stopping the workers
  if (!(grace > preStop + drain + STEP_MARGIN)) {
    err(`${name(wl)}: terminationGracePeriodSeconds ${grace} must exceed preStop ${preStop} s + --drain-seconds ${drain} + ${STEP_MARGIN} s for the last step`);
  }

  // scrape annotations
  const ann = (wl.spec.template.metadata || {}).annotations || {};
  if (ann["prometheus.io/scrape"] !== "true" || ann["prometheus.io/port"] !== String(metricsPort) || ann["prometheus.io/path"] !== "/metrics") {
    err(`${name(wl)}: pod annotations prometheus.io/scrape "true", prometheus.io/port "${metricsPort}", prometheus.io/path /metrics`);
  }

  // --- Services
  const services = of("Service");
  const targetOf = (svc, p) => {
    const t = p.targetPort === undefined ? p.port : p.targetPort;
    return containerPort(t);
  };
  for (const svc of services) {
    if (!selects(svc.spec.selector, podLabels)) err(`${name(svc)}: selector ${JSON.stringify(svc.spec.selector)} selects no pod of ${name(wl)} (labels ${JSON.stringify(podLabels)})`);
    for (const p of svc.spec.ports || []) {
      if (!targetOf(svc, p)) err(`${name(svc)}: port ${p.name || p.port} targets ${p.targetPort}, which the container does not expose`);
    }
  }
  const exposes = (svc, cport) => (svc.spec.ports || []).some((p) => (targetOf(svc, p) || {}).containerPort === cport);
  const publicSvc = services.filter((s) => !isHeadless(s) && exposes(s, grpcPort));
  if (publicSvc.length !== 1) err(`one Service (with a cluster IP) for the public gRPC API on port ${grpcPort}, found ${publicSvc.length}`);
  for (const s of publicSvc) if (listen.http && !exposes(s, listen.http)) err(`${name(s)}: also the HTTP API (container port ${listen.http})`);
  const headless = services.filter((s) => isHeadless(s) && exposes(s, grpcPort));
  if (headless.length !== 1) err(`one headless Service (clusterIP: None) exposing gRPC for client-side round-robin, found ${headless.length}`);
  for (const s of headless) {
    if (s.spec.publishNotReadyAddresses) err(`${name(s)}: round-robin clients must only see ready pods (no publishNotReadyAddresses)`);
    const target = `dns:///${s.metadata.name}.`;
    const readme = fs.readFileSync(path.join(REPO, "deploy", "README.md"), "utf8");
    if (!readme.includes(target) || !readme.includes('{"loadBalancingConfig":[{"round_robin":{}}]}')) {
      err(`deploy/README.md: document the client target ${target}<namespace>.svc:${grpcPort} with {"loadBalancingConfig":[{"round_robin":{}}]}`);
    }
  }

  // --- ServiceMonitor: selects a Service whose named port reaches --metrics-listen
  const monitors = of("ServiceMonitor");
  if (monitors.length !== 1) err(`one ServiceMonitor, found ${monitors.length}`);
  for (const sm of monitors) {
    const sel = (sm.spec.selector || {}).matchLabels;
    const nsSel = sm.spec.namespaceSelector || {};
    if (nsSel.any !== true && nsSel.matchNames && !nsSel.matchNames.includes(ns)) err(`${name(sm)}: namespaceSelector excludes ${ns}`);
    const chosen = services.filter((s) => selects(sel, s.metadata.labels));
    if (!chosen.length) err(`${name(sm)}: selector ${JSON.stringify(sel)} selects no Service`);
    for (const ep of sm.spec.endpoints || []) {
      for (const s of chosen) {
        const p = (s.spec.ports || []).find((q) => q.name === ep.port);
        if (!p) err(`${name(sm)}: endpoint port ${ep.port} is not a named port of ${name(s)}`);
        else if ((targetOf(s, p) || {}).containerPort !== metricsPort) err(`${name(sm)}: endpoint port ${ep.port} of ${name(s)} does not reach --metrics-listen's port ${metricsPort}`);
      }
      if ((ep.path || "/metrics") !== "/metrics") err(`${name(sm)}: path /metrics`);
    }
    if (!(sm.spec.endpoints || []).length) err(`${name(sm)}: no endpoints`);
  }

  // --- PodDisruptionBudget
  const pdbs = of("PodDisruptionBudget");
  if (pdbs.length !== 1) err(`one PodDisruptionBudget, found ${pdbs.length}`);
  const hpas = of("HorizontalPodAutoscaler");
  for (const pdb of pdbs) {
    if (!selects((pdb.spec.selector || {}).matchLabels, podLabels)) err(`${name(pdb)}: selector must match ${name(wl)}'s pods`);
    const minA = pdb.spec.minAvailable;
    const minReplicas = hpas.length ? hpas[0].spec.minReplicas || 1 : wl.spec.replicas || 1;
    if (typeof minA === "number" && minA >= minReplicas) err(`${name(pdb)}: minAvailable ${minA} >= ${minReplicas} replicas would block every node drain`);
  }

  // --- HPA: the workload, on the frontend's queue gauge through the adapter rule
  if (hpas.length !== 1) err(`one HorizontalPodAutoscaler, found ${hpas.length}`);
  const queueGauge = queueGaugeName(errors);
  for (const hpa of hpas) {
    const ref = hpa.spec.scaleTargetRef;
    if (ref.kind !== wl.kind || ref.name !== wl.metadata.name || ref.apiVersion !== wl.apiVersion) {
      err(`${name(hpa)}: scaleTargetRef ${ref.apiVersion}/${ref.kind}/${ref.name} must be ${wl.apiVersion}/${wl.kind}/${wl.metadata.name}`);
    }
    if (wl.spec.replicas !== undefined) err(`${name(wl)}: leave replicas out, the HPA owns it (kubectl apply would reset it)`);
    if (!((hpa.spec.minReplicas || 1) >= 1 && hpa.spec.maxReplicas >= (hpa.spec.minReplicas || 1))) err(`${name(hpa)}: 1 <= minReplicas <= maxReplicas`);
    const pm = (hpa.spec.metrics || []).filter((x) => x.type === "Pods");
    if (pm.length !== 1 || pm[0].pods.metric.name !== queueGauge) {
      err(`${name(hpa)}: one Pods metric named ${queueGauge} (the frontend's queue gauge)`);
    } else if (pm[0].pods.target.type !== "AverageValue" || !(quantity(pm[0].pods.target.averageValue) > 0)) {
      err(`${name(hpa)}: Pods metric target type AverageValue with a positive averageValue`);
    }
    checkAdapter(objects, other, queueGauge, errors);
  }

  // --- kustomize itself, where kubectl is installed (it is not a Debian 12 package)
  let built = "";
  if (opts.kubectl !== false) built = kustomizeBuild(dir, app, ns, errors);
  return `${app.length} objects applied by kustomization.yaml (${app.map(name).join(", ")})${built}`;
}

// The metric name of the frontend's queue gauge, from the sources that register and document it.
function queueGaugeName(errors) {
  const src = fs.readFileSync(path.join(REPO, "metrics", "ditserve_metrics.cc"), "utf8");
  const m = /queue_depth_\s*=\s*&\s*gauge\(\s*"([a-z_]+)"/.exec(src);
  if (!m) {
    errors.push("metrics/ditserve_metrics.cc: cannot find the queue depth gauge's registration");
    return undefined;
  }
  const fe = fs.readFileSync(path.join(REPO, "server", "frontend_metrics.cc"), "utf8");
  if (!/queue_depth\(\)\.Set\(/.test(fe)) errors.push("server/frontend_metrics.cc: no longer sets queue_depth()");
  const doc = fs.readFileSync(path.join(REPO, "metrics", "METRICS.md"), "utf8");
  if (!doc.includes(`| \`${m[1]}\` | gauge |`)) errors.push(`metrics/METRICS.md: does not list ${m[1]} as a gauge`);
  return m[1];
}

// prometheus-adapter/: the Helm values and the ConfigMap carry the same rule, and it serves the
// HPA's metric per pod.
function checkAdapter(objects, other, metric, errors) {
  const err = (m) => errors.push(`prometheus-adapter: ${m}`);
  const values = other[path.join("prometheus-adapter", "values.yaml")];
  const cmObj = objects.find((o) => o.file === path.join("prometheus-adapter", "configmap.yaml"));
  if (!values || !cmObj) {
    err("values.yaml and configmap.yaml are both needed");
    return;
  }
  const knownValues = ["rules"];
  for (const k of Object.keys(values)) if (!knownValues.includes(k)) err(`values.yaml: unexpected key ${k}`);
  const valueRules = ((values.rules || {}).custom) || [];
  const cfgText = (cmObj.obj.data || {})["config.yaml"];
  if (!cfgText) {
    err("configmap.yaml: data config.yaml (the adapter's --config file)");
    return;
  }
  const cfgErrors = [];
  const cfg = parseYaml(cfgText, "configmap.yaml data config.yaml", cfgErrors)[0] || {};
  cfgErrors.forEach(err);
  if (!deepEqual(cfg.rules, valueRules)) err("configmap.yaml's rules differ from values.yaml's rules.custom");
  const rule = valueRules.find((r) => String(r.seriesQuery || "").startsWith(metric));
  if (!rule) {
    err(`no rule whose seriesQuery selects ${metric}`);
    return;
  }
  const known = ["seriesQuery", "seriesFilters", "resources", "name", "metricsQuery"];
  for (const k of Object.keys(rule)) if (!known.includes(k)) err(`rule: unknown field ${k}`);
  const ov = (rule.resources || {}).overrides || {};
  if ((ov.namespace || {}).resource !== "namespace" || (ov.pod || {}).resource !== "pod") {
    err("rule: resources.overrides must map the namespace and pod labels (a Pods metric is per pod)");
  }
  const exposed = rule.name && rule.name.as ? rule.name.as : metric;
  if (exposed !== metric) err(`rule: exposes ${exposed}, the HPA asks for ${metric}`);
  if (rule.name && rule.name.matches && !new RegExp(rule.name.matches).test(metric)) err(`rule: name.matches ${rule.name.matches} does not match ${metric}`);
  for (const t of ["<<.Series>>", "<<.LabelMatchers>>", "<<.GroupBy>>"]) {
    if (!String(rule.metricsQuery || "").includes(t)) err(`rule: metricsQuery lacks ${t}`);
  }
}

// `kubectl kustomize DIR`, when kubectl exists: the objects it renders must be the ones checked
// above, each in the kustomization's namespace (cluster-scoped Namespace aside).
function kustomizeBuild(dir, app, ns, errors) {
  const which = childProcess.spawnSync("sh", ["-c", "command -v kubectl"], { encoding: "utf8" });
  if (which.status !== 0) return "; kubectl not on PATH, kustomize build not run";
  const r = childProcess.spawnSync("kubectl", ["kustomize", dir], { encoding: "utf8", timeout: 60000 });
  if (r.status !== 0) {
    errors.push(`kubectl kustomize ${dir} failed: ${(r.stderr || r.error || "").toString().trim()}`);
    return "";
  }
  const parseErrors = [];
  const built = parseYaml(r.stdout, "kubectl kustomize output", parseErrors);
  parseErrors.forEach((e) => errors.push(e));
  const names = (list) => list.map(name).sort().join(", ");
  if (names(built) !== names(app)) errors.push(`kubectl kustomize renders ${names(built)}, expected ${names(app)}`);
  for (const o of built) {
    if (o.kind !== "Namespace" && (o.metadata || {}).namespace !== ns) errors.push(`kubectl kustomize: ${name(o)} not in namespace ${ns}`);
  }
  return `; kubectl kustomize renders the same ${built.length}`;
}

// ---------------------------------------------------------------------------------------------
// Selftest: broken copies must fail, each with the complaint it is about.

const MUTATIONS = [
  // [file (or files, each edited alike), from (its first occurrence is replaced), to,
  //  the complaint expected among the errors (regex), what the broken copy is]
  ["service.yaml", "app.kubernetes.io/component: server\n  ports:\n    - name: grpc\n      port: 50051\n      targetPort: grpc\n      protocol: TCP\n      appProtocol: grpc\n    - name: http\n      port: 8080\n      targetPort: http\n      protocol: TCP\n      appProtocol: http\n---\n# Headless",
    "app.kubernetes.io/component: frontend\n  ports:\n    - name: grpc\n      port: 50051\n      targetPort: grpc\n      protocol: TCP\n      appProtocol: grpc\n    - name: http\n      port: 8080\n      targetPort: http\n      protocol: TCP\n      appProtocol: http\n---\n# Headless",
    /Service\/ditserve: selector .* selects no pod/, "public Service selector misses the pods"],
  ["service.yaml", "targetPort: metrics", "targetPort: 9465", /targets 9465/, "metrics Service targets a port the container lacks"],
  ["deployment.yaml", "          readinessProbe:\n            # Out of the Services' endpoints within ~10 s of NOT_SERVING (re-forming, draining).\n            grpc:\n              port: 50051",
    "          readinessProbe:\n            # Out of the Services' endpoints within ~10 s of NOT_SERVING (re-forming, draining).\n            grpc:\n              port: 50052",
    /readinessProbe grpc.port 50052 must be --listen's port 50051/, "readiness probe on another port"],
  ["deployment.yaml", "livenessProbe:\n            # Restart", "livenessProbe:\n            httpGet: {path: /healthz, port: metrics}\n            # Restart", /livenessProbe must have exactly one handler, has httpGet, grpc/, "liveness probe with two handlers"],
  ["deployment.yaml", "            periodSeconds: 30\n            timeoutSeconds: 10\n            failureThreshold: 62", "            periodSeconds: 10\n            timeoutSeconds: 10\n            failureThreshold: 3",
    /livenessProbe gives up after 30 s/, "liveness that would kill a re-forming pod"],
  ["deployment.yaml", "failureThreshold: 186", "failureThreshold: 30", /startupProbe allows 300 s, less than --init-timeout 1800/, "startup probe shorter than weight loading"],
  ["deployment.yaml", "terminationGracePeriodSeconds: 60", "terminationGracePeriodSeconds: 30", /terminationGracePeriodSeconds 30 must exceed/, "grace period shorter than the drain"],
  ["deployment.yaml", "--drain-seconds=30 ", "--drain-seconds=50 ", /--drain-seconds 50/, "drain longer than the grace period"],
  ["deployment.yaml", "--metrics-listen=0.0.0.0:9464", "--metrics-listen=0.0.0.0:9465", /containerPort named metrics must be --metrics-listen's port 9465/, "metrics flag and container port disagree"],
  ["deployment.yaml", "--listen=0.0.0.0:50051", "--listen=127.0.0.1:50051", /--listen listens on 127.0.0.1/, "frontend listening on loopback only"],
  ["deployment.yaml", "              nvidia.com/gpu: 4\n            limits:\n              memory: 64Gi\n              nvidia.com/gpu: 4", "              nvidia.com/gpu: 2\n            limits:\n              memory: 64Gi\n              nvidia.com/gpu: 2",
    /limits nvidia.com\/gpu \(2\) must equal --spawn-workers \(4\)/, "two GPUs for four ranks"],
  ["deployment.yaml", "              value: \"0\"                    # NVLink SHARP", "              value: \"1\"                    # NVLink SHARP", /env NCCL_NVLS_ENABLE=0/, "NVLS on"],
  ["deployment.yaml", "            medium: Memory\n", "", /medium: Memory/, "/dev/shm on disk"],
  ["deployment.yaml", "              memory: 64Gi", "              memory: 8Gi", /memory limit \(8Gi\) must exceed/, "memory limit below /dev/shm"],
  ["deployment.yaml", "              mountPath: /models\n              readOnly: true", "              mountPath: /models\n              readOnly: false", /mounted readOnly: true/, "model mounted read-write"],
  ["deployment.yaml", "runAsUser: 10001", "runAsUser: 0", /runAsUser 10001/, "root"],
  ["deployment.yaml", "      volumes:\n", "      volumes:\n        - name: scratch\n          emptyDir: {}\n", /the model volume must stay the first volume/, "a volume ahead of the model's (the README's patch would replace it)"],
  ["deployment.yaml", "image: ditserve:cuda", "image: ditserve:cpu", /image ditserve:cuda/, "the CPU image"],
  ["deployment.yaml", "readinessProbe:", "readinesProbe:", /unknown field \/spec\/template\/spec\/containers\/0\/readinesProbe/, "a misspelled field (strict validation)"],
  ["deployment.yaml", "containerPort: 9464", "containerPort: \"9464\"", /schema: .*containerPort must be integer/, "a string where the schema wants an integer"],
  ["deployment.yaml", "  selector:\n    matchLabels:\n      app.kubernetes.io/name: ditserve\n      app.kubernetes.io/component: server\n  template:", "  selector:\n    matchLabels:\n      app.kubernetes.io/name: ditserve\n      app.kubernetes.io/component: worker\n  template:",
    /selector.matchLabels must match the pod template's labels/, "Deployment selector misses its own pods"],
  ["deployment.yaml", "prometheus.io/port: \"9464\"", "prometheus.io/port: \"9090\"", /prometheus.io\/port "9464"/, "scrape annotation on the wrong port"],
  ["deployment.yaml", "  revisionHistoryLimit: 5", "  replicas: 2\n  revisionHistoryLimit: 5", /leave replicas out/, "replicas fighting the HPA"],
  ["deployment.yaml", "            - name: NCCL_IB_DISABLE\n              value: \"1\"", "            - name: NCCL_IB_DISABLE\n              value: yes", /schema: .*value must be string/, "YAML 1.1 boolean where a string is needed"],
  ["hpa.yaml", "    name: ditserve\n  minReplicas", "    name: ditserve-old\n  minReplicas", /scaleTargetRef .* must be apps\/v1\/Deployment\/ditserve/, "HPA scaling another Deployment"],
  ["hpa.yaml", "name: ditserve_queue_depth", "name: ditserve_queue_length", /one Pods metric named ditserve_queue_depth/, "HPA on a metric the frontend does not export"],
  ["hpa.yaml", "apiVersion: autoscaling/v2", "apiVersion: autoscaling/v2beta2", /pre-release API version|no schema/, "a removed HPA API version"],
  ["servicemonitor.yaml", "app.kubernetes.io/component: metrics", "app.kubernetes.io/component: monitoring", /ServiceMonitor\/ditserve: selector .* selects no Service/, "ServiceMonitor selecting nothing"],
  ["servicemonitor.yaml", "interval: 15s", "scrapeInterval: 15s", /unknown field \/spec\/endpoints\/0\/scrapeInterval/, "a ServiceMonitor field that does not exist (strict validation of the CRD schema)"],
  ["hpa.yaml", "          averageValue: \"2\"", "          averageValue: \"two\"", /schema: .*averageValue/, "a malformed quantity"],
  ["servicemonitor.yaml", "- port: metrics", "- port: grpc", /endpoint port grpc is not a named port/, "ServiceMonitor on a port the Service lacks"],
  ["pdb.yaml", "app.kubernetes.io/component: server", "app.kubernetes.io/component: api", /PodDisruptionBudget\/ditserve: selector must match/, "PDB covering no pod"],
  ["pdb.yaml", "  maxUnavailable: 1", "  minAvailable: 2", /minAvailable 2 >= 2 replicas/, "PDB that blocks every drain"],
  ["prometheus-adapter/configmap.yaml", "as: \"ditserve_queue_depth\"", "as: \"ditserve_queue\"", /configmap.yaml's rules differ from values.yaml's/, "adapter ConfigMap and Helm values disagreeing"],
  [["prometheus-adapter/configmap.yaml", "prometheus-adapter/values.yaml"], "as: \"ditserve_queue_depth\"", "as: \"ditserve_queue\"", /rule: exposes ditserve_queue, the HPA asks for ditserve_queue_depth/, "adapter rule exposing another name than the HPA's"],
  [["prometheus-adapter/configmap.yaml", "prometheus-adapter/values.yaml"], "pod: {resource: pod}", "pod: {resource: pods}", /resources.overrides must map the namespace and pod labels/, "adapter rule not per pod"],
  [["prometheus-adapter/configmap.yaml", "prometheus-adapter/values.yaml"], "ditserve_queue_depth{namespace", "ditserve_queue_length{namespace", /no rule whose seriesQuery selects ditserve_queue_depth/, "adapter rule on another series"],
  ["kustomization.yaml", "  - pdb.yaml\n", "", /pdb.yaml is not listed in resources/, "a manifest left out of the kustomization"],
  ["namespace.yaml", "name: ditserve\n", "name: ditserve-prod\n", /a Namespace object named ditserve/, "Namespace differing from kustomization's"],
  ["service.yaml", "  clusterIP: None\n  selector", "  selector", /one headless Service/, "no headless Service for round-robin"],
  ["service.yaml", "      port: 8080\n      targetPort: http\n", "      port: 8080\n      port: 8081\n      targetPort: http\n", /YAML: Map keys must be unique/, "a duplicate key"],
  ["deployment.yaml", "  template:\n    metadata:\n", "  template:\n   metadata:\n", /YAML:/, "broken indentation"],
];

function copyDir(src, dst) {
  fs.mkdirSync(dst, { recursive: true });
  for (const e of fs.readdirSync(src, { withFileTypes: true })) {
    const s = path.join(src, e.name);
    const d = path.join(dst, e.name);
    if (e.isDirectory()) copyDir(s, d);
    else fs.copyFileSync(s, d);
  }
}

function selftest(dir) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "k8s-validate-"));
  let failures = 0;
  try {
    const copy = path.join(tmp, "k8s");
    copyDir(dir, copy);
    const clean = validateDir(copy, { kubectl: false });
    if (clean.errors.length) {
      console.log("selftest: the pristine copy fails:\n  " + clean.errors.join("\n  "));
      return 1;
    }
    let run = 0;
    for (const [fileOrFiles, from, to, expect, what] of MUTATIONS) {
      const files = [].concat(fileOrFiles);
      const file = files.join(" + ");
      const originals = files.map((f) => fs.readFileSync(path.join(copy, f), "utf8"));
      if (!originals.every((o) => o.includes(from))) {
        console.log(`selftest: FAIL: the edit for "${what}" no longer applies to ${file} (update MUTATIONS)`);
        failures++;
        continue;
      }
      files.forEach((f, i) => fs.writeFileSync(path.join(copy, f), originals[i].replace(from, to)));
      const r = validateDir(copy, { kubectl: false });
      files.forEach((f, i) => fs.writeFileSync(path.join(copy, f), originals[i]));
      run++;
      if (!r.errors.length) {
        console.log(`selftest: FAIL: accepted ${file} with ${what}`);
        failures++;
      } else if (!r.errors.some((e) => expect.test(e))) {
        console.log(`selftest: FAIL: ${file} with ${what} was rejected, but not for ${expect}:\n  ${r.errors.join("\n  ")}`);
        failures++;
      } else {
        console.log(`selftest: rejects ${what}: ${r.errors.find((e) => expect.test(e)).split("\n")[0]}`);
      }
    }
    console.log(failures ? `selftest: FAILED (${failures} of ${run} broken copies)` : `selftest: OK (${run} broken copies rejected)`);
    return failures ? 1 : 0;
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

function main(argv) {
  if (argv[0] === "--selftest") return selftest(argv[1] || DEFAULT_DIR);
  if (argv[0] && argv[0].startsWith("-")) {
    console.error("usage: validate.js [DIR] | --selftest [DIR]");
    return 2;
  }
  const dir = path.resolve(argv[0] || DEFAULT_DIR);
  const r = validateDir(dir);
  if (r.errors.length) {
    console.log(r.errors.map((e) => `k8s: FAIL: ${e}`).join("\n"));
    const rel = path.relative(REPO, dir);
    console.log(`k8s: ${r.errors.length} problem(s) in ${rel && !rel.startsWith("..") ? rel : dir}`);
    return 1;
  }
  console.log(`k8s: OK (${r.files} YAML files, ${r.objects} objects valid against their schemas; ${r.summary})`);
  return 0;
}

process.exitCode = main(process.argv.slice(2));
