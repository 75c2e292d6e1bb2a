'use strict';
// One BullMQ worker process of make bench-jobs: bench/jobs_worker.lua's
// counterpart, started and stopped by bench/jobs_bench.lua through the same
// files (bench/jobs_files.lua):
//   NODE_PATH=build/bullmq/node_modules node bench/bullmq/worker.js PORT QUEUE DIR NAME [concurrency=N] [remove=1]
// Without options it runs BullMQ's defaults (concurrency 1, completed jobs
// kept); remove=1 is the worker's removeOnComplete: { count: 0 }. Each job's
// processor records its start, the due time the producer put in the job's
// data, and its end.
const fs = require('fs');
const { Worker } = require('bullmq');

const LIFETIME_MS = 120e3; // a worker never outlives this
const SLICE_MS = 50; // between looks at the stop files, as the hwt worker
const CLOSE_MS = 2000; // for running jobs to finish once asked to stop

const [port, queueName, dir, name, ...optionArgs] = process.argv.slice(2);
const options = Object.fromEntries(optionArgs.map((a) => a.split('=')));
const file = (kind, who) => (who ? `${dir}/${kind}.${who}` : `${dir}/${kind}`);

// Unix seconds with sub-millisecond digits (Date.now() has whole ms only).
const now = () => (performance.timeOrigin + performance.now()) / 1000;

const starts = [];
const dues = [];
const ends = [];

async function processor(job) {
  const start = now();
  starts.push(start);
  dues.push(job.data.due);
  ends.push(now());
}

function workerOptions() {
  const opts = { connection: { host: '127.0.0.1', port: Number(port), maxRetriesPerRequest: null } };
  if (options.concurrency) opts.concurrency = Number(options.concurrency);
  if (options.remove === '1') opts.removeOnComplete = { count: 0 };
  return opts;
}

function writeRecords() {
  const lines = starts.map((s, i) => `${s.toFixed(6)} ${dues[i].toFixed(6)} ${ends[i].toFixed(6)}\n`);
  fs.writeFileSync(`${file('out', name)}.tmp`, lines.join(''));
  fs.renameSync(`${file('out', name)}.tmp`, file('out', name));
}

async function stop(worker) {
  const timeout = new Promise((resolve) => setTimeout(resolve, CLOSE_MS));
  await Promise.race([worker.close(), timeout]);
  writeRecords();
  process.exit(0);
}

async function main() {
  const worker = new Worker(queueName, processor, workerOptions());
  worker.on('error', (err) => process.stderr.write(`bullmq worker ${name}: ${err}\n`));
  await worker.waitUntilReady();
  fs.writeFileSync(file('ready', name), '');
  const born = Date.now();
  const watch = setInterval(() => {
    if (fs.existsSync(file('stop', name)) || !fs.existsSync(file('alive')) ||
        Date.now() - born > LIFETIME_MS) {
      clearInterval(watch);
      stop(worker);
    }
  }, SLICE_MS);
}

main().catch((err) => {
  process.stderr.write(`bullmq worker ${name}: ${err.stack || err}\n`);
  process.exit(1);
});
