package dev.quiver.compat;

import static java.nio.charset.StandardCharsets.UTF_8;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Runs Apache RocketMQ's own tools (mqadmin, the benchmark Producer and Consumer) as separate
 * JVMs from the 5.5.0 jars whose class path compat/run.sh writes to `compat.toolsClasspath`.
 */
final class Tools {
    private static final String JAVA = Path.of(System.getProperty("java.home"), "bin", "java").toString();
    private static final long COMMAND_TIMEOUT_S = 90;

    private Tools() {}

    static String classpath() throws IOException {
        String file = System.getProperty("compat.toolsClasspath");
        if (file == null || !Files.exists(Path.of(file))) {
            throw new AssertionError("compat.toolsClasspath must name the tools class-path file (compat/run.sh sets it)");
        }
        return Files.readString(Path.of(file), UTF_8).trim();
    }

    static ProcessBuilder java(String mainClass, List<String> args) throws IOException {
        Path home = Files.createTempDirectory("rocketmq-tool");
        List<String> command = new ArrayList<>(List.of(JAVA, "-Xmx256m",
            "-Duser.home=" + home, "-Drocketmq.home.dir=" + home, "-cp", classpath(), mainClass));
        command.addAll(args);
        return new ProcessBuilder(command).redirectErrorStream(true);
    }

    /** Runs one mqadmin command against the server under test and returns what it printed. */
    static String mqadmin(String... args) throws Exception {
        List<String> all = new ArrayList<>(List.of(args));
        all.add("-n");
        all.add(Compat.NAMESRV);
        Process process = java("org.apache.rocketmq.tools.command.MQAdminStartup", all).start();
        Output output = Output.collect(process.getInputStream());
        if (!process.waitFor(COMMAND_TIMEOUT_S, TimeUnit.SECONDS)) {
            process.destroyForcibly();
            throw new AssertionError("mqadmin " + all + " did not finish in " + COMMAND_TIMEOUT_S + " s:\n" + output.text());
        }
        output.join();
        return output.text();
    }

    /** Collects a process's output on its own thread, so the process never blocks on a full pipe. */
    static final class Output {
        private final ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        private final Thread reader;

        private Output(InputStream in) {
            reader = new Thread(() -> {
                byte[] buffer = new byte[8192];
                try {
                    for (int n; (n = in.read(buffer)) > 0; ) {
                        synchronized (bytes) {
                            bytes.write(buffer, 0, n);
                        }
                    }
                } catch (IOException ignored) {
                    // The process ended; what was read so far is the output.
                }
            });
            reader.setDaemon(true);
            reader.start();
        }

        static Output collect(InputStream in) {
            return new Output(in);
        }

        void join() throws InterruptedException {
            reader.join(10_000);
        }

        String text() {
            synchronized (bytes) {
                return bytes.toString(UTF_8);
            }
        }
    }
}
