// node create_topic.js BOOTSTRAP TOPIC PARTITIONS — CreateTopics through kafkajs' admin client.
const { Kafka, logLevel } = require('kafkajs');

const [bootstrap, topic, partitions] = process.argv.slice(2);
(async () => {
  const admin = new Kafka({ clientId: 'compat-admin', brokers: [bootstrap], logLevel: logLevel.WARN }).admin();
  await admin.connect();
  const created = await admin.createTopics({ topics: [{ topic, numPartitions: Number(partitions) }],
                                             waitForLeaders: true });
  await admin.disconnect();
  console.log(created ? 'created' : 'exists');
})().catch((e) => { console.error(e); process.exit(1); });
