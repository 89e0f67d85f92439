// node consumer.js BOOTSTRAP TOPIC GROUP — one group member; prints "R partition offset key" per record.
// SIGTERM: disconnect (commit, LeaveGroup) and exit 0. Fetch keeps kafkajs' default maxWaitTimeInMs (5000);
// kafkajs heartbeats only between fetches, so the session timeout must exceed that wait (8000 here).
const { Kafka, logLevel } = require('kafkajs');

const [bootstrap, topic, groupId] = process.argv.slice(2);
(async () => {
  const kafka = new Kafka({ clientId: 'compat-kafkajs', brokers: [bootstrap], logLevel: logLevel.WARN });
  const consumer = kafka.consumer({ groupId, sessionTimeout: 8000, heartbeatInterval: 500 });
  process.on('SIGTERM', async () => {
    try { await consumer.disconnect(); process.exit(0); } catch (e) { console.error(e); process.exit(1); }
  });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    autoCommitInterval: 100,
    eachMessage: async ({ partition, message }) => {
      process.stdout.write(`R ${partition} ${message.offset} ${message.key.toString()}\n`);
    },
  });
})().catch((e) => { console.error(e); process.exit(1); });
