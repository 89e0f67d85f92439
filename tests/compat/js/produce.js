// node produce.js BOOTSTRAP TOPIC LO HI — sends keys key-LO..key-(HI-1), gzip, acks=all, in batches of 100.
const { Kafka, CompressionTypes, Partitioners, logLevel } = require('kafkajs');

const [bootstrap, topic, lo, hi] = process.argv.slice(2);
const key = (i) => 'key-' + String(i).padStart(4, '0');
(async () => {
  const kafka = new Kafka({ clientId: 'compat-producer', brokers: [bootstrap], logLevel: logLevel.WARN });
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  let acked = 0;
  for (let start = Number(lo); start < Number(hi); start += 100) {
    const messages = [];
    for (let i = start; i < Math.min(start + 100, Number(hi)); i++) {
      messages.push({ key: key(i), value: 'value of ' + key(i) });
    }
    const meta = await producer.send({ topic, messages, acks: -1, compression: CompressionTypes.GZIP });
    if (meta.some((m) => m.errorCode !== 0)) throw new Error('produce error ' + JSON.stringify(meta));
    acked += messages.length;
  }
  await producer.disconnect();
  console.log('acked ' + acked);
})().catch((e) => { console.error(e); process.exit(1); });
