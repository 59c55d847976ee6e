package dev.safewrite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** The README's first example is src/test/java/Example.java, and it runs as written. */
class ReadmeTest {
  private static final Path README = Path.of("README.md");
  private static final Path EXAMPLE = Path.of("src/test/java/Example.java");

  static String firstJavaBlock() throws Exception {
    Matcher block =
        Pattern.compile("```java\n(.*?)```", Pattern.DOTALL).matcher(Files.readString(README));
    assertTrue(block.find(), "README.md has no ```java block");
    return block.group(1);
  }

  @Test
  void firstExampleIsExampleJava() throws Exception {
    assertEquals(Files.readString(EXAMPLE), firstJavaBlock());
    int lines = firstJavaBlock().split("\n").length;
    assertTrue(lines <= 14, "the first example has " + lines + " lines");
  }

  /** The counter of "Leadership and fenced writes" is CounterReplica, which LeadTest runs. */
  @Test
  void counterExampleIsCounterReplica() throws Exception {
    String replica = Files.readString(Path.of("src/test/java/dev/safewrite/CounterReplica.java"));
    String body = replica.substring(replica.indexOf("/** One replica"));
    assertTrue(
        Files.readString(README).contains("```java\n" + body + "```\n"),
        "README.md does not show CounterReplica.java as it is");
  }

  @Test
  @Tag("sidecar")
  void firstExampleRunsAsWritten() throws Exception {
    ObjectRef counter = ObjectRef.of("v1", "ConfigMap", "default", "counter");
    Class.forName("Example").getMethod("main", String[].class).invoke(null, (Object) new String[0]);
    int before = Integer.parseInt(Sidecar.data(Sidecar.read(counter), "n"));
    Class.forName("Example").getMethod("main", String[].class).invoke(null, (Object) new String[0]);
    assertEquals(before + 1, Integer.parseInt(Sidecar.data(Sidecar.read(counter), "n")));
  }
}
