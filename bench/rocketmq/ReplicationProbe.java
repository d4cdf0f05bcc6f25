// Watches one master/slave pair for bench/replication.sh, the same way for Quiver and for Apache
// RocketMQ, with RocketMQ's own admin client (one JVM for the whole run, not one per sample).
//
//   ReplicationProbe NAMESRV TOPIC MASTER_ADDR SLAVE_ADDR WARMUP_S MEASURE_S LAG_FILE PID...
//
// 1. Sends one message and waits (at most 90 s) until the slave's CommitLog has reached the
//    master's: the HA link is up. Prints "ready"; the script then starts the Producer.
// 2. Sleeps WARMUP_S, then for MEASURE_S reads GET_BROKER_RUNTIME_INFO (code 28) of the master and
//    then of the slave every 200 ms and writes "epoch_ms master_position slave_position" to
//    LAG_FILE (key commitLogMaxOffset on both systems).
// 3. At the window's two ends reads the CPU ticks (utime + stime) of the PIDs from /proc and the
//    topic's stored messages (sum of its queues' max offsets on the master) and prints them as
//    key=value lines.
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.HashMap;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.remoting.protocol.admin.TopicOffset;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public class ReplicationProbe {
    static final long READY_TIMEOUT_MS = 90_000;
    static final long SAMPLE_INTERVAL_MS = 200;

    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1], master = args[2], slave = args[3];
        long warmupMs = Long.parseLong(args[4]) * 1000, measureMs = Long.parseLong(args[5]) * 1000;
        String lagFile = args[6];
        String[] pids = Arrays.copyOfRange(args, 7, args.length);

        DefaultMQAdminExt admin = new DefaultMQAdminExt(5_000);
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName("replication-probe-" + System.nanoTime());
        admin.start();
        try {
            waitForSlave(namesrv, topic, admin, master, slave);
            Thread.sleep(warmupMs);

            long ticks0 = ticks(pids), stored0 = stored(admin, topic), start = System.currentTimeMillis();
            int errors = 0;
            try (PrintWriter out = new PrintWriter(Files.newBufferedWriter(Paths.get(lagFile)))) {
                for (long next = start; next < start + measureMs; next += SAMPLE_INTERVAL_MS) {
                    long wait = next - System.currentTimeMillis();
                    if (wait > 0) {
                        Thread.sleep(wait);
                    }
                    try {
                        long m = position(admin, master), s = position(admin, slave);
                        out.printf("%d %d %d%n", System.currentTimeMillis(), m, s);
                    } catch (Exception e) {
                        errors++;
                    }
                }
            }
            long end = System.currentTimeMillis(), ticks1 = ticks(pids), stored1 = stored(admin, topic);
            System.out.printf("window_start_ms=%d%nwindow_end_ms=%d%nstored0=%d%nstored1=%d%nticks0=%d%nticks1=%d%nsample_errors=%d%n",
                start, end, stored0, stored1, ticks0, ticks1, errors);
        } finally {
            admin.shutdown();
        }
    }

    // A message through the master, then the slave's position catching up with the master's: the
    // HA link works. A SYNC_MASTER answers FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE while no
    // slave is connected; the message is stored all the same, so any answer will do.
    static void waitForSlave(String namesrv, String topic, DefaultMQAdminExt admin, String master, String slave)
        throws Exception {
        long deadline = System.currentTimeMillis() + READY_TIMEOUT_MS;
        DefaultMQProducer producer = new DefaultMQProducer("replication_probe");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("replication-probe-" + System.nanoTime());
        producer.start();
        try {
            while (true) {
                try {
                    producer.send(new Message(topic, "probe".getBytes()));
                    break;
                } catch (Exception e) {
                    if (System.currentTimeMillis() > deadline) {
                        throw new IllegalStateException("no send reached the master within 90 s", e);
                    }
                    Thread.sleep(500);
                }
            }
        } finally {
            producer.shutdown();
        }
        long m = -1, s = -1;
        while (System.currentTimeMillis() < deadline) {
            try {
                m = position(admin, master);
                s = position(admin, slave);
                if (m > 0 && s >= m) {
                    System.out.printf("ready master_position=%d slave_position=%d%n", m, s);
                    System.out.flush();
                    return;
                }
            } catch (Exception e) {
                // Not registered yet or still starting: try again until the deadline.
            }
            Thread.sleep(200);
        }
        throw new IllegalStateException("slave did not catch up within 90 s: master " + m + ", slave " + s);
    }

    static long position(DefaultMQAdminExt admin, String addr) throws Exception {
        HashMap<String, String> info = admin.fetchBrokerRuntimeStats(addr).getTable();
        String value = info.get("commitLogMaxOffset");
        if (value == null) {
            throw new IllegalStateException(addr + " reports no commitLogMaxOffset");
        }
        return Long.parseLong(value.trim());
    }

    static long stored(DefaultMQAdminExt admin, String topic) throws Exception {
        long sum = 0;
        for (TopicOffset offset : admin.examineTopicStats(topic).getOffsetTable().values()) {
            sum += offset.getMaxOffset();
        }
        return sum;
    }

    // utime + stime, fields 14 and 15 of /proc/PID/stat; counted after the ")" closing the
    // command name, which may itself hold spaces.
    static long ticks(String[] pids) throws Exception {
        long sum = 0;
        for (String pid : pids) {
            String stat = new String(Files.readAllBytes(Paths.get("/proc", pid, "stat")));
            String[] fields = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
            sum += Long.parseLong(fields[11]) + Long.parseLong(fields[12]);
        }
        return sum;
    }
}
