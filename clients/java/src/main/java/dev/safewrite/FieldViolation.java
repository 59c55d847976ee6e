package dev.safewrite;

/**
 * One field the request or the object got wrong (a {@code google.rpc.BadRequest} violation).
 *
 * @param field the field's path, e.g. {@code target.namespace} or {@code metadata.labels}
 * @param description what is wrong with it
 */
public record FieldViolation(String field, String description) {}
