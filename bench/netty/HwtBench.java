// Netty HashedWheelTimer peer of the side-by-side timer benchmark (W1..W6,
// W1s, W3s).
//
// Build and run from the repository root:
//   javac -d bench/netty/build -cp /usr/share/java/netty-common.jar bench/netty/HwtBench.java
//   java -cp bench/netty/build:/usr/share/java/netty-common.jar HwtBench <W1..W6|W1s|W3s> <N> [seconds]
//
// W1s and W3s are W1 and W3 with one shared TimerTask instance (a field, no
// per-timeout lambda): the nearest Netty has to Lua's
// timer:timeout(d, on_timeout, conn), since newTimeout takes no argument.
//
// One workload per invocation (fresh JVM). Each workload first runs a smaller,
// untimed copy of itself on a separate timer to warm up the JIT, then measures.
// Output lines: RESULT netty <workload> <metric> <value>
//
// Timers use tickDuration 1 ms, ticksPerWheel 512, maxPendingTimeouts -1
// (unlimited), except W5's first measurement, which uses Netty's defaults
// (100 ms tick, 512 ticks). Linux only (/proc/self).

import io.netty.util.HashedWheelTimer;
import io.netty.util.Timeout;
import io.netty.util.TimerTask;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.math.BigDecimal;
import java.math.MathContext;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;

public final class HwtBench {

    static final long SEED = 0x9E3779B97F4A7C15L;
    static final long MS = 1_000_000L;
    static final long S = 1_000_000_000L;
    static final long PAGE_SIZE = 4096;   // /proc/self/statm counts pages

    // ---- fixed-seed PRNG: xorshift64* ---------------------------------------

    static final class XorShift64Star {
        private long x;

        XorShift64Star(long seed) { x = seed; }

        long next() {
            x ^= x >>> 12;
            x ^= x << 25;
            x ^= x >>> 27;
            return x * 0x2545F4914F6CDD1DL;
        }

        /** Uniform double in [0, 1) from the top 53 bits. */
        double nextDouble() { return (next() >>> 11) * 0x1.0p-53; }

        /** Uniform long in [lo, hi] (nanoseconds here). */
        long uniform(long lo, long hi) { return lo + (long) (nextDouble() * (hi - lo + 1)); }

        /** Uniform int in [0, bound). */
        int below(int bound) { return (int) (nextDouble() * bound); }
    }

    /** Delays in nanoseconds, uniform in [lo, hi], drawn from a fresh fixed-seed PRNG. */
    static long[] delays(int n, long lo, long hi) {
        XorShift64Star rng = new XorShift64Star(SEED);
        long[] d = new long[n];
        for (int i = 0; i < n; i++) d[i] = rng.uniform(lo, hi);
        return d;
    }

    // ---- output -------------------------------------------------------------

    static void result(String workload, String metric, double value) {
        // six significant digits, plain notation, no trailing zeros
        String v = new BigDecimal(value).round(new MathContext(6))
                .stripTrailingZeros().toPlainString();
        System.out.println("RESULT netty " + workload + " " + metric + " " + v);
    }

    // ---- timers -------------------------------------------------------------

    /** ThreadFactory giving the worker a known name (<= 15 chars, so /proc comm shows it whole). */
    static final class NamedFactory implements ThreadFactory {
        final String name;
        volatile Thread thread;

        NamedFactory(String name) { this.name = name; }

        @Override public Thread newThread(Runnable r) {
            Thread t = new Thread(r, name);
            t.setDaemon(true);
            thread = t;
            return t;
        }
    }

    static HashedWheelTimer timer(NamedFactory f, long tickNanos) {
        return new HashedWheelTimer(f, tickNanos, TimeUnit.NANOSECONDS, 512, false, -1);
    }

    static HashedWheelTimer timer1ms(String name) { return timer(new NamedFactory(name), MS); }

    // ---- measurement helpers -------------------------------------------------

    /** Process CPU time, all JVM threads; on Linux the JDK reads it via times(), so 10 ms steps. */
    static long processCpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean)
                ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    }

    static void sleepMs(long ms) {
        try { Thread.sleep(ms); } catch (InterruptedException e) { throw new RuntimeException(e); }
    }

    /** Two full GCs and a short pause, so heap and the timer's queues settle. */
    static void settle() {
        System.gc();
        sleepMs(100);
        System.gc();
        sleepMs(100);
    }

    static long heapUsed() {
        return ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getUsed();
    }

    static long rssBytes() {
        try {
            String[] f = Files.readString(Path.of("/proc/self/statm")).trim().split("\\s+");
            return Long.parseLong(f[1]) * PAGE_SIZE;
        } catch (IOException e) { throw new RuntimeException(e); }
    }

    /** Nearest-rank percentile of an already sorted array. */
    static long percentile(long[] sorted, double p) {
        if (sorted.length == 0) return 0;
        int idx = (int) Math.ceil(p * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, idx))];
    }

    static double ms(long nanos) { return nanos / 1e6; }

    static double seconds(long nanos) { return nanos / 1e9; }

    static double opsPerSec(int n, long nanos) { return n / seconds(nanos); }

    static void await(CountDownLatch latch) {
        try { latch.await(); } catch (InterruptedException e) { throw new RuntimeException(e); }
    }

    /** Linux tid of the thread whose /proc/self/task/<tid>/comm equals name. */
    static String findTid(String name) throws IOException {
        try (var tasks = Files.list(Path.of("/proc/self/task"))) {
            for (Path task : (Iterable<Path>) tasks::iterator) {
                try {
                    if (Files.readString(task.resolve("comm")).trim().equals(name)) {
                        return task.getFileName().toString();
                    }
                } catch (IOException ignored) { /* thread exited meanwhile */ }
            }
        }
        throw new IllegalStateException("no thread named " + name);
    }

    static long voluntarySwitches(String tid) throws IOException {
        for (String line : Files.readAllLines(Path.of("/proc/self/task/" + tid + "/status"))) {
            if (line.startsWith("voluntary_ctxt_switches:")) {
                return Long.parseLong(line.substring(line.indexOf(':') + 1).trim());
            }
        }
        throw new IllegalStateException("no voluntary_ctxt_switches for tid " + tid);
    }

    /** Warm-up size for the throughput workloads W1..W3: N/10, but at least enough for C2. */
    static int warmCount(int n) { return Math.max(n / 10, 200_000); }

    static volatile long sink;   // keeps callbacks from being optimised away

    // ---- W1: schedule N one-shot timeouts, delays uniform [1 s, 60 s] ----------

    /** Schedules one timeout per delay, each with its own capturing lambda. Returns elapsed ns. */
    static long scheduleAll(HashedWheelTimer t, long[] delays, Timeout[] out) {
        long start = System.nanoTime();
        for (int i = 0; i < delays.length; i++) {
            final int id = i;
            out[i] = t.newTimeout(to -> sink += id, delays[i], TimeUnit.NANOSECONDS);
        }
        return System.nanoTime() - start;
    }

    static void w1(int n) {
        int warmN = warmCount(n);
        HashedWheelTimer warm = timer1ms("hwt-warm");
        scheduleAll(warm, delays(warmN, 1 * S, 60 * S), new Timeout[warmN]);
        warm.stop();
        warm = null;

        // Inputs and the handle array are allocated before the "before" reading,
        // so bytes_per_timeout counts only what newTimeout and the lambda keep.
        long[] d = delays(n, 1 * S, 60 * S);
        Timeout[] handles = new Timeout[n];
        HashedWheelTimer t = timer1ms("hwt-w1");
        t.start();
        settle();
        long heap0 = heapUsed(), rss0 = rssBytes();

        long elapsed = scheduleAll(t, d, handles);

        sleepMs(200);   // let the worker move the pending queue into the wheel
        settle();
        long heap1 = heapUsed(), rss1 = rssBytes();

        result("W1", "ops_per_s", opsPerSec(n, elapsed));
        result("W1", "bytes_per_timeout", (double) (heap1 - heap0) / n);
        result("W1", "bytes_rss_per_timeout", (double) (rss1 - rss0) / n);
        if (handles[n - 1] == null) throw new AssertionError();   // keep handles alive
        t.stop();
    }

    // ---- W1s / W3s: W1 and W3 with one shared TimerTask --------------------------

    /** The one task every timeout of W1s/W3s shares; its field stands in for the conn. */
    static final class SharedTask implements TimerTask {
        long fired;
        @Override public void run(Timeout timeout) { fired++; sink += fired; }
    }

    static long scheduleAllShared(HashedWheelTimer t, long[] delays, Timeout[] out, TimerTask task) {
        long start = System.nanoTime();
        for (int i = 0; i < delays.length; i++) {
            out[i] = t.newTimeout(task, delays[i], TimeUnit.NANOSECONDS);
        }
        return System.nanoTime() - start;
    }

    static void w1s(int n) {
        SharedTask task = new SharedTask();
        int warmN = warmCount(n);
        HashedWheelTimer warm = timer1ms("hwt-warm");
        scheduleAllShared(warm, delays(warmN, 1 * S, 60 * S), new Timeout[warmN], task);
        warm.stop();
        warm = null;

        long[] d = delays(n, 1 * S, 60 * S);
        Timeout[] handles = new Timeout[n];
        HashedWheelTimer t = timer1ms("hwt-w1s");
        t.start();
        settle();
        long heap0 = heapUsed(), rss0 = rssBytes();

        long elapsed = scheduleAllShared(t, d, handles, task);

        sleepMs(200);
        settle();
        long heap1 = heapUsed(), rss1 = rssBytes();

        result("W1s", "ops_per_s", opsPerSec(n, elapsed));
        result("W1s", "bytes_per_timeout", (double) (heap1 - heap0) / n);
        result("W1s", "bytes_rss_per_timeout", (double) (rss1 - rss0) / n);
        if (handles[n - 1] == null) throw new AssertionError();
        t.stop();
    }

    static long churnShared(HashedWheelTimer t, int n, TimerTask task) {
        long start = System.nanoTime();
        for (int i = 0; i < n; i++) {
            t.newTimeout(task, 30, TimeUnit.SECONDS).cancel();
        }
        return System.nanoTime() - start;
    }

    static void w3s(int n) {
        SharedTask task = new SharedTask();
        HashedWheelTimer warm = timer1ms("hwt-warm");
        churnShared(warm, warmCount(n), task);
        warm.stop();
        settle();

        HashedWheelTimer t = timer1ms("hwt-w3s");
        t.start();
        long elapsed = churnShared(t, n, task);
        result("W3s", "ops_per_s", opsPerSec(n, elapsed));
        t.stop();
    }

    // ---- W2: cancel all of them in random order ------------------------------

    static void shuffle(Timeout[] a, XorShift64Star rng) {
        for (int i = a.length - 1; i > 0; i--) {
            int j = rng.below(i + 1);
            Timeout tmp = a[i]; a[i] = a[j]; a[j] = tmp;
        }
    }

    /** Schedules N timeouts (untimed), shuffles, then times only the cancels. */
    static long cancelRun(HashedWheelTimer t, int n) {
        Timeout[] handles = new Timeout[n];
        scheduleAll(t, delays(n, 1 * S, 60 * S), handles);
        sleepMs(200);   // the worker moves them into the wheel, as in a real program
        XorShift64Star rng = new XorShift64Star(SEED);
        rng.next();     // not the same stream position as the delays
        shuffle(handles, rng);
        long start = System.nanoTime();
        for (Timeout h : handles) h.cancel();
        return System.nanoTime() - start;
    }

    static void w2(int n) {
        HashedWheelTimer warm = timer1ms("hwt-warm");
        cancelRun(warm, warmCount(n));
        warm.stop();
        settle();

        HashedWheelTimer t = timer1ms("hwt-w2");
        long elapsed = cancelRun(t, n);
        result("W2", "ops_per_s", opsPerSec(n, elapsed));
        t.stop();
    }

    // ---- W3: churn N x (newTimeout 30 s, cancel) --------------------------------

    static long churn(HashedWheelTimer t, int n) {
        long start = System.nanoTime();
        for (int i = 0; i < n; i++) {
            final int id = i;
            t.newTimeout(to -> sink += id, 30, TimeUnit.SECONDS).cancel();
        }
        return System.nanoTime() - start;
    }

    static void w3(int n) {
        HashedWheelTimer warm = timer1ms("hwt-warm");
        churn(warm, warmCount(n));
        warm.stop();
        settle();

        HashedWheelTimer t = timer1ms("hwt-w3");
        t.start();
        long elapsed = churn(t, n);
        result("W3", "ops_per_s", opsPerSec(n, elapsed));
        t.stop();
    }

    // ---- W4 / W6: fire N timeouts, measure lateness and CPU ------------------------

    static final class FireRun {
        long wallNanos, cpuNanos, schedEnd;
        long[] deadline, fired;   // System.nanoTime() values, per timeout
    }

    /**
     * Schedules one timeout per delay; each callback (on Netty's worker) records
     * its start time. Returns when the last callback has run.
     */
    static FireRun fire(HashedWheelTimer t, long[] delays) {
        int n = delays.length;
        FireRun r = new FireRun();
        r.deadline = new long[n];
        r.fired = new long[n];
        CountDownLatch done = new CountDownLatch(1);
        int[] count = {0};   // touched only by the single worker thread
        long[] lastFired = {0};

        long cpu0 = processCpuNanos();
        long start = System.nanoTime();
        for (int i = 0; i < n; i++) {
            final int id = i;
            long now = System.nanoTime();
            r.deadline[i] = now + delays[i];
            t.newTimeout(to -> {
                long at = System.nanoTime();
                r.fired[id] = at;
                if (++count[0] == n) { lastFired[0] = at; done.countDown(); }
            }, delays[i], TimeUnit.NANOSECONDS);
        }
        r.schedEnd = System.nanoTime();
        await(done);
        r.cpuNanos = processCpuNanos() - cpu0;
        r.wallNanos = lastFired[0] - start;
        return r;
    }

    /** Sorted lateness (ns) of the timeouts whose deadline is after `after`. */
    static long[] lateness(FireRun r, long after) {
        long[] late = new long[r.fired.length];
        int k = 0;
        for (int i = 0; i < late.length; i++) {
            if (r.deadline[i] > after) late[k++] = r.fired[i] - r.deadline[i];
        }
        late = Arrays.copyOf(late, k);
        Arrays.sort(late);
        return late;
    }

    /**
     * Callbacks/s while draining, as in bench/lua_bench.lua: the timeouts due
     * by the end of scheduling are the backlog; from then until the last of
     * them has run, every callback run counts. Returns {callbacks, nanos}.
     */
    static long[] drain(FireRun r) {
        long clear = r.schedEnd;
        for (int i = 0; i < r.fired.length; i++) {
            if (r.deadline[i] <= r.schedEnd && r.fired[i] > clear) clear = r.fired[i];
        }
        long count = 0;
        for (long at : r.fired) if (at >= r.schedEnd && at <= clear) count++;
        return new long[] {count, clear - r.schedEnd};
    }

    static void drainResults(String w, FireRun r) {
        long[] dr = drain(r);
        if (dr[1] > 0) result(w, "cb_per_s_drain", dr[0] / seconds(dr[1]));
        result(w, "backlog", dr[0]);
    }

    static void w4(int n) {
        HashedWheelTimer warm = timer1ms("hwt-warm");
        fire(warm, delays(Math.max(1, n / 10), 0, 1 * S));
        warm.stop();
        long[] d = delays(n, 0, 1 * S);
        settle();

        HashedWheelTimer t = timer1ms("hwt-w4");
        t.start();
        FireRun r = fire(t, d);
        long[] all = lateness(r, Long.MIN_VALUE);
        long[] after = lateness(r, r.schedEnd);
        result("W4", "n", n);
        result("W4", "wall_s", seconds(r.wallNanos));
        result("W4", "late_p50_ms", ms(percentile(all, 0.50)));
        result("W4", "late_p99_ms", ms(percentile(all, 0.99)));
        result("W4", "late_p99_after_ms", ms(percentile(after, 0.99)));
        result("W4", "late_max_ms", ms(all[all.length - 1]));
        result("W4", "cpu_s", seconds(r.cpuNanos));
        drainResults("W4", r);
        t.stop();
    }

    // n as given, like every peer: bench/run.sh passes W6 its N/5, and its
    // span (10 s, or 1 s for the harness's smoke run).
    static void w6(int n, int spanSeconds) {
        HashedWheelTimer warm = timer1ms("hwt-warm");
        fire(warm, delays(Math.max(1, n / 10), 0, Math.min(2, spanSeconds) * S));
        warm.stop();
        long[] d = delays(n, 0, spanSeconds * S);   // 10 s: 10 000 ticks of 1 ms = ~20 revolutions of 512
        settle();

        HashedWheelTimer t = timer1ms("hwt-w6");
        t.start();
        FireRun r = fire(t, d);
        long[] all = lateness(r, Long.MIN_VALUE);
        long[] after = lateness(r, r.schedEnd);
        result("W6", "n", n);
        result("W6", "wall_s", seconds(r.wallNanos));
        result("W6", "cpu_s", seconds(r.cpuNanos));
        result("W6", "late_p50_ms", ms(percentile(all, 0.50)));
        result("W6", "late_p99_ms", ms(percentile(all, 0.99)));
        result("W6", "late_p99_after_ms", ms(percentile(after, 0.99)));
        result("W6", "late_max_ms", ms(all[all.length - 1]));
        drainResults("W6", r);
        t.stop();
    }

    // ---- W5: idle, one timeout 1 h away --------------------------------------------

    /**
     * Over `seconds` of idling with one 1 h timeout pending: process CPU,
     * the worker's own CPU, and the worker's voluntary context switches.
     * Returns {wakeups, cpuNanos, workerCpuNanos}.
     */
    static long[] idle(HashedWheelTimer t, NamedFactory f, int seconds) throws IOException {
        t.newTimeout(to -> sink++, 1, TimeUnit.HOURS);   // starts the worker
        sleepMs(200);                                    // let it settle
        String tid = findTid(f.name);
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        long workerId = f.thread.getId();

        long sw0 = voluntarySwitches(tid);
        long cpu0 = processCpuNanos();
        long wcpu0 = threads.getThreadCpuTime(workerId);
        sleepMs(seconds * 1000L);
        long sw1 = voluntarySwitches(tid);
        long cpu1 = processCpuNanos();
        long wcpu1 = threads.getThreadCpuTime(workerId);
        t.stop();
        return new long[] {sw1 - sw0, cpu1 - cpu0, wcpu1 - wcpu0};
    }

    static void w5(int seconds) throws IOException {
        NamedFactory fDefault = new NamedFactory("hwt-w5-default");
        HashedWheelTimer tDefault = new HashedWheelTimer(fDefault);   // 100 ms tick, 512 ticks
        long[] a = idle(tDefault, fDefault, seconds);
        result("W5", "wakeups", a[0]);
        result("W5", "cpu_s", seconds(a[1]));
        result("W5", "worker_cpu_s", seconds(a[2]));

        NamedFactory f1ms = new NamedFactory("hwt-w5-1ms");
        long[] b = idle(timer(f1ms, MS), f1ms, seconds);
        result("W5", "wakeups_1ms", b[0]);
        result("W5", "cpu_s_1ms", seconds(b[1]));
        result("W5", "worker_cpu_s_1ms", seconds(b[2]));
    }

    // ---- main -----------------------------------------------------------------

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: HwtBench <W1..W6|W1s|W3s> <N> [seconds]");
            System.exit(2);
        }
        String w = args[0];
        int n = Integer.parseInt(args[1]);
        int seconds = args.length > 2 ? Integer.parseInt(args[2]) : 5;
        switch (w) {
            case "W1": w1(n); break;
            case "W1s": w1s(n); break;
            case "W3s": w3s(n); break;
            case "W2": w2(n); break;
            case "W3": w3(n); break;
            case "W4": w4(n); break;
            case "W5": w5(seconds); break;
            case "W6": w6(n, args.length > 2 ? seconds : 10); break;
            default:
                System.err.println("unknown workload " + w);
                System.exit(2);
        }
    }
}
