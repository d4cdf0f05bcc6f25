package dev.quiver.compat.grpc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * RocketMQ's gRPC clients for Python (5.1.2), Go (5.1.4) and Node.js (1.0.8), each running its
 * own end-to-end program (compat/grpc/{python,go,node}) through compat/grpc/clients.sh: sends
 * of every message type, SimpleConsumer receives, acks and invisible-time changes, FIFO order,
 * a delayed message, transactions with a checker, and a PushConsumer redelivering a failure.
 * compat/run.sh installs the clients first and passes -Dcompat.grpcClients=true; without it
 * (a run of this suite alone) they are skipped.
 */
class OtherClientsTest {
    private static final long RUN_TIMEOUT_S = 240;

    @ParameterizedTest
    @ValueSource(strings = {"python", "go", "node"})
    void theClientPassesItsEndToEndProgram(String language) throws Exception {
        Assumptions.assumeTrue(Boolean.getBoolean("compat.grpcClients"),
            "compat/run.sh installs the Python, Go and Node.js clients and sets compat.grpcClients");
        String prefix = "Grpc" + Character.toUpperCase(language.charAt(0)) + language.substring(1);
        List<String> command = List.of(
            clientsScript().toString(), "run", language, Grpc.ENDPOINT,
            Grpc.createTopic(prefix + "Normal", "NORMAL"),
            Grpc.createTopic(prefix + "Fifo", "FIFO"),
            Grpc.createTopic(prefix + "Delay", "DELAY"),
            Grpc.createTopic(prefix + "Transaction", "TRANSACTION"),
            Grpc.createGroup(prefix + "Ordered", true),
            Grpc.unique(prefix));
        Path output = Files.createTempFile("grpc-client-" + language, ".log");
        Process process = new ProcessBuilder(command)
            .redirectErrorStream(true)
            .redirectOutput(output.toFile())
            .start();
        boolean ended = process.waitFor(RUN_TIMEOUT_S, TimeUnit.SECONDS);
        if (!ended) {
            process.destroyForcibly().waitFor();
        }
        String printed = Files.readString(output, StandardCharsets.UTF_8);
        Files.deleteIfExists(output);
        assertTrue(ended, language + " did not finish within " + RUN_TIMEOUT_S + " s:\n" + printed);
        assertEquals(0, process.exitValue(), language + " failed:\n" + printed);
        String summary = printed.lines().filter(line -> line.startsWith(language + " client")).reduce((a, b) -> b)
            .orElse("");
        assertTrue(summary.contains(": ok"), "its summary says ok:\n" + printed);
        System.out.println(summary);
    }

    private static Path clientsScript() {
        // Surefire runs with the module folder (compat/grpc) as the working directory.
        return new File("clients.sh").getAbsoluteFile().toPath();
    }
}
