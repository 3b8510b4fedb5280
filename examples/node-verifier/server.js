#!/usr/bin/env node
// A Cohort verifier in Node.js: `exact`, exact match of the final answer against reference.answer.
//
// It implements grpo.verifier.v1.VerifierService straight from the .proto files in ../../proto
// (loaded at run time with @grpc/proto-loader: no generated code), plus grpc.health.v1 (overall
// and per verifier) and server reflection, and drains on SIGTERM. It passes `cohort conformance`.
//
//   node server.js --port 50061 [--host 127.0.0.1] [--proto-dir ../../proto]
//
// Scoring (pure: the same request always gives the same results):
//   answer     the text of the last <answer>...</answer> block, or the whole completion if none
//   compare    trimmed, whitespace collapsed; case-insensitive unless options.case_sensitive=true
//   CORRECT 1.0 | INCORRECT 0.0 | NO_ANSWER 0.0 (empty answer)          status OK
//   an empty gold answer cannot be judged: status INVALID_REFERENCE (masked, never reward 0)
'use strict';

const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { HealthImplementation } = require('grpc-health-check');
const { ReflectionService } = require('@grpc/reflection');

const VERSION = '1.0.0';
const NAME = 'exact';
const SERVICE = 'grpo.verifier.v1.VerifierService';
const LIMITS = {
  maxGroupsPerBatch: 4096,
  maxRolloutsPerGroup: 1024,
  maxMessageBytes: 8 * 1024 * 1024,
  maxCompletionChars: 1000000,
  maxQueuedGroups: 16384,
};

function parseArgs(argv) {
  const args = { host: '127.0.0.1', port: 50061, protoDir: path.resolve(__dirname, '..', '..', 'proto') };
  for (let i = 0; i < argv.length; i += 2) {
    const [key, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`missing value for ${key}`);
    if (key === '--host') args.host = value;
    else if (key === '--port') args.port = Number(value);
    else if (key === '--proto-dir') args.protoDir = path.resolve(value);
    else throw new Error(`unknown argument ${key} (expected --host, --port, --proto-dir)`);
  }
  if (!Number.isInteger(args.port) || args.port < 0 || args.port > 65535) throw new Error(`bad --port ${args.port}`);
  return args;
}

// ---- scoring: plain functions, no gRPC ------------------------------------------------------

function normalise(text, caseSensitive) {
  const t = text.trim().replace(/\s+/g, ' ');
  return caseSensitive ? t : t.toLowerCase();
}

function finalAnswer(completion) {
  const matches = [...completion.matchAll(/<answer>([\s\S]*?)<\/answer>/gi)];
  return matches.length ? matches[matches.length - 1][1] : completion;
}

function scoreRollout(rollout, gold, caseSensitive) {
  const result = { index: rollout.index, status: 'ROLLOUT_STATUS_OK', reward_components: {}, flags: [] };
  if (normalise(gold, true) === '') {
    return { ...result, status: 'ROLLOUT_STATUS_INVALID_REFERENCE', verdict: 'VERDICT_UNSPECIFIED', reward: 0, detail: 'empty gold answer' };
  }
  const answer = normalise(finalAnswer(rollout.completion), caseSensitive);
  if (answer === '') {
    return { ...result, verdict: 'VERDICT_NO_ANSWER', reward: 0, reward_components: { match: 0 }, detail: 'no answer' };
  }
  const match = answer === normalise(gold, caseSensitive);
  return {
    ...result,
    verdict: match ? 'VERDICT_CORRECT' : 'VERDICT_INCORRECT',
    reward: match ? 1 : 0,
    reward_components: { match: match ? 1 : 0 },
    detail: `answer ${JSON.stringify(answer.slice(0, 60))}`,
  };
}

class RequestError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

function validateGroup(group) {
  const id = JSON.stringify(group.group_id);
  if (group.verifier !== NAME) throw new RequestError(grpc.status.INVALID_ARGUMENT, `unknown verifier ${JSON.stringify(group.verifier)}; served here: ${NAME}`);
  if (!group.rollouts.length) throw new RequestError(grpc.status.INVALID_ARGUMENT, `group ${id} has no rollouts`);
  if (group.rollouts.length > LIMITS.maxRolloutsPerGroup) {
    throw new RequestError(grpc.status.INVALID_ARGUMENT, `group ${id} has ${group.rollouts.length} rollouts; the limit is ${LIMITS.maxRolloutsPerGroup}`);
  }
  if (!group.reference || group.reference.kind !== 'answer') {
    throw new RequestError(grpc.status.INVALID_ARGUMENT, `group ${id}: verifier ${NAME} needs reference.answer`);
  }
  const seen = new Set();
  for (const r of group.rollouts) {
    if (seen.has(r.index)) throw new RequestError(grpc.status.INVALID_ARGUMENT, `group ${id}: duplicate rollout index ${r.index}`);
    seen.add(r.index);
    if (r.completion.length > LIMITS.maxCompletionChars) {
      throw new RequestError(grpc.status.INVALID_ARGUMENT, `group ${id} rollout ${r.index}: completion too long`);
    }
  }
  const cs = group.options.case_sensitive;
  if (cs !== undefined && cs !== 'true' && cs !== 'false') {
    throw new RequestError(grpc.status.INVALID_ARGUMENT, `option case_sensitive=${JSON.stringify(cs)}: expected "true" or "false"`);
  }
}

function verifyGroup(group) {
  const start = process.hrtime.bigint();
  const caseSensitive = group.options.case_sensitive === 'true';
  const results = group.rollouts.map((r) => scoreRollout(r, group.reference.answer, caseSensitive));
  const perRollout = Number(process.hrtime.bigint() - start) / group.rollouts.length;
  for (const r of results) r.verify_duration = { seconds: 0, nanos: Math.round(perRollout) };
  return { group_id: group.group_id, verifier: NAME, verifier_version: VERSION, results };
}

// ---- transport ------------------------------------------------------------------------------

function main() {
  const args = parseArgs(process.argv.slice(2));
  const protoFile = path.join(args.protoDir, 'grpo', 'verifier', 'v1', 'verifier_service.proto');
  const packageDefinition = protoLoader.loadSync(protoFile, {
    includeDirs: [args.protoDir],
    keepCase: true,
    longs: Number,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const proto = grpc.loadPackageDefinition(packageDefinition).grpo.verifier.v1;

  const health = new HealthImplementation({ '': 'SERVING', [SERVICE]: 'SERVING', [NAME]: 'SERVING' });
  const state = { draining: false };

  // Wraps a handler: draining -> UNAVAILABLE, deadline passed -> DEADLINE_EXCEEDED, RequestError -> its code.
  const unary = (handler) => (call, callback) => {
    if (state.draining) return callback({ code: grpc.status.UNAVAILABLE, details: 'server is draining (shutting down)' });
    const deadline = call.getDeadline();
    if (deadline instanceof Date && deadline.getTime() <= Date.now()) {
      return callback({ code: grpc.status.DEADLINE_EXCEEDED, details: 'deadline passed before scoring' });
    }
    try {
      callback(null, handler(call.request));
    } catch (err) {
      if (err instanceof RequestError) return callback({ code: err.code, details: err.message });
      console.error(err);
      return callback({ code: grpc.status.INTERNAL, details: String(err) });
    }
  };

  const server = new grpc.Server({
    'grpc.max_receive_message_length': LIMITS.maxMessageBytes,
    'grpc.max_send_message_length': LIMITS.maxMessageBytes,
  });
  server.addService(proto.VerifierService.service, {
    VerifyGroup: unary((req) => {
      validateGroup(req);
      return verifyGroup(req);
    }),
    BatchVerifyGroups: unary((req) => {
      if (!req.requests.length) throw new RequestError(grpc.status.INVALID_ARGUMENT, 'BatchVerifyGroupsRequest.requests is empty');
      if (req.requests.length > LIMITS.maxGroupsPerBatch) {
        throw new RequestError(grpc.status.INVALID_ARGUMENT, `${req.requests.length} groups in one call; the limit is ${LIMITS.maxGroupsPerBatch}`);
      }
      req.requests.forEach(validateGroup);
      return { responses: req.requests.map(verifyGroup) };
    }),
    ListVerifiers: unary(() => ({
      verifiers: [{ name: NAME, version: VERSION, description: 'exact match of the final answer', reference_kinds: ['answer'] }],
      limits: {
        max_groups_per_batch: LIMITS.maxGroupsPerBatch,
        max_rollouts_per_group: LIMITS.maxRolloutsPerGroup,
        max_message_bytes: LIMITS.maxMessageBytes,
        max_queued_groups: LIMITS.maxQueuedGroups,
        max_rollout_timeout: { seconds: 1, nanos: 0 },
      },
      server_version: `cohort-node-exact-verifier ${VERSION}`,
    })),
  });
  health.addToServer(server);
  new ReflectionService(packageDefinition).addToServer(server);

  // SIGTERM: health NOT_SERVING, new calls UNAVAILABLE, in-flight calls finish, then exit 0.
  const drain = (signal) => {
    if (state.draining) return;
    state.draining = true;
    console.error(`${signal}: draining`);
    for (const name of ['', SERVICE, NAME]) health.setStatus(name, 'NOT_SERVING');
    const force = setTimeout(() => server.forceShutdown(), 30000);
    force.unref();
    server.tryShutdown(() => process.exit(0));
  };
  process.on('SIGTERM', () => drain('SIGTERM'));
  process.on('SIGINT', () => drain('SIGINT'));

  const address = args.host.includes(':') ? `[${args.host}]:${args.port}` : `${args.host}:${args.port}`;
  server.bindAsync(address, grpc.ServerCredentials.createInsecure(), (err, port) => {
    if (err) {
      console.error(`cannot bind ${address}: ${err.message}`);
      process.exit(1);
    }
    console.error(`serving ${NAME} ${VERSION} on ${args.host}:${port}`);
  });
}

if (require.main === module) {
  try {
    main();
  } catch (err) {
    console.error(`error: ${err.message}`);
    process.exit(2);
  }
}

module.exports = { scoreRollout, finalAnswer, normalise };
