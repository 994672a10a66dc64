// MQTT.js interoperability check for the Tidemark broker.
//
// Connects to the broker at TIDEMARK_MQTT_URL (for example
// mqtt://127.0.0.1:1883) with MQTT 3.1.1 and 5.0 clients and checks:
// QoS 0, 1 and 2 publish/subscribe (delivered QoS, payload, 5.0 user
// properties), and a persistent session that queues QoS 1 and 2 messages
// while its client is away and delivers them once it reconnects.
// Prints one line per check and exits non-zero on the first mismatch.
'use strict';

const mqtt = require('mqtt');

const url = process.env.TIDEMARK_MQTT_URL;
if (!url) {
  console.error('TIDEMARK_MQTT_URL is not set');
  process.exit(2);
}
const WAIT_MS = 10000;
const run = `${process.pid}`;

function fail(msg) {
  throw new Error(msg);
}

function withTimeout(p, what) {
  let timer;
  return Promise.race([
    p,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), WAIT_MS);
    }),
  ]).finally(() => clearTimeout(timer));
}

// connect resolves with the client and its CONNACK once connected.
function connect(version, clientId, clean, props) {
  const opts = {
    protocolVersion: version,
    clientId,
    clean,
    reconnectPeriod: 0,
    connectTimeout: WAIT_MS,
    keepalive: 30,
  };
  if (version === 5 && props) opts.properties = props;
  const client = mqtt.connect(url, opts);
  const inbox = [];
  const waiters = [];
  client.on('message', (topic, payload, packet) => {
    inbox.push({ topic, payload: payload.toString(), packet });
    // Each waiter re-queues itself while short of messages: run only the
    // ones waiting now.
    for (const w of waiters.splice(0)) w();
  });
  client.nextMessages = (n, what) =>
    withTimeout(
      new Promise((resolve) => {
        const check = () => {
          if (inbox.length >= n) resolve(inbox.splice(0, n));
          else waiters.push(check);
        };
        check();
      }),
      `${clientId}: ${what}`,
    );
  client.inbox = inbox;
  return withTimeout(
    new Promise((resolve, reject) => {
      client.once('connect', (connack) => resolve({ client, connack }));
      client.once('error', reject);
    }),
    `connect ${clientId}`,
  );
}

function end(client) {
  return withTimeout(client.endAsync(), 'disconnect');
}

async function subscribe(client, filter, qos) {
  const granted = await withTimeout(client.subscribeAsync(filter, { qos }), `subscribe ${filter}`);
  if (granted.length !== 1 || granted[0].qos !== qos) {
    fail(`subscribe ${filter}: granted ${JSON.stringify(granted)}, want QoS ${qos}`);
  }
}

function publish(client, topic, payload, qos, props) {
  const opts = { qos };
  if (props) opts.properties = props;
  return withTimeout(client.publishAsync(topic, payload, opts), `publish ${topic}`);
}

async function pubSub(version) {
  const base = `interop/${run}/v${version}`;
  const { client: sub } = await connect(version, `interop-sub-${run}-v${version}`, true);
  const { client: pub } = await connect(version, `interop-pub-${run}-v${version}`, true);
  await subscribe(sub, `${base}/#`, 2);
  for (const qos of [0, 1, 2]) {
    const topic = `${base}/q${qos}`;
    const payload = `hello v${version} qos ${qos}`;
    const props = version === 5 ? { userProperties: { k: 'v' }, responseTopic: `${base}/reply`, correlationData: Buffer.from([1, 2, 3]) } : undefined;
    await publish(pub, topic, payload, qos, props);
    const [m] = await sub.nextMessages(1, `QoS ${qos} message`);
    if (m.topic !== topic || m.payload !== payload) fail(`QoS ${qos}: got ${m.topic} ${m.payload}, want ${topic} ${payload}`);
    if (m.packet.qos !== qos) fail(`QoS ${qos}: delivered at QoS ${m.packet.qos}`);
    if (version === 5) {
      const p = m.packet.properties || {};
      if (!p.userProperties || p.userProperties.k !== 'v') fail(`QoS ${qos}: user property lost: ${JSON.stringify(p)}`);
      if (p.responseTopic !== `${base}/reply`) fail(`QoS ${qos}: response topic lost`);
      if (!p.correlationData || !Buffer.from([1, 2, 3]).equals(p.correlationData)) fail(`QoS ${qos}: correlation data lost`);
    }
    console.log(`ok v${version} QoS ${qos} publish/subscribe`);
  }
  await end(sub);
  await end(pub);
}

async function persistentSession(version) {
  const base = `interop/${run}/persist/v${version}`;
  const id = `interop-persist-${run}-v${version}`;
  const props = version === 5 ? { sessionExpiryInterval: 300 } : undefined;
  let { client: sub, connack } = await connect(version, id, false, props);
  if (connack.sessionPresent) fail('session present on the first connect');
  await subscribe(sub, `${base}/#`, 2);
  await end(sub);

  const { client: pub } = await connect(version, `interop-ppub-${run}-v${version}`, true);
  await publish(pub, `${base}/a`, 'queued-1', 1);
  await publish(pub, `${base}/a`, 'queued-2', 2);
  await publish(pub, `${base}/a`, 'not-queued-0', 0);
  // A QoS 0 publish resolves once written, before the broker has read it;
  // read later, after the reconnect below, it would rightly reach the
  // session live. The broker takes one connection's packets in order, so
  // the acknowledgement of a QoS 1 message sent behind it (to a topic the
  // session does not match) means it was handled while the session was
  // offline.
  await publish(pub, `interop/${run}/persist-sync/v${version}`, 'sync', 1);

  ({ client: sub, connack } = await connect(version, id, false, props));
  if (!connack.sessionPresent) fail('session not present on reconnect');
  const got = await sub.nextMessages(2, 'queued messages');
  const payloads = got.map((m) => m.payload);
  if (payloads[0] !== 'queued-1' || payloads[1] !== 'queued-2') fail(`queued messages ${JSON.stringify(payloads)}`);
  await publish(pub, `${base}/a`, 'live', 2);
  const [live] = await sub.nextMessages(1, 'live message');
  if (live.payload !== 'live') fail(`live message ${live.payload}, want live (a queued QoS 0 or duplicate came first?)`);
  await new Promise((r) => setTimeout(r, 300));
  if (sub.inbox.length) fail(`unexpected messages ${JSON.stringify(sub.inbox.map((m) => m.payload))}`);
  console.log(`ok v${version} persistent session reconnect`);
  // Leave no session behind: reconnect with a clean session and go.
  await end(sub);
  ({ client: sub } = await connect(version, id, true));
  await end(sub);
  await end(pub);
}

async function main() {
  for (const v of [4, 5]) {
    await pubSub(v);
    await persistentSession(v);
  }
  console.log('interop: all checks passed');
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(`interop FAILED: ${err && err.stack ? err.stack : err}`);
    process.exit(1);
  },
);
