package dev.safewrite;

import com.google.protobuf.Any;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.EnumValueDescriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.Descriptors.MethodDescriptor;
import com.google.protobuf.Descriptors.ServiceDescriptor;
import com.google.protobuf.Message;
import com.google.rpc.Code;
import com.google.rpc.ErrorInfo;
import dev.safewrite.v1.CapabilitiesResponse;
import dev.safewrite.v1.WriteFailure;
import dev.safewrite.v1.WriterProto;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Version skew (docs/compatibility.md): what a request needs of its sidecar, and the client's
 * refusal of a request its sidecar cannot serve.
 *
 * <p>What was added after 0.1.0 carries, in the proto, the first version that has it: an RPC its
 * {@code method_since} option, a field its {@code since}, an enum value its {@code value_since}.
 * They are read here from the generated descriptors (no table is kept), once, into the features and
 * the fields worth visiting to find them in a request. A request that uses none of them needs
 * nothing of the sidecar; one that does is checked against what the sidecar says it knows (rpc
 * Capabilities, asked by {@link Calls} once per client); when that cannot be learned, the call
 * fails without being sent ({@link #unlearned}).
 */
final class Skew {
  private Skew() {}

  /** Something a request may use that a sidecar may lack: an RPC, a field or an enum value. */
  record Feature(Kind kind, String name, String since, Map<String, String> metadata) {
    enum Kind {
      RPC,
      FIELD,
      ENUM_VALUE
    }
  }

  /**
   * What a sidecar knows: its version (null for one older than 0.2.0, which answered
   * UNIMPLEMENTED), and the full names of the RPCs, fields and enum values it knows, as its
   * Capabilities answer lists them.
   */
  record Known(String version, Set<String> methods, Set<String> fields, Set<String> enumValues) {
    /** A sidecar older than 0.2.0: it knows nothing that has a since option. */
    static final Known OLDER = new Known(null, Set.of(), Set.of(), Set.of());

    static Known of(CapabilitiesResponse answer) {
      return new Known(
          answer.getVersion(),
          Set.copyOf(answer.getMethodsList()),
          Set.copyOf(answer.getFieldsList()),
          Set.copyOf(answer.getEnumValuesList()));
    }

    boolean has(Feature feature) {
      return switch (feature.kind()) {
        case RPC -> methods.contains(feature.name());
        case FIELD -> fields.contains(feature.name());
        case ENUM_VALUE -> enumValues.contains(feature.name());
      };
    }

    /** The first of {@code features} this sidecar lacks; null when it has them all. */
    Feature lacking(List<Feature> features) {
      for (Feature feature : features) {
        if (!has(feature)) {
          return feature;
        }
      }
      return null;
    }
  }

  /** The RPCs with a {@code method_since} option, by full method name. */
  private static final Map<String, Feature> METHODS = new HashMap<>();

  /** The fields with a {@code since} option. */
  private static final Map<FieldDescriptor, Feature> FIELDS = new HashMap<>();

  /** The enum values with a {@code value_since} option. */
  private static final Map<EnumValueDescriptor, Feature> VALUES = new HashMap<>();

  /**
   * Per message type that can hold a feature (itself or through its fields), the fields worth
   * visiting: those with a since option, and those holding a message or enum that can.
   */
  private static final Map<Descriptor, List<FieldDescriptor>> VISIT = new HashMap<>();

  static {
    FileDescriptor file = WriterProto.getDescriptor();
    for (ServiceDescriptor service : file.getServices()) {
      for (MethodDescriptor method : service.getMethods()) {
        String since = method.getOptions().getExtension(WriterProto.methodSince);
        if (!since.isEmpty()) {
          String name = service.getFullName() + "/" + method.getName();
          METHODS.put(name, new Feature(Feature.Kind.RPC, name, since, Map.of()));
        }
      }
    }
    List<Descriptor> messages = new ArrayList<>();
    for (Descriptor message : file.getMessageTypes()) {
      collect(message, messages);
    }
    for (Descriptor message : messages) {
      for (FieldDescriptor field : message.getFields()) {
        String since = field.getOptions().getExtension(WriterProto.since);
        if (!since.isEmpty()) {
          FIELDS.put(
              field,
              new Feature(
                  Feature.Kind.FIELD,
                  field.getFullName(),
                  since,
                  Map.of("message", message.getFullName(), "number", "" + field.getNumber())));
        }
      }
    }
    List<com.google.protobuf.Descriptors.EnumDescriptor> enums =
        new ArrayList<>(file.getEnumTypes());
    for (Descriptor message : messages) {
      enums.addAll(message.getEnumTypes());
    }
    for (com.google.protobuf.Descriptors.EnumDescriptor type : enums) {
      for (EnumValueDescriptor value : type.getValues()) {
        String since = value.getOptions().getExtension(WriterProto.valueSince);
        if (!since.isEmpty()) {
          // An enum value's full name is its enum's scope and its name; the contract's is the
          // enum's full name and its name.
          String name = type.getFullName() + "." + value.getName();
          VALUES.put(
              value,
              new Feature(
                  Feature.Kind.ENUM_VALUE,
                  name,
                  since,
                  Map.of("enum", type.getFullName(), "value", value.getName())));
        }
      }
    }
    // The types that can hold a feature, to a fixed point (messages may nest each other).
    Set<Descriptor> holds = new HashSet<>();
    for (boolean changed = true; changed; ) {
      changed = false;
      for (Descriptor message : messages) {
        if (!holds.contains(message)
            && message.getFields().stream().anyMatch(f -> worth(f, holds))) {
          holds.add(message);
          changed = true;
        }
      }
    }
    for (Descriptor message : holds) {
      VISIT.put(message, message.getFields().stream().filter(f -> worth(f, holds)).toList());
    }
  }

  private static void collect(Descriptor message, List<Descriptor> into) {
    into.add(message);
    for (Descriptor nested : message.getNestedTypes()) {
      collect(nested, into);
    }
  }

  private static boolean worth(FieldDescriptor field, Set<Descriptor> holds) {
    return FIELDS.containsKey(field)
        || (field.getJavaType() == FieldDescriptor.JavaType.MESSAGE
            && holds.contains(field.getMessageType()))
        || (field.getJavaType() == FieldDescriptor.JavaType.ENUM
            && field.getEnumType().getValues().stream().anyMatch(VALUES::containsKey));
  }

  /** Whether a message of this type can hold a feature. */
  static boolean mayHoldFeatures(Descriptor type) {
    return VISIT.containsKey(type);
  }

  /**
   * The features a call needs: its RPC's ({@code method} as {@code
   * safewrite.v1.WriterService/Lead}) and those of every field and enum value set in {@code
   * request}, recursively.
   */
  static List<Feature> features(String method, Message request) {
    List<Feature> found = new ArrayList<>(0);
    Feature rpc = METHODS.get(method);
    if (rpc != null) {
      found.add(rpc);
    }
    if (VISIT.containsKey(request.getDescriptorForType())) {
      visit(request, found);
    }
    return found;
  }

  private static void visit(Message message, List<Feature> found) {
    for (FieldDescriptor field : VISIT.getOrDefault(message.getDescriptorForType(), List.of())) {
      if (field.isRepeated()) {
        int count = message.getRepeatedFieldCount(field);
        if (count > 0) {
          add(FIELDS.get(field), found);
        }
        for (int i = 0; i < count; i++) {
          value(field, message.getRepeatedField(field, i), found);
        }
      } else if (message.hasField(field)) {
        add(FIELDS.get(field), found);
        value(field, message.getField(field), found);
      }
    }
  }

  private static void value(FieldDescriptor field, Object value, List<Feature> found) {
    if (value instanceof Message inner) {
      visit(inner, found); // a map's entries too: their value field is visited
    } else if (value instanceof EnumValueDescriptor enumValue) {
      add(VALUES.get(enumValue), found);
    }
  }

  private static void add(Feature feature, List<Feature> found) {
    if (feature != null && !found.contains(feature)) {
      found.add(feature);
    }
  }

  /**
   * The failure of a call that needs {@code feature} when what the sidecar knows could not be
   * learned ({@code failure}: rpc Capabilities failed otherwise than UNIMPLEMENTED, or the call's
   * deadline passed or its thread was interrupted while another call asked). Nothing was sent: a
   * sidecar older than 0.2.0 would drop what it does not know (a write's fence) and serve the rest,
   * so the call fails closed. Decoded as any failure is, with {@code failure}'s code, rich details
   * and trailers, so its exception class and retry advice are its code's (UNAVAILABLE and
   * RESOURCE_EXHAUSTED retryable, ...); the description says what happened, with {@code failure}'s
   * own; the cause is {@code failure}. Sending the call again is safe: nothing was sent.
   */
  static SafewriteException unlearned(Feature feature, StatusRuntimeException failure) {
    Status status = failure.getStatus();
    String cause = status.getDescription();
    if (cause == null || cause.isEmpty()) {
      cause = status.getCode().toString();
    }
    String message =
        name(feature)
            + " needs a sidecar of "
            + feature.since()
            + " or newer; the sidecar's features could not be learned (rpc Capabilities: "
            + cause
            + "); nothing was sent (docs/compatibility.md)";
    Metadata trailers = new Metadata();
    if (failure.getTrailers() != null) {
      trailers.merge(failure.getTrailers());
    }
    return Errors.decode(
        new StatusRuntimeException(status.withDescription(message).withCause(failure), trailers),
        true);
  }

  /** How a message names {@code feature}: an RPC as {@code rpc <name>}, the rest by name. */
  private static String name(Feature feature) {
    return feature.kind() == Feature.Kind.RPC ? "rpc " + feature.name() : feature.name();
  }

  /**
   * The client's refusal of a call that needs {@code feature}, which {@code sidecar} lacks, made as
   * the sidecar makes its own refusal of an unknown field (FAILED_PRECONDITION, ErrorInfo with
   * domain safewrite.dev and reason UNKNOWN_FIELD, WriteFailure) and decoded as any failure is: a
   * {@link PreconditionFailedException} with {@code REASON_UNKNOWN_FIELD}, never retryable.
   */
  static SafewriteException refusal(Feature feature, Known sidecar) {
    String version =
        sidecar.version() == null
            ? "this sidecar is 0.1.x (older than 0.2.0: it has no rpc Capabilities)"
            : "this sidecar is " + sidecar.version();
    String message =
        name(feature)
            + " needs a sidecar of "
            + feature.since()
            + " or newer; "
            + version
            + "; nothing was sent; upgrade the sidecar, or leave the feature unused"
            + " (docs/compatibility.md)";
    Map<String, String> metadata = new LinkedHashMap<>();
    metadata.put("field", feature.name());
    metadata.putAll(feature.metadata());
    metadata.put("since", feature.since());
    metadata.put("sidecar_version", sidecar.version() == null ? "" : sidecar.version());
    metadata.put("refused_by", "client");
    com.google.rpc.Status status =
        com.google.rpc.Status.newBuilder()
            .setCode(Code.FAILED_PRECONDITION_VALUE)
            .setMessage(message)
            .addDetails(
                Any.pack(
                    ErrorInfo.newBuilder()
                        .setReason("UNKNOWN_FIELD")
                        .setDomain(SafewriteException.DOMAIN)
                        .putAllMetadata(metadata)
                        .build()))
            .addDetails(
                Any.pack(
                    WriteFailure.newBuilder()
                        .setReason(dev.safewrite.v1.Reason.REASON_UNKNOWN_FIELD)
                        .build()))
            .build();
    return Errors.decode(StatusProto.toStatusRuntimeException(status), false);
  }
}
