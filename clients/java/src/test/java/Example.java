import dev.safewrite.*;

public class Example {
  public static void main(String[] args) {
    try (var client = SafewriteClient.connect()) { // the sidecar at $SAFEWRITE_ADDRESS
      var ref = ObjectRef.of("v1", "ConfigMap", "default", "counter");
      var increment = Mutation.cel("{\"data\": {\"n\": string(int(object.data.n) + 1)}}");
      var config = WriteConfig.builder().createIfMissing("{\"data\": {\"n\": \"0\"}}").build();
      var result = client.update(ref, increment, config);
      System.out.println(result.outcome() + " " + result.object().get("data"));
    }
  }
}
