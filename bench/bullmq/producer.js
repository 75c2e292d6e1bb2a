'use strict';
// One BullMQ producer process of make bench-jobs: bench/jobs_producer.lua's
// counterpart, with the same arguments, modes and payloads:
//   NODE_PATH=build/bullmq/node_modules node bench/bullmq/producer.js PORT QUEUE DIR NAME MODE COUNT [ARG]
//   batch  COUNT jobs due in an hour, queue.addBulk in lists of ARG jobs
//   one    COUNT jobs due in an hour, one awaited queue.add each
//   at     COUNT jobs due at Unix time ARG, in lists of SETUP_LIST
//   paced  COUNT jobs, RATE a second, each due DELAY s after it is added
//          (ARG = "RATE,DELAY")
// Every job's data is { n: i, due: the Unix time it is due }, by this
// machine's clock. Writes the seconds from the first call to the last reply
// to DIR/result.NAME.
const fs = require('fs');
const { Queue } = require('bullmq');

const SETUP_LIST = 1000; // jobs a list when the lists are not what is measured
const FAR = 3600; // seconds: the delay of jobs that must not fall due

const [port, queueName, dir, name, mode, countArg, modeArg] = process.argv.slice(2);
const count = Number(countArg);
const now = () => (performance.timeOrigin + performance.now()) / 1000;
const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));
const delayMs = (due) => Math.max(0, Math.round((due - now()) * 1000));

async function addLists(queue, size, dueOf) {
  for (let first = 1; first <= count; first += size) {
    const list = [];
    for (let i = first; i <= Math.min(count, first + size - 1); i++) {
      const due = dueOf();
      list.push({ name: 'job', data: { n: i, due }, opts: { delay: delayMs(due) } });
    }
    await queue.addBulk(list);
  }
}

async function addPaced(queue, rate, delay) {
  const base = now();
  for (let i = 1; i <= count; i++) {
    const wait = base + (i - 1) / rate - now();
    if (wait > 0) await sleep(wait);
    const due = now() + delay;
    await queue.add('job', { n: i, due }, { delay: Math.round(delay * 1000) });
  }
}

const MODES = {
  batch: (queue) => addLists(queue, Number(modeArg), () => now() + FAR),
  one: async (queue) => {
    for (let i = 1; i <= count; i++) {
      await queue.add('job', { n: i, due: now() + FAR }, { delay: FAR * 1000 });
    }
  },
  at: (queue) => addLists(queue, SETUP_LIST, () => Number(modeArg)),
  paced: (queue) => {
    const [rate, delay] = String(modeArg).split(',').map(Number);
    return addPaced(queue, rate, delay);
  },
};

async function main() {
  const run = MODES[mode];
  if (!run) throw new Error('mode: batch, one, at or paced expected');
  const queue = new Queue(queueName, { connection: { host: '127.0.0.1', port: Number(port) } });
  await queue.getJobCounts('delayed'); // connected, off the clock
  const started = now();
  await run(queue);
  const seconds = now() - started;
  fs.writeFileSync(`${dir}/result.${name}.tmp`, `${seconds.toFixed(6)}\n`);
  fs.renameSync(`${dir}/result.${name}.tmp`, `${dir}/result.${name}`);
  await queue.close();
}

main().catch((err) => {
  process.stderr.write(`bullmq producer ${name}: ${err.stack || err}\n`);
  process.exit(1);
});
