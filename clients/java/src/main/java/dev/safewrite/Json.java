package dev.safewrite;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParseException;
import com.google.gson.JsonParser;

/** JSON text to and from Gson trees; numbers keep their text, so int64 values survive. */
final class Json {
  private static final Gson GSON =
      new GsonBuilder().disableHtmlEscaping().serializeNulls().create();

  private Json() {}

  static String text(JsonElement element) {
    return GSON.toJson(element);
  }

  /** Parses a JSON object; the sidecar and the API server only ever send objects. */
  static JsonObject object(String text) {
    JsonElement element = JsonParser.parseString(text);
    if (!element.isJsonObject()) {
      throw new JsonParseException("not a JSON object");
    }
    return element.getAsJsonObject();
  }

  static JsonElement parse(String text) {
    return JsonParser.parseString(text);
  }
}
