// MQTT.js over WebSocket against the Tidemark broker, as user alice.
//
// Connects to TIDEMARK_WS_URL (ws://host:port/mqtt or wss://...; for wss
// TIDEMARK_CA is the CA file to trust) with MQTT 5.0, checks that a
// subscription outside alice's rules is refused (0x87), subscribes to
// alice/to-js, prints "ready", and answers the first message with
// "echo:<payload>" on alice/from-js. Exits non-zero on any mismatch.
'use strict';

const fs = require('fs');
const mqtt = require('mqtt');

const url = process.env.TIDEMARK_WS_URL;
if (!url) {
  console.error('TIDEMARK_WS_URL is not set');
  process.exit(2);
}
const opts = {
  protocolVersion: 5,
  clientId: 'alice-js',
  username: 'alice',
  password: 'wonderland',
  clean: true,
  reconnectPeriod: 0,
  connectTimeout: 10000,
};
if (process.env.TIDEMARK_CA) opts.ca = fs.readFileSync(process.env.TIDEMARK_CA);

const timer = setTimeout(() => {
  console.error('timed out');
  process.exit(1);
}, 20000);

const client = mqtt.connect(url, opts);
client.on('error', (err) => {
  console.error('error:', err.message);
  process.exit(1);
});
client.on('connect', async () => {
  try {
    // MQTT.js rejects a SUBACK with a failure code.
    let refusal = null;
    try {
      const granted = await client.subscribeAsync('bob/#', { qos: 1 });
      throw new Error(`bob/# granted ${JSON.stringify(granted)}, want refused`);
    } catch (err) {
      refusal = err.message;
    }
    if (!/not authorized/i.test(refusal)) throw new Error(`bob/#: ${refusal}, want "Not authorized"`);
    console.log(`subscribe bob/#: refused (${refusal})`);
    const granted = await client.subscribeAsync('alice/to-js', { qos: 1 });
    if (granted[0].qos !== 1) throw new Error(`alice/to-js granted ${granted[0].qos}, want 1`);
    console.log('ready');
  } catch (err) {
    console.error(err.message);
    process.exit(1);
  }
});
client.on('message', async (topic, payload) => {
  console.log(`received ${topic}: ${payload}`);
  await client.publishAsync('alice/from-js', `echo:${payload}`, { qos: 1 });
  await client.endAsync();
  clearTimeout(timer);
  console.log('done');
});
